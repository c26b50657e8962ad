"""Split-KV (notebook 04, §4.2): a batch-1 decode keeps a handful of SMs busy; cutting each
request's KV into chunks fills the GPU, at the price of a merge. The time of every split count
on the simplified GPU of `attnlab.machine.hardware.decode_time` ("SMs share the bandwidth, blocks run in
waves"), the SM occupancy over time, and the tables notebook 04 prints.

Pure part: `split_kv_plan(batch, context, kv_heads, splits, gpu)` -> SplitPlan.

This file is long because the explorer's two linked panels, SM occupancy over time and the time of
every split count, draw one `SplitPlan`, and their artists (made once; the bar labels kept in the
blitted background while the split slider moves) are most of the lines; the model itself is
`machine.hardware.decode_time`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.patches import Patch, Polygon, Rectangle
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullLocator

from attnlab.validate import as_int
from attnlab.machine.hardware import SPLITS, DecodeTime, decode_time, get_gpu, gpus
from attnlab.machine.models import get_model
from attnlab.explore import style
from attnlab.explore._base import Explorer, readonly
from attnlab.explore._controls import dropdown, steps
from attnlab.explore.decode.intensity import BATCHES

__all__ = ["SplitPlan", "split_kv_plan", "SplitKVExplorer", "CONTEXTS", "KV_HEADS", "MODEL"]

CONTEXTS = tuple(1024 << i for i in range(8))  # 1K .. 128K tokens
KV_HEADS = (1, 2, 4, 8, 16)
#: The layer shape: Llama-3-8B's query heads and head dim; the explorer varies the KV heads.
MODEL = "Llama-3-8B"


@dataclass(frozen=True)
class SplitPlan:
    """One layer of decode attention under every candidate split count."""

    batch: int
    context: int
    kv_heads: int
    splits: int
    gpu: str
    sms: int
    runs: tuple  # DecodeTime per candidate split count (those <= context)
    chosen: DecodeTime  # the run for `splits`
    base: DecodeTime  # no split
    best: DecodeTime  # the fastest run
    occupancy: tuple  # (time µs, busy SMs) outline of the chosen run's waves
    base_occupancy: tuple  # the same for no split
    x_max: float  # µs: the slowest candidate, so a fixed time axis holds them all

    @property
    def speedup(self) -> float:
        return self.base.time / self.chosen.time

    @property
    def block_time(self) -> float:
        """Seconds one wave of blocks takes in the chosen run."""
        return self.chosen.attn_time / self.chosen.waves


def _occupancy(run, sms: int) -> tuple[np.ndarray, np.ndarray]:
    """Outline (time in µs, busy SMs) of one run's attention waves: full waves at `sms`, then the
    last, partial wave."""
    bt = run.attn_time / run.waves * 1e6
    full, rem = divmod(run.blocks, sms)
    x, y = [0.0], [0.0]
    if full:
        x += [0.0, full * bt]
        y += [sms, sms]
    if rem:
        x += [full * bt, (full + 1) * bt]
        y += [rem, rem]
    x.append(run.attn_time * 1e6)
    y.append(0.0)
    return readonly(np.array(x), np.array(y, dtype=float))


def _us(t: float) -> str:
    """Compact bar label in µs: '41.5', '661', '8,460'."""
    us = t * 1e6
    return f"{us:.3g}" if us < 1000 else f"{us:,.0f}"


def split_kv_plan(
    batch: int = 1,
    context: int = 32768,
    kv_heads: int = 8,
    splits: int = 16,
    gpu="H100-SXM",
    *,
    candidates=SPLITS,
) -> SplitPlan:
    """One layer of decode attention (MODEL's query heads and head dim, shared by `kv_heads` KV
    heads) on the simplified GPU of `attnlab.machine.hardware.decode_time`, for every split count in
    `candidates` (those <= context). ValueError if `splits` is not a candidate or exceeds the
    context.

    >>> p = split_kv_plan(1, 32768, 8, 16)
    >>> p.chosen.blocks, p.chosen.waves, f"{p.chosen.utilization:.0%}", round(p.speedup, 1)
    (128, 1, '97%', 15.9)
    """
    batch = as_int("batch", batch, 1, None)
    context = as_int("context", context, 1, None)
    kv_heads = as_int("kv_heads", kv_heads, 1, None)
    splits = as_int("splits", splits, 1, context)
    cands = [as_int("candidates", s, 1, None) for s in candidates]
    if splits not in cands:
        raise ValueError(f"splits={splits} is not a candidate; valid: {cands}")
    G = get_gpu(gpu)
    group = max(1, get_model(MODEL).q_heads // kv_heads)  # the merge traffic scales with query heads
    runs = [decode_time(batch, context, kv_heads, s, G, group=group) for s in cands if s <= context]
    chosen = next(r for r in runs if r.splits == splits)
    base = decode_time(batch, context, kv_heads, 1, G, group=group)
    best = min(runs, key=lambda r: r.time)
    return SplitPlan(
        batch,
        context,
        kv_heads,
        splits,
        G.name,
        G.sms,
        tuple(runs),
        chosen,
        base,
        best,
        _occupancy(chosen, G.sms),
        _occupancy(base, G.sms),
        max(max(r.time for r in runs), base.time) * 1e6,
    )


class SplitKVExplorer(Explorer):
    """Controls: batch, context, KV heads, split count; GPU.

    Left: how many SMs are busy over time (one step per wave of work blocks, then the merge), on a
    time axis fixed for the current batch, context and heads, with the no-split run as an outline.
    Right: the predicted time of every split count (attention + merge), the chosen one highlighted
    and the best one marked. Moving the split slider redraws only the moving artists.
    """

    name = "split_kv"
    size = (style.WIDTH, 4.4)

    def __init__(
        self, batch: int = 1, context: int = 32768, kv_heads: int = 8, splits: int = 1, gpu: str = "H100-SXM"
    ):
        super().__init__(
            batch=batch, context=context, kv_heads=kv_heads, splits=splits, gpu=get_gpu(gpu).name
        )

    def controls(self):
        return {
            "batch": steps("batch (requests)", BATCHES, 1),
            "context": steps("context (tokens)", CONTEXTS, 32768),
            "kv_heads": steps("KV heads", KV_HEADS, 8),
            "splits": steps("KV splits", SPLITS, 1),
            "gpu": dropdown("GPU", gpus(), "H100-SXM"),
        }

    def compute(self, batch, context, kv_heads, splits, gpu):
        return split_kv_plan(batch, context, kv_heads, splits, gpu)

    def build(self, fig):
        ax_o, ax_t = self.ax_o, self.ax_t = fig.subplots(1, 2)
        c = style.COLORS
        ax_o.set_xlabel("time (µs)")
        ax_o.set_ylabel("busy SMs")
        ax_o.grid(True, axis="x", alpha=0.25)
        ax_o.xaxis.set_major_locator(MaxNLocator(5))  # few ticks: a full redraw stays cheap
        self.busy = Polygon(np.zeros((2, 2)), closed=True, fc=c["fa1"], ec=c["fa1"], lw=0.8, alpha=0.85)
        ax_o.add_patch(self.busy)
        self.merge_r = Rectangle((0, 0), 0, 1, fc=c["memory"], ec=c["memory"], hatch="///", alpha=0.8, lw=0.5)
        ax_o.add_patch(self.merge_r)
        self.waves = LineCollection([], colors="white", lw=0.8)
        ax_o.add_collection(self.waves)
        (self.ghost,) = ax_o.plot([], [], color="k", ls="--", lw=1)
        self.sm_line = ax_o.axhline(1, color=c["standard"], lw=1)
        self.sm_text = ax_o.text(
            0.99,
            0,
            "",
            transform=ax_o.get_yaxis_transform(),
            ha="right",
            va="bottom",
            fontsize=style.SMALL,
            color=c["standard"],
        )
        self.occ_text = ax_o.text(
            0.99,
            0.98,
            "",
            transform=ax_o.transAxes,
            ha="right",
            va="top",
            fontsize=style.SMALL,
            bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": c["muted"]},
        )
        ax_o.legend(
            [
                Patch(fc=c["fa1"]),
                Patch(fc=c["memory"], hatch="///"),
                ax_o.plot([], [], color="k", ls="--", lw=1)[0],
            ],
            ["attention (white lines: waves)", "merge of the states", "no split"],
            loc="upper center",
            bbox_to_anchor=(0.5, -0.17),
            ncol=2,
            frameon=False,
        )

        idx = np.arange(len(SPLITS))
        self.attn_bars = ax_t.bar(idx, np.ones(len(SPLITS)), color=c["muted"], width=0.7)
        self.merge_bars = ax_t.bar(idx, np.zeros(len(SPLITS)), color=c["memory"], width=0.7)
        self.labels = [
            ax_t.annotate(
                "",
                (i, 1),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=style.SMALL,
            )
            for i in idx
        ]
        self.best_txt = ax_t.annotate(
            "best",
            (0, 1),
            xytext=(0, 22),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=style.SMALL,
            fontweight="bold",
            color=c["fa2"],
        )
        ax_t.set_yscale("log")
        ax_t.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax_t.yaxis.set_minor_locator(NullLocator())
        ax_t.set_xticks(idx, [str(s) for s in SPLITS])
        ax_t.set_xlim(-0.6, len(SPLITS) - 0.4)
        ax_t.set_xlabel("KV splits per (request, KV head)")
        ax_t.set_ylabel("predicted time, one layer (µs)")
        ax_t.yaxis.set_major_formatter(FuncFormatter(style.plain))
        ax_t.grid(True, axis="y", alpha=0.25)

        # the bar labels, the SM line and the right title change with batch, context, heads and
        # GPU only (background_key): they stay in the background while the split slider moves
        return [self.busy, self.merge_r, self.waves, self.ghost, self.occ_text, *self.attn_bars, ax_o.title]

    def background_key(self, p: SplitPlan):
        return (p.batch, p.context, p.kv_heads, p.gpu)

    def draw(self, p: SplitPlan) -> str:
        ax_o, ax_t, c = self.ax_o, self.ax_t, style.COLORS
        batch, context, kv_heads, splits = p.batch, p.context, p.kv_heads, p.splits
        r, sms, xmax = p.chosen, p.sms, p.x_max
        ax_o.set_xlim(0, xmax * 1.04)
        ax_o.set_ylim(0, sms * 1.45)
        ax_o.set_yticks([0, sms // 2, sms])
        x, y = p.occupancy
        self.busy.set_xy(np.column_stack([x, y]))
        self.merge_r.set_bounds(r.attn_time * 1e6, 0, r.merge_time * 1e6, sms)
        self.merge_r.set_visible(r.merge_time > 0)
        bt = p.block_time * 1e6
        segs = [[(k * bt, 0), (k * bt, sms)] for k in range(1, r.waves)] if 1 < r.waves <= 40 else []
        self.waves.set_segments(segs)
        gx, gy = p.base_occupancy
        self.ghost.set_data(gx, gy)
        self.ghost.set_visible(r.splits != 1)
        self.sm_line.set_ydata([sms, sms])
        self.sm_text.set_position((0.99, sms))
        self.sm_text.set_text(f"{sms} SMs ({p.gpu})")
        self.occ_text.set_text(
            f"{r.blocks:,} blocks, {r.waves:,} wave{'s' if r.waves > 1 else ''}\n"
            f"{r.utilization:.0%} of SM time busy\n"
            f"{style.seconds(r.time)}, {p.speedup:.1f}x vs no split"
        )
        times = {q.splits: q for q in p.runs}
        tmin = min(q.attn_time for q in p.runs) * 1e6
        lo, hi = tmin / 2, xmax * 3
        ax_t.set_ylim(lo, hi)
        for i, s in enumerate(SPLITS):
            q = times.get(s)
            for art in (self.attn_bars[i], self.merge_bars[i], self.labels[i]):
                art.set_visible(q is not None)
            if q is None:
                continue
            a, m = q.attn_time * 1e6, q.merge_time * 1e6
            self.attn_bars[i].set_y(lo)
            self.attn_bars[i].set_height(a - lo)
            self.attn_bars[i].set_color(c["fa1"] if s == r.splits else c["muted"])
            self.merge_bars[i].set_y(a)
            self.merge_bars[i].set_height(m)
            self.labels[i].xy = (i, q.time * 1e6)
            self.labels[i].set_text(f"{_us(q.time)}\n{q.utilization:.0%}")
        bi = SPLITS.index(p.best.splits)
        self.best_txt.xy = (bi, p.best.time * 1e6)
        ax_o.set_title(
            f"SM occupancy: batch {batch}, context {context:,}\n{kv_heads} KV heads, "
            f"{splits} split{'s' if splits > 1 else ''}"
        )
        ax_t.set_title(f"predicted time per split count\n{p.gpu} (orange: merge)")
        return (
            f"{r.blocks:,} work blocks (batch {batch} x {kv_heads} KV heads x {splits} splits) on "
            f"{sms} SMs: {r.waves:,} wave(s), <b>{r.utilization:.0%}</b> utilization; "
            f"time {style.seconds(r.time)} (attention {style.seconds(r.attn_time)}"
            + (f" + merge {style.seconds(r.merge_time)}" if r.merge_time else "")
            + f"), <b>{p.speedup:.1f}x</b> vs no split ({style.seconds(p.base.time)}). "
            f"Best split count here: <b>{p.best.splits}</b> ({style.seconds(p.best.time)})."
            + (
                " <i>Below ~5 µs the model is optimistic: it has no launch cost, and a real "
                "kernel launch alone takes a few µs.</i>"
                if r.time < 5e-6
                else ""
            )
        )
