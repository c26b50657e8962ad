"""Closed-form HBM accesses (in elements) of standard attention and FlashAttention.

Each formula equals the `HBM` counter of the kernels in `attention` exactly (tests prove it on a
grid of sizes, blocks that do not divide N included); at large N the formulas stand in for the
counter. Per head, with T_r = ceil(N_q / B_r), T_c = ceil(N_k / B_c):

    standard        2 N_q d + 2 N_k d + 4 N_q N_k
    FA1 (K/V outer) 2 N_k d + T_c N_q (3d + 4)                 (Q, O in; O out; l, m in and out)
    FA2 (Q outer)   N_q d + T_r 2 N_k d + N_q d  [+ N_q lse]   (K, V re-read for every Q block)

With causal masking the blocks entirely above the diagonal are skipped, so the sums run over the
blocks that remain; they are counted in closed form (sums of floor((a i + b) / m), see
`_floor_sum`), so every count costs O(log N) time and O(1) memory at any size. Paper's Theorem 2:
standard is Theta(N d + N^2), FlashAttention Theta(N^2 d^2 / M); Proposition 3: no exact attention
algorithm does asymptotically better than N^2 d^2 / M for all M (`lower_bound`).

N may be an int (the result is a Python int, exact at any size) or an array of ints (the result
is an int64 array of the same shape, equal element by element to the scalar results; ValueError
if a count does not fit in int64), so a whole curve is one call.

Example (the lecture's exercise 3): N = 4096, d = 64, M = 100,000 -> B_c = 391, B_r = 64,
T_c = 11, FA1 = 524,288 + 11 x 802,816 = 9,355,264; standard = 68,157,440; ratio 7.29.

Tile rules. The block sizes that are not given come from `block_sizes(d, M, rule)`: rule="fa1"
(the default, for either loop order) is the paper's and the lecture's, B_c = ceil(M/4d),
B_r = min(ceil(M/4d), d); the lecture's tables use it for both orders. Under it the FA2 order
re-reads K and V for every d query rows and its count stops falling with M once M > 4 d^2.
rule="fa2" is FlashAttention-2's own tile shape, the same SRAM budget with the roles swapped:
B_r = ceil(M/4d) (the Q block and its accumulator stay on chip), B_c = min(ceil(M/4d), d). Then
T_r = T_c, and per sweep FA2 moves 2 N_k d where FA1 moves N_q (3d + 4): at N = 32,768, d = 64
FA2 moves 357 M elements against FA1's 544 M at M = 100,000, and 50 M against 75 M at
M = 800,000, falling as 1/M like FA1. Statements comparing the two orders hold under one rule.

Backward pass (`backward_io`, `recompute_flops`): with S and P stored in HBM by the forward
pass, or recomputed tile by tile from Q, K and the saved lse (FlashAttention's recomputation);
the counter of `backward.attention_backward` equals them. This file is long because the forward
and backward closed forms share the block-counting helpers (`_floor_sum`, `_kv_outer`).

>>> flash_io(4096, 64, 100_000, "fa1"), standard_io(4096, 64)
(9355264, 68157440)
>>> flash_io(np.array([1024, 4096]), 64)
array([ 733184, 9355264])
>>> flash_io(32768, 64, 100_000, "fa2"), flash_io(32768, 64, 100_000, "fa2", rule="fa2")
(2151677952, 356515840)
"""

from __future__ import annotations

import numpy as np

from attnlab.validate import as_bool, as_counts, as_int, choice
from attnlab.core.attention import ORDERS, RULES, block_sizes

__all__ = [
    "standard_io",
    "flash_io",
    "lower_bound",
    "io_ratio",
    "io_table",
    "backward_io",
    "recompute_flops",
    "BACKWARD_MODES",
]

_INT64_MAX = int(np.iinfo(np.int64).max)


def _n_k(N, n_k):
    return N if n_k is None else as_int("n_k", n_k, 1, None)


def _to_int64(what: str, N: np.ndarray, counts) -> np.ndarray:
    """Python-int counts (one per element of N) as an int64 array shaped like N; ValueError naming
    N if one does not fit."""
    for n, c in zip(N.ravel().tolist(), counts):
        if c > _INT64_MAX:
            raise ValueError(
                f"N={n} gives {what} = {c} elements, beyond int64 (max {_INT64_MAX}); "
                f"valid: counts that fit in int64, or pass N as a Python int for an exact count"
            )
    return np.array(counts, dtype=np.int64).reshape(N.shape)


