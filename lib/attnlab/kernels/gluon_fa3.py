"""An FA3-style FlashAttention forward (prefill) for the H200 (Hopper, sm_90), written in Triton's
Gluon, where the kernel states its layouts, shared memory, barriers and warp roles itself.

    flash_attention_gluon(q, k, v, causal=False, scale=None, soft_cap=None, window=None) -> (o, lse)

The same function and contract as `kernels.hopper.flash_attention_hopper(..., return_lse=True)`:
o = softmax(scale q k^T) v, q (B, Hq, N_q, d), k, v (B, Hkv, N_k, d), GQA (query head h reads KV
head h // (Hq / Hkv)), causal bottom-right aligned (query i sees keys j <= i + N_k - N_q), a row
that sees no key gives o = 0 and lse = -inf (never NaN); o in q's dtype, lse float32 (B, Hq, N_q),
natural log. The variants are the Hopper kernel's, with the same checks (`kernels.variants.
variant_args`): soft_cap=c caps the scaled logits at c tanh(s / c) before the softmax (a finite
real in (0, 1e4]); window=w is `sliding_window(w)`, q_idx - w < kv_idx <= q_idx (an int >= 1;
it implies causal, and one of N_k keys or more runs as causal); None or 0 is off. Key tiles
wholly outside the window are never loaded. What the kernel does, and which FlashAttention-3 idea
each part is, is in `kernels.gluon_fa3_kernel`; `steps` switches those parts (GLUON_STEPS):

    warp_specialize   1-warp TMA producer partition + 8 computing warps (off: they load themselves)
    split_warpgroups  with warp_specialize: two 4-warp consumer partitions of 64 rows each, which
                      run independently (off: one 8-warp consumer, its warpgroups in lockstep)
    pingpong          with split_warpgroups: the consumers take turns at the tensor cores (mbarrier
                      hand-off), one's softmax under the other's GEMMs
    intra_overlap     tile j's softmax under tile j-1's PV wgmma (off: QK^T, softmax, PV in turn)
    early_k_release   with warp_specialize: a K stage is freed as soon as its QK^T is done and a V
                      stage after its PV, each on its own barrier, so the producer refills K a
                      GEMM earlier (off: one barrier frees both after PV)
    lpt_order         causal only: the longest query blocks first
    tma_store         O through shared memory and a TMA store (inactive when N_q % 128 != 0)
    persistent        with warp_specialize: one program per SM, each walking its own list of
                      tiles (`machine.schedule.persistent_tiles`: causal longest first with
                      lpt_order, heads in L2-sized sections), the next tile's first K / V stages
                      and Q loading under the last one's epilogue (off: one program per tile)

TMA loads, wgmma, the stage ring with mbarriers, exp2 softmax and the causal tile skipping are
always on; soft_cap and window are compile-time switches of the same kernel, so a launch without
them runs the plain kernel. steps=None runs `kernels.tuning.gluon_default_steps(d, causal)` (causal:
with a window too), the fastest set measured per case on the H200 without variants; num_stages
sets the K/V ring's depth (2 by default, 3 with intra_overlap where shared memory holds them) and
block_n the keys per tile (128 by default). The record of what ran is written
into `report` (a dict) when given.

Restrictions: float16 or bfloat16 only, d in {64, 128}, and q, k, v contiguous (B, H, N, d)
tensors (no hidden copies: anything else is refused by name); any N_q, N_k >= 1 (a last partial
tile is masked; with N_q % 128 != 0 O is stored from registers). It needs an sm_90 GPU.

Gluon kernels do not run under Triton's interpreter (TRITON_INTERPRET=1): there this module
imports and refuses calls; it is checked on the GPU against a float32 reference and timed beside
cuDNN and FlashAttention-2 by `python -m attnlab.gpubench.sweeps.gluon`, and in every harness run as
the ours-gluon rows of the prefill and prefill_fa3 sections (with a within_rule verdict).
"""

from __future__ import annotations

import torch

from attnlab.validate import as_bool
from attnlab.kernels import interpreting
from attnlab.kernels.common import LOG2E, as_count, as_scale, check_qkv
from attnlab.kernels.tuning import gluon_default_steps
from attnlab.kernels.variants import variant_args

__all__ = ["flash_attention_gluon", "GLUON_STEPS", "config_for"]

GLUON_STEPS = (
    "warp_specialize",
    "split_warpgroups",
    "pingpong",
    "intra_overlap",
    "lpt_order",
    "tma_store",
    "early_k_release",
    "persistent",
)
BLOCK_M = 128
BLOCK_N = 128
_SHARED_LIMIT = 232448  # bytes of shared memory one H100 / H200 CTA may use


