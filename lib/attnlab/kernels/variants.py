"""Attention variants as compile-time specialisations of one Triton prefill kernel (lecture §5.4).

FlashInfer writes an attention variant as functors filled into one CUDA template and JIT-compiles
each combination; here the functors are `tl.constexpr` switches of a FlashAttention-2 kernel, so
Triton compiles one specialised binary per (SOFT_CAP, WINDOW, CAUSAL) and a switch that is off
costs nothing. Which switches a variant sets is its registry entry's (`Entry.kernel` in
attnlab.core.variants.REGISTRY): `switches(uses)` reads them as the launchers' keywords, the same
for `flash_attention_hopper` and `flash_attention_gluon`. The loop is kernels.fa2's (its
`online_update` / `finish`), with three additions:

- SOFT_CAP = c > 0: logits c * tanh(s / c) on the natural-scale logits s = scale * q k^T, then
  times log2(e) for the base-2 softmax (capping the base-2 logits would change the function);
  tanh(x) = 1 - 2 / (1 + e^(2x)), which saturates to +-1 without NaN;
- WINDOW = w > 0: `sliding_window(w)`, q_idx - w < kv_idx <= q_idx (it implies causal). The loop
  starts at the first KV block that meets the window of the block's first row and stops at the
  diagonal, so a query block visits about (w + BLOCK_M) / BLOCK_N blocks: O(N w) work, not O(N^2);
- tiles where every (query, key) pair is visible skip the element-wise mask: each query block
  runs three loops, [lo, full_lo) masked (the window's lower edge), [full_lo, full_hi) unmasked,
  [full_hi, hi) masked (the diagonal, the ragged end). `kv_block_range` is the same arithmetic in
  Python; the tests compare it with what the kernel records and with the dense mask.

Positions are bottom-right aligned (query row i sits at q_idx = i + N_k - N_q); a row that sees no
key (q_idx < 0, possible when N_q > N_k) outputs 0. GQA: query head h reads KV head h // (Hq / Hkv).
Inputs may have any strides (no copies). Left out: the backward pass, lse output, other variants
(ALiBi, sinks, RoPE, sigmoid), a non-causal (two-sided) window, autotuning, Hopper-only features
(`kernels.hopper.flash_attention_hopper` takes soft_cap and window with the same ranges).

This file is long because the kernel's three loops each call the one tile function with its
twenty-six arguments, one a line as the formatter writes them; the launcher's checks, the loop
ranges in Python and the registry's switches are the short parts.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from attnlab.core.variants import REGISTRY, kernel_switches, lookup
from attnlab.validate import as_bool, as_float, as_int
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

__all__ = [
    "variant_prefill",
    "variant_args",
    "switches",
    "SWITCHES",
    "kv_block_range",
    "blocks",
    "MAX_SOFT_CAP",
]

#: The largest soft-cap the kernels take. They compute c tanh(x / c) as c (1 - 2 / (1 + e^(2x/c))),
#: whose absolute error grows like c x 2^-24 (fp32): 1e-6 at c = 30, 6e-4 at c = 1e4, and past about
#: 1e7 the cap rounds every logit to 0 (uniform attention). Real caps are 30-50 (Grok, Gemma 2); a cap
#: far above every logit changes nothing, so None is the answer there.
MAX_SOFT_CAP = 1e4


#: The variant switches every prefill kernel here compiles in, as the launchers' keywords
#: (variant_prefill, flash_attention_hopper and flash_attention_gluon take all three).
SWITCHES = ("causal", "soft_cap", "window")


def switches(uses) -> dict:
    """The launchers' keywords for registered variants `uses` ((name, parameter) pairs, composed in
    order), read from their registry entries: {"soft_cap": 30.0, "causal": True}. A variant that no
    kernel here compiles, or an entry naming a switch the kernels lack, is refused by name."""
    kw = kernel_switches(uses)
    if kw is None:
        missing = [name for name, _ in uses if lookup(name).kernel is None]
        have = [e.name for e in REGISTRY.values() if e.kernel is not None]
        raise ValueError(f"no prefill kernel compiles {', '.join(missing)} in; valid: {', '.join(have)}")
    unknown = [k for k in kw if k not in SWITCHES]
    if unknown:
        raise ValueError(
            f"the registry entries of {list(uses)} set {unknown}; valid switches: {', '.join(SWITCHES)}"
        )
    return kw


def variant_args(soft_cap, window, n_k: int) -> tuple[float, int]:
    """(cap, window) checked: soft_cap a finite real in (0, MAX_SOFT_CAP] or None / 0 (off);
    window an int >= 1 or None / 0 (off), numpy scalars accepted. A window of n_k keys or more
    sees what causal sees, so it is clamped to n_k (the kernels hold it in 32 bits)."""
    cap = 0.0 if soft_cap is None else as_float("soft_cap", soft_cap, 0.0, MAX_SOFT_CAP)
    w = 0 if window is None else as_int("window", window, 0)
    return cap, min(w, n_k)


@triton.jit
def _tile(
    q,
    k_base,
    v_base,
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
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr,
    SOFT_CAP: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
):
    """Fold KV block [start_n, start_n + BLOCK_N) into the running state; MASKED=False only for
    blocks whose every pair is visible (then no key is out of range either)."""
    cols = start_n + offs_n
    kt = tl.load(
        k_base + cols[None, :] * s_kn + offs_d[:, None] * s_kd,
        mask=(cols[None, :] < N_K) & d_ok[:, None],
        other=0.0,
    )
    v = tl.load(
        v_base + cols[:, None] * s_vn + offs_d[None, :] * s_vd,
        mask=(cols[:, None] < N_K) & d_ok[None, :],
        other=0.0,
    )
    if UPCAST:
        kt = kt.to(tl.float32)
        v = v.to(tl.float32)
    s = dot(q, kt, IEEE)
    if SOFT_CAP > 0:  # c tanh(scale s / c) log2(e) = cap_out (1 - 2 / (1 + 2^(cap_in s)))
        s = cap_out - (2.0 * cap_out) / (1.0 + tl.exp2(s * cap_in))
    else:
        s = s * qk_scale  # log2 domain: scale * log2(e)
    if MASKED:
        q_idx = offs_m[:, None] + OFFSET
        visible = cols[None, :] < N_K
        if CAUSAL:
            visible = visible & (cols[None, :] <= q_idx)
        if WINDOW > 0:
            visible = visible & (cols[None, :] > q_idx - WINDOW)
        s = tl.where(visible, s, float("-inf"))
    return online_update(s, v, m_i, l_i, acc, IEEE)


@triton.jit
def _variant_kernel(
    Q,
    K,
    V,
    O,
    R,
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
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr,
    SOFT_CAP: tl.constexpr,
    RECORD: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // H).to(tl.int64)  # 64-bit offsets for large batch x N
    h = (pid_bh % H).to(tl.int64)
    hk = h // GROUP
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    q = tl.load(
        Q + b * s_qb + h * s_qh + offs_m[:, None] * s_qn + offs_d[None, :] * s_qd,
        mask=(offs_m[:, None] < N_Q) & d_ok[None, :],
        other=0.0,
    )
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    OFFSET = N_K - N_Q
    first = pid_m * BLOCK_M + OFFSET  # q_idx of the block's first and last row
    last = first + BLOCK_M - 1
    # KV blocks [lo, hi) are visited; [full_lo, full_hi) of them need no mask (= kv_block_range)
    lo = 0
    hi = (N_K + BLOCK_N - 1) // BLOCK_N
    full_lo = 0
    full_hi = N_K // BLOCK_N
    if CAUSAL:  # keys after the last row's diagonal are masked for every row
        hi = (tl.minimum(tl.maximum(last + 1, 0), N_K) + BLOCK_N - 1) // BLOCK_N
        full_hi = tl.minimum(tl.maximum(first + 1, 0), N_K) // BLOCK_N
    if WINDOW > 0:  # keys at or before the first row's q_idx - w are masked for every row
        lo = tl.maximum(first - WINDOW + 1, 0) // BLOCK_N
        full_lo = tl.minimum((tl.maximum(last - WINDOW + 1, 0) + BLOCK_N - 1) // BLOCK_N, hi)
        full_hi = tl.maximum(full_hi, full_lo)  # lo <= full_lo <= full_hi <= hi
    if RECORD:
        i4 = tl.arange(0, 4)
        tl.store(
            R + pid_m * 4 + i4,
            tl.where(i4 == 0, lo, tl.where(i4 == 1, full_lo, tl.where(i4 == 2, full_hi, hi))),
        )
    k_base = K + b * s_kb + hk * s_kh
    v_base = V + b * s_vb + hk * s_vh
    for j in range(lo, full_lo):  # the window's lower edge: masked
        m_i, l_i, acc = _tile(
            q,
            k_base,
            v_base,
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
            True,
            CAUSAL,
            WINDOW,
            SOFT_CAP,
            UPCAST,
            IEEE,
        )
    for j in range(full_lo, full_hi):  # every pair visible: no element-wise mask
        m_i, l_i, acc = _tile(
            q,
            k_base,
            v_base,
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
            False,
            CAUSAL,
            WINDOW,
            SOFT_CAP,
            UPCAST,
            IEEE,
        )
    for j in range(full_hi, hi):  # the diagonal and the ragged end: masked
        m_i, l_i, acc = _tile(
            q,
            k_base,
            v_base,
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
            True,
            CAUSAL,
            WINDOW,
            SOFT_CAP,
            UPCAST,
            IEEE,
        )
    o, _ = finish(acc, m_i, l_i)
    tl.store(
        O + b * s_ob + h * s_oh + offs_m[:, None] * s_on + offs_d[None, :] * s_od,
        o.to(O.dtype.element_ty),
        mask=(offs_m[:, None] < N_Q) & d_ok[None, :],
    )


def kv_block_range(
    pid_m: int, n_q: int, n_k: int, block_m: int, block_n: int, causal: bool = False, window: int = 0
) -> tuple[int, int, int, int]:
    """(lo, full_lo, full_hi, hi): the KV block indices query block `pid_m` visits, [lo, hi), and
    those of them it runs without a mask, [full_lo, full_hi); the kernel's own arithmetic."""
    causal = causal or window > 0
    first = pid_m * block_m + n_k - n_q
    last = first + block_m - 1
    lo, hi, full_lo, full_hi = 0, -(-n_k // block_n), 0, n_k // block_n
    if causal:
        hi = -(-min(max(last + 1, 0), n_k) // block_n)
        full_hi = min(max(first + 1, 0), n_k) // block_n
    if window > 0:
        lo = max(first - window + 1, 0) // block_n
        full_lo = min(-(-max(last - window + 1, 0) // block_n), hi)
        full_hi = max(full_hi, full_lo)
    return lo, full_lo, full_hi, hi


def blocks(
    n_q: int,
    n_k: int,
    causal: bool = False,
    window: int = 0,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    d: int = 128,
) -> dict:
    """KV tiles one (batch, head) visits in total, and how many of them are masked, at the block
    sizes `variant_prefill` picks for head dim d here."""
    bm, bn = _blocks(d, block_m, block_n)
    r = [kv_block_range(i, n_q, n_k, bm, bn, causal, window) for i in range(-(-n_q // bm))]
    visited = sum(hi - lo for lo, _, _, hi in r)
    return {
        "visited": visited,
        "masked": visited - sum(fh - fl for _, fl, fh, _ in r),
        "block_m": bm,
        "block_n": bn,
    }


def _blocks(d, block_m, block_n):
    """The block sizes: each None or a power of two in [16, 256] (`kernels.common.as_block`)."""
    interp = interpreting()
    block_m, block_n = as_block("block_m", block_m), as_block("block_n", block_n)
    return (block_m or (16 if interp else (128 if d <= 128 else 64)), block_n or (16 if interp else 64))


def variant_prefill(
    q,
    k,
    v,
    *,
    causal: bool = False,
    soft_cap: float | None = None,
    window: int | None = None,
    scale: float | None = None,
    out=None,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    return_ranges: bool = False,
):
    """Attention of q (B, Hq, N_q, d), k, v (B, Hkv, N_k, d) with the variant compiled in.

    soft_cap=c: c * tanh(s / c) on the scaled logits (`attnlab.core.variants.soft_cap(c)`); window=w:
    `sliding_window(w)`, which is causal itself; causal: bottom-right aligned. None or 0 is off.
    Returns O in q's dtype (written into `out`, any strides, when given). Block sizes, warps and
    stages as in `flash_attention_triton`. return_ranges (for tests): also an int32 (num query
    blocks, 4) tensor of the (lo, full_lo, full_hi, hi) KV block indices each query block's loops ran over.
    """
    check_qkv(q, k, v)
    causal, return_ranges = as_bool("causal", causal), as_bool("return_ranges", return_ranges)
    scale = as_scale(scale, q.shape[3])
    num_warps, num_stages = as_warps(num_warps), as_stages(num_stages)
    cap, window = variant_args(soft_cap, window, k.shape[2])
    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    block_m, block_n = _blocks(d, block_m, block_n)
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    elif (
        not isinstance(out, torch.Tensor)
        or out.shape != q.shape
        or out.dtype != q.dtype
        or out.device != q.device
    ):
        raise ValueError(f"out must be a {q.dtype} tensor of shape {tuple(q.shape)} on {q.device}")
    interp = interpreting()
    # the interpreter casts fp32 to bf16 by truncation (a GPU rounds): there write fp32, torch rounds
    dst = (
        torch.empty(q.shape, dtype=torch.float32, device=q.device)
        if interp and q.dtype != torch.float32
        else out
    )
    grid = (triton.cdiv(n_q, block_m), B * H)
    rec = torch.zeros((grid[0], 4), dtype=torch.int32, device=q.device) if return_ranges else out
    kw = {}
    if not interp:
        kw = {"num_warps": num_warps or (4 if d <= 64 else 8), "num_stages": num_stages or 3}
    fp32 = q.dtype == torch.float32
    _variant_kernel[grid](
        q,
        k,
        v,
        dst,
        rec,
        scale * LOG2E,
        2.0 * scale / cap * LOG2E if cap else 0.0,
        cap * LOG2E,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *dst.stride(),
        H,
        H // k.shape[1],
        n_q,
        n_k,
        d,
        BLOCK_D=max(16, triton.next_power_of_2(d)),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        CAUSAL=causal or window > 0,
        WINDOW=window,
        SOFT_CAP=cap > 0,
        RECORD=return_ranges,
        UPCAST=interp or fp32,
        IEEE=interp or fp32,
        **kw,
    )
    if dst is not out:
        out.copy_(dst)
    return (out, rec) if return_ranges else out
