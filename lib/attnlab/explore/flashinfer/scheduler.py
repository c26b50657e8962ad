"""The load-balanced scheduler (notebook 05, lecture §5.6): one decode step of Llama-3-8B (8 KV
heads, group 4, one query token per request) on a grid of CTAs under four plans of
`attnlab.machine.schedule`: one work item per request, fixed 1024-token chunks, FlashInfer's balanced
plan (Algorithm 1) and its persistent two-tile-class plan (`plan_holistic`). Who runs what when (a
Gantt chart), each plan's utilization and makespan, and the utilization against the batch size.
The batches are the committed ones (`workload.recorded_lengths`, data/request_lengths.json); with
`prefill` set, one chunked-prefill request (that many new queries over twice as many KV tokens)
comes first in the batch.

Every plan is measured in one cost unit, 2 x packed query rows + KV tokens, so the four share a
time axis; the holistic plan itself weighs an item by its tile's rows (`plan_holistic`).

Pure part: `scheduler_plan(...)` -> the Plan, `scheduler_numbers(...)` -> SchedulerNumbers,
`scheduler_table(...)` and `mixed_plan_table(...)` -> the text tables notebook 05 prints.

The module is long because the explorer and the two tables read one cache of plans, statistics
and Gantt bars; apart, each would build its own.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import matplotlib as mpl
import numpy as np
from matplotlib.colors import to_rgba_array
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter, MaxNLocator

from attnlab.validate import as_int, as_sequence, choice
from attnlab.machine.models import get_model
from attnlab.machine.schedule import (
    list_schedule,
    plan_balanced,
    plan_fixed_split,
    plan_holistic,
    plan_per_request,
)
from attnlab.machine.workload import DISTS, RECORDED_BATCHES, recorded_lengths
from attnlab.explore import style
from attnlab.explore._base import Explorer, readonly
from attnlab.explore._controls import dropdown, steps

__all__ = [
    "PlanStats",
    "SchedulerNumbers",
    "scheduler_plan",
    "scheduler_numbers",
    "scheduler_table",
    "mixed_plan_table",
    "SchedulerExplorer",
    "BATCHES",
    "CTAS",
    "SCHEDULERS",
    "MODEL",
    "PREFILLS",
    "frame",
]

BATCHES = RECORDED_BATCHES  # 1, 2, 4, ..., 256
#: 108: A100's SMs; 132: H100's and H200's; 148: B200's; 264: two CTAs per H100 SM.
CTAS = (16, 32, 64, 108, 132, 148, 264)
SCHEDULERS = ("per-request", "fixed 1024", "balanced", "holistic")
MODEL = "Llama-3-8B"
#: Queries of the one prefill chunk put first in the batch (0: decode only); its KV is twice that.
PREFILLS = (0, 512)
PLAN_COLORS = dict(
    zip(
        SCHEDULERS,
        (style.COLORS["standard"], style.COLORS["memory"], style.COLORS["fa2"], style.COLORS["compute"]),
    )
)
GANTT_BINS = 600  # time bins of the Gantt raster (about its pixel width)
#: Request colours: tab20 without its greys (grey is an idle CTA), cycling with the request index.
PALETTE = tuple(c for i, c in enumerate(mpl.colormaps["tab20"].colors) if i not in (14, 15))
IDLE, AFTER = len(PALETTE), len(PALETTE) + 1  # raster codes: an idle CTA; past the makespan
IDLE_COLOR = "#e2e2e2"
#: Raster code -> RGBA (uint8): coloured images are drawn without a colormap pass.
RGBA = readonly(np.round(255 * to_rgba_array([*PALETTE, IDLE_COLOR, "white"])).astype(np.uint8))
_PLANNERS = {
    "per-request": plan_per_request,
    "fixed 1024": functools.partial(plan_fixed_split, chunk=1024),
    "balanced": plan_balanced,
    "holistic": plan_holistic,
}


@dataclass(frozen=True)
class PlanStats:
    """One plan of one batch, in numbers (cost units: 2 x packed query rows + KV tokens)."""

    scheduler: str
    items: int
    makespan: int  # cost of the busiest CTA
    utilization: float  # total cost / (CTAs x makespan)
    total: int  # summed cost of the items
    outputs: int  # output tiles (request, KV head, query tile)
    merged: int  # outputs whose partial states are merged (2 or more items)
    max_merge: int  # the most partial states merged into one output
    time_h200: float  # seconds under Plan.time's SM-sharing model
    time_h100: float
    tiles: str  # the query tile(s) of the plan, in rows ("16", "128 / 16")
    launched: int  # tensor-core rows the query tiles provide (each tile once per KV head)
    used: int  # packed query rows among them

    @property
    def idle_rows(self) -> float:
        """Share of the launched tile rows that hold no query."""
        return 1 - self.used / self.launched


@dataclass(frozen=True)
class SchedulerNumbers:
    batch: int
    dist: str
    num_ctas: int
    scheduler: str
    kv_heads: int
    group: int
    prefill: int  # queries of the prefill chunk first in the batch (0: none)
    plans: tuple  # PlanStats of the four SCHEDULERS, in that order
    chosen: PlanStats
    cta: np.ndarray  # the chosen plan's items as Gantt bars, by CTA then start
    start: np.ndarray
    cost: np.ndarray
    request: np.ndarray
    gantt: np.ndarray  # (num_ctas, GANTT_BINS) codes: request colour, IDLE, AFTER the makespan
    x_max: float  # the slowest plan's makespan: one time axis for all three
    curves: np.ndarray  # (4, len(BATCHES)): utilization of each plan against the batch size


def _args(batch, dist, num_ctas, scheduler, prefill=0):
    return (
        as_int("batch", batch, 1, None),
        choice("dist", dist, DISTS),
        as_int("num_ctas", num_ctas, 1, None),
        choice("scheduler", scheduler, SCHEDULERS),
        choice("prefill", prefill, PREFILLS),
    )


def _lengths(batch, dist, prefill):
    lens = recorded_lengths(dist, batch)
    return [(prefill, 2 * prefill)] + lens if prefill else lens


@functools.lru_cache(maxsize=32)
def _plan(batch, dist, num_ctas, scheduler, prefill=0):
    m = get_model(MODEL)
    return _PLANNERS[scheduler](
        _lengths(batch, dist, prefill), kv_heads=m.kv_heads, num_ctas=num_ctas, group=m.group
    )


def scheduler_plan(
    batch: int = 64,
    dist: str = "longtail",
    num_ctas: int = 132,
    scheduler: str = "balanced",
    prefill: int = 0,
):
    """The `attnlab.machine.schedule` Plan of one recorded batch for MODEL's decode, with one prefill
    chunk of `prefill` queries first (0: none; one of PREFILLS). Cached: treat it as read-only."""
    return _plan(*_args(batch, dist, num_ctas, scheduler, prefill))


def _item_cost(p) -> np.ndarray:
    """Each item in the explorer's one unit: 2 x packed query rows + KV tokens (the plans' own cost
    for all but the holistic plan, which weighs its tiles' rows)."""
    return 2 * (p.q_end - p.q_start) + (p.kv_end - p.kv_start)


