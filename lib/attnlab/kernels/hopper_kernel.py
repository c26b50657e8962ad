"""The Hopper prefill kernel: kernels.fa2's FlashAttention-2 loop with what FlashAttention-3
attacked (lecture §3.5), each idea a compile-time switch (a "step") of this one kernel, so that a
harness times exactly one change at a time. `kernels.hopper.flash_attention_hopper` launches it;
the steps, in the order of HOPPER_STEPS (each one on top of those before it):

    (base)          kernels.fa2's loop: pointer loads, every tile masked, 128 x 64 tiles
    tma             Q, K, V tiles arrive by TMA (the Tensor Memory Accelerator): a tensor
                    descriptor describes the (N, d) matrix of one head once, and each tile is one
                    asynchronous bulk copy into shared memory; no per-thread address arithmetic,
                    and rows or columns past the end come back as zeros (the hardware checks the
                    bounds). O leaves the same way.
    causal_split    mask only the tiles that need it: the KV tiles every row of the query block
                    sees run without the element-wise mask (no iota, compare, select), and only
                    the diagonal band and the ragged last tile take the masked path.
    softmax_fma     fewer instructions per score: the row max is taken on the raw scores and the
                    scale is folded into one fused multiply-add, p = 2^(s * scale*log2(e) - m);
                    unmasked tiles drop the -inf guards (m is finite there); P V accumulates into
                    acc inside the MMA (tl.dot(p, v, acc)); l is updated after the MMA. On Hopper
                    the exponentials and this element-wise work, not the tensor cores, are what
                    the MMAs wait for (FA3, section 3).
    big_tiles       KV tiles of 128 instead of 64 (d <= 128): twice the MMA work per loop step and
                    per softmax bookkeeping step, two stages of K, V in shared memory.
    lpt_order       causal only: the heaviest query blocks (the last ones, which see the most keys)
                    start first, and the grid walks the heads fastest, so the short blocks fill
                    the tail of the last wave (longest-processing-time-first scheduling).
    warp_specialize tl.range(..., warp_specialize=True): the compiler splits the CTA's warps into a
                    producer that issues the TMA copies and consumers that run MMA + softmax,
                    synchronised through mbarriers (FA3's producer-consumer split).

Variants (lecture §5.4): SOFT_CAP and WINDOW are compile-time switches too, as in
`kernels.variants`: the tile caps the logits in the base-2 domain, and a window adds a masked loop
for its lower edge and starts the KV loop at the first tile the window reaches, so tiles outside
it are never loaded (O(N w) work).

The KV loop runs in three stages: the window's lower edge (masked), the tiles every row sees (no
mask with causal_split), the diagonal band and the ragged end (masked). Under TRITON_INTERPRET=1
the interpreter runs the tensor-descriptor loads and stores too, so the tests check every step's
arithmetic; warp_specialize changes nothing there.

This file is long because the six steps and the two variants are compile-time switches of one
kernel and its one tile function (`tile`), so that each timed step set differs from the one
before by exactly one change; split per step, the shared loop would be written once per kernel.
"""

from __future__ import annotations

import triton
import triton.language as tl

from attnlab.kernels.common import finish, online_update

__all__ = ["HOPPER_STEPS", "DEFAULT_STEPS", "cumulative_steps", "mma", "tile", "hopper_kernel"]

#: The optimisation steps, in the order a harness adds them (each one on top of those before it).
HOPPER_STEPS = ("tma", "causal_split", "softmax_fma", "big_tiles", "lpt_order", "warp_specialize")
#: What steps=None runs: the steps that paid on the H200 (gpubench/sweeps/hopper.py, recorded in
#: data/measurements/h200-2026-12-01-hopper-steps.json); warp_specialize bought nothing there.
DEFAULT_STEPS = HOPPER_STEPS[:-1]


