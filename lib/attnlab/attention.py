"""Standard attention (three kernels, S and P in HBM) and tiled FlashAttention, counting HBM traffic.

Conventions (tests rely on them):
- one head is (N, d); batched is (batch, heads, N, d). With GQA, query head h reads KV head
  h // (Hq // Hkv).
- causal masks are aligned bottom-right when N_q != N_k: query i sees keys j <= i + N_k - N_q,
  as in FlashAttention and FlashInfer. For N_q = 3, N_k = 5 (x = visible):
      q0: x x x . .
      q1: x x x x .
      q2: x x x x x
  A query row that sees no key outputs 0 and lse = -inf, never NaN.
- lse is the natural-log log-sum-exp of the scaled logits.
- `sram` (M) is in elements, as in the paper; Bc = ceil(M / 4d), Br = min(ceil(M / 4d), d).

What this leaves out on purpose: dropout, the backward pass (recomputation from m and l), and
real SRAM capacity checks for explicit block sizes: the accounting follows the paper's dataflow.
"""
from __future__ import annotations

import math

import numpy as np

from ._check import as_float, as_int, choice
from .hbm import HBM
from .softmax import softmax

__all__ = ["standard_attention", "flash_attention", "block_sizes", "causal_mask", "ORDERS"]

ORDERS = ("fa1", "fa2")


def block_sizes(d: int, sram: int = 100_000) -> tuple[int, int]:
    """(Br, Bc) by the paper's rule: Bc = ceil(M / 4d), Br = min(ceil(M / 4d), d).

    Example: d = 64, M = 100,000 gives Bc = ceil(100000 / 256) = 391 and Br = 64.
    The SRAM must hold at least one row each of Q, K, V and O (M >= 4d), else ValueError.
    """
    d = as_int("d", d, 1, None)
    sram = as_int("sram", sram, 1, None)
    if sram < 4 * d:
        raise ValueError(
            f"sram={sram} elements cannot hold one row each of Q, K, V and O at head dim d={d}; "
            f"valid: sram >= 4*d = {4 * d}")
    bc = -(-sram // (4 * d))
    return min(bc, d), bc


def causal_mask(n_q: int, n_k: int) -> np.ndarray:
    """Boolean (n_q, n_k) mask, True where query i may see key j (bottom-right aligned)."""
    i = np.arange(n_q)[:, None]
    j = np.arange(n_k)[None, :]
    return j <= i + (n_k - n_q)


def _prepare(q, k, v, scale):
    """Check shapes and dtypes; return (q, k, v) as 4-D float arrays, the scale and whether
    the input was a single 2-D head."""
    arrays = []
    for name, a in (("q", q), ("k", k), ("v", v)):
        a = np.asarray(a)
        if a.dtype.kind not in "fiu":
            raise TypeError(f"{name} must hold real numbers, got dtype {a.dtype}")
        if a.ndim not in (2, 4):
            raise ValueError(f"{name} must be (N, d) or (batch, heads, N, d), got shape {a.shape}")
        arrays.append(a)
    q, k, v = arrays
    if not (q.ndim == k.ndim == v.ndim):
        raise ValueError(f"q, k, v must have the same rank, got shapes {q.shape}, {k.shape}, {v.shape}")
    single = q.ndim == 2
    if single:
        q, k, v = q[None, None], k[None, None], v[None, None]
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k's head dim {k.shape[-1]} must equal q's head dim {q.shape[-1]}")
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(f"v must match k in (batch, heads, N); got v {v.shape} vs k {k.shape}")
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"q batch {q.shape[0]} must equal k batch {k.shape[0]}")
    hq, hkv = q.shape[1], k.shape[1]
    if hkv == 0 or hq % hkv:
        raise ValueError(f"query heads {hq} must be a multiple of KV heads {hkv} (GQA)")
    for name, n in (("N_q", q.shape[2]), ("N_k", k.shape[2]), ("d", q.shape[3]), ("d_v", v.shape[3])):
        if n < 1:
            raise ValueError(f"{name}={n} must be >= 1")
    dtype = np.result_type(q.dtype, k.dtype, v.dtype, np.float32)
    q, k, v = (a.astype(dtype, copy=False) for a in (q, k, v))
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scale = as_float("scale", scale, 0.0, None, lo_open=True)
    return q, k, v, dtype.type(scale), single


def _heads(q, k):
    """(b, h, kv_head) for every query head, GQA mapping h -> h // (Hq // Hkv)."""
    group = q.shape[1] // k.shape[1]
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            yield b, h, h // group