@functools.lru_cache(maxsize=256)
def _stats(batch, dist, num_ctas, scheduler, prefill=0) -> PlanStats:
    p = _plan(batch, dist, num_ctas, scheduler, prefill)
    sizes = np.diff(p.merge_order[1])
    loads = np.bincount(p.cta, weights=_item_cost(p), minlength=num_ctas).astype(np.int64)
    top = int(loads.max())
    heads = get_model(MODEL).kv_heads
    if scheduler == "holistic":
        tiles = "/".join(str(t) for t in sorted(set(p.tile_rows.tolist()), reverse=True))
        launched = p.launched_rows
    else:
        tiles, launched = str(p.tile_q), p.num_outputs * p.tile_q
    used = heads * int(p.l_qo.sum()) * p.group
    return PlanStats(
        scheduler,
        len(p.cta),
        top,
        float(loads.sum() / (num_ctas * top)),
        int(loads.sum()),
        len(sizes),
        int((sizes > 1).sum()),
        int(sizes.max()),
        p.time("H200-SXM"),
        p.time("H100-SXM"),
        tiles,
        launched,
        used,
    )


@functools.lru_cache(maxsize=32)
def _curves(dist, num_ctas, prefill=0) -> np.ndarray:
    """Utilization of each plan at every recorded batch size (first call per (dist, CTAs) plans them all)."""
    return readonly(
        [[_stats(b, dist, num_ctas, s, prefill).utilization for b in BATCHES] for s in SCHEDULERS]
    )


