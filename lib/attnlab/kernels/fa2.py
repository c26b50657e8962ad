"""FlashAttention-2's forward pass in Triton: the same algorithm as `attnlab.core.attention.flash_attention`
with order="fa2", on a real GPU.

One program computes one block of BLOCK_M query rows for one (batch, head): Q_i is loaded once and
stays on chip, the loop streams K_j, V_j blocks, keeps the running max m, sum l and the
un-normalised output in registers (online softmax, base 2: `online_update` and `finish`, which
every kernel shares, live in `kernels.common`), and writes O_i and lse once.
Causal masking is bottom-right aligned (query i sees keys <= i + N_k - N_q); the loop stops at
the last block a row can see, so blocks above the diagonal are never loaded. GQA maps query head
h to KV head h // (Hq // Hkv).

What it leaves out on purpose: the backward pass, dropout, paged KV, autotuning, and Hopper-only
features (TMA, warp specialisation: `kernels.hopper` has them). Under TRITON_INTERPRET=1 the dot
products run in float32, because the interpreter's bf16 dot is wrong, and a half-precision output
is written in float32 and rounded by torch (the interpreter truncates where a GPU rounds).
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
    as_scale,
    as_stages,
    as_warps,
    check_qkv,
    dot,
    finish,
    online_update,
)

__all__ = ["flash_attention_triton"]


@triton.jit
def _fwd_kernel(
    Q,
    K,
    V,
    O,
    LSE,
    qk_scale,
    s_qb,
    s_qh,
    s_qn,
    s_kb,
    s_kh,
    s_kn,
    s_vb,
    s_vh,
    s_vn,
    s_ob,
    s_oh,
    s_on,
    H,
    GROUP,
    N_Q,
    N_K,
    HEAD_DIM,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // H).to(tl.int64)  # 64-bit offsets for large batch x N
    h = pid_bh % H
    hk = h // GROUP
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    # Q_i stays on chip for the whole loop
    q = tl.load(
        Q + b * s_qb + h * s_qh + offs_m[:, None] * s_qn + offs_d[None, :],
        mask=(offs_m[:, None] < N_Q) & d_ok[None, :],
        other=0.0,
    )
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    offset = N_K - N_Q
    hi = N_K
    if CAUSAL:  # the last key the block's last row can see, +1: later blocks are all masked
        hi = tl.minimum(N_K, tl.maximum((pid_m + 1) * BLOCK_M + offset, 0))
    k_base = K + b * s_kb + hk * s_kh
    v_base = V + b * s_vb + hk * s_vh
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        kt = tl.load(
            k_base + cols[None, :] * s_kn + offs_d[:, None],
            mask=(cols[None, :] < N_K) & d_ok[:, None],
            other=0.0,
        )
        if UPCAST:
            kt = kt.to(tl.float32)
        s = dot(q, kt, IEEE) * qk_scale  # log2 domain: scale * log2(e)
        visible = cols[None, :] < N_K
        if CAUSAL:
            visible = visible & (cols[None, :] <= offs_m[:, None] + offset)
        s = tl.where(visible, s, float("-inf"))
        v = tl.load(
            v_base + cols[:, None] * s_vn + offs_d[None, :],
            mask=(cols[:, None] < N_K) & d_ok[None, :],
            other=0.0,
        )
        if UPCAST:
            v = v.to(tl.float32)
        m_i, l_i, acc = online_update(s, v, m_i, l_i, acc, IEEE)
    o, lse = finish(acc, m_i, l_i)
    row_ok = offs_m < N_Q
    tl.store(
        O + b * s_ob + h * s_oh + offs_m[:, None] * s_on + offs_d[None, :],
        o.to(O.dtype.element_ty),
        mask=row_ok[:, None] & d_ok[None, :],
    )
    tl.store(LSE + pid_bh * N_Q + offs_m, lse, mask=row_ok)


def flash_attention_triton(
    q,
    k,
    v,
    *,
    causal: bool = False,
    scale: float | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    return_lse: bool = False,
    num_warps: int | None = None,
    num_stages: int | None = None,
):
    """Attention of (batch, heads, N, d) torch tensors with the Triton kernel above.

    Returns O (same dtype as q), or (O, lse) with lse float32 of shape (batch, heads, N_q).
    Block sizes (None or powers of two in [16, 256]) default to 128 x 64 on a GPU (64 x 64 for
    d > 128) and 16 x 16 when interpreting; num_warps one of 1, 2, 4, 8, 16, num_stages 1 to 8.
    """
    check_qkv(q, k, v)
    causal, return_lse = as_bool("causal", causal), as_bool("return_lse", return_lse)
    scale = as_scale(scale, q.shape[3])
    block_m, block_n = as_block("block_m", block_m), as_block("block_n", block_n)
    num_warps, num_stages = as_warps(num_warps), as_stages(num_stages)
    q, k, v = (t.contiguous() for t in (q, k, v))
    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    interp = interpreting()
    if block_m is None:
        block_m = 16 if interp else (128 if d <= 128 else 64)
    if block_n is None:
        block_n = 16 if interp else 64
    o = torch.empty_like(q)
    # the interpreter casts fp32 to bf16 by truncation (a GPU rounds to nearest): there the kernel
    # writes fp32 and torch rounds
    dst = (
        torch.empty(q.shape, dtype=torch.float32, device=q.device)
        if interp and q.dtype != torch.float32
        else o
    )
    lse = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(n_q, block_m), B * H)
    kw = {}
    if not interp:
        kw = {"num_warps": num_warps or (4 if d <= 64 else 8), "num_stages": num_stages or 3}
    _fwd_kernel[grid](
        q,
        k,
        v,
        dst,
        lse,
        scale * LOG2E,
        q.stride(0),
        q.stride(1),
        q.stride(2),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        v.stride(0),
        v.stride(1),
        v.stride(2),
        dst.stride(0),
        dst.stride(1),
        dst.stride(2),
        H,
        H // k.shape[1],
        n_q,
        n_k,
        d,
        BLOCK_D=max(16, triton.next_power_of_2(d)),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        CAUSAL=causal,
        UPCAST=interp or q.dtype == torch.float32,
        IEEE=q.dtype == torch.float32 or interp,
        **kw,
    )
    if dst is not o:
        o.copy_(dst)
    return (o, lse) if return_lse else o
