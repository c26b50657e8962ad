"""Split-KV decode attention (Flash-Decoding) in Triton, with a separate merge kernel.

Stage 1, `_split_kernel`: one program per (request, KV head, split), exactly the work block of the
lecture's time model (`attnlab.machine.hardware.decode_time`). It loads the g query heads that share this KV
head (GQA) once, streams its chunk of ceil(context / splits) keys with the online softmax, and
writes a partial state per query head: o (fp32) and lse (natural log).
Stage 2, `kernels.common.merge_splits_kernel`: one program per (request, query head) folds the
`splits` partial states with the merge operator (+), in a fixed order, so the result is deterministic.

With splits = 1 the first stage already holds the answer and the merge is skipped.
What it leaves out on purpose: paged KV, variable lengths within a batch, a persistent
load-balanced schedule (FlashInfer's design, later in the course).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from attnlab.validate import as_bool
from attnlab.kernels import interpreting
from attnlab.kernels.common import (
    LOG2E,
    DTYPES,
    as_block,
    as_count,
    as_scale,
    as_warps,
    dot,
    finish,
    merge_splits_kernel,
    online_update,
)

__all__ = ["split_kv_decode", "workspace", "check_workspace"]


@triton.jit
def _split_kernel(
    Q,
    K,
    V,
    OP,
    LP,
    qk_scale,
    s_qb,
    s_qh,
    s_kb,
    s_kh,
    s_kn,
    s_vb,
    s_vh,
    s_vn,
    CTX,
    CHUNK,
    SPLITS,
    KV_HEADS,
    GROUP,
    HEAD_DIM,
    BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    pid_s = tl.program_id(1)
    b = (pid_bh // KV_HEADS).to(tl.int64)  # 64-bit offsets: batch x context can pass 2^31
    hk = pid_bh % KV_HEADS
    offs_g = tl.arange(0, BLOCK_G)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    g_ok = offs_g < GROUP
    d_ok = offs_d < HEAD_DIM
    heads = hk * GROUP + offs_g
    # the g query heads of this KV head stay on chip: one KV read serves all of them
    q = tl.load(
        Q + b * s_qb + heads[:, None] * s_qh + offs_d[None, :], mask=g_ok[:, None] & d_ok[None, :], other=0.0
    )
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    start = pid_s * CHUNK
    end = tl.minimum(start + CHUNK, CTX)
    k_base = K + b * s_kb + hk * s_kh
    v_base = V + b * s_vb + hk * s_vh
    for n0 in range(start, end, BLOCK_N):
        cols = n0 + offs_n
        c_ok = cols < end
        kt = tl.load(
            k_base + cols[None, :] * s_kn + offs_d[:, None], mask=c_ok[None, :] & d_ok[:, None], other=0.0
        )
        if UPCAST:
            kt = kt.to(tl.float32)
        s = tl.where(c_ok[None, :], dot(q, kt, IEEE) * qk_scale, float("-inf"))
        v = tl.load(
            v_base + cols[:, None] * s_vn + offs_d[None, :], mask=c_ok[:, None] & d_ok[None, :], other=0.0
        )
        if UPCAST:
            v = v.to(tl.float32)
        m_i, l_i, acc = online_update(s, v, m_i, l_i, acc, IEEE)
    o, lse = finish(acc, m_i, l_i)
    row = (b * KV_HEADS * GROUP + heads) * SPLITS + pid_s  # partial state index
    tl.store(OP + row[:, None] * HEAD_DIM + offs_d[None, :], o, mask=g_ok[:, None] & d_ok[None, :])
    tl.store(LP + row, lse, mask=g_ok)


def workspace(batch: int, q_heads: int, head_dim: int, splits: int, device) -> dict:
    """Buffers for the partial states and the output, allocated once. Passing them to
    `split_kv_decode` keeps every pointer fixed between calls, so the two launches can be captured
    in a CUDA graph and replayed (FlashInfer's fixed workspace serves the same purpose)."""
    batch, q_heads = as_count("batch", batch, 1), as_count("q_heads", q_heads, 1)
    head_dim, splits = as_count("head_dim", head_dim, 1, 256), as_count("splits", splits, 1)
    shapes = _ws_shapes(batch, q_heads, head_dim, splits)
    return {
        **{key: torch.empty(shape, dtype=torch.float32, device=device) for key, shape in shapes.items()},
        "splits": splits,
    }


def _ws_shapes(batch: int, q_heads: int, head_dim: int, splits: int) -> dict:
    """The shapes of `workspace`'s tensors: partial states (o, lse) per split, then the merged ones."""
    rows = batch * q_heads
    return {"op": (rows * splits, head_dim), "lp": (rows * splits,), "o": (rows, head_dim), "lse": (rows,)}


def check_workspace(ws, batch: int, q_heads: int, head_dim: int, splits: int, device) -> dict:
    """`ws` if it is what `workspace(batch, q_heads, head_dim, splits, device)` makes: a dict whose
    "op", "lp", "o", "lse" are float32 tensors of those shapes on `device` and whose "splits" is
    `splits`. Anything else is refused by name (TypeError for the wrong kind of thing, ValueError
    for a workspace of other shapes), before a kernel could write past its buffers."""
    made = "kernels.decode.workspace(batch, q_heads, d, splits, device)"
    if not isinstance(ws, dict) or not {"op", "lp", "o", "lse", "splits"} <= set(ws):
        keys = f" with keys {sorted(map(str, ws))}" if isinstance(ws, dict) else ""
        raise TypeError(f"ws must be a dict from {made}, got {type(ws).__name__}{keys}")
    want = _ws_shapes(batch, q_heads, head_dim, splits)
    for key in want:
        if not isinstance(ws[key], torch.Tensor) or ws[key].dtype != torch.float32:
            what = ws[key].dtype if isinstance(ws[key], torch.Tensor) else type(ws[key]).__name__
            raise TypeError(f"ws[{key!r}] must be a float32 torch.Tensor from {made}, got {what}")
    made_for = as_count("ws['splits']", ws["splits"])
    got = {key: tuple(ws[key].shape) for key in want}
    if made_for != splits or got != want:
        raise ValueError(
            f"ws was made for splits={made_for} and shapes {got}; this call needs "
            f"splits={splits} and shapes {want}"
        )
    for key in want:
        t = ws[key]
        if t.device != torch.device(device) or not t.is_contiguous():
            where = f"{t.device}" + ("" if t.is_contiguous() else ", not contiguous")
            raise ValueError(f"ws[{key!r}] is on {where}; valid: contiguous, on {device} (q's device)")
    return ws


def split_kv_decode(
    q,
    k,
    v,
    splits: int = 1,
    *,
    scale: float | None = None,
    block_n: int | None = None,
    return_lse: bool = False,
    num_warps: int | None = None,
    ws: dict | None = None,
):
    """Decode attention for one new query per head: q (batch, Hq, d), k and v (batch, Hkv, ctx, d).

    Returns o (batch, Hq, d) in float32, or (o, lse). `splits` in 1..ctx. `ws` is an optional
    `workspace(...)` for these shapes (needed for CUDA-graph capture); block_n None or a power of
    two in [16, 256], num_warps one of 1, 2, 4, 8, 16.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if q.dim() != 3 or k.dim() != 4 or v.shape != k.shape:
        raise ValueError(
            f"need q (batch, Hq, d) and k, v (batch, Hkv, ctx, d); got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    B, hq, d = q.shape
    _, hkv, ctx, dk = k.shape
    if k.shape[0] != B or dk != d or hkv == 0 or hq % hkv:
        raise ValueError(
            f"q {tuple(q.shape)} and k {tuple(k.shape)} must agree in batch and head dim, "
            f"with query heads a multiple of KV heads"
        )
    if B < 1 or hq < 1 or ctx < 1:
        raise ValueError(f"batch={B}, query heads={hq} and context={ctx} must be >= 1")
    if not 1 <= d <= 256:
        raise ValueError(f"head dim d={d} is out of range; valid: 1 <= d <= 256")
    splits = as_count("splits", splits)
    if not 1 <= splits <= ctx:
        raise ValueError(f"splits={splits} is out of range; valid: 1 <= splits <= context={ctx}")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in DTYPES:
        raise TypeError(
            f"q, k, v must share one dtype of float16, bfloat16, float32; got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; put q, k, v on one device")
    scale, return_lse = as_scale(scale, d), as_bool("return_lse", return_lse)
    block_n, num_warps = as_block("block_n", block_n), as_warps(num_warps)
    ws = (
        workspace(B, hq, d, splits, q.device)
        if ws is None
        else check_workspace(ws, B, hq, d, splits, q.device)
    )
    q, k, v = (t.contiguous() for t in (q, k, v))
    group = hq // hkv
    interp = interpreting()
    block_n = block_n or (16 if interp else 64)
    chunk = -(-ctx // splits)
    op, lp = ws["op"], ws["lp"]
    block_d = max(16, triton.next_power_of_2(d))
    kw = {} if interp else {"num_warps": num_warps or 4}
    _split_kernel[(B * hkv, splits)](
        q,
        k,
        v,
        op,
        lp,
        scale * LOG2E,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        v.stride(0),
        v.stride(1),
        v.stride(2),
        ctx,
        chunk,
        splits,
        hkv,
        group,
        d,
        BLOCK_G=max(16, triton.next_power_of_2(group)),
        BLOCK_N=block_n,
        BLOCK_D=block_d,
        UPCAST=interp or q.dtype == torch.float32,
        IEEE=interp or q.dtype == torch.float32,
        **kw,
    )
    if splits == 1:
        o, lse = op.view(B, hq, d), lp.view(B, hq)
    else:
        o, lse = ws["o"], ws["lse"]
        merge_splits_kernel[(B * hq,)](
            op, lp, o, lse, splits, d, BLOCK_S=triton.next_power_of_2(splits), BLOCK_D=block_d, **kw
        )
        o, lse = o.view(B, hq, d), lse.view(B, hq)
    return (o, lse) if return_lse else o
