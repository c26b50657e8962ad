"""A Hopper prefill kernel: kernels.fa2's FlashAttention-2 loop with what FlashAttention-3 attacked
(lecture §3.5), one switchable step at a time.

`kernels.fa2.flash_attention_triton` is the readable FA2 kernel and stays as it is. This module
computes the same function, o = softmax(scale q k^T) v with lse, and adds the Hopper tricks as
`steps`, applied in the order of HOPPER_STEPS so that a harness can time base -> +tma ->
+causal_split -> ... and see what each one buys (`python -m attnlab.gpubench.sweeps.hopper`):

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

`steps=None` means DEFAULT_STEPS, every step but warp_specialize (on the H200 with Triton 3.6 it
bought nothing at the best launch, -3 % to +6 %, and its 4-warp launches do not compile), except
that a step whose compile fails here is dropped (once per
dtype, d and causal, with a warning), so the default is "all that work".

Variants (lecture §5.4): `soft_cap` and `window` are compile-time switches too, as in
`kernels.variants`: the tile caps the logits in the base-2 domain, and a window adds a masked loop
for its lower edge and starts the KV loop at the first tile the window reaches, so tiles outside
it are never loaded (O(N w) work).

Layout and conventions: q (B, Hq, N_q, d), k, v (B, Hkv, N_k, d) with any strides (no copies; a
tensor stored NHD and viewed as (B, H, N, d) by a transpose works as it is). GQA: query head h
reads KV head h // (Hq / Hkv). Causal is bottom-right aligned (query i sees keys
j <= i + N_k - N_q); a row that sees no key gives o = 0 and lse = -inf, never NaN. lse is the
natural log, float32 (B, Hq, N_q). The tma step needs every stride but the last to be a multiple of
16 bytes, the last stride 1 and 16-byte-aligned data; otherwise the kernel runs with pointer loads
(same math). Descriptors are made on the device by default (one per head and tensor, in each
program: `triton.set_allocator` gives them their global-memory scratch, and this module sets it);
`descriptors="host"` passes 4-D host descriptors (triton.tools.tensor_descriptor) instead.

Under TRITON_INTERPRET=1 (no GPU): 16 x 16 tiles (big_tiles: 16 x 32), dots in float32 (the
interpreter's bf16 dot is wrong), and a half-precision O written in float32 and rounded by torch
(the interpreter truncates on the cast). The interpreter runs the tensor-descriptor loads too, so
the tests check every step's arithmetic; warp_specialize changes nothing there.

The file is long because each step is a compile-time switch of one kernel (so the harness times
exactly one change at a time), and the launcher checks and falls back per step.

What it leaves out on purpose: the backward pass, FP8 (FA3's third idea), dropout, paged or varlen
KV, autotuning (the sweep picks block sizes), persistent kernels, and FA3's two explicit schedules
that Triton does not expose on Hopper: the ping-pong of two consumer warpgroups and the
intra-warpgroup overlap of one tile's softmax with the next tile's MMA.
"""
from __future__ import annotations

import math
import warnings

import torch
import triton
import triton.language as tl

from attnlab.kernels import interpreting
from attnlab.kernels.fa2 import LOG2E, _check, finish, online_update
from attnlab.kernels.variants import variant_args

__all__ = ["flash_attention_hopper", "HOPPER_STEPS", "DEFAULT_STEPS", "cumulative_steps", "tma_ok", "launch_config"]

#: The optimisation steps, in the order a harness adds them (each one on top of those before it).
HOPPER_STEPS = ("tma", "causal_split", "softmax_fma", "big_tiles", "lpt_order", "warp_specialize")
#: What steps=None runs: the steps that paid on the H200 (data/measurements, gpubench.sweeps.hopper).
DEFAULT_STEPS = HOPPER_STEPS[:-1]


def cumulative_steps() -> list[tuple[str, ...]]:
    """[(), ("tma",), ("tma", "causal_split"), ...]: base, then one more step each time."""
    return [HOPPER_STEPS[:i] for i in range(len(HOPPER_STEPS) + 1)]


