"""Independent float64 references for the layer-1 tests.

Nothing here imports `attnlab`: the attention is written from the definition, one query row at a
time, and the HBM counts are enumerated block by block from the dataflow described in the
docstrings of `attnlab.core.attention` (not copied from `attnlab.core.iomodel`'s formulas).

Conventions (the docstring of attnlab.core.attention, "Conventions (tests rely on them)"):
- one head is (N, d); batched is (B, H, N, d); GQA: query head h reads KV head h // (Hq // Hkv);
- causal masks are bottom-right aligned: query i sees key j iff j <= i + N_k - N_q;
- a query that sees no key outputs 0 and has lse = -inf;
- lse is the natural-log log-sum-exp of the scaled logits.
"""

from __future__ import annotations

import functools
import math

import numpy as np

__all__ = [
    "visible",
    "ref_mask",
    "attention_head",
    "attention",
    "decode_attention",
    "standard_io_ref",
    "flash_io_ref",
    "paper_blocks",
]


# --------------------------------------------------------------------------------------------
# attention by definition
# --------------------------------------------------------------------------------------------


def visible(i: int, j: int, n_q: int, n_k: int, causal: bool) -> bool:
    """True when query i may attend to key j (bottom-right aligned causal convention)."""
    return (not causal) or j <= i + n_k - n_q


@functools.lru_cache(maxsize=64)
def ref_mask(n_q: int, n_k: int, causal: bool) -> np.ndarray:
    """(n_q, n_k) boolean mask built element by element from `visible` (read-only, cached)."""
    m = np.zeros((n_q, n_k), dtype=bool)
    for i in range(n_q):
        for j in range(n_k):
            m[i, j] = visible(i, j, n_q, n_k, causal)
    m.flags.writeable = False
    return m


