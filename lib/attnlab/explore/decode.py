"""Decode-attention explorers (notebook 04): intensity ~ g, split-KV against idle SMs, the merge
operator in floating point, and cascade attention over a shared prefix.

Pure parts (numbers only, tested in tests/test_decode_explore.py):

    decode_intensity(g, l_qo, l_kv, batch, gpu)     one KV head's FLOP/byte, the roofline around it
    split_kv_plan(batch, context, kv_heads, splits) every split count's time, SM occupancy per wave
    merge_errors(splits, dtype, order, seed)        merged states against the fp64 one-pass result
    cascade_numbers(n, prefix, unique, g)           KV tokens read and the prefix part's intensity

Text tables for the notebook: intensity_table, batch_table, split_table, split_rows_table,
merge_table, cascade_check, cascade_table.

Draw parts: intensity_explorer, split_kv_explorer, merge_explorer, cascade_explorer. Each keeps
its axes fixed while the slider that matters most moves, so a move redraws only the moving artists.

What this leaves out on purpose: everything `attnlab.decode` leaves out (paged layouts, L2 hits,
launch latency, load balancing across requests of different lengths: notebook 05), and, in the
merge explorer, the rounding of bf16 inputs: the states are computed in float32 or float64.

Example: Llama-3-8B (8 KV heads) on an H100 SXM, batch 1 at 32K context: 8 work blocks keep 8 of
132 SMs busy (6 %); cut each KV into 16 chunks and 128 blocks fill one wave: about 16x faster.
"""
from __future__ import annotations

import functools

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.patches import Patch, Polygon, Rectangle
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullLocator

from .._check import as_int, choice
from ..decode import cascade_attention, cascade_intensity, intensity, split_kv_attention
from ..hardware import SPLITS, decode_time
from ..hardware import DTYPE_BYTES, attainable, get_gpu, gpus, peak
from ..models import get_model
from ..softmax import attention_state, merge_states
from . import style
from ._base import Explorer, dropdown, slider, steps, toggle

__all__ = ["decode_intensity", "intensity_table", "batch_table", "intensity_explorer",
           "split_kv_plan", "split_table", "split_vs_context", "wave_tail", "split_rows_table", "split_kv_explorer",
           "merge_data", "merge_errors", "merge_table", "merge_explorer",
           "cascade_numbers", "cascade_check", "cascade_table", "cascade_explorer",
           "GROUPS", "BATCHES", "CONTEXTS", "KV_HEADS", "MERGE_ORDERS", "MERGE_DTYPES"]

GROUPS = (1, 2, 4, 8, 16, 32, 64, 128)                  # query heads per KV head
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTEXTS = tuple(1024 << i for i in range(8))           # 1K .. 128K tokens
KV_HEADS = (1, 2, 4, 8, 16)
L_KV_MIN, L_KV_MAX = 128, 131072
L_KV_STEPS = [1 << k for k in range(7, 18)]             # 128 ... 131072: 8192 stays reachable
I_LIM = (0.5, 5000.0)                                   # FLOP/byte: every slider setting fits
TFLOPS_LIM = (0.5, 5000.0)                              # TFLOP/s: every GPU's bf16 roof fits
LINEAR_N = 4096                                         # the contrast: a 4096 x 4096 linear layer
REFERENCES = (("MHA", 1), ("GQA g=8", 8), ("MLA g=128", 128))
MERGE_ORDERS = ("forward", "reverse", "random")
MERGE_DTYPES = ("float32", "float64")
MERGE_KEYS, MERGE_D = 10_000, 64
MERGE_MAX_SPLITS = 256
MERGE_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256)         # split counts of the error curve
ERR_FLOOR = 1e-19                                       # an exact 0 is drawn here on log axes
N_GRID = np.unique(np.round(np.geomspace(1, 256, 41)).astype(int))


def _gpu_name(gpu) -> str:
    return get_gpu(gpu).name


def _decades(lo: float, hi: float) -> list[float]:
    return [10.0 ** e for e in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)]


def _plain(x, _pos=None) -> str:
    return f"{x:g}" if x < 1 else f"{x:,.0f}"