def standard_io(N, d: int, *, n_k: int | None = None):
    """HBM elements moved by Algorithm 0 for one head: 2 N_q d + 2 N_k d + 4 N_q N_k.

    Causal masking does not change it: the mask is applied inside the softmax kernel, and S and
    P are still full N_q x N_k matrices. `n_k` defaults to N (self-attention). N: an int >= 1
    (returns an int) or an array of them (returns int64).

    >>> standard_io(1000, 64)                 # 4 N d + 4 N^2
    4256000
    """
    N, scalar = as_counts("N", N, 1, None)
    d = as_int("d", d, 1, None)
    nk = None if n_k is None else as_int("n_k", n_k, 1, None)
    if scalar:
        nk = N if nk is None else nk
        return 2 * N * d + 2 * nk * d + 4 * N * nk
    return _to_int64("standard_io", N, [standard_io(n, d, n_k=nk) for n in N.ravel().tolist()])


def _floor_sum(n: int, m: int, a: int, b: int) -> int:
    """sum_{i=0}^{n-1} floor((a i + b) / m) for n >= 0, m >= 1, a >= 0, b >= 0, in O(log m + log a)
    steps (the Euclid-like reduction used in competitive programming, e.g. AtCoder's floor_sum)."""
    total = 0
    while True:
        if a >= m:
            total += (n - 1) * n // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        y_max = a * n + b
        if y_max < m:
            return total
        n, b = divmod(y_max, m)
        m, a = a, m