def attention_head(q, k, v, *, causal=False, scale=None):
    """One head, float64, one query row at a time. Returns (o (n_q, d_v), lse (n_q,))."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    n_q, d = q.shape
    n_k = k.shape[0]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    mask = ref_mask(n_q, n_k, causal)
    o = np.zeros((n_q, v.shape[1]), dtype=np.float64)
    lse = np.full(n_q, -np.inf, dtype=np.float64)
    for i in range(n_q):
        cols = np.flatnonzero(mask[i])
        if cols.size == 0:  # fully masked row: output 0, lse -inf
            continue
        s = scale * (k[cols] @ q[i])  # logits of the visible keys only
        mx = s.max()
        e = np.exp(s - mx)
        tot = e.sum()
        p = e / tot
        o[i] = p @ v[cols]
        lse[i] = mx + math.log(tot)
    return o, lse


def decode_attention(q, keys, values):
    """Decode, float64: q (n_req, hq, d), one query per head; keys[i], values[i] request i's
    tokens (n_i, hkv, d) in order. Query head h reads KV head h // (hq / hkv). Returns (o, lse)."""
    n_req, hq, d = q.shape
    o, lse = np.zeros((n_req, hq, d)), np.zeros((n_req, hq))
    for i, (k, v) in enumerate(zip(keys, values)):
        k, v = np.asarray(k, np.float64), np.asarray(v, np.float64)
        g = hq // k.shape[1]
        for h in range(hq):
            oh, lh = attention_head(q[i, h][None], k[:, h // g], v[:, h // g])
            o[i, h], lse[i, h] = oh[0], lh[0]
    return o, lse


def attention(q, k, v, *, causal=False, scale=None):
    """(N, d) or (B, H, N, d) with GQA. Returns (o, lse) in float64."""
    q = np.asarray(q)
    k = np.asarray(k)
    v = np.asarray(v)
    if q.ndim == 2:
        return attention_head(q, k, v, causal=causal, scale=scale)
    b, hq, n_q, _ = q.shape
    hkv = k.shape[1]
    group = hq // hkv
    o = np.zeros((b, hq, n_q, v.shape[3]))
    lse = np.zeros((b, hq, n_q))
    for bi in range(b):
        for h in range(hq):
            g = h // group
            o[bi, h], lse[bi, h] = attention_head(q[bi, h], k[bi, g], v[bi, g], causal=causal, scale=scale)
    return o, lse


# --------------------------------------------------------------------------------------------
# HBM counts, per head, in elements
# --------------------------------------------------------------------------------------------


def standard_io_ref(n_q: int, d: int, n_k: int | None = None, d_v: int | None = None) -> int:
    """Algorithm 0, kernel by kernel.

    1. read Q, K; write S    2. read S; write P    3. read P, V; write O
    With d_v = d this is 2 N_q d + 2 N_k d + 4 N_q N_k.
    """
    n_k = n_q if n_k is None else n_k
    d_v = d if d_v is None else d_v
    k1 = n_q * d + n_k * d + n_q * n_k
    k2 = n_q * n_k + n_q * n_k
    k3 = n_q * n_k + n_k * d_v + n_q * d_v
    return k1 + k2 + k3


def paper_blocks(d: int, sram: int) -> tuple[int, int]:
    """(Br, Bc) by the paper's rule Bc = ceil(M / 4d), Br = min(ceil(M / 4d), d), computed with
    math.ceil on the exact ratio (integers small enough to be exact in float64)."""
    bc = math.ceil(sram / (4 * d))
    return min(bc, d), bc


def _block_has_visible(mask, r0, r1, c0, c1) -> bool:
    return bool(mask[r0:r1, c0:c1].any())


def flash_io_ref(
    n_q: int,
    d: int,
    *,
    n_k: int | None = None,
    d_v: int | None = None,
    block_r: int,
    block_c: int,
    order: str = "fa1",
    causal: bool = False,
    return_lse: bool = False,
) -> dict[str, tuple[int, int]]:
    """Enumerate the HBM traffic of tiled FlashAttention by visiting every (Q block, K/V block).

    fa1 (K/V outer): per K/V block read K_j, V_j; per visited (i, j) read Q_i, O_i, l_i, m_i and
    write O_i, l_i, m_i. fa2 (Q outer): per Q block that has any visible block read Q_i once;
    per visited (i, j) read K_j, V_j; per Q block write O_i (always) and lse_i if return_lse.
    A block is visited when at least one of its (query, key) pairs is visible.

    Returns {tensor: (reads, writes)}; sum both entries over tensors for the total.
    """
    n_k = n_q if n_k is None else n_k
    d_v = d if d_v is None else d_v
    mask = ref_mask(n_q, n_k, causal) if causal else None
    q_blocks = [(r0, min(r0 + block_r, n_q)) for r0 in range(0, n_q, block_r)]
    k_blocks = [(c0, min(c0 + block_c, n_k)) for c0 in range(0, n_k, block_c)]

    def active(rb, cb):
        return mask is None or _block_has_visible(mask, rb[0], rb[1], cb[0], cb[1])

    io: dict[str, list[int]] = {}

    def rd(name, n):
        io.setdefault(name, [0, 0])[0] += n

    def wr(name, n):
        io.setdefault(name, [0, 0])[1] += n

    if order == "fa1":
        for c0, c1 in k_blocks:
            rd("K", (c1 - c0) * d)
            rd("V", (c1 - c0) * d_v)
            for r0, r1 in q_blocks:
                if not active((r0, r1), (c0, c1)):
                    continue
                rows = r1 - r0
                rd("Q", rows * d)
                rd("O", rows * d_v)
                rd("l", rows)
                rd("m", rows)
                wr("O", rows * d_v)
                wr("l", rows)
                wr("m", rows)
    elif order == "fa2":
        for r0, r1 in q_blocks:
            rows = r1 - r0
            visits = [(c0, c1) for c0, c1 in k_blocks if active((r0, r1), (c0, c1))]
            if visits:
                rd("Q", rows * d)
            for c0, c1 in visits:
                rd("K", (c1 - c0) * d)
                rd("V", (c1 - c0) * d_v)
            wr("O", rows * d_v)
            if return_lse:
                wr("lse", rows)
    else:
        raise ValueError(f"order={order!r}")
    return {name: (r, w) for name, (r, w) in io.items()}


def total(io: dict[str, tuple[int, int]]) -> int:
    """Total elements of a {tensor: (reads, writes)} dict."""
    return sum(r + w for r, w in io.values())


# --------------------------------------------------------------------------------------------
# attention states (o, lse) and the decode time model
# --------------------------------------------------------------------------------------------


def state_ref(q, k, v, *, mask=None, scale=None):
    """Attention state by definition, float64, one query row at a time.

    q is (d,) or (n, d); k (n_k, d); v (n_k, d_v); `mask` (bool, broadcastable to (n, n_k),
    True = visible). lse = mx + log(sum_j exp(s_j - mx)) with math.log (natural log); a row that
    sees no key gets o = 0, lse = -inf. Returns (o, lse) shaped like q's leading dimension.
    """
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    single = q.ndim == 1
    q2 = q[None] if single else q
    n, d = q2.shape
    n_k = k.shape[0]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    vis = (
        np.ones((n, n_k), dtype=bool)
        if mask is None
        else np.broadcast_to(np.asarray(mask, dtype=bool), (n, n_k))
    )
    o = np.zeros((n, v.shape[1]), dtype=np.float64)
    lse = np.full(n, -np.inf, dtype=np.float64)
    for i in range(n):
        cols = np.flatnonzero(vis[i])
        if cols.size == 0:
            continue
        s = np.array([scale * math.fsum(q2[i] * k[j]) for j in cols])
        mx = float(s.max())
        e = np.exp(s - mx)
        tot = math.fsum(e)
        o[i] = (e / tot) @ v[cols]
        lse[i] = mx + math.log(tot)
    return (o[0], lse[0]) if single else (o, lse)


def decode_time_ref(
    batch: int,
    context: int,
    kv_heads: int,
    splits: int,
    *,
    sms: int,
    bandwidth: float,
    head_dim: int = 128,
    group: int = 4,
    dtype_bytes: float = 2,
) -> dict:
    """The lecture's "SMs share the bandwidth" GPU, written out from decode_time's docstring.

    blocks = batch * kv_heads * splits, each reading K and V of ceil(context / splits) tokens;
    a block runs on one SM at bandwidth / sms; blocks run in ceil(blocks / sms) waves;
    merge (splits > 1): 2 * batch * kv_heads * group * splits * (head_dim + 1) * 4 bytes at the
    full bandwidth.
    """
    blocks = batch * kv_heads * splits
    chunk = (context + splits - 1) // splits  # ceil without floats
    block_bytes = 2 * chunk * head_dim * dtype_bytes
    block_time = block_bytes / (bandwidth / sms)
    waves = math.ceil(blocks / sms)
    attn = waves * block_time
    merge_bytes = 0 if splits == 1 else 2 * batch * kv_heads * group * splits * (head_dim + 1) * 4
    merge_time = merge_bytes / bandwidth
    return {
        "blocks": blocks,
        "waves": waves,
        "block_time": block_time,
        "attn_time": attn,
        "merge_time": merge_time,
        "time": attn + merge_time,
        "utilization": blocks / (waves * sms),
    }
