"""A Hopper prefill: kernels.fa2's FlashAttention-2 loop with what FlashAttention-3 attacked
(lecture §3.5), one switchable step at a time, and a record of the steps each call ran.

`kernels.fa2.flash_attention_triton` is the readable FA2 kernel and stays as it is. This module
computes the same function, o = softmax(scale q k^T) v with lse, and adds the Hopper tricks as
`steps`, applied in the order of HOPPER_STEPS so that a harness can time base -> +tma ->
+causal_split -> ... and see what each one buys (`python -m attnlab.gpubench.sweeps.hopper`):
tma, causal_split, softmax_fma, big_tiles, lpt_order, warp_specialize. The kernel and what each
step changes in it are in `kernels.hopper_kernel`; the argument checks in `kernels.hopper_checks`;
the launch table (`launch_config`) in `kernels.tuning`.

`steps=None` means DEFAULT_STEPS, every step but warp_specialize (on the H200 with Triton 3.6 it
bought nothing at the best launch, -3 % to +6 %, and its 4-warp launches do not compile), except
that a step whose compile fails here is dropped, from the end of DEFAULT_STEPS one at a time,
with a RuntimeWarning the first time, and remembered for that (dtype, d, causal, descriptors,
soft-cap, window) so later calls do not compile it again. Never silently: every call records what
it ran, read back with `steps_run()` (the last call) or `report=` (a dict the call fills):

    requested   the steps asked for (steps=None: DEFAULT_STEPS)
    ran         the steps the launched kernel was compiled with
    dropped     {step: why} the steps dropped because they do not compile here (this call or before)
    inactive    steps that ran but changed nothing for this call: tma when the strides do not
                allow it (pointer loads instead), lpt_order when not causal, big_tiles when the
                block size stayed, warp_specialize under the interpreter
    descriptors "device" or "host" (TMA only), and config: the launch's blocks, warps, stages

`fallback=False` refuses to drop: a step that does not compile raises RuntimeError, as explicit
`steps` always do. `dropped_steps()` lists every fallback this process made; `forget_dropped()`
clears them, so the next call tries every default step again.

Variants (lecture §5.4): `soft_cap` and `window` are compile-time switches too, as in
`kernels.variants`; tiles outside the window are never loaded (O(N w) work).

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
(the interpreter truncates on the cast).

What it leaves out on purpose: the backward pass, FP8 (FA3's third idea), dropout, paged or varlen
KV, autotuning (the sweep picks block sizes), persistent kernels, and FA3's two explicit schedules
that Triton does not expose on Hopper: the ping-pong of two consumer warpgroups and the
intra-warpgroup overlap of one tile's softmax with the next tile's MMA.

This file is long because its docstring is the launcher's contract (the steps, the record, the
layout) and the launcher's fallback loop fills the record that `steps_run()`, `dropped_steps()`
and `report=` read; the kernel, its checks and the launch table live in files of their own.
"""

from __future__ import annotations

import warnings

import torch
import triton

from attnlab.validate import as_bool
from attnlab.kernels import interpreting
from attnlab.kernels.common import LOG2E
from attnlab.kernels.hopper_checks import COMPILE_ERRORS, check_args, parse_steps, tma_ok
from attnlab.kernels.hopper_kernel import DEFAULT_STEPS, HOPPER_STEPS, hopper_kernel
from attnlab.kernels.tuning import default_descriptors, launch_config

__all__ = [
    "flash_attention_hopper",
    "steps_run",
    "dropped_steps",
    "forget_dropped",
]

_ALLOCATOR_DEVICE = None
_WORKING = {}  # (dtype, d, causal, descriptors, soft-cap on, window on) -> the steps that compiled
_DROPPED = {}  # the same key -> {step: why}: what steps=None dropped there
_LAST = None  # the record of the last call


def _ordered(st) -> tuple:
    return tuple(s for s in HOPPER_STEPS if s in st)


