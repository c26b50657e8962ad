"""Closed-form HBM accesses (in elements) of standard attention and FlashAttention.

Each formula equals the `HBM` counter of the kernels in `attention` exactly (tests prove it on a
grid of sizes, blocks that do not divide N included); at large N the formulas stand in for the
counter. Per head, with T_r = ceil(N_q / B_r), T_c = ceil(N_k / B_c):

    standard        2 N_q d + 2 N_k d + 4 N_q N_k
    FA1 (K/V outer) 2 N_k d + T_c N_q (3d + 4)                 (Q, O in; O out; l, m in and out)
    FA2 (Q outer)   N_q d + T_r 2 N_k d + N_q d  [+ N_q lse]   (K, V re-read for every Q block)

With causal masking the blocks entirely above the diagonal are skipped, so the sums run over the
blocks that remain. Paper's Theorem 2: standard is Theta(N d + N^2), FlashAttention
Theta(N^2 d^2 / M); Proposition 3: no exact attention algorithm does asymptotically better than
N^2 d^2 / M for all M (`lower_bound`).

Example (the lecture's exercise 3): N = 4096, d = 64, M = 100,000 -> B_c = 391, B_r = 64,
T_c = 11, FA1 = 524,288 + 11 x 802,816 = 9,355,264; standard = 68,157,440; ratio 7.29.
"""
from __future__ import annotations

import numpy as np

from ._check import as_int, choice
from .attention import ORDERS, block_sizes

__all__ = ["standard_io", "flash_io", "lower_bound", "io_ratio", "io_table"]


def _n_k(N, n_k):
    return N if n_k is None else as_int("n_k", n_k, 1, None)


def standard_io(N: int, d: int, *, n_k: int | None = None) -> int:
    """HBM elements moved by Algorithm 0 for one head: 2 N_q d + 2 N_k d + 4 N_q N_k.

    Causal masking does not change it: the mask is applied inside the softmax kernel, and S and
    P are still full N_q x N_k matrices. `n_k` defaults to N (self-attention).
    """
    N = as_int("N", N, 1, None)
    d = as_int("d", d, 1, None)
    nk = _n_k(N, n_k)
    return 2 * N * d + 2 * nk * d + 4 * N * nk


def _blocks(N, d, sram, block_r, block_c):
    br, bc = block_sizes(d, sram)
    br = br if block_r is None else as_int("block_r", block_r, 1, None)
    bc = bc if block_c is None else as_int("block_c", block_c, 1, None)
    return br, bc


def flash_io(N: int, d: int, sram: int = 100_000, order: str = "fa1", causal: bool = False, *,
             n_k: int | None = None, block_r: int | None = None, block_c: int | None = None,
             return_lse: bool = False) -> int:
    """HBM elements moved by `flash_attention` for one head (see the module docstring).

    N is the number of queries, `n_k` the number of keys (default N); with causal masking the
    alignment is bottom-right, as in the kernel. `sram` M is in elements; the block sizes come
    from `block_sizes(d, sram)` unless given.
    """
    N = as_int("N", N, 1, None)
    d = as_int("d", d, 1, None)
    order = choice("order", order, ORDERS)
    nk = _n_k(N, n_k)
    br, bc = _blocks(N, d, sram, block_r, block_c)
    offset = nk - N
    r0 = np.arange(0, N, br)                      # first row of each Q block
    r1 = np.minimum(r0 + br, N)
    c0 = np.arange(0, nk, bc)                     # first key of each K/V block
    c1 = np.minimum(c0 + bc, nk)
    if causal:                                    # active[i, j]: block has a visible entry
        active = c0[None, :] <= (r1 - 1 + offset)[:, None]
    else:
        active = np.ones((r0.size, c0.size), dtype=bool)
    rows = (r1 - r0)[:, None]
    keys = (c1 - c0)[None, :]
    if order == "fa1":
        kv = 2 * d * int(keys.sum())              # every K/V block is read once
        visits = int((active * rows).sum())       # Q-block rows touched, over all passes
        return kv + visits * (3 * d + 4)
    q_blocks_used = active.any(axis=1)
    q_read = d * int((rows[:, 0] * q_blocks_used).sum())
    kv = 2 * d * int((active * keys).sum())
    out = N * d + (N if return_lse else 0)
    return q_read + kv + out


def lower_bound(N, d, sram):
    """N^2 d^2 / M: the order of HBM accesses no exact attention can beat for every M
    (Proposition 3; the constant is not part of the statement). Works on arrays."""
    N = np.asarray(N, dtype=np.float64)
    return N ** 2 * float(d) ** 2 / float(sram)


def io_ratio(N: int, d: int, sram: int = 100_000, order: str = "fa1", causal: bool = False) -> float:
    """standard_io / flash_io: how many times fewer HBM accesses FlashAttention makes."""
    return standard_io(N, d) / flash_io(N, d, sram, order, causal)


def io_table(Ns, d: int, sram: int = 100_000, causal: bool = False) -> list[dict]:
    """One row per N: standard, FA1 and FA2 accesses and the standard/FA1 ratio."""
    rows = []
    for N in Ns:
        std = standard_io(N, d)
        fa1 = flash_io(N, d, sram, "fa1", causal)
        fa2 = flash_io(N, d, sram, "fa2", causal)
        rows.append({"N": int(N), "standard": std, "fa1": fa1, "fa2": fa2, "ratio": std / fa1})
    return rows
