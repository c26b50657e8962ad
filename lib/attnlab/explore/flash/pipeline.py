"""FA3's schedule made movable (notebook 03, §3.5): one CTA's timeline over six K/V tiles, the
producer's loads and each consumer warpgroup's QK^T, softmax and PV, with FA3's steps switched
on and off; beside it, the share of the time each unit is busy once the pipeline is full, and
the recorded H200 row of the same setting where the run holds one.

Pure part: `pipeline_numbers(...)` -> PipelineNumbers, from `attnlab.machine.pipeline` (the
drawn six tiles, and 64 tiles for the steady state) and the recorded step table
(`attnlab.explore.measured.steps`).

This file is long because the explorer and `model_beside_measured` set the one model
(`machine.pipeline.schedule`) beside the one recorded step table, once as a timeline to move and
once as notebook 03's table; drawing the timeline's rectangles is most of the lines.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.patches import Patch

from attnlab.machine.hardware import get_gpu
from attnlab.machine.pipeline import CONSUMERS, HEAD_DIMS, RESOURCES, schedule, stage_times
from attnlab.explore import style
from attnlab.explore._base import Explorer, readonly
from attnlab.explore._controls import checkbox, steps, toggle
from attnlab.explore.measured.steps import SETTING_OF, ladder_rows, measured_setting

__all__ = [
    "PipelineNumbers",
    "pipeline_numbers",
    "model_beside_measured",
    "PipelineExplorer",
    "GPUS",
    "REUSE",
    "SHOWN",
    "LONG",
]

GPUS = ("H100", "H200", "B200")
REUSE = (1, 2, 4, 8, 16, 32, 64)
SHOWN = 6  # tiles drawn
LONG = 64  # tiles of the steady-state numbers (a CTA of an 8K prefill walks 64)
H = 0.72  # bar height
LANE = H / 4  # a warpgroup's row: its GEMMs in the upper lane, its softmax in the lower
#: colours of the steps: the load, the two GEMMs, the softmax's exp (MUFU) and FMA parts
KIND_COLORS = {
    "load": style.COLORS["memory"],
    "qk": style.COLORS["fa1"],
    "exp": style.COLORS["standard"],
    "fma": style.COLORS["highlight"],
    "pv": style.COLORS["fa2"],
}
ROWS = ("K/V loads", "warpgroup 1", "warpgroup 2")
UNIT_LABELS = {"copy": "copy\n(TMA)", "tensor": "Tensor\nCores", "softmax": "MUFU\n+ FMA"}


@dataclass(frozen=True)
class PipelineNumbers:
    """The drawn timeline's rectangles and the steady state's numbers for one setting."""

    gpu: str
    d: int
    warp_specialize: bool
    consumers: str
    overlap: bool
    stages: int
    reuse: int
    x0: np.ndarray  # per rectangle: start, end (us), row (0 loads, 1-2 warpgroups), kind, tile
    x1: np.ndarray
    row: np.ndarray
    kind: tuple
    tile: np.ndarray
    makespan_us: float  # of the drawn tiles
    busy: tuple  # steady state, per RESOURCES: share of the makespan busy
    tensor_share: float
    tflops: float  # predicted: tensor share x the dense bf16 peak
    peak_tflops: float
    per_tile_us: float  # steady state: time per tile
    measured: tuple  # (label, B x N, median TFLOP/s, band) of the recorded run, or ()


@functools.lru_cache(maxsize=None)
def _measured(warp_specialize, consumers, overlap, stages, d) -> tuple:
    """The recorded rows of a setting, read from the run file once per setting, not per move."""
    return tuple(measured_setting(warp_specialize, consumers, overlap, stages, d))


def _rects(tl):
    """Rectangles of a timeline: one per load, QK^T and PV; two per softmax (exp, then FMA)."""
    x0, x1, row, kind, tile = [], [], [], [], []
    split = tl.times.exp / tl.times.softmax
    for s in tl.steps:
        r = 0 if s.kind == "load" else 1 + s.who
        parts = (
            [
                ("exp", s.start, s.start + split * (s.end - s.start)),
                ("fma", s.start + split * (s.end - s.start), s.end),
            ]
            if s.kind == "softmax"
            else [(s.kind, s.start, s.end)]
        )
        for k, a, b in parts:
            x0.append(a * 1e6)
            x1.append(b * 1e6)
            row.append(r)
            kind.append(k)
            tile.append(s.tile)
    return np.array(x0), np.array(x1), np.array(row), tuple(kind), np.array(tile)


def pipeline_numbers(
    gpu: str = "H200",
    d: int = 128,
    warp_specialize: bool = True,
    consumers: str = "pingpong",
    overlap: bool = True,
    stages: int = 2,
    reuse: int = 8,
) -> PipelineNumbers:
    """The explorer's numbers for one setting (a refused combination raises the model's error).

    >>> r = pipeline_numbers("H200", 128, True, "pingpong", True, 3)
    >>> f"{r.tensor_share:.0%} of the time on the Tensor Cores, {r.tflops:.0f} TFLOP/s predicted"
    '100% of the time on the Tensor Cores, 985 TFLOP/s predicted'
    """
    t = stage_times(gpu, d, reuse=reuse)
    kw = dict(warp_specialize=warp_specialize, consumers=consumers, overlap=overlap, stages=stages)
    shown, long = schedule(t, tiles=SHOWN, **kw), schedule(t, tiles=LONG, **kw)
    half = schedule(t, tiles=LONG // 2, **kw)
    per_tile = (long.makespan - half.makespan) / (LONG - LONG // 2)
    busy = tuple(long.busy(r) / long.makespan for r in RESOURCES)
    rows = (
        _measured(warp_specialize, consumers, overlap, stages, d) if get_gpu(gpu).name == "H200-SXM" else ()
    )
    measured = tuple((r.label, f"{r.batch} x {r.N // 1024}K", r.median, r.band) for r in rows)
    x0, x1, row, kind, tile = _rects(shown)
    return PipelineNumbers(
        gpu=get_gpu(gpu).name,
        d=t.d,
        warp_specialize=warp_specialize,
        consumers=consumers,
        overlap=overlap,
        stages=stages,
        reuse=t.reuse,
        x0=readonly(x0),
        x1=readonly(x1),
        row=readonly(row),
        kind=kind,
        tile=readonly(tile),
        makespan_us=shown.makespan * 1e6,
        busy=busy,
        tensor_share=long.tensor_share,
        tflops=long.tflops,
        peak_tflops=long.tflops / long.tensor_share,
        per_tile_us=per_tile * 1e6,
        measured=measured,
    )


def model_beside_measured(d: int = 128, reuse: int = 8) -> str:
    """Each row of the recorded step table (no mask, H200) beside the model at the same switches:
    the model's Tensor-Core share and its change over the row the step adds to, the measured
    change per shape with its verdict from the run's noise band."""
    setting = {impl: key for key, impl in SETTING_OF.items()}
    rows = [r for r in ladder_rows() if r.head_dim == d and not r.causal and r.impl in setting]
    shapes = sorted({(r.batch, r.N) for r in rows})
    out, share = [], {}
    t = stage_times("H200", d, reuse=reuse)
    for impl in dict.fromkeys(r.impl for r in rows):
        ws, consumers, overlap, stages = setting[impl]
        share[impl] = schedule(
            t, tiles=LONG, warp_specialize=ws, consumers=consumers, overlap=overlap, stages=stages
        ).tensor_share
        first = next(r for r in rows if r.impl == impl)
        row = {
            "step": first.label,
            "share": f"{share[impl]:.0%}",
            "model": "" if first.base is None else f"{share[impl] / share[first.base] - 1:+.0%}",
        }
        for b, n in shapes:
            m = next(r for r in rows if r.impl == impl and (r.batch, r.N) == (b, n))
            row[(b, n)] = "" if m.change is None else f"{m.change:+.0%} {m.verdict}"
        out.append(row)
    cols = {
        "step": f"step (d = {d}, no mask)",
        "share": "model: TC busy",
        "model": "model change",
        **{(b, n): f"measured {b} x {n // 1024}K" for b, n in shapes},
    }
    return style.table(out, cols)