def _log_axis(ax, which: str, lo: float, hi: float) -> None:
    """A fixed log axis with plain-number ticks at the decades and no minor ticks."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    (ax.set_xlim if which == "x" else ax.set_ylim)(lo, hi)
    axis.set_major_locator(FixedLocator([t for t in _decades(lo, hi) if lo <= t <= hi]))
    axis.set_major_formatter(FuncFormatter(_plain))
    axis.set_minor_locator(NullLocator())


# ================================================================================================
# 4.1 arithmetic intensity ~ g


def decode_intensity(g: int = 8, l_qo: int = 1, l_kv: int = 8192, batch: int = 1,
                     gpu="H100-SXM", head_dim: int = 128) -> dict:
    """Decode attention for one KV head and its g query heads, for a whole batch, in bf16.

    Per request: FLOPs 4 g l_qo l_kv d, bytes 2 (2 g l_qo d + 2 l_kv d) (Q in, O out, K and V in).
    A batch of B requests multiplies both by B (no two requests share KV), so the intensity,
    `attnlab.decode.intensity(g, l_qo, l_kv)`, does not depend on B. For contrast, a linear layer
    with LINEAR_N x LINEAR_N bf16 weights on the B tokens of the batch reaches B n / (n + 2B):
    its weights are read once for every token of the batch.

    Returns the inputs, intensity, asymptote (g l_qo), flops and bytes (whole batch), ridge,
    peak, bandwidth (bytes/s), attainable (FLOP/s), fraction (of peak), bound, refs (label ->
    intensity of MHA / GQA g=8 / MLA g=128 at the same l_qo, l_kv), linear (intensity of the
    contrast layer), and the curve of intensity against l_kv ('curve_l', 'curve_i').

    Example: g = 8, l_kv = 8192: 8 * 8192 / 8200 = 7.99 FLOP/byte, 2.7 % of the H100's ridge.
    """
    g = as_int("g", g, 1, None)
    l_qo = as_int("l_qo", l_qo, 1, None)
    l_kv = as_int("l_kv", l_kv, 1, None)
    batch = as_int("batch", batch, 1, None)
    head_dim = as_int("head_dim", head_dim, 1, None)
    G = get_gpu(gpu)
    p = peak(G, "bf16")
    b = DTYPE_BYTES["bf16"]
    flops = batch * 4.0 * g * l_qo * l_kv * head_dim
    nbytes = batch * b * (2.0 * g * l_qo * head_dim + 2.0 * l_kv * head_dim)
    i = intensity(g, l_qo, l_kv)
    ridge = p / G.hbm_bandwidth
    att = attainable(i, G, "bf16")
    grid = np.geomspace(L_KV_MIN, L_KV_MAX, 61)
    return {"g": g, "l_qo": l_qo, "l_kv": l_kv, "batch": batch, "gpu": G.name,
            "intensity": i, "asymptote": float(g * l_qo), "flops": flops, "bytes": nbytes,
            "ridge": ridge, "peak": p, "bandwidth": G.hbm_bandwidth, "attainable": att,
            "fraction": att / p, "bound": "memory-bound" if i < ridge else "compute-bound",
            "refs": {lab: intensity(gr, l_qo, l_kv) for lab, gr in REFERENCES},
            "linear": batch * LINEAR_N / (LINEAR_N + 2.0 * batch),
            "curve_l": grid, "curve_i": intensity(g, l_qo, grid)}


def intensity_table(l_kv: int = 8192, gpu="H100-SXM") -> str:
    """Decode intensity at `l_kv` for MHA, Llama-3-8B, Llama-3-70B and MLA (DeepSeek-V3 as g = 128),
    against the bf16 ridge point of `gpu`."""
    cases = [("MHA (every query head has its own KV)", 1)]
    for name in ("Llama-3-8B", "Llama-3-70B", "DeepSeek-V3"):
        m = get_model(name)
        label = f"{name} (MLA, treated as MQA)" if name == "DeepSeek-V3" else f"{name} (GQA)"
        cases.append((label, m.group))
    rows = []
    for label, g in cases:
        r = decode_intensity(g, 1, l_kv, 1, gpu)
        rows.append({"case": label, "g": g, "i": r["intensity"], "ridge": r["intensity"] / r["ridge"],
                     "att": r["attainable"], "bound": r["bound"]})
    ridge = decode_intensity(1, 1, l_kv, 1, gpu)["ridge"]
    head = f"context l_kv = {l_kv:,}, one query per step; {_gpu_name(gpu)} bf16 ridge point = {ridge:.0f} FLOP/byte\n"
    return head + style.table(
        rows, {"case": "model", "g": "g", "i": "FLOP/byte", "ridge": "of ridge", "att": "attainable",
               "bound": "bound by"},
        {"case": str, "i": lambda x: f"{x:.1f}" if x < 100 else f"{x:.0f}", "ridge": ".1%",
         "att": lambda x: f"{x / 1e12:.1f} TFLOP/s", "bound": str})


def batch_table(g: int = 8, l_kv: int = 8192, batches=(1, 16, 256), gpu="H100-SXM") -> str:
    """FLOPs, bytes and intensity of one layer's decode attention (one KV head) for several batch
    sizes: FLOPs and bytes grow with the batch, their ratio does not."""
    rows = [decode_intensity(g, 1, l_kv, b, gpu) for b in batches]
    return style.table(
        rows, {"batch": "batch", "flops": "FLOPs", "bytes": "HBM bytes", "intensity": "FLOP/byte",
               "linear": f"linear {LINEAR_N}x{LINEAR_N}: FLOP/byte"},
        {"flops": lambda x: style.si(x), "bytes": lambda x: style.si(x, "B"), "intensity": ".2f",
         "linear": ".1f"})


def intensity_explorer(g: int = 8, l_qo: int = 1, l_kv: int = 8192, batch: int = 1,
                       gpu: str = "H100-SXM") -> Explorer:
    """Sliders: group size g, queries per step l_qo (speculative tokens), context l_kv, batch; GPU.

    Left: the bf16 roofline with decode attention (star), MHA / GQA g=8 / MLA g=128 at the same
    l_qo and l_kv, and a linear layer on the same batch for contrast: batch moves the linear layer,
    never the attention point. Right: intensity against l_kv for the current g and l_qo, its
    asymptote g l_qo and the ridge point. Both panels have fixed axes.
    """
    decode_intensity(g, l_qo, l_kv, batch, gpu)              # validates the arguments
    fig = style.new_figure(2, height=3.9)
    ax_r, ax_l = fig.axes
    c = style.COLORS
    _log_axis(ax_r, "x", *I_LIM); _log_axis(ax_r, "y", *TFLOPS_LIM)
    _log_axis(ax_l, "x", L_KV_MIN / 1.25, L_KV_MAX * 1.25); _log_axis(ax_l, "y", *I_LIM)
    ax_l.xaxis.set_major_locator(FixedLocator([128, 1024, 8192, 65536]))
    for ax in (ax_r, ax_l):
        ax.grid(True, alpha=0.25)
    ax_r.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax_r.set_ylabel("attainable bf16 throughput (TFLOP/s)")
    ax_l.set_xlabel("context l_kv (tokens)")
    ax_l.set_ylabel("intensity (FLOP/byte)")
    ax_l.set_title("intensity against context length", fontsize=10)

    roof, = ax_r.plot([], [], color="k", lw=2, label="roof: min(peak, I x bandwidth)")
    ridge_v = ax_r.axvline(1, color=c["bound"], ls="--", lw=1, label="ridge point")
    refs = {lab: ax_r.plot([], [], "o", ms=6, mfc="white", mec=c["fa1"], mew=1.5)[0] for lab, _ in REFERENCES}
    ref_txt = {lab: ax_r.text(0, 0, lab, fontsize=7.5, color=c["fa1"], ha="left", va="top")
               for lab, _ in REFERENCES}
    linear, = ax_r.plot([], [], "s", ms=7, color=c["compute"], mec="k", mew=0.5,
                        label=f"linear layer {LINEAR_N}x{LINEAR_N}, same batch")
    star, = ax_r.plot([], [], "*", ms=15, color=c["highlight"], mec="k", mew=0.8,
                      label="decode attention (your settings)")
    ax_r.plot([], [], "o", ms=6, mfc="white", mec=c["fa1"], mew=1.5, label="MHA / GQA / MLA, same l_qo, l_kv")
    ax_r.legend(loc="upper left", fontsize=7.5)

    curve, = ax_l.plot([], [], color=c["fa1"], lw=2, label="I = g l_qo l_kv / (g l_qo + l_kv)")
    asym = ax_l.axhline(1, color=c["fa1"], ls=":", lw=1, label="asymptote g x l_qo")
    ridge_h = ax_l.axhline(1, color=c["bound"], ls="--", lw=1, label="ridge point (bf16)")
    dot, = ax_l.plot([], [], "*", ms=14, color=c["highlight"], mec="k", mew=0.8)
    ax_l.legend(loc="upper left", fontsize=7.5)

    controls = {
        "g": steps("group size g", GROUPS, g),
        "l_qo": slider("queries/step l_qo", l_qo, 1, 16),
        "l_kv": steps("context l_kv", L_KV_STEPS if l_kv in L_KV_STEPS else sorted({*L_KV_STEPS, l_kv}), l_kv),
        "batch": steps("batch", BATCHES, batch),
        "gpu": dropdown("GPU", gpus(), _gpu_name(gpu)),
    }
    grid = np.geomspace(*I_LIM, 121)

    def update(g, l_qo, l_kv, batch, gpu):
        r = decode_intensity(g, l_qo, int(round(l_kv)), batch, gpu)
        G = get_gpu(gpu)
        roof.set_data(grid, attainable(grid, G) / 1e12)
        ridge_v.set_xdata([r["ridge"]] * 2)
        for lab, _ in REFERENCES:
            x = r["refs"][lab]
            refs[lab].set_data([x], [attainable(x, G) / 1e12])
            ref_txt[lab].set_position((x * 1.2, attainable(x, G) / 1e12 / 1.3))
        linear.set_data([r["linear"]], [attainable(r["linear"], G) / 1e12])
        star.set_data([r["intensity"]], [r["attainable"] / 1e12])
        curve.set_data(r["curve_l"], r["curve_i"])
        asym.set_ydata([r["asymptote"]] * 2)
        ridge_h.set_ydata([r["ridge"]] * 2)
        dot.set_data([r["l_kv"]], [r["intensity"]])
        ax_r.set_title(f"bf16 roofline, {r['gpu']}: g={g}, l_qo={l_qo}, l_kv={r['l_kv']:,}, batch={batch}",
                       fontsize=10)
        ax_l.set_title(f"intensity against context (g={g}, l_qo={l_qo}; ridge {r['ridge']:.0f})", fontsize=10)
        return (f"Decode attention: <b>{r['intensity']:.1f} FLOP/byte</b> (asymptote g x l_qo = "
                f"{r['asymptote']:.0f}), {r['intensity'] / r['ridge']:.1%} of the ridge point "
                f"({r['ridge']:.0f}): {r['bound']}, at most {r['attainable'] / 1e12:.1f} TFLOP/s "
                f"({r['fraction']:.1%} of peak). Batch {batch}: {style.si(r['flops'])}FLOP over "
                f"{style.si(r['bytes'], 'B')} per KV head, {batch}x one request's FLOPs <i>and</i> bytes, "
                f"so the same ratio; the linear layer on the same batch reaches {r['linear']:.1f}.")

    dynamic = [roof, ridge_v, *refs.values(), *ref_txt.values(), linear, star, curve, asym, ridge_h,
               dot, ax_r.title, ax_l.title]

    def compute(g, l_qo, l_kv, batch, gpu):
        return decode_intensity(g, l_qo, int(round(l_kv)), batch, gpu)

    return Explorer("intensity", controls, fig, update, compute=compute, dynamic=dynamic)


# ================================================================================================
# 4.2 parallelism and split-KV


def _occupancy(run, sms: int) -> tuple[np.ndarray, np.ndarray]:
    """Outline (time in µs, busy SMs) of one run's attention waves: full waves at `sms`, then the
    last, partial wave."""
    bt = run.attn_time / run.waves * 1e6
    full, rem = divmod(run.blocks, sms)
    x, y = [0.0], [0.0]
    if full:
        x += [0.0, full * bt]; y += [sms, sms]
    if rem:
        x += [full * bt, (full + 1) * bt]; y += [rem, rem]
    x.append(run.attn_time * 1e6); y.append(0.0)
    return np.array(x), np.array(y, dtype=float)


Q_HEADS = 32   # Llama-3-8B's query heads: the explorer varies how many KV heads share them


def _us(t: float) -> str:
    """Compact bar label in µs: '41.5', '661', '8,460'."""
    us = t * 1e6
    return f"{us:.3g}" if us < 1000 else f"{us:,.0f}"


def split_kv_plan(batch: int = 1, context: int = 32768, kv_heads: int = 8, splits: int = 16,
                  gpu="H100-SXM", *, candidates=SPLITS) -> dict:
    """One layer of decode attention (Llama-3-8B's 32 query heads of head_dim 128, shared by
    `kv_heads` KV heads: group = 32 / kv_heads) on the simplified GPU of
    `attnlab.hardware.decode_time`, for every split count in `candidates` (those <= context).

    Returns runs (DecodeTime per candidate), chosen (the run for `splits`), base (no split),
    best (the fastest run), speedup (base time / chosen time), sms, block_time (s, chosen),
    occupancy and base_occupancy (outline of busy SMs over time in µs: x, y arrays), x_max
    (µs: the slowest candidate's time, so a fixed time axis holds every split count).

    ValueError if `splits` is not a candidate or exceeds the context.

    Example: batch 1, 32K context, 8 KV heads, 16 splits on an H100 SXM: 128 blocks in one wave,
    97 % of the SMs busy, ~41 µs against 661 µs without splitting: 15.9x.
    """
    batch = as_int("batch", batch, 1, None)
    context = as_int("context", context, 1, None)
    kv_heads = as_int("kv_heads", kv_heads, 1, None)
    splits = as_int("splits", splits, 1, context)
    cands = [as_int("candidates", s, 1, None) for s in candidates]
    if splits not in cands:
        raise ValueError(f"splits={splits} is not a candidate; valid: {cands}")
    G = get_gpu(gpu)
    group = max(1, Q_HEADS // kv_heads)          # the merge traffic scales with query heads
    runs = [decode_time(batch, context, kv_heads, s, G, group=group) for s in cands if s <= context]
    chosen = next(r for r in runs if r.splits == splits)
    base = decode_time(batch, context, kv_heads, 1, G, group=group)
    best = min(runs, key=lambda r: r.time)
    return {"batch": batch, "context": context, "kv_heads": kv_heads, "splits": splits, "gpu": G.name,
            "runs": runs, "chosen": chosen, "base": base, "best": best,
            "speedup": base.time / chosen.time, "sms": G.sms,
            "block_time": chosen.attn_time / chosen.waves,
            "occupancy": _occupancy(chosen, G.sms), "base_occupancy": _occupancy(base, G.sms),
            "x_max": max(max(r.time for r in runs), base.time) * 1e6}


def _cell(r) -> str:
    return f"{style.seconds(r.time)} ({r.utilization:.0%})"


def split_table(batches=(1, 16, 256), splits=(1, 4, 16, 64), context: int = 4096, kv_heads: int = 8,
                gpu="H100-SXM") -> str:
    """Predicted time of one layer (and SM utilization) for each batch x split count."""
    rows = []
    for b in batches:
        row = {"batch": b}
        for s in splits:
            row[s] = _cell(decode_time(b, context, kv_heads, s, gpu))
        rows.append(row)
    head = (f"one layer, {kv_heads} KV heads, head_dim 128, context {context:,}, {_gpu_name(gpu)}: "
            f"time (SM utilization)\n")
    return head + style.table(rows, {"batch": "batch", **{s: f"{s} split" + ("s" if s > 1 else "")
                                                         for s in splits}},
                              {s: str for s in splits})


def split_vs_context(batch: int = 256, contexts=(1024, 4096, 32768), splits=(1, 4, 16, 64),
                     kv_heads: int = 8, gpu="H100-SXM") -> str:
    """One batch size over several contexts: time (utilization) per split count, and the change
    of the largest split count against no split."""
    rows = []
    for ctx in contexts:
        runs = {s: decode_time(batch, ctx, kv_heads, s, gpu) for s in splits}
        rows.append({"context": ctx, **{s: _cell(runs[s]) for s in splits},
                     "change": runs[splits[-1]].time / runs[splits[0]].time - 1})
    head = f"batch {batch}, {kv_heads} KV heads, {_gpu_name(gpu)}: time (SM utilization)\n"
    return head + style.table(
        rows, {"context": "context", **{s: f"{s} split" + ("s" if s > 1 else "") for s in splits},
               "change": f"{splits[-1]} vs {splits[0]}"},
        {"context": ",", **{s: str for s in splits}, "change": "+.1%"})


def wave_tail(batch: int = 256, context: int = 32768, kv_heads: int = 8, splits=(1, 64),
              gpu="H100-SXM") -> str:
    """Where the time goes for each split count: blocks over SMs, whole waves, the time an ideal
    (tail-free) schedule would need, the tail it wastes, and the merge."""
    G = get_gpu(gpu)
    lines = [f"batch {batch}, context {context:,}, {kv_heads} KV heads, {G.name} ({G.sms} SMs)"]
    for s in splits:
        r = decode_time(batch, context, kv_heads, s, G)
        ideal = r.attn_time * (r.blocks / G.sms) / r.waves
        lines.append(f"{s:>3} split{'s' if s > 1 else ' '}: {r.blocks:>7,} blocks / {G.sms} = "
                     f"{r.blocks / G.sms:7.2f} -> {r.waves:>4} waves; attention {r.attn_time * 1e6:8,.0f} µs "
                     f"(tail {(r.attn_time - ideal) * 1e6:4,.0f} µs) + merge {r.merge_time * 1e6:4,.0f} µs "
                     f"= {r.time * 1e6:8,.0f} µs")
    return "\n".join(lines)


def split_rows_table(batch: int = 2, context: int = 16384, kv_heads: int = 8, gpu="H100-SXM") -> str:
    """Every split count of `attnlab.decode.SPLITS` for one configuration: blocks, waves,
    utilization, attention and merge time, total, speedup against no split; the best one marked."""
    p = split_kv_plan(batch, context, kv_heads, 1, gpu)
    rows = [{"splits": r.splits, "blocks": r.blocks, "waves": r.waves, "util": r.utilization,
             "attn": r.attn_time, "merge": r.merge_time, "time": r.time,
             "speedup": p["base"].time / r.time,
             "best": "<- best" if r.splits == p["best"].splits else ""} for r in p["runs"]]
    head = f"batch {batch}, context {context:,}, {kv_heads} KV heads, {p['gpu']} ({p['sms']} SMs)\n"
    return head + style.table(
        rows, {"splits": "splits", "blocks": "blocks", "waves": "waves", "util": "utilization",
               "attn": "attention", "merge": "merge", "time": "total", "speedup": "vs no split",
               "best": "note"},
        {"blocks": ",", "waves": ",", "util": ".0%", "attn": style.seconds,
         "merge": lambda t: style.seconds(t) if t else "-", "time": style.seconds,
         "speedup": lambda x: f"{x:.2f}x", "best": str})


def split_kv_explorer(batch: int = 1, context: int = 32768, kv_heads: int = 8, splits: int = 1,
                      gpu: str = "H100-SXM") -> Explorer:
    """Sliders: batch, context, KV heads, split count; GPU.

    Left: how many SMs are busy over time (one step per wave of work blocks, then the merge), on a
    time axis fixed for the current batch, context and heads, with the no-split run as an outline.
    Right: the predicted time of every split count (attention + merge), the chosen one highlighted
    and the best one marked. Moving the split slider redraws only the moving artists.
    """
    split_kv_plan(batch, context, kv_heads, splits, gpu)          # validates the arguments
    fig = style.new_figure(2, height=4.0)
    ax_o, ax_t = fig.axes
    c = style.COLORS
    ax_o.set_xlabel("time (µs)")
    ax_o.set_ylabel("busy SMs")
    ax_o.grid(True, axis="x", alpha=0.25)
    ax_o.xaxis.set_major_locator(MaxNLocator(5))          # few ticks: a full redraw stays cheap
    busy = Polygon(np.zeros((2, 2)), closed=True, fc=c["fa1"], ec=c["fa1"], lw=0.8, alpha=0.85)
    ax_o.add_patch(busy)
    merge_r = Rectangle((0, 0), 0, 1, fc=c["memory"], ec=c["memory"], hatch="///", alpha=0.8, lw=0.5)
    ax_o.add_patch(merge_r)
    waves = LineCollection([], colors="white", lw=0.8)
    ax_o.add_collection(waves)
    ghost, = ax_o.plot([], [], color="k", ls="--", lw=1)
    sm_line = ax_o.axhline(1, color=c["standard"], lw=1)
    sm_text = ax_o.text(0.99, 0, "", transform=ax_o.get_yaxis_transform(), ha="right", va="bottom",
                        fontsize=8, color=c["standard"])
    occ_text = ax_o.text(0.99, 0.5, "", transform=ax_o.transAxes, ha="right", va="center", fontsize=9,
                         bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": c["muted"]})
    ax_o.legend([Patch(fc=c["fa1"]), Patch(fc=c["memory"], hatch="///"),
                 ax_o.plot([], [], color="k", ls="--", lw=1)[0]],
                ["attention blocks (white lines: waves)", "merge of the partial states", "no split"],
                loc="upper right", fontsize=7.5)

    idx = np.arange(len(SPLITS))
    attn_bars = ax_t.bar(idx, np.ones(len(SPLITS)), color=c["muted"], width=0.7)
    merge_bars = ax_t.bar(idx, np.zeros(len(SPLITS)), color=c["memory"], width=0.7)
    labels = [ax_t.annotate("", (i, 1), xytext=(0, 2), textcoords="offset points", ha="center",
                            va="bottom", fontsize=7) for i in idx]
    best_txt = ax_t.annotate("best", (0, 1), xytext=(0, 22), textcoords="offset points", ha="center",
                             va="bottom", fontsize=8, fontweight="bold", color=c["fa2"])
    ax_t.set_yscale("log")
    ax_t.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax_t.yaxis.set_minor_locator(NullLocator())
    ax_t.set_xticks(idx, [str(s) for s in SPLITS])
    ax_t.set_xlim(-0.6, len(SPLITS) - 0.4)
    ax_t.set_xlabel("KV splits per (request, KV head)")
    ax_t.set_ylabel("predicted time, one layer (µs)")
    ax_t.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax_t.grid(True, axis="y", alpha=0.25)

    controls = {
        "batch": steps("batch", BATCHES, batch),
        "context": steps("context (tokens)", CONTEXTS, context),
        "kv_heads": steps("KV heads", KV_HEADS, kv_heads),
        "splits": steps("KV splits", SPLITS, splits),
        "gpu": dropdown("GPU", gpus(), _gpu_name(gpu)),
    }

    def update(batch, context, kv_heads, splits, gpu):
        try:
            p = split_kv_plan(batch, context, kv_heads, splits, gpu)
        except ValueError as e:
            return f"<span style='color:#d62728'>{e}</span>"
        r, sms, xmax = p["chosen"], p["sms"], p["x_max"]
        ax_o.set_xlim(0, xmax * 1.04)
        ax_o.set_ylim(0, sms * 1.45)
        ax_o.set_yticks([0, sms // 2, sms])
        x, y = p["occupancy"]
        busy.set_xy(np.column_stack([x, y]))
        merge_r.set_bounds(r.attn_time * 1e6, 0, r.merge_time * 1e6, sms)
        merge_r.set_visible(r.merge_time > 0)
        bt = p["block_time"] * 1e6
        segs = ([[(k * bt, 0), (k * bt, sms)] for k in range(1, r.waves)] if 1 < r.waves <= 40 else [])
        waves.set_segments(segs)
        gx, gy = p["base_occupancy"]
        ghost.set_data(gx, gy)
        ghost.set_visible(r.splits != 1)
        sm_line.set_ydata([sms, sms])
        sm_text.set_position((0.99, sms))
        sm_text.set_text(f"{sms} SMs ({p['gpu']})")
        occ_text.set_text(f"{r.blocks:,} blocks, {r.waves:,} wave{'s' if r.waves > 1 else ''}\n"
                          f"{r.utilization:.0%} of SM time busy\n"
                          f"{style.seconds(r.time)}, {p['speedup']:.1f}x vs no split")
        times = {q.splits: q for q in p["runs"]}
        tmin = min(q.attn_time for q in p["runs"]) * 1e6
        lo, hi = tmin / 2, xmax * 3
        ax_t.set_ylim(lo, hi)
        for i, s in enumerate(SPLITS):
            q = times.get(s)
            for art in (attn_bars[i], merge_bars[i], labels[i]):
                art.set_visible(q is not None)
            if q is None:
                continue
            a, m = q.attn_time * 1e6, q.merge_time * 1e6
            attn_bars[i].set_y(lo); attn_bars[i].set_height(a - lo)
            attn_bars[i].set_color(c["fa1"] if s == r.splits else c["muted"])
            merge_bars[i].set_y(a); merge_bars[i].set_height(m)
            labels[i].xy = (i, q.time * 1e6)
            labels[i].set_text(f"{_us(q.time)}\n{q.utilization:.0%}")
            labels[i].set_fontweight("bold" if s == r.splits else "normal")
        bi = SPLITS.index(p["best"].splits)
        best_txt.xy = (bi, p["best"].time * 1e6)
        ax_o.set_title(f"SM occupancy: batch {batch}, context {context:,}, {kv_heads} KV heads, "
                       f"{splits} split{'s' if splits > 1 else ''}", fontsize=10)
        ax_t.set_title(f"time per split count on {p['gpu']} (orange: merge)", fontsize=10)
        return (f"{r.blocks:,} work blocks (batch {batch} x {kv_heads} KV heads x {splits} splits) on "
                f"{sms} SMs: {r.waves:,} wave(s), <b>{r.utilization:.0%}</b> utilization; "
                f"time {style.seconds(r.time)} (attention {style.seconds(r.attn_time)}"
                + (f" + merge {style.seconds(r.merge_time)}" if r.merge_time else "")
                + f"), <b>{p['speedup']:.1f}x</b> vs no split ({style.seconds(p['base'].time)}). "
                f"Best split count here: <b>{p['best'].splits}</b> ({style.seconds(p['best'].time)})."
                + (" <i>Below ~5 µs the model is optimistic: it has no launch cost, and a real "
                   "kernel launch alone takes a few µs.</i>" if r.time < 5e-6 else ""))

    dynamic = [busy, merge_r, waves, ghost, sm_line, sm_text, occ_text, *attn_bars, *merge_bars, *labels,
               best_txt, ax_o.title, ax_t.title]
    return Explorer("split_kv", controls, fig, update, compute=split_kv_plan, dynamic=dynamic)


# ================================================================================================
# 4.3 attention states and the merge operator


@functools.lru_cache(maxsize=16)
def merge_data(seed: int = 0, n_keys: int = MERGE_KEYS, d: int = MERGE_D):
    """One query and n_keys keys and values (standard normal, float64) from `seed`, plus the
    float64 one-pass output o_ref: (q, k, v, o_ref), read-only arrays."""
    seed = as_int("seed", seed, 0, None)
    n_keys = as_int("n_keys", n_keys, 1, None)
    d = as_int("d", d, 1, None)
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(d)
    k = rng.standard_normal((n_keys, d))
    v = rng.standard_normal((n_keys, d))
    o_ref, _ = attention_state(q, k, v)
    for a in (q, k, v, o_ref):
        a.setflags(write=False)
    return q, k, v, o_ref


@functools.lru_cache(maxsize=16)
def _cast(dtype: str, seed: int, n_keys: int, d: int) -> tuple:
    q, k, v, _ = merge_data(seed, n_keys, d)
    return tuple(x.astype(dtype) for x in (q, k, v))


@functools.lru_cache(maxsize=1024)
def _states(dtype: str, seed: int, splits: int, n_keys: int, d: int) -> tuple:
    q, k, v = _cast(dtype, seed, n_keys, d)
    _, _, states = split_kv_attention(q, k, v, splits, return_states=True)
    return tuple(states)


def _order(order: str, splits: int, seed: int):
    if order == "random":
        return np.random.default_rng([seed, splits]).permutation(splits)
    return order


@functools.lru_cache(maxsize=2048)
def _merged(dtype: str, seed: int, splits: int, order: str, n_keys: int, d: int) -> np.ndarray:
    o, _ = merge_states(_states(dtype, seed, splits, n_keys, d), _order(order, splits, seed))
    o = np.asarray(o, dtype=np.float64)
    o.setflags(write=False)
    return o


@functools.lru_cache(maxsize=64)
def _curve(dtype: str, seed: int, order: str, n_keys: int, d: int) -> tuple:
    ref = merge_data(seed, n_keys, d)[3]
    fwd, oth, diff = [], [], []
    for s in MERGE_GRID:
        if s > n_keys:
            break
        a = _merged(dtype, seed, s, "forward", n_keys, d)
        b = _merged(dtype, seed, s, order, n_keys, d)
        fwd.append(np.abs(a - ref).max()); oth.append(np.abs(b - ref).max()); diff.append(np.abs(a - b).max())
    n = len(fwd)
    return tuple(np.array(x) for x in (MERGE_GRID[:n], fwd, oth, diff))


def merge_errors(splits: int = 64, dtype: str = "float32", order: str = "reverse", seed: int = 0,
                 *, n_keys: int = MERGE_KEYS, d: int = MERGE_D, curve: bool = True) -> dict:
    """Split n_keys keys into `splits` chunks, compute each chunk's attention state in `dtype`,
    merge them forward and in `order` ('forward', 'reverse' or 'random': a permutation seeded by
    (seed, splits), as atomics finishing in any order would give), and compare with the float64
    one-pass output o_ref.

    Returns per-element absolute differences 'fwd' (forward vs o_ref), 'other' (order vs o_ref)
    and 'diff' (forward vs order), their maxima 'fwd_max', 'other_max', 'diff_max'; with
    curve=True also 'curve': (splits grid, fwd max, other max, diff max) over MERGE_GRID.
    States and merges are cached per (dtype, seed, splits, order).

    Example: float64, 8 splits: both orders match o_ref to ~1e-16; float32: ~1e-8, and forward and
    reverse differ from each other in the last bits.
    """
    splits = as_int("splits", splits, 1, None)
    n_keys = as_int("n_keys", n_keys, 1, None)
    if splits > n_keys:
        raise ValueError(f"splits={splits} is out of range; valid: 1 <= splits <= n_keys={n_keys}")
    dtype = choice("dtype", dtype, MERGE_DTYPES)
    order = choice("order", order, MERGE_ORDERS)
    seed = as_int("seed", seed, 0, None)
    d = as_int("d", d, 1, None)
    ref = merge_data(seed, n_keys, d)[3]
    a = _merged(dtype, seed, splits, "forward", n_keys, d)
    b = _merged(dtype, seed, splits, order, n_keys, d)
    out = {"splits": splits, "dtype": dtype, "order": order, "seed": seed,
           "fwd": np.abs(a - ref), "other": np.abs(b - ref), "diff": np.abs(a - b)}
    out.update(fwd_max=float(out["fwd"].max()), other_max=float(out["other"].max()),
               diff_max=float(out["diff"].max()))
    if curve:
        out["curve"] = _curve(dtype, seed, order, n_keys, d)
    return out


def merge_table(splits=(2, 8, 64), seed: int = 0) -> str:
    """Error sizes (decades, via style.magnitude) of merged split states: float64 against the
    one-pass result, float32 against it, and float32 forward against reverse merge order."""
    rows = []
    for s in splits:
        f64 = merge_errors(s, "float64", "reverse", seed, curve=False)
        f32 = merge_errors(s, "float32", "reverse", seed, curve=False)
        rows.append({"splits": s, "f64": max(f64["fwd_max"], f64["other_max"]), "f32": f32["fwd_max"],
                     "f32r": f32["diff_max"]})
    head = f"one query, {MERGE_KEYS:,} keys, d = {MERGE_D}, seed {seed}: max |difference| over the output\n"
    return head + style.table(
        rows, {"splits": "splits", "f64": "fp64 merged vs one pass", "f32": "fp32 merged vs fp64 one pass",
               "f32r": "fp32 forward vs reverse"},
        {"f64": style.magnitude, "f32": style.magnitude, "f32r": style.magnitude})


def merge_explorer(splits: int = 8, dtype: str = "float32", order: str = "reverse",
                   seed: int = 0) -> Explorer:
    """Sliders: number of splits, dtype, merge order, seed.

    Left: max |o - o_ref| against the number of splits (log-log) for the forward order and your
    order, and the difference between the two (what a rerun with another order would change);
    your split count marked. Right: the same three differences per output element (d = 64) at
    your split count. An exact 0 is drawn at the bottom of the axis.
    """
    merge_errors(splits, dtype, order, seed, curve=False)           # validates the arguments
    fig = style.new_figure(2, height=3.9)
    ax_c, ax_e = fig.axes
    c = style.COLORS
    _log_axis(ax_c, "x", 0.8, 320)
    _log_axis(ax_e, "y", ERR_FLOOR / 2, 1e-5)
    _log_axis(ax_c, "y", ERR_FLOOR / 2, 1e-5)
    ax_c.xaxis.set_major_locator(FixedLocator(list(MERGE_GRID)))
    for ax in (ax_c, ax_e):
        ax.yaxis.set_major_locator(FixedLocator([10.0 ** e for e in range(-19, -4, 2)]))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _p: "0" if y < ERR_FLOOR * 1.5 else f"1e{int(round(np.log10(y)))}"))
        ax.grid(True, alpha=0.25)
    ax_c.set_xlabel("number of splits (chunks of 10,000 keys)")
    ax_c.set_ylabel("max |o - o_ref| over the output")
    ax_e.set_xlabel("output element (of d = 64)")
    ax_e.set_ylabel("|o - o_ref| per element")
    ax_e.set_xlim(-1, MERGE_D)
    for ax in (ax_c, ax_e):
        ax.axhspan(1.1e-16 / 2, 1.1e-16 * 2, color=c["fa2"], alpha=0.12, lw=0)
        ax.axhspan(6e-8 / 2, 6e-8 * 2, color=c["fa1"], alpha=0.12, lw=0)
    ax_c.text(0.9, 1.1e-16 * 2.5, "float64 unit roundoff, 1.1e-16", fontsize=7, color=c["fa2"])
    ax_c.text(0.9, 6e-8 * 2.5, "float32 unit roundoff, 6e-8", fontsize=7, color=c["fa1"])
    styles = {"fwd": ("-o", c["fa2"]), "other": ("-s", c["fa1"]), "diff": ("-^", c["standard"])}
    lines = {k: ax_c.plot([], [], fmt, ms=4, color=col, lw=1.3)[0] for k, (fmt, col) in styles.items()}
    marks = {k: ax_c.plot([], [], "o", ms=10, mfc="none", mec=c["highlight"], mew=2)[0] for k in styles}
    vline = ax_c.axvline(1, color=c["highlight"], lw=2, alpha=0.7)
    pts = {k: ax_e.plot([], [], fmt[1:], ms=4, color=col, alpha=0.8, ls="none")[0]
           for k, (fmt, col) in styles.items()}
    leg_c = ax_c.legend([lines["fwd"], lines["other"], lines["diff"]], ["", "", ""], loc="center right",
                        fontsize=7.5)
    ax_e.legend([pts["fwd"], pts["other"], pts["diff"]], ["forward vs o_ref", "your order vs o_ref",
                                                           "forward vs your order"],
                loc="center right", fontsize=7.5)

    controls = {
        "splits": slider("splits", splits, 1, MERGE_MAX_SPLITS),
        "dtype": toggle("dtype", list(MERGE_DTYPES), dtype),
        "order": toggle("merge order", list(MERGE_ORDERS), order),
        "seed": slider("seed", seed, 0, 9),
    }

    def floor(x):
        return np.maximum(np.asarray(x, dtype=float), ERR_FLOOR)

    def update(splits, dtype, order, seed):
        r = merge_errors(splits, dtype, order, seed)
        grid, fwd, oth, diff = r["curve"]
        for k, ys in (("fwd", fwd), ("other", oth), ("diff", diff)):
            lines[k].set_data(grid, floor(ys))
            marks[k].set_data([splits], [max(r[k + "_max"], ERR_FLOOR)])
            pts[k].set_data(np.arange(MERGE_D), floor(r[k]))
        vline.set_xdata([splits, splits])
        for t, s in zip(leg_c.get_texts(), ("forward order vs fp64 one pass", f"{order} order vs fp64 one pass",
                                            f"forward vs {order}")):
            t.set_text(s)
        ax_c.set_title(f"merged vs one pass, {dtype}, seed {seed} (ring: {splits} splits)", fontsize=10)
        ax_e.set_title(f"per output element: {splits} splits, {dtype}, {order} order", fontsize=10)
        same = r["diff_max"] == 0
        return (f"{splits} split(s), {dtype}: forward merge vs the fp64 one-pass output "
                f"{style.magnitude(r['fwd_max'])}; {order} merge {style.magnitude(r['other_max'])}; "
                f"forward vs {order}: <b>{'identical bits' if same else style.magnitude(r['diff_max'])}</b>"
                + ("" if same or dtype == "float64" else
                   " &mdash; same inputs, same math, a different order of additions, different last bits."))

    dynamic = [*lines.values(), *marks.values(), vline, *pts.values(), leg_c, ax_c.title, ax_e.title]
    return Explorer("merge", controls, fig, update, compute=merge_errors, dynamic=dynamic)


# ================================================================================================
# 4.4 shared prefix: cascade attention


def cascade_numbers(n: int = 64, prefix: int = 4096, unique: int = 256, g: int = 4,
                    gpu="H100-SXM") -> dict:
    """KV tokens read by n requests sharing a `prefix`-token prefix, each with `unique` tokens of
    its own: naive (every request reads prefix + unique) against cascade (prefix once, then each
    unique part), split into prefix and unique parts; and the intensities of
    `attnlab.decode.cascade_intensity` (bf16, group g: the prefix part has n g queries per KV
    element) with the ridge point of `gpu`, plus the prefix part's intensity over N_GRID requests.

    Example: 64 requests, prefix 4096, unique 256, g = 4: 278,528 tokens naive, 20,480 cascade
    (93 % fewer); the prefix part's intensity is 241 FLOP/byte against 4.0 per request.
    """
    n = as_int("n", n, 1, None)
    prefix = as_int("prefix", prefix, 1, None)
    unique = as_int("unique", unique, 0, None)
    g = as_int("g", g, 1, None)
    ci = cascade_intensity(n, prefix, unique, g)
    G = get_gpu(gpu)
    return {"n": n, "prefix": prefix, "unique": unique, "g": g, "gpu": G.name,
            "naive_prefix": n * prefix, "naive_unique": n * unique,
            "cascade_prefix": prefix, "cascade_unique": n * unique,
            "tokens_naive": ci["tokens_naive"], "tokens_cascade": ci["tokens_cascade"],
            "saving": ci["saving"], "i_prefix": ci["prefix"], "i_naive": ci["naive"],
            "i_unique": ci["unique"], "ridge": peak(G, "bf16") / G.hbm_bandwidth,
            "curve_n": N_GRID, "curve_i": intensity(g, N_GRID, prefix)}


def cascade_check(n: int = 64, prefix: int = 4096, unique: int = 256, d: int = 64, seed: int = 0) -> str:
    """Run `attnlab.decode.cascade_attention` on random float64 data and compare it with each
    request's own attention over prefix + unique keys; report the largest difference and the KV
    tokens each way."""
    n = as_int("n", n, 1, None)
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n, d))
    pk, pv = rng.standard_normal((prefix, d)), rng.standard_normal((prefix, d))
    uniq = [(rng.standard_normal((unique, d)), rng.standard_normal((unique, d))) for _ in range(n)]
    res = cascade_attention(q, pk, pv, uniq)
    ref = np.stack([attention_state(q[i], np.vstack([pk, k]), np.vstack([pv, v]))[0]
                    for i, (k, v) in enumerate(uniq)])
    err = float(np.abs(res.o - ref).max())
    saving = 1 - res.tokens_read / res.tokens_naive
    return (f"{n} requests, shared prefix {prefix:,} + {unique:,} unique tokens each, d = {d}, float64\n"
            f"max |cascade - per-request attention| = {style.magnitude(err)}\n"
            f"KV tokens read: naive {res.tokens_naive:,}, cascade {res.tokens_read:,} "
            f"({saving:.1%} fewer)")


def cascade_table(ns=(1, 8, 64, 256), prefix: int = 4096, unique: int = 256, g: int = 4,
                  gpu="H100-SXM") -> str:
    """`cascade_numbers` for several request counts: tokens read, saving, intensities."""
    rows = [cascade_numbers(n, prefix, unique, g, gpu) for n in ns]
    head = (f"prefix {prefix:,} + {unique:,} unique tokens per request, g = {g}; "
            f"{rows[0]['gpu']} bf16 ridge point {rows[0]['ridge']:.0f} FLOP/byte\n")
    return head + style.table(
        rows, {"n": "requests", "tokens_naive": "KV tokens naive", "tokens_cascade": "cascade",
               "saving": "saving", "i_naive": "naive FLOP/byte", "i_prefix": "prefix part FLOP/byte"},
        {"tokens_naive": ",", "tokens_cascade": ",", "saving": ".1%", "i_naive": ".1f", "i_prefix": ".1f"})


def cascade_explorer(n: int = 64, prefix: int = 4096, unique: int = 256, g: int = 4,
                     gpu: str = "H100-SXM") -> Explorer:
    """Sliders: requests n, prefix length, unique length per request, group size g (type exact
    values into a slider's number box).

    Left: KV tokens read, naive against cascade, as a share of the naive count (prefix and
    unique parts stacked; absolute counts on the bars). Right: intensity of the prefix part
    against n for this prefix and g, the naive per-request intensity and the ridge point of `gpu`.
    """
    start = cascade_numbers(n, prefix, unique, g, gpu)
    fig = style.new_figure(2, height=3.9)
    ax_b, ax_i = fig.axes
    c = style.COLORS
    x = np.array([0, 1])
    pre = ax_b.bar(x, [1, 1], width=0.55, color=c["fa1"], label="prefix tokens")
    uni = ax_b.bar(x, [0, 0], width=0.55, color=c["fa2"], label="unique tokens")
    tops = [ax_b.text(i, 0, "", ha="center", va="bottom", fontsize=8.5) for i in x]
    ax_b.set_xticks(x, ["naive: each request\nreads prefix + unique", "cascade: prefix once,\nthen each unique part"])
    ax_b.set_xlim(-0.6, 1.6)
    ax_b.set_ylim(0, 145)
    ax_b.set_yticks([0, 25, 50, 75, 100])
    ax_b.set_ylabel("KV tokens read (% of naive)")
    ax_b.set_xlabel("kernel")
    ax_b.grid(True, axis="y", alpha=0.25)
    ax_b.legend(loc="upper center", fontsize=7.5, ncol=2)

    _log_axis(ax_i, "x", 0.8, 320)
    ax_i.xaxis.set_major_locator(FixedLocator([1, 4, 16, 64, 256]))
    _log_axis(ax_i, "y", *I_LIM)
    ax_i.grid(True, alpha=0.25)
    ax_i.set_xlabel("requests sharing the prefix, n")
    ax_i.set_ylabel("intensity (FLOP/byte, bf16)")
    curve, = ax_i.plot([], [], color=c["fa1"], lw=2, label="prefix part (n g queries per KV element)")
    naive = ax_i.axhline(1, color=c["standard"], ls=":", lw=1.5, label="naive: each request alone")
    ax_i.axhline(start["ridge"], color=c["bound"], ls="--", lw=1, label=f"ridge point, {start['gpu']}")
    dot, = ax_i.plot([], [], "*", ms=15, color=c["highlight"], mec="k", mew=0.8)
    dot_txt = ax_i.text(0, 0, "", fontsize=8, ha="left", va="top")
    ax_i.legend(loc="upper left", fontsize=7.5)

    controls = {
        "n": slider("requests n", n, 1, 256),
        "prefix": slider("prefix (tokens)", prefix, 256, 32768),
        "unique": slider("unique (tokens)", unique, 0, 4096),
        "g": steps("group size g", (1, 2, 4, 8, 16), g),
    }

    def update(n, prefix, unique, g):
        r = cascade_numbers(n, prefix, unique, g, gpu)
        tn = r["tokens_naive"]
        pct = [100 * r["naive_prefix"] / tn, 100 * r["cascade_prefix"] / tn]
        upct = [100 * r["naive_unique"] / tn, 100 * r["cascade_unique"] / tn]
        for i in x:
            pre[i].set_height(pct[i])
            uni[i].set_y(pct[i]); uni[i].set_height(upct[i])
        tops[0].set_position((0, pct[0] + upct[0] + 1.5))
        tops[0].set_text(f"{tn:,} tokens")
        tops[1].set_position((1, pct[1] + upct[1] + 1.5))
        tops[1].set_text(f"{r['tokens_cascade']:,} tokens\n({r['saving']:.1%} fewer)")
        curve.set_data(r["curve_n"], r["curve_i"])
        naive.set_ydata([r["i_naive"]] * 2)
        dot.set_data([n], [r["i_prefix"]])
        left = n > 32
        dot_txt.set_ha("right" if left else "left")
        dot_txt.set_position((n / 1.2 if left else n * 1.2, r["i_prefix"] / 1.25))
        dot_txt.set_text(f"{r['i_prefix']:.0f}" if r["i_prefix"] >= 100 else f"{r['i_prefix']:.1f}")
        ax_b.set_title(f"KV read: n={n}, prefix {prefix:,} + unique {unique:,}", fontsize=10)
        ax_i.set_title(f"prefix-part intensity (prefix {prefix:,}, g={g})", fontsize=10)
        return (f"Naive: {n} x ({prefix:,} + {unique:,}) = {tn:,} KV tokens; cascade: {prefix:,} + "
                f"{n} x {unique:,} = {r['tokens_cascade']:,}: <b>{r['saving']:.1%} fewer</b>. "
                f"Prefix part: {n} x {g} = {n * g} queries share each KV element, "
                f"<b>{r['i_prefix']:.1f} FLOP/byte</b> against {r['i_naive']:.1f} for a request alone "
                f"(ridge {r['ridge']:.0f}).")

    dynamic = [*pre, *uni, *tops, curve, naive, dot, dot_txt, ax_b.title, ax_i.title]
    return Explorer("cascade", controls, fig, update,
                    compute=lambda n, prefix, unique, g: cascade_numbers(n, prefix, unique, g, gpu),
                    dynamic=dynamic)
