"""The fixed-size workspace (notebook 05, lecture §5.6): a CUDA graph replays the same launches
with the same grid and the same pointers, yet every decode step brings other request lengths.
FlashInfer plans each step on the CPU and copies the plan into a workspace of fixed shape
(`schedule.fixed_size_workspace`); persistent kernels, a grid of MAX_CTAS CTAs, read their items
from it. A new batch changes the contents, never the shapes; a plan that needs more slots than
the graph was captured with is refused.

Pure part: `workspace_numbers(batch, dist, max_items)` -> WorkspaceNumbers, on the balanced plan
of `scheduler_plan` (the committed batches of Llama-3-8B's decode).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from attnlab.validate import as_int, choice
from attnlab.machine.schedule import fixed_size_workspace
from attnlab.machine.workload import DISTS
from attnlab.explore import style
from attnlab.explore._base import Explorer, readonly
from attnlab.explore._controls import dropdown, steps
from attnlab.explore.flashinfer.scheduler import (
    BATCHES,
    IDLE,
    IDLE_COLOR,
    PALETTE,
    RGBA,
    frame,
    scheduler_plan,
)

__all__ = [
    "WorkspaceNumbers",
    "workspace_numbers",
    "workspace_need",
    "WorkspaceExplorer",
    "MAX_CTAS",
    "MAX_ITEMS",
    "SLOTS",
]

MAX_CTAS = 132  # one persistent CTA per H100/H200 SM
#: Slots per CTA: the smallest multiple of 8 that holds every committed batch's balanced plan on
#: 132 CTAs (the most is 31 items, constant lengths at batch 16; batch 256 needs 16 or 17).
MAX_ITEMS = 32
SLOTS = (8, 16, 24, 32, 48)


@dataclass(frozen=True)
class WorkspaceNumbers:
    batch: int
    dist: str
    max_ctas: int
    max_items: int
    shapes: tuple  # (name, dtype, shape) of the workspace's three arrays
    nbytes: int  # their size together
    grid: np.ndarray  # (max_items, max_ctas) codes into RGBA: a used slot's request, else IDLE
    count: np.ndarray  # items per CTA
    used: int  # slots holding an item
    busiest: int  # items on the busiest CTA
    need: np.ndarray  # items on the busiest CTA at each batch size in BATCHES (this dist)

    @property
    def slots(self) -> int:
        return self.max_ctas * self.max_items


@functools.lru_cache(maxsize=64)
def _busiest(batch, dist) -> int:
    return int(np.bincount([w.cta for w in scheduler_plan(batch, dist, MAX_CTAS, "balanced").work]).max())


@functools.lru_cache(maxsize=8)
def _need(dist) -> np.ndarray:
    return readonly([_busiest(b, dist) for b in BATCHES])


def workspace_need(dist: str = "longtail") -> np.ndarray:
    """Items on the busiest CTA of the balanced plan (132 CTAs) at each batch size in BATCHES.

    >>> workspace_need("longtail").tolist()
    [2, 2, 2, 3, 3, 4, 6, 9, 17]
    """
    return _need(choice("dist", dist, DISTS))


@functools.lru_cache(maxsize=64)
def _workspace(batch, dist, max_items):
    return fixed_size_workspace(scheduler_plan(batch, dist, MAX_CTAS, "balanced"), MAX_CTAS, max_items)


def workspace_numbers(
    batch: int = 64, dist: str = "longtail", max_items: int = MAX_ITEMS
) -> WorkspaceNumbers:
    """The balanced plan of one committed batch packed into a (MAX_CTAS x max_items) workspace.
    ValueError if a CTA has more items than `max_items` slots.

    >>> w = workspace_numbers(256, "longtail")
    >>> [s for _, _, s in w.shapes], w.used, w.busiest
    ([(132, 32, 6), (132, 32), (132,)], 2056, 17)
    """
    batch = as_int("batch", batch, 1, None)
    dist = choice("dist", dist, DISTS)
    max_items = as_int("max_items", max_items, 1, None)
    try:
        ws = _workspace(batch, dist, max_items)
    except ValueError as e:
        busiest = _busiest(batch, dist)
        raise ValueError(
            f"batch {batch} ({dist}) does not fit the workspace: {e}. Its busiest CTA "
            f"has {busiest} items; capture the graph with max_items >= {busiest}."
        ) from None
    shapes = tuple(
        (n, str(a.dtype), a.shape) for n, a in (("items", ws.items), ("valid", ws.valid), ("count", ws.count))
    )
    grid = np.where(ws.valid, ws.items[..., 0] % len(PALETTE), IDLE).astype(np.int8).T
    return WorkspaceNumbers(
        batch,
        dist,
        MAX_CTAS,
        max_items,
        shapes,
        ws.items.nbytes + ws.valid.nbytes + ws.count.nbytes,
        readonly(grid),
        ws.count,
        int(ws.valid.sum()),
        int(ws.count.max()),
        _need(dist),
    )


def _shape_text(w: WorkspaceNumbers) -> str:
    return ", ".join(f"{n} {d} {s}" for n, d, s in w.shapes)


class WorkspaceExplorer(Explorer):
    """Controls: batch size, length distribution, slots per CTA (max_items, fixed at capture).

    Left: the workspace as a grid, one column per CTA, one row per slot; a slot holding a work
    item is coloured by its request (as in the scheduler explorer), an empty slot grey. Its title
    gives the arrays' shapes, which stay the same for every batch. Right: the items on the busiest
    CTA at each batch size for this distribution, against the slots per CTA; its title gives this
    batch's slots used.
    """

    name = "workspace"
    size = (style.WIDTH, 4.4)
    error_xy, error_width = (0.32, 0.6), 52  # over the grid: clear of the right panel's labels

    def __init__(self, batch: int = 64, dist: str = "longtail", max_items: int = MAX_ITEMS):
        super().__init__(batch=batch, dist=dist, max_items=max_items)

    def controls(self):
        return {
            "batch": steps("batch (requests)", BATCHES, 64),
            "dist": dropdown("length distribution", DISTS, "longtail"),
            "max_items": steps("slots per CTA (max_items)", SLOTS, MAX_ITEMS),
        }

    def compute(self, batch, dist, max_items):
        return workspace_numbers(batch, dist, max_items)

    def build(self, fig):
        ax_w, ax_n = self.ax_w, self.ax_n = fig.subplots(1, 2, width_ratios=(1.6, 1))
        self.img = ax_w.imshow(
            RGBA[[[IDLE]]],
            aspect="auto",
            interpolation="nearest",
            origin="lower",
            extent=(-0.5, MAX_CTAS - 0.5, -0.5, 0.5),
        )
        self.frame = frame(ax_w)
        ax_w.set_xlim(-0.5, MAX_CTAS - 0.5)
        ax_w.set_xticks([0, 33, 66, 99, 131])
        ax_w.set_xlabel("CTA (persistent block; grid fixed at 132)")
        ax_w.set_ylabel("slot j (work item j of the CTA)")
        style.legend_below(
            ax_w,
            [Patch(fc=PALETTE[0]), Patch(fc=IDLE_COLOR)],
            ["slot with a work item (colour: request)", "empty slot (valid = False)"],
        )

        x = np.arange(len(BATCHES))
        self.bars = ax_n.bar(x, np.ones(len(BATCHES)), width=0.65, color=style.COLORS["muted"])
        self.cap = ax_n.axhline(MAX_ITEMS, color="k", lw=1.5)
        ax_n.set_xticks(x, [str(b) for b in BATCHES])
        ax_n.set_xlim(-0.6, len(BATCHES) - 0.4)
        ax_n.set_ylim(0, max(SLOTS) * 1.12)
        ax_n.set_xlabel("batch size (requests)")
        ax_n.set_ylabel("work items on the busiest CTA (of 132)")
        ax_n.grid(True, axis="y", alpha=0.25)
        style.legend_below(
            ax_n,
            [
                Patch(fc=style.COLORS["fa1"]),
                Patch(fc=style.COLORS["standard"]),
                Line2D([], [], color="k", lw=1.5),
            ],
            ["this batch", "does not fit", "slots per CTA"],
            ncol=3,
        )
        return [self.img, self.frame, *self.bars, self.cap, ax_n.title]

    def background_key(self, w: WorkspaceNumbers):
        return w.max_items  # the left title: the shapes, fixed at capture

    def draw(self, w: WorkspaceNumbers) -> str:
        self.img.set_data(RGBA[w.grid])
        self.img.set_extent((-0.5, w.max_ctas - 0.5, -0.5, w.max_items - 0.5))
        self.ax_w.set_ylim(-0.5, w.max_items - 0.5)
        self.ax_w.set_title(f"workspace, the same shapes for every batch:\n{_shape_text(w)}")
        c = style.COLORS
        for b, bar, n in zip(BATCHES, self.bars, w.need):
            bar.set_height(n)
            bar.set_color(c["standard"] if n > w.max_items else c["fa1"] if b == w.batch else c["muted"])
        self.cap.set_ydata([w.max_items] * 2)
        self.ax_n.set_title(
            f"batch {w.batch}, {w.dist}, balanced plan:\n{w.used:,} of {w.slots:,} slots used"
        )
        return (
            f"Workspace captured with the graph: {_shape_text(w)}, {style.binary_bytes(w.nbytes)} in all, "
            f"the same shapes and addresses for every batch. Batch {w.batch} ({w.dist}, balanced plan): "
            f"its {w.used:,} work items fill <b>{w.used / w.slots:.0%} of the {w.slots:,} slots</b>; "
            f"the busiest CTA holds {w.busiest} of its {w.max_items}. Each step rewrites the contents "
            f"in place, so one captured CUDA graph replays every step."
        )