def _boxes(x0, x1, y, h=H):
    lo, hi = y - h / 2, y + h / 2
    return np.stack([np.c_[x0, lo], np.c_[x1, lo], np.c_[x1, hi], np.c_[x0, hi]], axis=1)


class PipelineExplorer(Explorer):
    """Switches: producer warp, the consumers (lockstep, independent, ping-pong), the overlap,
    ring stages, head dim, GPU, and how many CTAs share each K/V tile through L2.

    Left: the timeline of one CTA over six tiles (odd tiles paler, so one tile can be followed);
    each warpgroup's row has its GEMMs above its softmax; the gaps in a row are waits. Right: each unit's busy share once the pipeline is full, the
    Tensor Cores' beside the recorded H200 rate of this setting (its share of the dense peak).
    """

    name = "fa3_pipeline"
    size = (style.WIDTH, 4.2)
    error_xy = (0.37, 0.8)

    def __init__(
        self,
        gpu: str = "H200",
        d: int = 128,
        warp_specialize: bool = True,
        consumers: str = "pingpong",
        overlap: bool = True,
        stages: int = 2,
        reuse: int = 8,
    ):
        super().__init__(
            gpu=gpu,
            d=d,
            warp_specialize=warp_specialize,
            consumers=consumers,
            overlap=overlap,
            stages=stages,
            reuse=reuse,
        )

    def controls(self):
        return {
            "warp_specialize": checkbox("producer warp (warp specialisation)", True),
            "consumers": toggle("consumer warpgroups", list(CONSUMERS), "pingpong"),
            "overlap": checkbox("intra-warpgroup overlap", True),
            "stages": steps("K/V ring stages", (1, 2, 3, 4), 2),
            "d": steps("head dim d", HEAD_DIMS, 128),
            "gpu": toggle("GPU", list(GPUS), "H200"),
            "reuse": steps("CTAs sharing a K/V tile (L2 reuse)", REUSE, 8),
        }

    def compute(self, warp_specialize, consumers, overlap, stages, d, gpu, reuse):
        return pipeline_numbers(gpu, d, warp_specialize, consumers, overlap, stages, reuse)

    def build(self, fig):
        ax, ax_b = self.ax, self.ax_b = fig.subplots(1, 2, width_ratios=(3.2, 1))
        self.wait = PolyCollection(
            _boxes(np.zeros(3), np.ones(3), np.arange(3.0)), fc="#f0f0f0", ec="#bdbdbd", lw=0.6
        )
        self.bars = PolyCollection([], lw=0.4, ec="white")
        ax.add_collection(self.wait)
        ax.add_collection(self.bars)
        ax.set_ylim(2.6, -0.6)
        ax.set_yticks(range(3), ROWS)
        ax.set_xlabel("time (µs), one CTA on one SM")
        ax.set_ylabel("who works")
        ax.grid(True, axis="x", alpha=0.25)
        style.legend_below(
            ax,
            [Patch(color=KIND_COLORS[k]) for k in KIND_COLORS] + [Patch(fc="#f0f0f0", ec="#bdbdbd")],
            ["K, V load", "QKᵀ", "exp (MUFU)", "softmax FMA", "PV", "waiting"],
            ncol=6,
        )
        x = np.arange(len(RESOURCES))
        self.busy = ax_b.bar(
            x, np.zeros(3), width=0.6, color=[KIND_COLORS["load"], KIND_COLORS["qk"], KIND_COLORS["exp"]]
        )
        self.meas = ax_b.bar([1.0], [0.0], width=0.3, fc="white", ec="k", hatch="//", lw=1)[0]
        self.tops = [ax_b.text(i, 0, "", ha="center", va="bottom", fontsize=style.SMALL) for i in x]
        ax_b.set_xticks(x, [UNIT_LABELS[r] for r in RESOURCES])
        ax_b.set_ylim(0, 118)
        ax_b.set_yticks([0, 25, 50, 75, 100])
        ax_b.set_ylabel("busy (% of the time)")
        ax_b.set_xlabel("unit of the SM")
        ax_b.grid(True, axis="y", alpha=0.25)
        style.legend_below(
            ax_b,
            [Patch(color=style.COLORS["muted"]), Patch(fc="white", ec="k", hatch="//")],
            ["model (unit colours)", "H200 measured, best shape"],
            ncol=1,
        )
        return [self.wait, self.bars, *self.busy, self.meas, *self.tops, ax.title, ax_b.title]

    def draw(self, r: PipelineNumbers) -> str:
        span = r.makespan_us
        self.ax.set_xlim(0, span * 1.02)
        self.wait.set_verts(_boxes(np.zeros(3), np.full(3, span), np.arange(3.0)))
        lane = np.array([0.0 if k == "load" else (-LANE if k in ("qk", "pv") else LANE) for k in r.kind])
        self.bars.set_verts(_boxes(r.x0, r.x1, r.row + lane, np.where(lane == 0, H, H / 2 - 0.02)))
        self.bars.set_facecolor(
            [_tint(KIND_COLORS[k], 0.0 if j % 2 == 0 else 0.45) for k, j in zip(r.kind, r.tile)]
        )
        for i, share in enumerate(r.busy):
            self.busy[i].set_height(100 * share)
            self.tops[i].set_position((i, 100 * share + 2))
            self.tops[i].set_text(f"{share:.0%}")
        best = max(r.measured, key=lambda m: m[2]) if r.measured else None
        meas_share = best[2] / r.peak_tflops if best else 0.0
        self.meas.set_height(100 * meas_share)
        self.meas.set_x(1.15)
        self.meas.set_visible(best is not None)
        if best:
            self.tops[1].set_text(f"{r.busy[1]:.0%}  ({meas_share:.0%})")
        self.ax.set_title(
            f"{r.gpu.split('-')[0]}, d = {r.d}, {r.stages} stage{'s' if r.stages > 1 else ''}: "
            f"one CTA over {SHOWN} K/V tiles"
        )
        self.ax_b.set_title(f"{r.per_tile_us:.2f} µs a tile")
        lock = (
            " In lockstep both warpgroups issue the same step at once and share its unit, so each "
            "step takes twice as long."
            if r.consumers == "lockstep"
            else ""
        )
        if best:
            meas = "; ".join(f"{m[1]} {m[2]:.0f} TFLOP/s (band {m[3]:.1%})" for m in r.measured)
            meas = (
                f" Measured on the H200, set '{r.measured[0][0]}', no mask: {meas}, "
                f"{meas_share:.0%} of the dense peak."
            )
        elif r.gpu == "H200-SXM" and r.d != 256:
            meas = " The recorded H200 run holds no set for this setting."
        else:
            meas = " The recorded run is an H200's at d = 64 and 128."
        who = "a producer warp" if r.warp_specialize else "warpgroup 1"
        how = {
            "lockstep": "in lockstep",
            "independent": "independent",
            "pingpong": "taking turns (ping-pong)",
        }
        return (
            f"Loads by {who}; consumers {how[r.consumers]}; overlap {'on' if r.overlap else 'off'}. "
            f"Full pipeline ({LONG} tiles): Tensor Cores busy <b>{r.tensor_share:.0%}</b> of the time → "
            f"<b>{r.tflops:.0f} TFLOP/s</b> predicted of the {r.peak_tflops:.0f} dense bf16 peak; copy "
            f"{r.busy[0]:.0%}, MUFU + FMA {r.busy[2]:.0%}.{lock}{meas}"
        )


def _tint(color: str, white: float) -> tuple:
    """`color` mixed with a share `white` of white (odd tiles are paler)."""
    h = color.lstrip("#")
    return tuple((1 - white) * int(h[i : i + 2], 16) / 255 + white for i in (0, 2, 4))