def _max_stages(d: int, bn: int) -> int:
    return (_SHARED_LIMIT - 1024 - BLOCK_M * d * 2) // (2 * bn * d * 2)


def config_for(d: int, steps, num_stages: int | None = None, block_n: int | None = None) -> dict:
    """Block sizes, K/V stages, warps and the register cap of a launch with these steps. block_n
    (keys per tile): 64, 128 (default) or 256; stages default to 2 (3 with intra_overlap, where
    shared memory holds them: the overlap keeps two stages busy), at most what shared memory holds."""
    ws = "warp_specialize" in steps
    split = ws and "split_warpgroups" in steps
    overlap = "intra_overlap" in steps
    bn = BLOCK_N if block_n is None else as_count("block_n", block_n)
    if bn not in (64, 128, 256) or _max_stages(d, bn) < 2:
        raise ValueError(
            f"block_n={bn} is out of range; valid: 64, 128 or 256 (two stages in shared memory), or None"
        )
    most = _max_stages(d, bn)
    stages = (3 if overlap and most >= 3 else 2) if num_stages is None else as_count("num_stages", num_stages)
    if not 2 <= stages <= most:
        raise ValueError(
            f"num_stages={stages} is out of range; valid: 2 <= num_stages <= {most} for d={d}, "
            f"block_n={bn}, or None"
        )
    return {
        "block_m": BLOCK_M,
        "block_n": bn,
        "stages": stages,
        "num_warps": 4 if split else 8,
        "split": split,  # 168 x 384 threads: 24 for the producer, 240 for each computing thread
        "maxnreg": 168 if ws else None,
    }


def _parse_steps(steps) -> frozenset | None:
    if steps is None:
        return None
    if isinstance(steps, str) or not all(isinstance(s, str) for s in steps):
        raise TypeError(f"steps must be None or a tuple / set of names from {GLUON_STEPS}, got {steps!r}")
    bad = sorted(set(steps) - set(GLUON_STEPS))
    if bad:
        raise ValueError(f"unknown steps {bad}; valid: {', '.join(GLUON_STEPS)}")
    return frozenset(steps)