@triton.jit
def _mma(a, b, acc, IEEE: tl.constexpr):
    """acc + a @ b, the addition done by the MMA itself (Hopper's wgmma accumulates in place)."""
    if IEEE:
        return tl.dot(a, b, acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _tile(q, kd, vd, k_ptr, v_ptr, start_n, offs_m, offs_n, offs_d, d_ok, m_i, l_i, acc,
          s_kn, s_kd, s_vn, s_vd, N_K, OFFSET, qk_scale, cap_in, cap_out, b32, hk32,
          MASKED: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr, SOFT_CAP: tl.constexpr,
          TMA: tl.constexpr, HOST_DESC: tl.constexpr, FAST: tl.constexpr, BLOCK_N: tl.constexpr,
          BLOCK_D: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr):
    """Fold KV tile [start_n, start_n + BLOCK_N) into (m_i, l_i, acc). MASKED=False only for a
    tile whose every (row, key) pair is visible: then no key is past N_K either. With SOFT_CAP
    the logits are capped here, already in the base-2 domain, and the launcher passes
    qk_scale = 1."""
    cols = start_n + offs_n
    # -- K^T and V tiles: one TMA copy each, or per-thread pointer loads --------------------------
    if TMA:
        if HOST_DESC:   # a 4-D descriptor over (B, Hkv, N_k, d): the tile is [1, 1, BLOCK_N, BLOCK_D]
            k = kd.load([b32, hk32, start_n, 0]).reshape([BLOCK_N, BLOCK_D])
            v = vd.load([b32, hk32, start_n, 0]).reshape([BLOCK_N, BLOCK_D])
        else:           # this head's own 2-D descriptor over (N_k, d)
            k = kd.load([start_n, 0])
            v = vd.load([start_n, 0])
        kt = k.T        # a view: the MMA reads K from shared memory transposed
    else:
        kt = tl.load(k_ptr + cols[None, :] * s_kn + offs_d[:, None] * s_kd,
                     mask=(cols[None, :] < N_K) & d_ok[:, None], other=0.0)
        v = tl.load(v_ptr + cols[:, None] * s_vn + offs_d[None, :] * s_vd,
                    mask=(cols[:, None] < N_K) & d_ok[None, :], other=0.0)
    if UPCAST:
        kt = kt.to(tl.float32)
        v = v.to(tl.float32)
    if IEEE:
        s = tl.dot(q, kt, input_precision="ieee")
    else:
        s = tl.dot(q, kt)
    if SOFT_CAP > 0:   # c tanh(scale s / c) log2(e) = cap_out (1 - 2 / (1 + 2^(cap_in s)))
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
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)   # a row with no key so far
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)      # finite: every key visible
            m_use = m_new
        p = tl.exp2(s * qk_scale - m_use[:, None])
        alpha = tl.exp2(m_i - m_use)
        acc = _mma(p.to(v.dtype), v, acc * alpha[:, None], IEEE)
        l_i = l_i * alpha + tl.sum(p, 1)                          # after the MMA: fewer live registers
        return m_new, l_i, acc
    else:
        s = s * qk_scale                                          # log2 domain: scale * log2(e)
        if MASKED:
            s = tl.where(visible, s, float("-inf"))
        return online_update(s, v, m_i, l_i, acc, IEEE)