def cumulative_steps() -> list[tuple[str, ...]]:
    """[(), ("tma",), ("tma", "causal_split"), ...]: base, then one more step each time."""
    return [HOPPER_STEPS[:i] for i in range(len(HOPPER_STEPS) + 1)]


@triton.jit
def mma(a, b, acc, IEEE: tl.constexpr):
    """acc + a @ b, the addition done by the MMA itself (Hopper's wgmma accumulates in place)."""
    if IEEE:
        return tl.dot(a, b, acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def tile(
    q,
    kd,
    vd,
    k_ptr,
    v_ptr,
    start_n,
    offs_m,
    offs_n,
    offs_d,
    d_ok,
    m_i,
    l_i,
    acc,
    s_kn,
    s_kd,
    s_vn,
    s_vd,
    N_K,
    OFFSET,
    qk_scale,
    cap_in,
    cap_out,
    b32,
    hk32,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr,
    SOFT_CAP: tl.constexpr,
    TMA: tl.constexpr,
    HOST_DESC: tl.constexpr,
    FAST: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
):
    """Fold KV tile [start_n, start_n + BLOCK_N) into (m_i, l_i, acc). MASKED=False only for a
    tile whose every (row, key) pair is visible: then no key is past N_K either. With SOFT_CAP
    the logits are capped here, already in the base-2 domain, and the launcher passes
    qk_scale = 1."""
    cols = start_n + offs_n
    # -- K^T and V tiles: one TMA copy each, or per-thread pointer loads --------------------------
    if TMA:
        if HOST_DESC:  # a 4-D descriptor over (B, Hkv, N_k, d): the tile is [1, 1, BLOCK_N, BLOCK_D]
            k = kd.load([b32, hk32, start_n, 0]).reshape([BLOCK_N, BLOCK_D])
            v = vd.load([b32, hk32, start_n, 0]).reshape([BLOCK_N, BLOCK_D])
        else:  # this head's own 2-D descriptor over (N_k, d)
            k = kd.load([start_n, 0])
            v = vd.load([start_n, 0])
        kt = k.T  # a view: the MMA reads K from shared memory transposed
    else:
        kt = tl.load(
            k_ptr + cols[None, :] * s_kn + offs_d[:, None] * s_kd,
            mask=(cols[None, :] < N_K) & d_ok[:, None],
            other=0.0,
        )
        v = tl.load(
            v_ptr + cols[:, None] * s_vn + offs_d[None, :] * s_vd,
            mask=(cols[:, None] < N_K) & d_ok[None, :],
            other=0.0,
        )
    if UPCAST:
        kt = kt.to(tl.float32)
        v = v.to(tl.float32)
    if IEEE:
        s = tl.dot(q, kt, input_precision="ieee")
    else:
        s = tl.dot(q, kt)
    if SOFT_CAP > 0:  # c tanh(scale s / c) log2(e) = cap_out (1 - 2 / (1 + 2^(cap_in s)))
        s = cap_out - (2.0 * cap_out) / (1.0 + tl.exp2(s * cap_in))
    if MASKED:
        visible = cols[None, :] < N_K
        if CAUSAL:
            visible = visible & (cols[None, :] <= offs_m[:, None] + OFFSET)
        if WINDOW > 0:
            visible = visible & (cols[None, :] > offs_m[:, None] + OFFSET - WINDOW)
    if FAST:
        # softmax_fma: max on the raw scores (scale > 0 keeps the arg max), then one FMA per score
        if MASKED:
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key so far
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)  # finite: every key visible
            m_use = m_new
        p = tl.exp2(s * qk_scale - m_use[:, None])
        alpha = tl.exp2(m_i - m_use)
        acc = mma(p.to(v.dtype), v, acc * alpha[:, None], IEEE)
        l_i = l_i * alpha + tl.sum(p, 1)  # after the MMA: fewer live registers
        return m_new, l_i, acc
    else:
        s = s * qk_scale  # log2 domain: scale * log2(e)
        if MASKED:
            s = tl.where(visible, s, float("-inf"))
        return online_update(s, v, m_i, l_i, acc, IEEE)