def standard_attention(q, k, v, *, causal: bool = False, scale: float | None = None,
                       hbm: HBM | None = None):
    """The paper's Algorithm 0: three kernels, with S and P written to HBM and read back.

    1. read Q, K; S = scale * Q K^T; write S       (N_q d + N_k d reads, N_q N_k writes)
    2. read S; P = softmax(mask(S)); write P       (N_q N_k reads, N_q N_k writes)
    3. read P, V; O = P V; write O                 (N_q N_k + N_k d_v reads, N_q d_v writes)

    Per head: 2 N_q d + 2 N_k d + 4 N_q N_k elements when d_v = d; for N >> d the 4 N^2 term
    (write S, read S, write P, read P) dominates. Computed in the inputs' float dtype.
    """
    q, k, v, scale, single = _prepare(q, k, v, scale)
    n_q, n_k = q.shape[2], k.shape[2]
    mask = causal_mask(n_q, n_k) if causal else None
    out = np.empty(q.shape[:3] + (v.shape[3],), dtype=q.dtype)
    for b, h, g in _heads(q, k):
        qh, kh, vh = q[b, h], k[b, g], v[b, g]
        if hbm is not None:
            hbm.read("Q", qh); hbm.read("K", kh); hbm.write("S", n_q * n_k)
        s = (qh @ kh.T) * scale
        if hbm is not None:
            hbm.read("S", n_q * n_k); hbm.write("P", n_q * n_k)
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        p = softmax(s, axis=-1)
        if hbm is not None:
            hbm.read("P", n_q * n_k); hbm.read("V", vh); hbm.write("O", n_q * vh.shape[1])
        out[b, h] = p @ vh
    return out[0, 0] if single else out


def _block_active(r0: int, r1: int, c0: int, offset: int, causal: bool) -> bool:
    """False when every (query, key) pair of the block is masked: its first key lies beyond the
    last visible key of its last query row (c0 > r1 - 1 + offset)."""
    return not causal or c0 <= r1 - 1 + offset


def flash_attention(q, k, v, *, causal: bool = False, scale: float | None = None,
                    sram: int = 100_000, block_r: int | None = None, block_c: int | None = None,
                    order: str = "fa2", hbm: HBM | None = None, return_lse: bool = False):
    """Tiled exact attention with online softmax; S and P live only "on chip".

    order="fa1" (the FlashAttention paper's Algorithm 1): the outer loop runs over K/V blocks
    (each read once), the inner loop over Q blocks; every visit reads Q_i, O_i, l_i, m_i and
    writes O_i, l_i, m_i back, so HBM traffic is 2 N_k d + T_c N_q (3d + 4) without masking.
    order="fa2" (FlashAttention-2): the outer loop runs over Q blocks; O_i, l_i, m_i stay on chip
    and O_i is written once, but K and V are re-read for every Q block: N_q d + T_r 2 N_k d + N_q d
    (+ N_q for lse when return_lse).

    Causal: a block whose every entry is masked is skipped (no loads, no compute); partial
    blocks are masked element-wise. N need not divide by the block sizes.
    The initialisation of O, l, m in HBM (fa1) is not counted, as in the paper's analysis.
    In fa1, lse = m + log l is derived from the statistics it already stored (no extra traffic).

    Returns O, or (O, lse) with return_lse=True.

    Example: at N = 257, d = 64, block_r = block_c = 32, fp32 inputs, the result differs from
    `standard_attention` by ~1e-7.
    """
    order = choice("order", order, ORDERS)
    q, k, v, scale, single = _prepare(q, k, v, scale)
    n_q, n_k, d = q.shape[2], k.shape[2], q.shape[3]
    if block_r is None or block_c is None:
        br, bc = block_sizes(d, sram)
        block_r = br if block_r is None else block_r
        block_c = bc if block_c is None else block_c
    block_r = as_int("block_r", block_r, 1, None)
    block_c = as_int("block_c", block_c, 1, None)
    offset = n_k - n_q
    out = np.zeros(q.shape[:3] + (v.shape[3],), dtype=q.dtype)
    lse = np.full(q.shape[:3], -np.inf, dtype=q.dtype)
    kernel = _fa1_head if order == "fa1" else _fa2_head
    for b, h, g in _heads(q, k):
        out[b, h], lse[b, h] = kernel(q[b, h], k[b, g], v[b, g], scale, block_r, block_c,
                                      offset, causal, hbm, return_lse)
    if single:
        out, lse = out[0, 0], lse[0, 0]
    return (out, lse) if return_lse else out


def _scores(qi, kj, scale, r0, c0, offset, causal):
    """Scaled logits of one block, masked entries set to -inf."""
    s = (qi @ kj.T) * scale
    if causal:
        rows = np.arange(r0, r0 + qi.shape[0])[:, None]
        cols = np.arange(c0, c0 + kj.shape[0])[None, :]
        s = np.where(cols <= rows + offset, s, -np.inf)
    return s