def _kv_outer(N: int, nk: int, br: int, bc: int, causal: bool) -> tuple[int, int]:
    """(row visits, tile elements) of a loop with K/V blocks outside and Q blocks inside (FA1's
    forward, FA2's backward): the query rows summed over the K/V blocks that visit them, and the
    areas of the visited tiles. K/V block j visits the Q blocks i >= i_min(j) = max(0,
    floor((j bc - offset) / br)), i.e. N - br i_min(j) query rows (the last Q block always sees
    key nk - 1); the first j0 blocks (j bc < offset) visit every row. Every block is bc keys wide
    but the last, nk - (t_c - 1) bc."""
    offset = nk - N
    t_c = -(-nk // bc)
    if not causal:
        return t_c * N, N * nk
    j0 = min(t_c, max(0, -(-offset // bc)))
    visits = t_c * N - br * _floor_sum(t_c - j0, br, bc, j0 * bc - offset)
    rows_last = N - br * max(0, ((t_c - 1) * bc - offset) // br)
    return visits, bc * visits - (t_c * bc - nk) * rows_last


def _flash_count(N: int, nk: int, d: int, br: int, bc: int, order: str, causal: bool, lse: bool) -> int:
    """flash_io for one head in Python ints: T_r = ceil(N / br) Q blocks, T_c = ceil(nk / bc) K/V
    blocks; block (i, j) is visited unless causal and its first key c0 = j bc lies beyond the last
    visible key r1 - 1 + (nk - N) of its last query row."""
    offset = nk - N
    t_r, t_c = -(-N // br), -(-nk // bc)
    if order == "fa1":
        return 2 * nk * d + _kv_outer(N, nk, br, bc, causal)[0] * (3 * d + 4)
    if not causal:
        q_rows, keys = N, t_r * nk
    else:
        # Q block i is read when its last row sees key 0: i >= floor(-offset / br).
        q_rows = N - br * max(0, (-offset) // br)
        # Q block i < t_r - 1 has last visible key L_i = br i + base and reads the first
        # floor(L_i / bc) + 1 K/V blocks (bc keys each, but only nk - (t_c - 1) bc in the last);
        # the last Q block sees every key.
        base = br - 1 + offset
        i_a = min(t_r - 1, max(0, -(base // br)))  # first i with L_i >= 0
        n = t_r - 1 - i_a
        blocks = n + _floor_sum(n, bc, br, br * i_a + base)
        i_full = -((base - (t_c - 1) * bc) // br)  # first i that reaches block t_c - 1
        full = t_r - 1 - min(t_r - 1, max(i_a, i_full))
        keys = bc * blocks - full * (t_c * bc - nk) + nk
    return q_rows * d + 2 * keys * d + N * d + (N if lse else 0)


def _tile_args(N, d, sram, causal, n_k, block_r, block_c, rule):
    """The checked sizes of a tiled pass, its blocks given or from the tile rule (flash_io and
    the backward's counts share them)."""
    N, scalar = as_counts("N", N, 1, None)
    d = as_int("d", d, 1, None)
    sram = as_int("sram", sram, 1, None)
    causal = as_bool("causal", causal)
    rule = choice("rule", rule, RULES)
    nk = None if n_k is None else as_int("n_k", n_k, 1, None)
    br = None if block_r is None else as_int("block_r", block_r, 1, None)
    bc = None if block_c is None else as_int("block_c", block_c, 1, None)
    if br is None or bc is None:
        rule_r, rule_c = block_sizes(d, sram, rule)
        br = rule_r if br is None else br
        bc = rule_c if bc is None else bc
    return N, scalar, d, causal, nk, br, bc


def flash_io(
    N,
    d: int,
    sram: int = 100_000,
    order: str = "fa1",
    causal: bool = False,
    *,
    n_k: int | None = None,
    block_r: int | None = None,
    block_c: int | None = None,
    return_lse: bool = False,
    rule: str = "fa1",
):
    """HBM elements moved by `flash_attention` for one head (see the module docstring).

    N is the number of queries (an int >= 1, or an array of them: int64 out), `n_k` the number of
    keys (default N); with causal masking the alignment is bottom-right, as in the kernel.
    `sram` M is in elements; the block sizes come from `block_sizes(d, sram, rule)` unless given:
    rule="fa1" (the default) is the paper's and the lecture's rule for either order, rule="fa2"
    FlashAttention-2's tall Q block (B_r = ceil(M/4d), B_c = min(ceil(M/4d), d)).
    `causal` and `return_lse` are bools (return_lse adds the N lse writes of fa2; fa1 derives lse
    from m and l it stores anyway). O(log N) time and O(1) memory per N, at any size.

    >>> flash_io(4096, 64, order="fa2", causal=True)       # about half of the 34,078,720 unmasked
    19113472
    >>> flash_io(1 << 20, 256, 1024, causal=True)             # a million tokens: counted, not built
    424412429942784
    """
    order = choice("order", order, ORDERS)
    return_lse = as_bool("return_lse", return_lse)
    N, scalar, d, causal, nk, br, bc = _tile_args(N, d, sram, causal, n_k, block_r, block_c, rule)
    if scalar:
        return _flash_count(N, N if nk is None else nk, d, br, bc, order, causal, return_lse)
    counts = [
        _flash_count(n, n if nk is None else nk, d, br, bc, order, causal, return_lse)
        for n in N.ravel().tolist()
    ]
    return _to_int64("flash_io", N, counts)


BACKWARD_MODES = ("recompute", "stored")


def backward_io(
    N,
    d: int,
    sram: int = 100_000,
    mode: str = "recompute",
    causal: bool = False,
    *,
    n_k: int | None = None,
    block_r: int | None = None,
    block_c: int | None = None,
    rule: str = "fa1",
):
    """HBM elements moved by the backward pass of one head (`backward.attention_backward`,
    FlashAttention-2's backward: K/V blocks outside, Q blocks inside), d_v = d. With V the row
    visits of the K/V-outer loop (T_c N without masking) and E the elements of the visited tiles
    (N N_k without masking):

        both modes      2 N d + N            read O, dO; write D = rowsum(dO * O)
                        + 4 N_k d            read K, V; write dK, dV once
        "recompute"     + V (4d + 2)         per visited row: Q, dO, D, lse in; dQ in and out
        "stored"        + V (4d + 1) + E     D without lse, and the tile of P the forward stored

    So storing P costs the backward E - V more elements (N N_k - T_c N unmasked), and the forward
    E writes of P on top (Algorithm 0 also writes S: N N_k more), where recomputing costs
    `recompute_flops`. Blocks as in `flash_io` (rule "fa1" by default: the paper's rule, the
    blocks of its backward too). N an int (int out) or an array of ints (int64 out).

    >>> backward_io(4096, 64), backward_io(4096, 64, mode="stored")   # the lecture's N, d, M
    (13201408, 29933568)
    """
    mode = choice("mode", mode, BACKWARD_MODES)
    N, scalar, d, causal, nk, br, bc = _tile_args(N, d, sram, causal, n_k, block_r, block_c, rule)

    def count(n):
        k = n if nk is None else nk
        visits, tiles = _kv_outer(n, k, br, bc, causal)
        rows = visits * (4 * d + 2) if mode == "recompute" else visits * (4 * d + 1) + tiles
        return 2 * n * d + n + 4 * k * d + rows

    if scalar:
        return count(N)
    return _to_int64("backward_io", N, [count(n) for n in N.ravel().tolist()])


def recompute_flops(
    N,
    d: int,
    sram: int = 100_000,
    causal: bool = False,
    *,
    n_k: int | None = None,
    block_r: int | None = None,
    block_c: int | None = None,
    rule: str = "fa1",
) -> dict:
    """What recomputation adds to the backward of one head, against the gradient work both modes
    do (d_v = d; E the elements of the tiles visited, N N_k without masking):

        scores          E        entries of S and P recomputed
        qk_flops        2 d E    S_ij = Q_i K_j^T once more
        exps            E        P_ij = exp(S_ij - lse_i)
        gradient_flops  8 d E    dV += P^T dO, dP = dO V^T, dQ += dS K, dK += dS^T Q

    so the matmul FLOPs grow by a quarter (2 d E on 8 d E), in exchange for E - V fewer HBM
    elements in the backward and E fewer in the forward (`backward_io`). Python ints; N an int.

    >>> recompute_flops(4096, 64)["qk_flops"], recompute_flops(4096, 64)["gradient_flops"]
    (2147483648, 8589934592)
    """
    N, scalar, d, causal, nk, br, bc = _tile_args(N, d, sram, causal, n_k, block_r, block_c, rule)
    if not scalar:
        raise TypeError(f"N must be one int for recompute_flops, got an array of shape {N.shape}")
    tiles = _kv_outer(N, N if nk is None else nk, br, bc, causal)[1]
    return {"scores": tiles, "qk_flops": 2 * d * tiles, "exps": tiles, "gradient_flops": 8 * d * tiles}


def lower_bound(N, d: int, sram: int):
    """N^2 d^2 / M: the order of HBM accesses no exact attention can beat for every M
    (Proposition 3; the constant is not part of the statement). N an int or an array of ints
    (N, d <= 2^53); a float (or float64 array) out, the same float64 arithmetic either way.

    >>> lower_bound(4096, 64, 100_000)
    687194.76736
    """
    N, scalar = as_counts("N", N, 1, 1 << 53)
    d = as_int("d", d, 1, 1 << 53)
    sram = as_int("sram", sram, 1, None)
    out = np.asarray(N, dtype=np.float64) ** 2 * np.float64(d) ** 2 / np.float64(sram)
    return float(out) if scalar else out


def io_ratio(N, d: int, sram: int = 100_000, order: str = "fa1", causal: bool = False, *, rule: str = "fa1"):
    """standard_io / flash_io: how many times fewer HBM accesses FlashAttention makes
    (a float; a float64 array for an array of N); `rule` as in `flash_io`.

    >>> round(io_ratio(4096, 64), 2), round(io_ratio(4096, 64, order="fa2", rule="fa2"), 2)
    (7.29, 10.83)
    """
    std, fa = standard_io(N, d), flash_io(N, d, sram, order, causal, rule=rule)
    return std / fa if isinstance(std, int) else std.astype(np.float64) / fa.astype(np.float64)


def io_table(Ns, d: int, sram: int = 100_000, causal: bool = False) -> list[dict]:
    """One row per N of `Ns` (integers >= 1): standard, FA1 and FA2 accesses under the lecture's
    rule (keys 'standard', 'fa1', 'fa2': the lecture's table), FA2 under its own tile rule
    ('fa2_own', `block_sizes(..., rule="fa2")`) and the standard/FA1 ratio ('ratio')."""
    Ns, scalar = as_counts("Ns", Ns, 1, None)
    if scalar or Ns.ndim != 1:
        raise TypeError(f"Ns must be a 1-D sequence of token counts, got {Ns!r}")
    rows = []
    for N in Ns.tolist():
        std = standard_io(N, d)
        fa1 = flash_io(N, d, sram, "fa1", causal)
        fa2 = flash_io(N, d, sram, "fa2", causal)
        own = flash_io(N, d, sram, "fa2", causal, rule="fa2")
        rows.append({"N": N, "standard": std, "fa1": fa1, "fa2": fa2, "fa2_own": own, "ratio": std / fa1})
    return rows