def _check(q, k, v, causal, scale, soft_cap, window, report):
    """Every argument refused by name before anything touches the device; (causal, scale, cap,
    window) resolved: scale defaults to 1/sqrt(d), cap 0.0 and window 0 are off, a window is
    clamped to N_k."""
    check_qkv(q, k, v)
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"q, k, v must be float16 or bfloat16 for the Gluon kernel, got {q.dtype}")
    d = q.shape[3]
    if d not in (64, 128):
        raise ValueError(f"head dim d={d} is not supported by the Gluon kernel; valid: 64, 128")
    causal = as_bool("causal", causal)
    cap, window = variant_args(soft_cap, window, k.shape[2])
    scale = as_scale(scale, d)
    if report is not None and not isinstance(report, dict):
        raise TypeError(f"report must be a dict to fill or None, got {type(report).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_contiguous():
            raise ValueError(
                f"{name} must be contiguous (B, H, N, d), got strides {tuple(t.stride())}; "
                "call .contiguous() first"
            )
    return causal, scale, cap, window


def _check_device(q, k, v):
    """CUDA tensors on one sm_90 device, and no interpreter: Gluon kernels run nowhere else."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.device.type != "cuda":
            raise ValueError(
                f"{name} is on {t.device}: the Gluon kernel needs CUDA tensors on an sm_90 GPU "
                "(Gluon kernels do not run under Triton's interpreter)"
            )
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; put q, k, v on one device")
    if interpreting():
        raise RuntimeError("TRITON_INTERPRET=1: Gluon kernels do not run under Triton's interpreter")
    cap = torch.cuda.get_device_capability(q.device)
    if cap != (9, 0):
        raise RuntimeError(
            f"the Gluon kernel is written for sm_90 (Hopper: H100 / H200); {q.device} is sm_{cap[0]}{cap[1]}"
        )


def flash_attention_gluon(
    q,
    k,
    v,
    *,
    causal: bool = False,
    scale: float | None = None,
    soft_cap: float | None = None,
    window: int | None = None,
    report: dict | None = None,
    steps=None,
    num_stages: int | None = None,
    block_n: int | None = None,
):
    """Attention of contiguous q (B, Hq, N_q, d), k, v (B, Hkv, N_k, d), fp16 / bf16, d in {64, 128},
    on an sm_90 GPU. Returns (o, lse): o in q's dtype and shape, lse float32 (B, Hq, N_q), natural
    log. scale defaults to 1/sqrt(d). soft_cap=c: c tanh(s / c) on the scaled logits; window=w:
    q_idx - w < kv_idx <= q_idx, causal implied (None or 0: off; module docstring). steps: None
    (`tuning.gluon_default_steps(d, causal)`) or names from GLUON_STEPS; num_stages, block_n: the K/V ring
    (config_for). report, a dict, is filled with {"kernel", "steps", "inactive", "config",
    "causal", "soft_cap", "window", "registers", "spills"}: causal, soft_cap and window as compiled
    (0 = off; a window of N_k keys or more runs as causal, window 0), then the compiled kernel's
    registers per thread and spilled registers as Triton reports them."""
    requested = _parse_steps(steps)
    causal, scale, cap, window = _check(q, k, v, causal, scale, soft_cap, window, report)
    causal = causal or window > 0
    if requested is None:
        requested = frozenset(gluon_default_steps(q.shape[3], causal))
    cfg = config_for(q.shape[3], requested, num_stages, block_n)  # the launch refused here too
    _check_device(q, k, v)
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from attnlab.kernels.gluon_fa3_kernel import fa3_fwd_kernel
    from attnlab.kernels.gluon_fa3_tiles import persistent_schedule

    B, H, n_q, d = q.shape
    hkv, n_k = k.shape[1], k.shape[2]
    window = window if window < n_k else 0  # every key a causal row sees is in the window
    bm, bn = cfg["block_m"], cfg["block_n"]
    qm = bm // 2 if cfg["split"] else bm  # the rows of one consumer: Q and O tiles
    o = torch.empty_like(q)
    lse = torch.empty((B, H, n_q), dtype=torch.float32, device=q.device)
    el = gl.bfloat16 if q.dtype == torch.bfloat16 else gl.float16

    def desc(t, rows):  # a 2-D view (B * H * N, d): tiles of `rows` rows
        flat = t.view(-1, d)
        return TensorDescriptor(
            flat,
            list(flat.shape),
            list(flat.stride()),
            [rows, d],
            gl.NVMMASharedLayout.get_default_for([rows, d], el),
        )

    lpt = causal and "lpt_order" in requested
    tma_store = "tma_store" in requested and n_q % bm == 0
    num_m = _cdiv(n_q, bm)
    persist = "persistent" in requested and "warp_specialize" in requested
    grid = (B * H, num_m) if lpt else (num_m, B * H)
    tiles = indptr = lse  # placeholders: read only by a persistent launch
    if persist:
        programs, tiles, indptr = persistent_schedule(
            q.device, B, H, num_m, n_q, n_k, causal, lpt, H // hkv, d, bm, bn
        )
        grid = (programs,)
    kw = {"num_warps": cfg["num_warps"]}
    if cfg["maxnreg"]:
        kw["maxnreg"] = cfg["maxnreg"]
    # with a soft-cap the kernel caps the logits in the base-2 domain itself: qk_scale = 1
    compiled = fa3_fwd_kernel[grid](
        desc(q, qm),
        desc(k, bn),
        desc(v, bn),
        desc(o, qm),
        o,
        lse,
        tiles,
        indptr,
        1.0 if cap else scale * LOG2E,
        2.0 * scale / cap * LOG2E if cap else 0.0,
        cap * LOG2E,
        n_q,
        n_k,
        H,
        H // hkv,
        num_m,
        window,
        BLOCK_M=bm,
        BLOCK_N=bn,
        HEAD_D=d,
        STAGES=cfg["stages"],
        CAUSAL=causal,
        WINDOW=window > 0,
        SOFT_CAP=cap > 0,
        LPT=lpt,
        WS="warp_specialize" in requested,
        OVERLAP="intra_overlap" in requested,
        TMA_STORE=tma_store,
        SPLIT=cfg["split"],
        PINGPONG=cfg["split"] and "pingpong" in requested,
        EARLY_K="warp_specialize" in requested and "early_k_release" in requested,
        PERSIST=persist,
        **kw,
    )
    if report is not None:
        inactive = {
            "lpt_order": "lpt_order" in requested and not lpt,
            "split_warpgroups": "split_warpgroups" in requested and not cfg["split"],
            "pingpong": "pingpong" in requested and not cfg["split"],
            "early_k_release": "early_k_release" in requested and "warp_specialize" not in requested,
            "tma_store": "tma_store" in requested and not tma_store,
            "persistent": "persistent" in requested and not persist,
        }
        report.clear()
        report.update(
            {
                "kernel": "gluon_fa3",
                "steps": tuple(s for s in GLUON_STEPS if s in requested),
                "inactive": tuple(s for s in GLUON_STEPS if inactive.get(s)),
                "config": cfg,
                "causal": causal,
                "soft_cap": cap,
                "window": window,
                "registers": getattr(compiled, "n_regs", None),
                "spills": getattr(compiled, "n_spills", None),
            }
        )
    return o, lse


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)