@triton.jit
def hopper_kernel(
    Q,
    K,
    V,
    O,
    LSE,
    qk_scale,
    cap_in,
    cap_out,
    s_qb,
    s_qh,
    s_qn,
    s_qd,
    s_kb,
    s_kh,
    s_kn,
    s_kd,
    s_vb,
    s_vh,
    s_vn,
    s_vd,
    s_ob,
    s_oh,
    s_on,
    s_od,
    H,
    GROUP,
    N_Q,
    N_K,
    HEAD_DIM,
    NUM_M,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr,
    SOFT_CAP: tl.constexpr,
    TMA: tl.constexpr,
    HOST_DESC: tl.constexpr,
    SPLIT: tl.constexpr,
    FAST: tl.constexpr,
    LPT: tl.constexpr,
    WS: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
):
    if LPT:  # grid (B*H, NUM_M): heads fastest, the last (heaviest) query block first
        pid_bh = tl.program_id(0)
        pid_m = NUM_M - 1 - tl.program_id(1)
    else:  # kernels.fa2's grid (NUM_M, B*H)
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1)
    b32 = pid_bh // H
    h32 = pid_bh % H
    hk32 = h32 // GROUP
    b = b32.to(tl.int64)  # 64-bit offsets for large batch x N
    h = h32.to(tl.int64)
    hk = hk32.to(tl.int64)
    row0 = pid_m * BLOCK_M
    offs_m = row0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    # -- where this head's rows start; with host descriptors Q, K, V, O are descriptors already ---
    qd, kd, vd, od = Q, K, V, O
    q_ptr, k_ptr, v_ptr, o_ptr = Q, K, V, O
    if not HOST_DESC:
        q_ptr = Q + b * s_qb + h * s_qh
        k_ptr = K + b * s_kb + hk * s_kh
        v_ptr = V + b * s_vb + hk * s_vh
        o_ptr = O + b * s_ob + h * s_oh
    if TMA:
        if not HOST_DESC:  # one head = one (N, d) matrix with row stride s_n: bounds are per head
            # descriptors made once per program, reused by every tile load
            qd = tl.make_tensor_descriptor(
                q_ptr, shape=[N_Q, HEAD_DIM], strides=[s_qn, 1], block_shape=[BLOCK_M, BLOCK_D]
            )
            kd = tl.make_tensor_descriptor(
                k_ptr, shape=[N_K, HEAD_DIM], strides=[s_kn, 1], block_shape=[BLOCK_N, BLOCK_D]
            )
            vd = tl.make_tensor_descriptor(
                v_ptr, shape=[N_K, HEAD_DIM], strides=[s_vn, 1], block_shape=[BLOCK_N, BLOCK_D]
            )
            od = tl.make_tensor_descriptor(
                o_ptr, shape=[N_Q, HEAD_DIM], strides=[s_on, 1], block_shape=[BLOCK_M, BLOCK_D]
            )
            q = qd.load([row0, 0])
        else:
            q = qd.load([b32, h32, row0, 0]).reshape([BLOCK_M, BLOCK_D])
    else:
        q = tl.load(
            q_ptr + offs_m[:, None] * s_qn + offs_d[None, :] * s_qd,
            mask=(offs_m[:, None] < N_Q) & d_ok[None, :],
            other=0.0,
        )
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    # -- which KV tiles: [lo, hi) are visited, [full_lo, full_hi) of them need no mask ------------
    OFFSET = N_K - N_Q
    first = row0 + OFFSET  # q_idx of the block's first and last row
    last = first + BLOCK_M - 1
    hi = (N_K + BLOCK_N - 1) // BLOCK_N
    full_hi = N_K // BLOCK_N  # tiles before the ragged end
    if CAUSAL:  # tiles after the last row's diagonal are never loaded; before the first row's, no mask
        hi = (tl.minimum(tl.maximum(last + 1, 0), N_K) + BLOCK_N - 1) // BLOCK_N
        full_hi = tl.minimum(tl.maximum(first + 1, 0), N_K) // BLOCK_N
    lo = 0
    full_lo = 0
    if (
        WINDOW > 0
    ):  # tiles at or before the first row's q_idx - w are never loaded (kernels.variants's ranges)
        lo = tl.maximum(first - WINDOW + 1, 0) // BLOCK_N
        full_lo = tl.minimum((tl.maximum(last - WINDOW + 1, 0) + BLOCK_N - 1) // BLOCK_N, hi)
        full_hi = tl.maximum(full_hi, full_lo)  # lo <= full_lo <= full_hi <= hi
    if not SPLIT:
        full_lo = lo  # kernels.fa2: every tile takes the mask
        full_hi = lo
    # stage 0, the window's lower edge: masked
    if WINDOW > 0:
        for j in tl.range(lo, full_lo, warp_specialize=WS):
            m_i, l_i, acc = tile(
                q,
                kd,
                vd,
                k_ptr,
                v_ptr,
                j * BLOCK_N,
                offs_m,
                offs_n,
                offs_d,
                d_ok,
                m_i,
                l_i,
                acc,
                s_kn,
                s_kd,
                s_vn,
                s_vd,
                N_K,
                OFFSET,
                qk_scale,
                cap_in,
                cap_out,
                b32,
                hk32,
                True,
                CAUSAL,
                WINDOW,
                SOFT_CAP,
                TMA,
                HOST_DESC,
                FAST,
                BLOCK_N,
                BLOCK_D,
                UPCAST,
                IEEE,
            )
    # stage 1, off the band: no mask, no guards
    for j in tl.range(full_lo, full_hi, warp_specialize=WS):
        m_i, l_i, acc = tile(
            q,
            kd,
            vd,
            k_ptr,
            v_ptr,
            j * BLOCK_N,
            offs_m,
            offs_n,
            offs_d,
            d_ok,
            m_i,
            l_i,
            acc,
            s_kn,
            s_kd,
            s_vn,
            s_vd,
            N_K,
            OFFSET,
            qk_scale,
            cap_in,
            cap_out,
            b32,
            hk32,
            False,
            CAUSAL,
            WINDOW,
            SOFT_CAP,
            TMA,
            HOST_DESC,
            FAST,
            BLOCK_N,
            BLOCK_D,
            UPCAST,
            IEEE,
        )
    # stage 2, the diagonal band and the ragged end: masked
    for j in tl.range(full_hi, hi, warp_specialize=WS):
        m_i, l_i, acc = tile(
            q,
            kd,
            vd,
            k_ptr,
            v_ptr,
            j * BLOCK_N,
            offs_m,
            offs_n,
            offs_d,
            d_ok,
            m_i,
            l_i,
            acc,
            s_kn,
            s_kd,
            s_vn,
            s_vd,
            N_K,
            OFFSET,
            qk_scale,
            cap_in,
            cap_out,
            b32,
            hk32,
            True,
            CAUSAL,
            WINDOW,
            SOFT_CAP,
            TMA,
            HOST_DESC,
            FAST,
            BLOCK_N,
            BLOCK_D,
            UPCAST,
            IEEE,
        )
    o, lse = finish(acc, m_i, l_i)
    if TMA:  # the copy engine drops rows past N_q and columns past d
        if HOST_DESC:
            od.store([b32, h32, row0, 0], o.to(od.dtype).reshape([1, 1, BLOCK_M, BLOCK_D]))
        else:
            od.store([row0, 0], o.to(od.dtype))
    else:
        tl.store(
            o_ptr + offs_m[:, None] * s_on + offs_d[None, :] * s_od,
            o.to(O.dtype.element_ty),
            mask=(offs_m[:, None] < N_Q) & d_ok[None, :],
        )
    tl.store(LSE + pid_bh * N_Q + offs_m, lse, mask=offs_m < N_Q)