@functools.lru_cache(maxsize=32)
def _bars(batch, dist, num_ctas, scheduler, prefill=0):
    """(cta, start, cost, request) of every item, sorted by CTA then start: a CTA runs its items in
    the plan's order, back to back."""
    p = _plan(batch, dist, num_ctas, scheduler, prefill)
    cta, cost, req = np.array(p.cta), _item_cost(p), np.array(p.request)
    order = np.argsort(cta, kind="stable")
    cta, cost, req = cta[order], cost[order], req[order]
    end = np.cumsum(cost)
    first = np.searchsorted(cta, cta)  # each item's CTA's first item
    start = end - cost - (end[first] - cost[first])
    return readonly(cta, start, cost, req)


def _gantt(cta, start, cost, request, num_ctas, makespan, x_max, bins=GANTT_BINS) -> np.ndarray:
    """The bars sampled at the centres of `bins` time bins per CTA: the request's colour where an
    item runs, IDLE where the CTA waits for the makespan, AFTER past it (codes into RGBA)."""
    t = (np.arange(bins) + 0.5) * (x_max / bins)
    rows = np.arange(num_ctas)[:, None]
    width = float(x_max) + 1.0  # rows never overlap on the one sorted key line
    idx = np.searchsorted(cta * width + start + cost, rows * width + t, side="right")
    j = np.minimum(idx, len(cta) - 1)
    hit = (idx < len(cta)) & (cta[j] == rows) & (start[j] <= t)
    return readonly(
        np.where(hit, request[j] % len(PALETTE), np.where(t < makespan, IDLE, AFTER)).astype(np.int8)
    )


def scheduler_numbers(
    batch: int = 64,
    dist: str = "longtail",
    num_ctas: int = 132,
    scheduler: str = "balanced",
    prefill: int = 0,
) -> SchedulerNumbers:
    """The four plans of one recorded batch (MODEL's decode; `prefill` > 0: one prefill chunk of
    that many queries first), the chosen one as Gantt bars.

    >>> r = scheduler_numbers(64, "longtail", 132, "balanced")
    >>> r.chosen.items, r.chosen.makespan, f"{r.chosen.utilization:.1%}", r.chosen.max_merge
    (536, 10418, '98.1%', 2)
    >>> [f"{p.utilization:.0%}" for p in r.plans]
    ['57%', '96%', '98%', '59%']
    """
    batch, dist, num_ctas, scheduler, prefill = _args(batch, dist, num_ctas, scheduler, prefill)
    plans = tuple(_stats(batch, dist, num_ctas, s, prefill) for s in SCHEDULERS)
    chosen = plans[SCHEDULERS.index(scheduler)]
    bars = _bars(batch, dist, num_ctas, scheduler, prefill)
    x_max = float(max(p.makespan for p in plans))
    m = get_model(MODEL)
    return SchedulerNumbers(
        batch,
        dist,
        num_ctas,
        scheduler,
        m.kv_heads,
        m.group,
        prefill,
        plans,
        chosen,
        *bars,
        _gantt(*bars, num_ctas, chosen.makespan, x_max),
        x_max,
        _curves(dist, num_ctas, prefill),
    )


