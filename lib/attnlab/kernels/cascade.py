"""Cascade decode in Triton: n requests sharing one prefix (lecture §5.4, `attnlab.core.decode.cascade_attention`).

Three launches (four when the unique part is split):
1. `_prefix_kernel`, the shared prefix read once for all n requests. For a KV head, the n x g query
   rows (g = q_heads / kv_heads) of all requests are one (n g, d) matrix: a prefill-shaped tile block
   against the prefix K/V, so the dot products are matrix-matrix (tensor cores) and the prefix is
   read once per KV head, not n times. One program per (KV head, block of BLOCK_M rows, split of the
   prefix); the splits fill the GPU when n g is small. Each writes a partial state (o fp32, lse).
   Row r of KV head hk is request r // g, query head hk g + r % g.
2. `paged_decode(..., return_lse=True)` over each request's own (unique) tokens in a paged pool.
3. `_cascade_merge_kernel`, one program per (request, query head): the prefix splits and the unique
   state folded with the merge (+), lse-weighted, in a fixed order (deterministic); a part that saw
   no key (lse = -inf) gets weight 0, and two empty parts give o = 0, not NaN.

Layouts: q (n, q_heads, d); prefix_k, prefix_v NHD (prefix_len, kv_heads, d), any strides (e.g.
a page-aligned prefix viewed out of a pool: pool[first:last].flatten(0, 1)); the unique part as
`paged_decode` takes it. The unique state reaches the merge in q's dtype (as in FlashInfer's
cascade, whose levels' outputs are merged in their dtype); the prefix state stays fp32.

Nothing reads the page table on the host (only shapes), so a call can be captured in a CUDA graph.
Under TRITON_INTERPRET=1 dot products run in float32 and a bf16 output is rounded by torch, as in
`kernels.paged`. Left out: more than two levels, prefixes shared by subsets of the batch.

This file is long because its two kernels, the prefix plan and the launcher are one algorithm: the
prefix kernel writes its partial states in the layout the merge kernel reads, and the plan sizes
both; each part is short.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from attnlab.validate import as_bool
from attnlab.kernels import interpreting
from attnlab.kernels.common import (
    LOG2E,
    as_block,
    as_count,
    as_scale,
    check_paged,
    dot,
    finish,
    online_update,
)
from attnlab.kernels.paged import paged_decode
from attnlab.kernels.tuning import auto_splits

__all__ = ["cascade_decode", "prefix_plan", "PREFIX_MIN_CHUNK"]

#: With splits=None on a GPU no prefix chunk is shorter than this many tokens.
PREFIX_MIN_CHUNK = 128


@triton.jit
def _prefix_kernel(
    Q,
    K,
    V,
    OP,
    LP,
    qk_scale,
    s_qb,
    s_qh,
    s_qd,
    s_kn,
    s_kh,
    s_kd,
    s_vn,
    s_vh,
    s_vd,
    N_ROWS,
    PREFIX,
    CHUNK,
    SPLITS,
    KV_HEADS,
    GROUP,
    HEAD_DIM,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
):
    hk = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_s = tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # rows of this KV head: (request, group member)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    r_ok = rows < N_ROWS
    d_ok = offs_d < HEAD_DIM
    req = (rows // GROUP).to(tl.int64)
    head = hk * GROUP + rows % GROUP
    q = tl.load(
        Q + req[:, None] * s_qb + head[:, None] * s_qh + offs_d[None, :] * s_qd,
        mask=r_ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    start = pid_s * CHUNK
    end = tl.minimum(start + CHUNK, PREFIX)
    k_head = K + hk * s_kh
    v_head = V + hk * s_vh
    for n0 in range(start, end, BLOCK_N):
        cols = (n0 + offs_n).to(tl.int64)
        c_ok = cols < end
        kt = tl.load(
            k_head + cols[None, :] * s_kn + offs_d[:, None] * s_kd,
            mask=c_ok[None, :] & d_ok[:, None],
            other=0.0,
        )
        if UPCAST:
            kt = kt.to(tl.float32)
        s = tl.where(c_ok[None, :], dot(q, kt, IEEE) * qk_scale, float("-inf"))
        v = tl.load(
            v_head + cols[:, None] * s_vn + offs_d[None, :] * s_vd,
            mask=c_ok[:, None] & d_ok[None, :],
            other=0.0,
        )
        if UPCAST:
            v = v.to(tl.float32)
        m_i, l_i, acc = online_update(s, v, m_i, l_i, acc, IEEE)
    o, lse = finish(acc, m_i, l_i)  # no key (empty prefix): o = 0, lse = -inf
    idx = (req * KV_HEADS * GROUP + head) * SPLITS + pid_s  # partial state index
    tl.store(OP + idx[:, None] * HEAD_DIM + offs_d[None, :], o, mask=r_ok[:, None] & d_ok[None, :])
    tl.store(LP + idx, lse, mask=r_ok)


@triton.jit
def _cascade_merge_kernel(
    OP, LP, OU, LU, O, LSE, SPLITS, HEAD_DIM, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr
):
    pid = tl.program_id(0).to(tl.int64)  # (request, query head)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    s_ok = offs_s < SPLITS
    d_ok = offs_d < HEAD_DIM
    lp = tl.load(LP + pid * SPLITS + offs_s, mask=s_ok, other=float("-inf"))
    lu = tl.load(LU + pid)
    m = tl.maximum(tl.max(lp, 0), lu)
    m_safe = tl.where(m == float("-inf"), 0.0, m)  # both parts empty: shift by 0, weights 0
    wp = tl.exp(lp - m_safe)
    wu = tl.exp(lu - m_safe)
    total = tl.sum(wp, 0) + wu
    safe_total = tl.where(total > 0, total, 1.0)
    op = tl.load(
        OP + (pid * SPLITS + offs_s)[:, None] * HEAD_DIM + offs_d[None, :],
        mask=s_ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    ou = tl.load(OU + pid * HEAD_DIM + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    out = (tl.sum(op * wp[:, None], 0) + ou * wu) / safe_total
    tl.store(O + pid * HEAD_DIM + offs_d, out.to(O.dtype.element_ty), mask=d_ok)
    tl.store(LSE + pid, tl.where(total > 0, m_safe + tl.log(safe_total), float("-inf")))


def _check_prefix(q, prefix_k, prefix_v, k_pool):
    for name, t in (("prefix_k", prefix_k), ("prefix_v", prefix_v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 3:
            raise ValueError(f"{name} must be NHD (prefix_len, kv_heads, d), got shape {tuple(t.shape)}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {t.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; put them on one device")
    if prefix_v.shape != prefix_k.shape:
        raise ValueError(
            f"prefix_v {tuple(prefix_v.shape)} must have prefix_k's shape {tuple(prefix_k.shape)}"
        )
    if prefix_k.shape[1:] != k_pool.shape[2:]:
        raise ValueError(
            f"prefix_k (prefix_len, kv_heads, d) = {tuple(prefix_k.shape)} must match the "
            f"pool's kv_heads, d = {tuple(k_pool.shape[2:])}"
        )


def prefix_plan(
    n: int, q_heads: int, kv_heads: int, prefix_len: int, device, *, splits=None, block_m=None, block_n=None
):
    """(block_m, block_n, splits, chunk) of the prefix kernel: rows per block (16 under the
    interpreter, else up to 64 of the n g rows), keys per tile, the prefix cut into `splits`
    chunks of `chunk` tokens (whole tiles; splits=None: `auto_splits` over the KV heads x row
    blocks, about one block per SM, chunks >= PREFIX_MIN_CHUNK). On an H200 (Llama-3-8B, prefix
    4096): 32 splits at n = 8, 8 at n = 64, the fastest of 4-32 in the recorded run (data/measurements)."""
    interp = interpreting()
    block_m, block_n = as_block("block_m", block_m), as_block("block_n", block_n)
    rows, longest = n * (q_heads // kv_heads), max(prefix_len, 1)
    block_m = block_m or (16 if interp else min(64, max(16, triton.next_power_of_2(rows))))
    block_n = block_n or (16 if interp else 64)
    if splits is None:
        splits = auto_splits(
            triton.cdiv(rows, block_m),
            kv_heads,
            longest,
            device,
            waves=1,
            min_chunk=block_n if interp else PREFIX_MIN_CHUNK,
        )
    elif not 1 <= as_count("splits", splits) <= longest:
        raise ValueError(
            f"splits={splits} is out of range; valid: 1 <= splits <= prefix_len={prefix_len} "
            f"(1 for an empty prefix), or None"
        )
    splits = int(splits)
    chunk = triton.cdiv(triton.cdiv(longest, splits), block_n) * block_n  # whole tiles
    return block_m, block_n, triton.cdiv(longest, chunk), chunk  # no split left without keys


def cascade_decode(
    q,
    prefix_k,
    prefix_v,
    k_pool,
    v_pool,
    kv_indptr,
    kv_indices,
    kv_last_page_len,
    *,
    page_size: int,
    splits: int | None = None,
    unique_splits: int | None = None,
    scale: float | None = None,
    out=None,
    return_lse: bool = False,
    block_m: int | None = None,
    block_n: int | None = None,
):
    """Decode attention of n requests over a shared prefix followed by each one's own tokens.

    q (n, q_heads, d); prefix_k, prefix_v NHD (prefix_len, kv_heads, d), any strides, q's dtype,
    prefix_len >= 0; k_pool, v_pool NHD (pages, page_size, kv_heads, d) and the int32 table
    kv_indptr (n + 1), kv_indices, kv_last_page_len (n) of the unique tokens (every request >= 1),
    exactly as `paged_decode` takes them. `splits`: chunks of the prefix (None: enough programs for
    about two per SM, chunks >= PREFIX_MIN_CHUNK); `unique_splits`: `paged_decode`'s splits.
    `out`: an optional contiguous (n, q_heads, d) tensor of q's dtype. block_m, block_n: the prefix
    kernel's tiles, None or powers of two in [16, 256].

    Returns o (n, q_heads, d) in q's dtype, or (o, lse) with lse float32 (n, q_heads), natural log:
    equal to each request's attention over prefix + its own tokens.
    """
    B, hq, d, hkv, page_size = check_paged(
        q, k_pool, v_pool, kv_indptr, kv_indices, kv_last_page_len, page_size
    )
    _check_prefix(q, prefix_k, prefix_v, k_pool)
    interp = interpreting()
    P, g = prefix_k.shape[0], hq // hkv
    if unique_splits is not None:
        unique_splits = as_count("unique_splits", unique_splits, 1)
    scale, return_lse = as_scale(scale, d), as_bool("return_lse", return_lse)
    block_m, block_n, splits, chunk = prefix_plan(
        B, hq, hkv, P, q.device, splits=splits, block_m=block_m, block_n=block_n
    )
    rows, row_blocks = B * g, triton.cdiv(B * g, block_m)
    if out is None:
        out = torch.empty((B, hq, d), dtype=q.dtype, device=q.device)
    elif (
        not isinstance(out, torch.Tensor)
        or out.shape != (B, hq, d)
        or out.dtype != q.dtype
        or out.device != q.device
        or not out.is_contiguous()
    ):
        raise ValueError(f"out must be a contiguous {q.dtype} tensor of shape {(B, hq, d)} on {q.device}")
    f32 = dict(dtype=torch.float32, device=q.device)
    op = torch.empty((B * hq * splits, d), **f32)
    lp = torch.empty((B * hq * splits,), **f32)
    lse = torch.empty((B, hq), **f32)
    block_d = max(16, triton.next_power_of_2(d))
    fp32 = q.dtype == torch.float32
    kw = {} if interp else {"num_warps": 4, "num_stages": 2}
    _prefix_kernel[(hkv, row_blocks, splits)](
        q,
        prefix_k,
        prefix_v,
        op,
        lp,
        scale * LOG2E,
        *q.stride(),
        *prefix_k.stride(),
        *prefix_v.stride(),
        rows,
        P,
        chunk,
        splits,
        hkv,
        g,
        d,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=block_d,
        UPCAST=interp or fp32,
        IEEE=interp or fp32,
        **kw,
    )
    ou, lu = paged_decode(
        q,
        k_pool,
        v_pool,
        kv_indptr,
        kv_indices,
        kv_last_page_len,
        page_size=page_size,
        splits=unique_splits,
        scale=scale,
        return_lse=True,
    )
    # the interpreter truncates fp32 to bf16 (a GPU rounds): write fp32 there and let torch round
    dst = torch.empty(out.shape, **f32) if interp and q.dtype == torch.bfloat16 else out
    _cascade_merge_kernel[(B * hq,)](
        op,
        lp,
        ou,
        lu,
        dst,
        lse,
        splits,
        d,
        BLOCK_S=triton.next_power_of_2(splits),
        BLOCK_D=block_d,
        **({} if interp else {"num_warps": 4}),
    )
    if dst is not out:
        out.copy_(dst)
    return (out, lse) if return_lse else out
