"""What every attention kernel of `attnlab.core.attention` takes, checked: the paper's tile sizes
from the SRAM size M (`block_sizes`), the bottom-right causal mask (`causal_mask`), q, k, v as
4-D float arrays with their scale (`prepare_qkv`), the GQA map of query heads to KV heads
(`query_heads`), and the HBM counter (`as_hbm`). `sram` (M) is in elements, as in the paper."""

from __future__ import annotations

import numpy as np

from attnlab.validate import as_array, as_int, check_bytes
from attnlab.core.hbm import HBM
from attnlab.core.softmax import softmax_scale

__all__ = ["block_sizes", "causal_mask", "prepare_qkv", "query_heads", "as_hbm"]


def block_sizes(d: int, sram: int = 100_000) -> tuple[int, int]:
    """(Br, Bc) by the paper's rule: Bc = ceil(M / 4d), Br = min(ceil(M / 4d), d).

    The SRAM must hold at least one row each of Q, K, V and O (M >= 4d), else ValueError.

    >>> block_sizes(64, 100_000)          # Bc = ceil(100000 / 256) = 391, Br = min(391, 64)
    (64, 391)
    >>> block_sizes(256, 100_000)         # head dim 256: Bc = ceil(100000 / 1024) = 98 = Br
    (98, 98)
    """
    d = as_int("d", d, 1, 1 << 62)
    sram = as_int("sram", sram, 1, 1 << 62)
    if sram < 4 * d:
        raise ValueError(
            f"sram={sram} elements cannot hold one row each of Q, K, V and O at head dim d={d}; "
            f"valid: sram >= 4*d = {4 * d}"
        )
    bc = -(-sram // (4 * d))
    return min(bc, d), bc


def causal_mask(n_q: int, n_k: int) -> np.ndarray:
    """Boolean (n_q, n_k) mask, True where query i may see key j (bottom-right aligned); at most
    2 GiB with its int64 position vectors, checked before any is made.

    >>> causal_mask(3, 5).astype(int)
    array([[1, 1, 1, 0, 0],
           [1, 1, 1, 1, 0],
           [1, 1, 1, 1, 1]])
    """
    n_q = as_int("n_q", n_q, 0, 1 << 62)
    n_k = as_int("n_k", n_k, 0, 1 << 62)
    check_bytes(
        f"causal_mask: n_q={n_q} x n_k={n_k} (bool, and int64 positions)", n_q * n_k + 8 * (2 * n_q + n_k)
    )
    i = np.arange(n_q)[:, None]
    j = np.arange(n_k)[None, :]
    return j <= i + (n_k - n_q)


def as_hbm(hbm):
    """hbm itself: an HBM counter or None (no counting), refused by name otherwise."""
    if hbm is not None and not isinstance(hbm, HBM):
        raise TypeError(f"hbm must be an attnlab.core.hbm.HBM counter or None, got {type(hbm).__name__}")
    return hbm


def prepare_qkv(q, k, v, scale):
    """Check shapes and dtypes; return (q, k, v) as 4-D float arrays, the scale and whether
    the input was a single 2-D head."""
    shape = "(N, d) or (batch, heads, N, d)"
    q, k, v = (as_array(name, a, ndim=(2, 4), shape=shape) for name, a in (("q", q), ("k", k), ("v", v)))
    if not (q.ndim == k.ndim == v.ndim):
        raise ValueError(f"q, k, v must have the same rank, got shapes {q.shape}, {k.shape}, {v.shape}")
    shapes = f"q {q.shape}, k {k.shape}, v {v.shape}"
    single = q.ndim == 2
    if single:
        q, k, v = q[None, None], k[None, None], v[None, None]
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k's head dim {k.shape[-1]} must equal q's head dim {q.shape[-1]} ({shapes})")
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v must match k in (batch, heads, N) ({shapes})")
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"q batch {q.shape[0]} must equal k batch {k.shape[0]} ({shapes})")
    hq, hkv = q.shape[1], k.shape[1]
    if hkv == 0 or hq % hkv:
        raise ValueError(f"query heads {hq} must be a multiple of KV heads {hkv} (GQA; {shapes})")
    for name, n in (
        ("batch", q.shape[0]),
        ("heads", hq),
        ("N_q", q.shape[2]),
        ("N_k", k.shape[2]),
        ("d", q.shape[3]),
        ("d_v", v.shape[3]),
    ):
        if n < 1:
            raise ValueError(f"{name}={n} is out of range; valid: >= 1 ({shapes})")
    dtype = np.result_type(q.dtype, k.dtype, v.dtype, np.float32)
    q, k, v = (a.astype(dtype, copy=False) for a in (q, k, v))
    return q, k, v, dtype.type(softmax_scale(scale, q.shape[-1])), single


def query_heads(q, k):
    """(b, h, kv_head) for every query head, GQA mapping h -> h // (Hq // Hkv)."""
    group = q.shape[1] // k.shape[1]
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            yield b, h, h // group