def scheduler_table(batches=(1, 8, 64, 256), dist: str = "longtail", num_ctas: int = 132) -> str:
    """Utilization and makespan of the first three plans at several batch sizes of decode, and the
    balanced plan's time on an H200 under Plan.time's model."""
    batches = as_sequence("batches", batches, "a list of recorded batch sizes")
    if not batches:
        raise ValueError("batches is empty; valid: at least one recorded batch size")
    rows = []
    for i, b in enumerate(batches):
        r = scheduler_numbers(as_int(f"batches[{i}]", b, 1, None), dist, num_ctas)
        row = {"batch": r.batch, "t": r.plans[2].time_h200 * 1e6}
        for i, p in enumerate(r.plans[:3]):
            row[f"u{i}"], row[f"m{i}"] = p.utilization, p.makespan
        rows.append(row)
    cols = {"batch": "batch"}
    for i, s in enumerate(SCHEDULERS[:3]):
        cols[f"u{i}"], cols[f"m{i}"] = s, "makespan"
    cols["t"] = "balanced, H200 µs"
    fmts = {**{f"u{i}": ".0%" for i in range(3)}, **{f"m{i}": "," for i in range(3)}, "t": ".1f"}
    return (
        f"{MODEL} decode ({r.kv_heads} KV heads, g = {r.group}), {dist} lengths, {num_ctas} CTAs: "
        f"utilization and makespan\n(cost units: 2 x packed query rows + KV tokens)\n"
        + style.table(rows, cols, fmts)
    )


def mixed_plan_table(batch: int = 64, dist: str = "longtail", num_ctas: int = 264, prefill: int = 512) -> str:
    """The balanced plan (one query tile for the batch) against the holistic plan (one per class)
    on a recorded decode batch with one prefill chunk first: tiles, idle tile rows, items, the most
    partial states of one output, makespan and utilization in the one cost unit; and the holistic
    plan's own items handed out longest first, as Algorithm 1 orders them (FlashInfer's holistic
    plan takes them in arrival order)."""
    batch, dist, num_ctas, _, prefill = _args(batch, dist, num_ctas, "balanced", prefill)
    rows = []
    for s in ("balanced", "holistic"):
        st = _stats(batch, dist, num_ctas, s, prefill)
        rows.append(
            {
                "plan": s,
                "tiles": st.tiles,
                "idle": st.idle_rows,
                "items": st.items,
                "merge": st.max_merge,
                "makespan": st.makespan,
                "u": st.utilization,
            }
        )
    cost = np.sort(_item_cost(_plan(batch, dist, num_ctas, "holistic", prefill)))[::-1]
    top = int(list_schedule(cost, num_ctas, descending=True).loads.max())
    rows.append(
        {
            **rows[-1],
            "plan": "holistic, longest first",
            "makespan": top,
            "u": float(cost.sum() / (num_ctas * top)),
        }
    )
    m = get_model(MODEL)
    head = (
        f"{MODEL} ({m.kv_heads} KV heads, g = {m.group}), {num_ctas} CTAs: one prefill chunk of "
        f"{prefill} queries over {2 * prefill:,} KV tokens,\nthen {batch} decode steps ({dist})\n"
    )
    return head + style.table(
        rows,
        {
            "plan": "plan",
            "tiles": "query tile",
            "idle": "idle rows",
            "items": "items",
            "merge": "most merged",
            "makespan": "makespan",
            "u": "utilization",
        },
        {"idle": ".0%", "makespan": ",", "u": ".0%"},
    )


def frame(ax) -> Rectangle:
    """The axes' outline as an artist of its own: an image that moves is drawn after the
    background's spines, so it returns them on top."""
    return ax.add_patch(
        Rectangle(
            (0, 0),
            1,
            1,
            transform=ax.transAxes,
            fill=False,
            ec="k",
            lw=mpl.rcParams["axes.linewidth"],
            clip_on=False,
            zorder=3,
        )
    )