def _safe(m):
    """Max used as exponent base: -inf (no visible key yet) becomes 0 so exp() gives 0, not NaN."""
    return np.where(np.isfinite(m), m, 0.0)


def _fa1_head(q, k, v, scale, br, bc, offset, causal, hbm, _return_lse):
    n_q, n_k, dv = q.shape[0], k.shape[0], v.shape[1]
    o = np.zeros((n_q, dv), dtype=q.dtype)          # O, l, m live in HBM between visits
    l = np.zeros(n_q, dtype=q.dtype)
    m = np.full(n_q, -np.inf, dtype=q.dtype)
    for c0 in range(0, n_k, bc):
        c1 = min(c0 + bc, n_k)
        kj, vj = k[c0:c1], v[c0:c1]
        if hbm is not None:                         # K_j, V_j stay in SRAM for the inner loop
            hbm.read("K", kj, rows=(c0, c1)); hbm.read("V", vj, rows=(c0, c1))
        for r0 in range(0, n_q, br):
            r1 = min(r0 + br, n_q)
            if not _block_active(r0, r1, c0, offset, causal):
                continue
            if hbm is not None:
                hbm.read("Q", q[r0:r1], rows=(r0, r1)); hbm.read("O", o[r0:r1], rows=(r0, r1))
                hbm.read("l", r1 - r0, rows=(r0, r1)); hbm.read("m", r1 - r0, rows=(r0, r1))
                hbm.compute((r0, r1), (c0, c1))
            s = _scores(q[r0:r1], kj, scale, r0, c0, offset, causal)
            m_blk = s.max(axis=1)
            p = np.exp(s - _safe(m_blk)[:, None])
            l_blk = p.sum(axis=1)
            m_old, l_old = m[r0:r1], l[r0:r1]
            m_new = np.maximum(m_old, m_blk)
            a_old = np.exp(m_old - _safe(m_new))    # 0 where m_old = -inf
            a_blk = np.exp(m_blk - _safe(m_new))
            l_new = a_old * l_old + a_blk * l_blk
            num = (a_old * l_old)[:, None] * o[r0:r1] + a_blk[:, None] * (p @ vj)
            o[r0:r1] = np.divide(num, l_new[:, None], out=np.zeros_like(num),
                                 where=l_new[:, None] > 0)
            l[r0:r1], m[r0:r1] = l_new, m_new
            if hbm is not None:
                hbm.write("O", o[r0:r1], rows=(r0, r1))
                hbm.write("l", r1 - r0, rows=(r0, r1)); hbm.write("m", r1 - r0, rows=(r0, r1))
    lse = np.where(l > 0, m + np.log(np.where(l > 0, l, 1.0)), -np.inf).astype(q.dtype)
    return o, lse


def _fa2_head(q, k, v, scale, br, bc, offset, causal, hbm, return_lse):
    n_q, n_k, dv = q.shape[0], k.shape[0], v.shape[1]
    o = np.zeros((n_q, dv), dtype=q.dtype)
    lse = np.full(n_q, -np.inf, dtype=q.dtype)
    for r0 in range(0, n_q, br):
        r1 = min(r0 + br, n_q)
        cols = [c0 for c0 in range(0, n_k, bc) if _block_active(r0, r1, c0, offset, causal)]
        qi = q[r0:r1]
        acc = np.zeros((r1 - r0, dv), dtype=q.dtype)  # O_i, l_i, m_i stay in SRAM
        l = np.zeros(r1 - r0, dtype=q.dtype)
        m = np.full(r1 - r0, -np.inf, dtype=q.dtype)
        if hbm is not None and cols:
            hbm.read("Q", qi, rows=(r0, r1))
        for c0 in cols:
            c1 = min(c0 + bc, n_k)
            if hbm is not None:
                hbm.read("K", k[c0:c1], rows=(c0, c1))
                hbm.read("V", v[c0:c1], rows=(c0, c1))
                hbm.compute((r0, r1), (c0, c1))
            s = _scores(qi, k[c0:c1], scale, r0, c0, offset, causal)
            m_new = np.maximum(m, s.max(axis=1))
            alpha = np.exp(m - _safe(m_new))
            p = np.exp(s - _safe(m_new)[:, None])
            l = alpha * l + p.sum(axis=1)
            acc = alpha[:, None] * acc + p @ v[c0:c1]
            m = m_new
        o[r0:r1] = np.divide(acc, l[:, None], out=np.zeros_like(acc), where=l[:, None] > 0)
        lse[r0:r1] = np.where(l > 0, m + np.log(np.where(l > 0, l, 1.0)), -np.inf)
        if hbm is not None:
            hbm.write("O", o[r0:r1], rows=(r0, r1))
            if return_lse:
                hbm.write("lse", r1 - r0, rows=(r0, r1))
    return o, lse