@triton.jit
def _hopper_kernel(Q, K, V, O, LSE, qk_scale, cap_in, cap_out,
                   s_qb, s_qh, s_qn, s_qd, s_kb, s_kh, s_kn, s_kd,
                   s_vb, s_vh, s_vn, s_vd, s_ob, s_oh, s_on, s_od,
                   H, GROUP, N_Q, N_K, HEAD_DIM, NUM_M,
                   BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   CAUSAL: tl.constexpr, WINDOW: tl.constexpr, SOFT_CAP: tl.constexpr,
                   TMA: tl.constexpr, HOST_DESC: tl.constexpr,
                   SPLIT: tl.constexpr, FAST: tl.constexpr, LPT: tl.constexpr, WS: tl.constexpr,
                   UPCAST: tl.constexpr, IEEE: tl.constexpr):
    if LPT:   # grid (B*H, NUM_M): heads fastest, the last (heaviest) query block first
        pid_bh = tl.program_id(0)
        pid_m = NUM_M - 1 - tl.program_id(1)
    else:     # kernels.fa2's grid (NUM_M, B*H)
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1)
    b32 = pid_bh // H
    h32 = pid_bh % H
    hk32 = h32 // GROUP
    b = b32.to(tl.int64)                             # 64-bit offsets for large batch x N
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
        if not HOST_DESC:   # one head = one (N, d) matrix with row stride s_n: bounds are per head
            # descriptors made once per program, reused by every tile load
            qd = tl.make_tensor_descriptor(q_ptr, shape=[N_Q, HEAD_DIM], strides=[s_qn, 1],
                                           block_shape=[BLOCK_M, BLOCK_D])
            kd = tl.make_tensor_descriptor(k_ptr, shape=[N_K, HEAD_DIM], strides=[s_kn, 1],
                                           block_shape=[BLOCK_N, BLOCK_D])
            vd = tl.make_tensor_descriptor(v_ptr, shape=[N_K, HEAD_DIM], strides=[s_vn, 1],
                                           block_shape=[BLOCK_N, BLOCK_D])
            od = tl.make_tensor_descriptor(o_ptr, shape=[N_Q, HEAD_DIM], strides=[s_on, 1],
                                           block_shape=[BLOCK_M, BLOCK_D])
            q = qd.load([row0, 0])
        else:
            q = qd.load([b32, h32, row0, 0]).reshape([BLOCK_M, BLOCK_D])
    else:
        q = tl.load(q_ptr + offs_m[:, None] * s_qn + offs_d[None, :] * s_qd,
                    mask=(offs_m[:, None] < N_Q) & d_ok[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    # -- which KV tiles: [lo, hi) are visited, [full_lo, full_hi) of them need no mask ------------
    OFFSET = N_K - N_Q
    first = row0 + OFFSET                            # q_idx of the block's first and last row
    last = first + BLOCK_M - 1
    hi = (N_K + BLOCK_N - 1) // BLOCK_N
    full_hi = N_K // BLOCK_N                         # tiles before the ragged end
    if CAUSAL:   # tiles after the last row's diagonal are never loaded; before the first row's, no mask
        hi = (tl.minimum(tl.maximum(last + 1, 0), N_K) + BLOCK_N - 1) // BLOCK_N
        full_hi = tl.minimum(tl.maximum(first + 1, 0), N_K) // BLOCK_N
    lo = 0
    full_lo = 0
    if WINDOW > 0:   # tiles at or before the first row's q_idx - w are never loaded (kernels.variants's ranges)
        lo = tl.maximum(first - WINDOW + 1, 0) // BLOCK_N
        full_lo = tl.minimum((tl.maximum(last - WINDOW + 1, 0) + BLOCK_N - 1) // BLOCK_N, hi)
        full_hi = tl.maximum(full_hi, full_lo)       # lo <= full_lo <= full_hi <= hi
    if not SPLIT:
        full_lo = lo                                 # kernels.fa2: every tile takes the mask
        full_hi = lo
    # stage 0, the window's lower edge: masked
    if WINDOW > 0:
        for j in tl.range(lo, full_lo, warp_specialize=WS):
            m_i, l_i, acc = _tile(q, kd, vd, k_ptr, v_ptr, j * BLOCK_N, offs_m, offs_n, offs_d, d_ok,
                                  m_i, l_i, acc, s_kn, s_kd, s_vn, s_vd, N_K, OFFSET, qk_scale, cap_in,
                                  cap_out, b32, hk32, True, CAUSAL, WINDOW, SOFT_CAP, TMA, HOST_DESC, FAST,
                                  BLOCK_N, BLOCK_D, UPCAST, IEEE)
    # stage 1, off the band: no mask, no guards
    for j in tl.range(full_lo, full_hi, warp_specialize=WS):
        m_i, l_i, acc = _tile(q, kd, vd, k_ptr, v_ptr, j * BLOCK_N, offs_m, offs_n, offs_d, d_ok,
                              m_i, l_i, acc, s_kn, s_kd, s_vn, s_vd, N_K, OFFSET, qk_scale, cap_in, cap_out,
                              b32, hk32, False, CAUSAL, WINDOW, SOFT_CAP, TMA, HOST_DESC, FAST, BLOCK_N,
                              BLOCK_D, UPCAST, IEEE)
    # stage 2, the diagonal band and the ragged end: masked
    for j in tl.range(full_hi, hi, warp_specialize=WS):
        m_i, l_i, acc = _tile(q, kd, vd, k_ptr, v_ptr, j * BLOCK_N, offs_m, offs_n, offs_d, d_ok,
                              m_i, l_i, acc, s_kn, s_kd, s_vn, s_vd, N_K, OFFSET, qk_scale, cap_in, cap_out,
                              b32, hk32, True, CAUSAL, WINDOW, SOFT_CAP, TMA, HOST_DESC, FAST, BLOCK_N,
                              BLOCK_D, UPCAST, IEEE)
    o, lse = finish(acc, m_i, l_i)
    if TMA:   # the copy engine drops rows past N_q and columns past d
        if HOST_DESC:
            od.store([b32, h32, row0, 0], o.to(od.dtype).reshape([1, 1, BLOCK_M, BLOCK_D]))
        else:
            od.store([row0, 0], o.to(od.dtype))
    else:
        tl.store(o_ptr + offs_m[:, None] * s_on + offs_d[None, :] * s_od, o.to(O.dtype.element_ty),
                 mask=(offs_m[:, None] < N_Q) & d_ok[None, :])
    tl.store(LSE + pid_bh * N_Q + offs_m, lse, mask=offs_m < N_Q)


def tma_ok(*tensors) -> bool:
    """True when TMA can address every tensor: last stride 1, the other strides and the data
    pointer multiples of 16 bytes."""
    for t in tensors:
        e = t.element_size()
        if t.stride(-1) != 1 or t.data_ptr() % 16 or any((s * e) % 16 for s in t.stride()[:-1]):
            return False
    return True


def _steps(steps) -> frozenset:
    if steps is None:
        return frozenset(DEFAULT_STEPS)
    if isinstance(steps, str) or not all(isinstance(s, str) for s in steps):
        raise TypeError(f"steps must be None or a tuple / set of step names from {HOPPER_STEPS}, "
                        f"got {steps!r}")
    bad = sorted(set(steps) - set(HOPPER_STEPS))
    if bad:
        raise ValueError(f"unknown steps {bad}; valid: {', '.join(HOPPER_STEPS)}")
    return frozenset(steps)


def _pow2(name, value, lo, hi):
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or value > hi or value & (value - 1):
        raise ValueError(f"{name} must be a power of two in [{lo}, {hi}], got {value!r}")


def launch_config(d: int, causal: bool, steps=None, *, block_m=None, block_n=None, num_warps=None,
                  num_stages=None) -> dict:
    """The block sizes, warps and stages `flash_attention_hopper` launches with for these steps
    (explicit arguments win)."""
    st = _steps(steps)
    interp = interpreting()
    big = "big_tiles" in st
    if interp:
        bm, bn = 16, (32 if big else 16)
    else:
        bm = 128 if d <= 128 else 64
        bn = 128 if big and d <= 128 else 64
    return {"block_m": block_m or bm, "block_n": block_n or bn,
            "num_warps": num_warps or (4 if d <= 64 else 8),
            "num_stages": num_stages or 3}       # the H200 sweep: 3 stages beat 2 by 10-17 % at 128 x 128


def _compile_errors() -> tuple:
    """What a step that does not build raises: Triton's compiler (RuntimeError "PassManager::run
    failed", CompilationError), shared memory or registers beyond the SM's (OutOfResources), and
    the interpreter's own error. Anything else (bad input) is not a reason to drop a step."""
    errs = [RuntimeError]
    for mod, name in (("triton.compiler.errors", "CompilationError"), ("triton.runtime.errors", "OutOfResources"),
                      ("triton.runtime.interpreter", "InterpreterError")):
        try:
            errs.append(getattr(__import__(mod, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return tuple(errs)


_COMPILE_ERRORS = _compile_errors()
_ALLOCATOR_DEVICE = None
_WORKING = {}     # (dtype, d, causal, descriptors, soft-cap on, window on) -> the steps that compiled


def _set_allocator(device):
    """Device-side descriptors live in a global-memory scratch that Triton asks for at launch."""
    global _ALLOCATOR_DEVICE
    if _ALLOCATOR_DEVICE == device:
        return

    def alloc(size: int, alignment: int, stream):
        return torch.empty(size, dtype=torch.int8, device=device)
    triton.set_allocator(alloc)
    _ALLOCATOR_DEVICE = device


def flash_attention_hopper(q, k, v, *, causal: bool = False, scale: float | None = None,
                           return_lse: bool = False, steps=None, block_m: int | None = None,
                           block_n: int | None = None, num_warps: int | None = None,
                           num_stages: int | None = None, out=None, descriptors: str | None = None,
                           soft_cap: float | None = None, window: int | None = None):
    """Attention of q (B, Hq, N_q, d), k, v (B, Hkv, N_k, d), any strides, with the Hopper kernel.

    Variants, compiled in as in `kernels.variants` (lecture §5.4): soft_cap=c caps the scaled
    logits at c tanh(s / c); window=w is `sliding_window(w)`, q_idx - w < kv_idx <= q_idx, and
    implies causal; tiles wholly outside the window are never loaded. None or 0 is off.

    steps: None (all of HOPPER_STEPS that compile here) or a tuple / set of their names; each
    adds one optimisation (module docstring). Returns O in q's dtype (written into `out`, any
    strides, when given), or (O, lse) with lse float32 (B, Hq, N_q), natural log. Block sizes,
    warps and stages default to `launch_config(d, causal, steps)`; scale defaults to 1/sqrt(d)
    and must be > 0. descriptors: "device" (made in the kernel), "host" (4-D TensorDescriptor) or
    None: host descriptors when causal, device ones otherwise (the H200's faster choice: causal
    551-582 against 525 TFLOP/s at N = 8K-16K; non-causal 557-582 against 543-559).
    """
    _check(q, k, v)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {causal!r}")
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {return_lse!r}")
    cap, window = variant_args(soft_cap, window, k.shape[2])
    causal = causal or window > 0
    if descriptors is None:
        descriptors = "host" if causal else "device"
    if descriptors not in ("device", "host"):
        raise ValueError(f"descriptors must be 'device' or 'host', got {descriptors!r}")
    B, H, n_q, d = q.shape
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    _pow2("block_m", block_m, 16, 256)
    _pow2("block_n", block_n, 16, 256)
    _pow2("num_warps", num_warps, 1, 16)
    if num_stages is not None and (isinstance(num_stages, bool) or not isinstance(num_stages, int)
                                   or not 1 <= num_stages <= 8):
        raise ValueError(f"num_stages must be an int in [1, 8], got {num_stages!r}")
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    elif not isinstance(out, torch.Tensor) or out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
        raise ValueError(f"out must be a {q.dtype} tensor of shape {tuple(q.shape)} on {q.device}")
    lse = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    interp = interpreting()
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; put q, k, v on one device")
    if not interp and q.device.type != "cuda":
        raise ValueError(f"q, k, v are on {q.device}: the compiled kernel needs CUDA tensors "
                         "(set TRITON_INTERPRET=1 before importing triton to run it on a CPU)")
    # the interpreter casts fp32 to bf16 by truncation (a GPU rounds): there write fp32, torch rounds
    dst = torch.empty(q.shape, dtype=torch.float32, device=q.device) if interp and q.dtype != torch.float32 else out

    key = (q.dtype, d, causal, descriptors, cap > 0, window > 0)
    if steps is None and key in _WORKING:
        st = _WORKING[key]
    else:
        st = _steps(steps)
    # the default drops failing steps from the end of HOPPER_STEPS, one at a time
    tries = [st] if steps is not None or key in _WORKING else \
        [frozenset(DEFAULT_STEPS[:i]) for i in range(len(DEFAULT_STEPS), -1, -1)]
    for i, st in enumerate(tries):
        try:
            _launch(q, k, v, dst, lse, causal, float(scale), st, descriptors, block_m, block_n,
                    num_warps, num_stages, interp, cap, window)
        except _COMPILE_ERRORS as e:                      # a step that does not compile here
            if steps is not None:
                raise RuntimeError(f"flash_attention_hopper: steps {sorted(st)} do not compile here for {q.dtype}, "
                                   f"d={d}, causal={causal} ({type(e).__name__}: {str(e)[:200]}); Triton 3.6 "
                                   "warp-specialises only 8-warp launches (d > 64); steps=None drops the steps "
                                   "that fail") from e
            if i + 1 == len(tries):
                raise
            warnings.warn(f"flash_attention_hopper: steps {sorted(st)} failed here "
                          f"({type(e).__name__}: {str(e)[:200]}); trying without {HOPPER_STEPS[len(st) - 1]}",
                          RuntimeWarning, stacklevel=2)
            continue
        if steps is None:
            _WORKING[key] = st
        break
    if dst is not out:
        out.copy_(dst)
    return (out, lse) if return_lse else out


def _launch(q, k, v, o, lse, causal, scale, st, descriptors, block_m, block_n, num_warps,
            num_stages, interp, cap=0.0, window=0):
    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    cfg = launch_config(d, causal, st, block_m=block_m, block_n=block_n, num_warps=num_warps,
                        num_stages=num_stages)
    bm, bn = cfg["block_m"], cfg["block_n"]
    bd = max(16, triton.next_power_of_2(d))
    tma = "tma" in st and tma_ok(q, k, v, o)
    host = tma and descriptors == "host"
    lpt = "lpt_order" in st and causal
    num_m = triton.cdiv(n_q, bm)
    grid = (B * H, num_m) if lpt else (num_m, B * H)
    args = [q, k, v, o]
    if host:
        from triton.tools.tensor_descriptor import TensorDescriptor
        args = [TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, r, bd])
                for t, r in ((q, bm), (k, bn), (v, bn), (o, bm))]
    elif tma and not interp:
        _set_allocator(q.device)
    kw = {} if interp else {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
    fp32 = q.dtype == torch.float32
    # with a soft-cap the tile caps the logits in the base-2 domain itself: qk_scale = 1
    _hopper_kernel[grid](*args, lse, 1.0 if cap else scale * LOG2E,
                         2.0 * scale / cap * LOG2E if cap else 0.0, cap * LOG2E,
                         *q.stride(), *k.stride(), *v.stride(), *o.stride(),
                         H, H // k.shape[1], n_q, n_k, d, num_m,
                         BLOCK_D=bd, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal, WINDOW=window, SOFT_CAP=cap > 0,
                         TMA=tma, HOST_DESC=host,
                         SPLIT="causal_split" in st, FAST="softmax_fma" in st, LPT=lpt,
                         WS="warp_specialize" in st, UPCAST=interp or fp32, IEEE=interp or fp32, **kw)