class SchedulerExplorer(Explorer):
    """Controls: batch size, length distribution, number of CTAs, scheduler, and a prefill chunk
    first in the batch (none, or 512 queries over 1,024 KV tokens).

    Left: the chosen plan as a Gantt chart, one row per CTA, each work item a bar coloured by its
    request; grey where a CTA waits for the busiest one; its makespan (black) and the ideal (total
    work / CTAs, dotted), and the four plans' makespans dashed in their colours, on one time axis.
    Right, top: utilization of the four plans for this batch (the chosen one outlined), each
    plan's idle tile rows under its bar. Right, bottom: utilization against the batch size, this
    batch starred.
    """

    name = "scheduler"
    size = (style.WIDTH, 5.2)

    def __init__(
        self,
        batch: int = 64,
        dist: str = "longtail",
        num_ctas: int = 132,
        scheduler: str = "balanced",
        prefill: int = 0,
    ):
        super().__init__(batch=batch, dist=dist, num_ctas=num_ctas, scheduler=scheduler, prefill=prefill)

    def controls(self):
        return {
            "batch": steps("batch (decode requests)", BATCHES, 64),
            "dist": dropdown("length distribution", DISTS, "longtail"),
            "num_ctas": steps("CTAs (persistent blocks)", CTAS, 132),
            "scheduler": dropdown("scheduler", SCHEDULERS, "balanced"),
            "prefill": dropdown("prefill chunk first", [("none", 0), ("512 queries", 512)], 0),
        }

    def compute(self, batch, dist, num_ctas, scheduler, prefill):
        return scheduler_numbers(batch, dist, num_ctas, scheduler, prefill)

    def build(self, fig):
        gs = fig.add_gridspec(2, 2, width_ratios=(1.5, 1))
        ax_g, ax_u, ax_b = fig.add_subplot(gs[:, 0]), fig.add_subplot(gs[0, 1]), fig.add_subplot(gs[1, 1])
        self.ax_g, self.ax_u, self.ax_b = ax_g, ax_u, ax_b
        self.img = ax_g.imshow(
            RGBA[[[AFTER]]], aspect="auto", interpolation="nearest", origin="lower", extent=(0, 1, -0.5, 0.5)
        )
        self.frame = frame(ax_g)
        self.spans = [ax_g.axvline(1, color=PLAN_COLORS[s], ls="--", lw=1.3) for s in SCHEDULERS]
        self.span = ax_g.axvline(1, color="k", lw=1.5)
        self.ideal = ax_g.axvline(1, color="k", ls=":", lw=1.5)
        ax_g.set_xlabel("time (cost units: 2 × packed query rows + KV tokens)")
        ax_g.set_ylabel("CTA")
        ax_g.xaxis.set_major_locator(MaxNLocator(5))
        ax_g.xaxis.set_major_formatter(FuncFormatter(style.count))
        ax_g.yaxis.set_major_locator(MaxNLocator(6, integer=True))
        style.legend_below(
            ax_g,
            [
                Patch(fc=PALETTE[0]),
                Patch(fc=IDLE_COLOR),
                Line2D([], [], color="k", lw=1.5),
                Line2D([], [], color="k", ls=":", lw=1.5),
                Line2D([], [], color=PLAN_COLORS["per-request"], ls="--", lw=1.3),
            ],
            [
                "work item (colour: request)",
                "idle CTA",
                "makespan of this plan",
                "total work / CTAs",
                "makespan of each plan (its colour)",
            ],
        )

        x = np.arange(len(SCHEDULERS))
        self.bars = ax_u.bar(x, np.ones(len(x)), width=0.6, color=[PLAN_COLORS[s] for s in SCHEDULERS])
        self.bar_txt = [ax_u.text(i, 0, "", ha="center", va="bottom", fontsize=style.SMALL) for i in x]
        ax_u.set_xticks(x, [s.replace("-", "-\n").replace(" ", "\n") for s in SCHEDULERS])
        ax_u.set_xlim(-0.6, len(x) - 0.4)
        ax_u.set_ylim(0, 145)
        ax_u.set_yticks([0, 25, 50, 75, 100])
        ax_u.set_ylabel("utilization (%)")
        ax_u.set_xlabel("plan (makespans: dashed, left)")
        ax_u.grid(True, axis="y", alpha=0.25)
        ax_u.set_title("the four plans on this batch")  # static: the Gantt's title says which

        style.pow2_axis(ax_b, 1, 256)
        ax_b.set_xlim(0.8, 320)
        ax_b.set_ylim(0, 105)
        ax_b.set_yticks([0, 25, 50, 75, 100])
        ax_b.set_xlabel("batch size (requests)")
        ax_b.set_ylabel("utilization (%)")
        ax_b.grid(True, alpha=0.25)
        ax_b.set_title("utilization vs batch size (★: this batch)")
        self.lines = [
            ax_b.plot([], [], "o-", ms=3.5, lw=1.6, color=PLAN_COLORS[s], label=s)[0] for s in SCHEDULERS
        ]
        self.now = ax_b.axvline(1, color=style.COLORS["bound"], lw=1, ls="--")
        (self.dot,) = ax_b.plot([], [], "*", ms=13, color=style.COLORS["highlight"], mec="k", mew=0.8)
        ax_b.legend(
            loc="upper center",
            bbox_to_anchor=(0.5, -0.3),
            ncol=4,
            frameon=False,
            handlelength=1.2,
            columnspacing=0.8,
        )
        return [
            self.img,
            self.frame,
            *self.spans,
            self.span,
            self.ideal,
            *self.bars,
            *self.bar_txt,
            *self.lines,
            self.now,
            self.dot,
            ax_g.title,
        ]

    def draw(self, r: SchedulerNumbers) -> str:
        c = r.chosen
        self.img.set_data(RGBA[r.gantt])
        self.img.set_extent((0, r.x_max, -0.5, r.num_ctas - 0.5))
        self.ax_g.set_xlim(0, r.x_max * 1.02)  # the slowest plan's makespan line off the frame
        self.ax_g.set_ylim(-0.5, r.num_ctas - 0.5)
        for line, p in zip(self.spans, r.plans):
            line.set_xdata([p.makespan] * 2)
        self.span.set_xdata([c.makespan] * 2)
        self.ideal.set_xdata([c.total / r.num_ctas] * 2)
        merges = f"{c.merged:,} outputs merge ≤ {c.max_merge} states" if c.merged else "no merge"
        mix = f" + 1 prefill × {r.prefill}" if r.prefill else ""
        self.ax_g.set_title(
            f"{c.scheduler}: batch {r.batch}{mix}, {r.dist}, {r.num_ctas} CTAs\n"
            f"{c.items:,} items; {merges}; tile {c.tiles} rows"
        )
        for i, (p, bar, txt) in enumerate(zip(r.plans, self.bars, self.bar_txt)):
            bar.set_height(100 * p.utilization)
            bar.set_edgecolor("k" if p is c else "none")
            bar.set_linewidth(2 if p is c else 0)
            txt.set_position((i, 100 * p.utilization + 2))
            txt.set_text(f"{p.utilization:.0%}\nidle {p.idle_rows:.0%}")
        for line, u in zip(self.lines, r.curves):
            line.set_data(BATCHES, 100 * u)
        self.now.set_xdata([r.batch] * 2)
        self.dot.set_data([r.batch], [100 * c.utilization])
        others = ", ".join(
            f"{p.scheduler} {p.utilization:.0%} / {p.makespan:,}" for p in r.plans if p is not c
        )
        mix = f" after one prefill chunk of {r.prefill} queries" if r.prefill else ""
        return (
            f"<b>{c.scheduler}</b>, batch {r.batch} ({r.dist}){mix}, {MODEL} ({r.kv_heads} KV heads, "
            f"g = {r.group}) on {r.num_ctas} CTAs: {c.items:,} work items, makespan {c.makespan:,} "
            f"cost units, utilization <b>{c.utilization:.0%}</b> ({others}); query tile {c.tiles} rows, "
            f"{c.idle_rows:.0%} of the tile rows idle; "
            f"time {style.seconds(c.time_h200)} on an H200, {style.seconds(c.time_h100)} on an H100 "
            f"(SM-sharing model). Merge: {c.merged:,} of {c.outputs:,} outputs combine partial states, "
            f"at most {c.max_merge} into one."
        )