def steps_run() -> dict | None:
    """The record of the last `flash_attention_hopper` call of this process (module docstring:
    requested, ran, dropped, inactive, descriptors, config), a copy; None before any call."""
    return None if _LAST is None else {k: (dict(v) if isinstance(v, dict) else v) for k, v in _LAST.items()}


def dropped_steps() -> dict:
    """Every fallback steps=None made in this process: {(dtype, d, causal, descriptors, soft-cap on,
    window on): {step: why}}."""
    return {key: dict(why) for key, why in _DROPPED.items()}


def forget_dropped() -> None:
    """Forget the fallbacks: the next steps=None call compiles every default step again."""
    _WORKING.clear()
    _DROPPED.clear()


def _set_allocator(device):
    """Device-side descriptors live in a global-memory scratch that Triton asks for at launch."""
    global _ALLOCATOR_DEVICE
    if _ALLOCATOR_DEVICE == device:
        return

    def alloc(size: int, alignment: int, stream):
        return torch.empty(size, dtype=torch.int8, device=device)

    triton.set_allocator(alloc)
    _ALLOCATOR_DEVICE = device


def flash_attention_hopper(
    q,
    k,
    v,
    *,
    causal: bool = False,
    scale: float | None = None,
    return_lse: bool = False,
    steps=None,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    out=None,
    descriptors: str | None = None,
    soft_cap: float | None = None,
    window: int | None = None,
    report: dict | None = None,
    fallback: bool = True,
):
    """Attention of q (B, Hq, N_q, d), k, v (B, Hkv, N_k, d), any strides, with the Hopper kernel.

    Variants, compiled in as in `kernels.variants` (lecture §5.4): soft_cap=c caps the scaled
    logits at c tanh(s / c); window=w is `sliding_window(w)`, q_idx - w < kv_idx <= q_idx, and
    implies causal; tiles wholly outside the window are never loaded. None or 0 is off.

    steps: None (all of DEFAULT_STEPS that compile here; fallback=False: all or a RuntimeError) or
    a tuple / set of their names; each adds one optimisation (module docstring). Returns O in q's
    dtype (written into `out`, any strides, when given), or (O, lse) with lse float32 (B, Hq, N_q),
    natural log. `report`, a dict, is filled with what the call ran (as `steps_run()`). Block
    sizes, warps and stages default to `launch_config(d, causal, steps)`; scale defaults to
    1/sqrt(d) and must be > 0. descriptors: "device" (made in the kernel), "host" (4-D
    TensorDescriptor) or None: `tuning.default_descriptors(causal)`, host ones when causal.
    """
    global _LAST
    requested = parse_steps(steps)  # the names first: refused on any device
    a = check_args(
        q,
        k,
        v,
        causal,
        scale,
        return_lse,
        block_m,
        block_n,
        num_warps,
        num_stages,
        out,
        descriptors,
        soft_cap,
        window,
        default_descriptors,
    )
    causal, scale, cap, window = a["causal"], a["scale"], a["cap"], a["window"]
    descriptors, out, launch = a["descriptors"], a["out"], a["launch"]
    block_m, block_n = launch["block_m"], launch["block_n"]
    num_warps, num_stages = launch["num_warps"], launch["num_stages"]
    fallback = as_bool("fallback", fallback)
    if report is not None and not isinstance(report, dict):
        raise TypeError(f"report must be a dict to fill or None, got {type(report).__name__}")
    B, H, n_q, d = q.shape
    lse = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    interp = interpreting()
    # the interpreter casts fp32 to bf16 by truncation (a GPU rounds): there write fp32, torch rounds
    dst = (
        torch.empty(q.shape, dtype=torch.float32, device=q.device)
        if interp and q.dtype != torch.float32
        else out
    )

    key = (q.dtype, d, causal, descriptors, cap > 0, window > 0)
    cached = steps is None and fallback and key in _WORKING
    if steps is not None or cached:
        tries = [_WORKING[key] if cached else requested]
    elif fallback:  # the default drops failing steps from the end of DEFAULT_STEPS, one at a time
        tries = [frozenset(DEFAULT_STEPS[:i]) for i in range(len(DEFAULT_STEPS), -1, -1)]
    else:
        tries = [requested]
    dropped = dict(_DROPPED.get(key, {})) if cached else {}
    for i, st in enumerate(tries):
        try:
            info = _launch(
                q,
                k,
                v,
                dst,
                lse,
                causal,
                scale,
                st,
                descriptors,
                block_m,
                block_n,
                num_warps,
                num_stages,
                interp,
                cap,
                window,
            )
        except COMPILE_ERRORS as e:  # a step that does not compile here
            if steps is not None or not fallback:
                raise RuntimeError(
                    f"flash_attention_hopper: steps {sorted(st)} do not compile here for {q.dtype}, "
                    f"d={d}, causal={causal} ({type(e).__name__}: {str(e)[:200]}); Triton 3.6 "
                    "warp-specialises only 8-warp launches (d > 64); steps=None drops the steps "
                    "that fail"
                ) from e
            if i + 1 == len(tries):
                raise
            gone = HOPPER_STEPS[len(st) - 1]
            dropped[gone] = f"{type(e).__name__}: {str(e)[:200]}"
            warnings.warn(
                f"flash_attention_hopper: steps {sorted(st)} failed here "
                f"({dropped[gone]}); trying without {gone}",
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        if steps is None and fallback:
            _WORKING[key] = st
            if dropped:
                _DROPPED[key] = dict(dropped)
        break
    _LAST = {
        "requested": _ordered(requested),
        "ran": _ordered(st),
        "dropped": dropped,
        "inactive": info["inactive"],
        "descriptors": info["descriptors"],
        "config": info["config"],
    }
    if report is not None:
        report.clear()
        report.update(steps_run())
    if dst is not out:
        out.copy_(dst)
    return (out, lse) if a["return_lse"] else out


def _launch(
    q,
    k,
    v,
    o,
    lse,
    causal,
    scale,
    st,
    descriptors,
    block_m,
    block_n,
    num_warps,
    num_stages,
    interp,
    cap=0.0,
    window=0,
) -> dict:
    """Launch hopper_kernel with the steps `st`; what took effect: {"inactive", "descriptors", "config"}."""
    B, H, n_q, d = q.shape
    n_k = k.shape[2]
    given = {"block_m": block_m, "block_n": block_n, "num_warps": num_warps, "num_stages": num_stages}
    cfg = launch_config(d, causal, st, **given)
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

        args = [
            TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, r, bd])
            for t, r in ((q, bm), (k, bn), (v, bn), (o, bm))
        ]
    elif tma and not interp:
        _set_allocator(q.device)
    kw = {} if interp else {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
    fp32 = q.dtype == torch.float32
    # with a soft-cap the tile caps the logits in the base-2 domain itself: qk_scale = 1
    hopper_kernel[grid](
        *args,
        lse,
        1.0 if cap else scale * LOG2E,
        2.0 * scale / cap * LOG2E if cap else 0.0,
        cap * LOG2E,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *o.stride(),
        H,
        H // k.shape[1],
        n_q,
        n_k,
        d,
        num_m,
        BLOCK_D=bd,
        BLOCK_M=bm,
        BLOCK_N=bn,
        CAUSAL=causal,
        WINDOW=window,
        SOFT_CAP=cap > 0,
        TMA=tma,
        HOST_DESC=host,
        SPLIT="causal_split" in st,
        FAST="softmax_fma" in st,
        LPT=lpt,
        WS="warp_specialize" in st,
        UPCAST=interp or fp32,
        IEEE=interp or fp32,
        **kw,
    )
    same_tiles = "big_tiles" in st and launch_config(d, causal, st - {"big_tiles"}, **given)["block_n"] == bn
    off = {
        "tma": "tma" in st and not tma,
        "lpt_order": "lpt_order" in st and not lpt,
        "big_tiles": same_tiles,
        "warp_specialize": "warp_specialize" in st and interp,
    }
    return {
        "inactive": _ordered({s for s, yes in off.items() if yes}),
        "descriptors": (descriptors if tma else None),
        "config": cfg,
    }
