"""The tile grid (notebook 03, §3.3-3.4): the score matrix S = QKᵀ as blocks, which block is being
computed, which Q and K/V tiles sit in SRAM at that step, which blocks the causal mask skips, and
the HBM traffic so far.

Pure part: `tile_schedule(...)` -> TileSchedule. It replays the trace of the real kernel
(`flash_attention(..., hbm=HBM(trace=True))`), so what the grid shows in SRAM is what the kernel
loaded, not a second drawing of the algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Rectangle

from attnlab.validate import as_bool, as_int, choice
from attnlab.core.attention import ORDERS, causal_mask, flash_attention
from attnlab.core.hbm import HBM
from attnlab.explore import style
from attnlab.explore._base import Explorer, readonly
from attnlab.explore._controls import checkbox, slider, steps, toggle

__all__ = ["TileSchedule", "tile_schedule", "TileGridExplorer", "TILE_N", "TILE_BLOCKS"]

TILE_N = [16, 24, 33, 48, 64, 100, 128, 200, 256]
TILE_BLOCKS = [4, 8, 16, 32, 64]
TILE_D = 16  # head dim of the replayed kernel: traffic scales with it, the grid not
MAX_N = 512  # the trace holds every tile load: keep it small
MAX_TILES = 4096  # blocks of S replayed at most (the explorer's largest grid: 64 x 64)


@lru_cache(maxsize=64)
def _trace(N: int, block_r: int, block_c: int, order: str, causal: bool):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((N, TILE_D)) for _ in range(3))
    hbm = HBM(trace=True)
    flash_attention(q, k, v, causal=causal, block_r=block_r, block_c=block_c, order=order, hbm=hbm)
    return tuple(hbm.events), hbm.total


@dataclass(frozen=True)
class TileSchedule:
    """Every computed block of one kernel run, in the order the kernel computed it."""

    N: int
    block_r: int
    block_c: int
    order: str
    causal: bool
    blocks: tuple  # ((r0, r1), (c0, c1)) per step: the block of S computed
    q_tile: tuple  # (r0, r1) of the Q rows in SRAM at each step
    kv_tile: tuple  # (c0, c1) of the K, V rows in SRAM at each step
    moved: np.ndarray  # HBM elements moved by the end of each step (loads + its stores)
    total: int  # the whole kernel's traffic; equals moved[-1]
    skipped: tuple  # (i, j) block pairs the causal mask skips entirely

    @property
    def steps(self) -> int:
        return len(self.blocks)


def tile_schedule(
    N: int = 64, block_r: int = 16, block_c: int = 16, order: str = "fa1", causal: bool = False
) -> TileSchedule:
    """Replay the kernel's trace (head dim 16) step by step.

    >>> s = tile_schedule(64, 16, 16, "fa1", causal=True)
    >>> s.steps, len(s.skipped), s.total == int(s.moved[-1])
    (10, 6, True)
    """
    N = as_int("N", N, 1, MAX_N)
    block_r = as_int("block_r", block_r, 1, MAX_N)
    block_c = as_int("block_c", block_c, 1, MAX_N)
    order = choice("order", order, ORDERS)
    causal = as_bool("causal", causal)
    tiles = -(-N // block_r) * -(-N // block_c)
    if tiles > MAX_TILES:
        raise ValueError(
            f"N={N} with block_r={block_r}, block_c={block_c} makes {tiles:,} blocks; "
            f"valid: at most {MAX_TILES:,} (larger blocks or a smaller N)"
        )
    return _schedule(N, block_r, block_c, order, causal)


@lru_cache(maxsize=64)
def _schedule(N: int, block_r: int, block_c: int, order: str, causal: bool) -> TileSchedule:
    events, total = _trace(N, block_r, block_c, order, causal)
    blocks, q_tile, kv_tile, moved = [], [], [], []
    cur_q = cur_kv = None
    count = 0
    open_step = False  # a block was computed; its stores may still follow
    for e in events:
        if e.kind == "compute":
            if open_step:
                moved.append(count)
            blocks.append((e.rows, e.cols))
            q_tile.append(cur_q)
            kv_tile.append(cur_kv)
            open_step = True
            continue
        if e.kind == "read" and open_step:  # the next step's loads begin
            moved.append(count)
            open_step = False
        count += e.elements
        if e.kind == "read" and e.tensor == "Q":
            cur_q = e.rows
        elif e.kind == "read" and e.tensor == "K":
            cur_kv = e.rows
    if open_step:
        moved.append(count)
    tr, tc = -(-N // block_r), -(-N // block_c)
    computed = {(r[0] // block_r, c[0] // block_c) for r, c in blocks}
    skipped = tuple((i, j) for i in range(tr) for j in range(tc) if (i, j) not in computed)
    return TileSchedule(
        N,
        block_r,
        block_c,
        order,
        causal,
        tuple(blocks),
        tuple(q_tile),
        tuple(kv_tile),
        readonly(np.array(moved, dtype=np.int64)),
        total,
        skipped,
    )


_TILE_CMAP = ListedColormap(["#e3e8f0", "#6baed6", "#ffbf00", "#bdbdbd", "#ffffff"])
_KEY = (
    "not yet computed",
    "computed",
    "current block (in SRAM)",
    "skipped: fully masked",
    "masked entry (in a block that is not skipped)",
)  # colour i of _TILE_CMAP


def grid_image(s: TileSchedule, step: int) -> np.ndarray:
    """The N x N grid coloured by state at `step` (indices into the tile colour map)."""
    N, br, bc = s.N, s.block_r, s.block_c
    img = np.zeros((N, N), dtype=np.int8)
    for i, j in s.skipped:
        img[i * br : (i + 1) * br, j * bc : (j + 1) * bc] = 3
    for (r0, r1), (c0, c1) in s.blocks[:step]:
        img[r0:r1, c0:c1] = 1
    (r0, r1), (c0, c1) = s.blocks[step]
    img[r0:r1, c0:c1] = 2
    if s.causal:  # masked entries inside blocks the kernel computes
        img[~causal_mask(N, N) & (img != 3)] = 4
    return img


@dataclass(frozen=True)
class TileView:
    schedule: TileSchedule
    step: int


class TileGridExplorer(Explorer):
    """Sliders: N, block sizes, loop order, causal, step. Left: the grid of S with the Q strip
    (blue) and the K/V strip (green) in SRAM; right: HBM elements moved, step by step."""

    name = "tile_grid"
    size = (style.WIDTH, 4.6)

    def __init__(
        self,
        N: int = 64,
        block_r: int = 16,
        block_c: int = 16,
        order: str = "fa1",
        causal: bool = False,
        step: int = 0,
    ):
        super().__init__(N=N, block_r=block_r, block_c=block_c, order=order, causal=causal, step=step)

    def controls(self):
        return {
            "N": steps("N (tokens)", TILE_N, 64),
            "block_r": steps("B_r (Q rows per block)", TILE_BLOCKS, 16),
            "block_c": steps("B_c (K/V rows per block)", TILE_BLOCKS, 16),
            "order": toggle("loop order", ORDERS, "fa1"),
            "causal": checkbox("causal (skip fully masked blocks)", False),
            "step": slider("step", 0, 0, tile_schedule().steps - 1),
        }

    def linked(self, name, value):
        if name != "step":  # a new grid: the step slider's range follows it
            v = self.values
            last = tile_schedule(v["N"], v["block_r"], v["block_c"], v["order"], v["causal"]).steps - 1
            w = self.widgets["step"]
            w.value = min(w.value, last)
            w.max = last

    def compute(self, N, block_r, block_c, order, causal, step):
        s = tile_schedule(N, block_r, block_c, order, causal)
        return TileView(s, as_int("step", step, 0, s.steps - 1))

    def build(self, fig):
        ax_g, ax_t = self.ax_g, self.ax_t = fig.subplots(1, 2)
        ax_g.set_box_aspect(1)
        self.grid = ax_g.imshow(
            np.zeros((4, 4)),
            cmap=_TILE_CMAP,
            vmin=-0.5,
            vmax=4.5,
            interpolation="nearest",
            extent=(0, 4, 4, 0),
        )
        self.q_rect = ax_g.add_patch(Rectangle((0, 0), 1, 1, color=style.COLORS["fa1"], alpha=0.9))
        self.kv_rect = ax_g.add_patch(Rectangle((0, 0), 1, 1, color=style.COLORS["fa2"], alpha=0.9))
        self.q_text = ax_g.text(
            0, 0, "Q", ha="center", va="center", fontsize=style.SMALL, color="white", rotation=90
        )
        self.kv_text = ax_g.text(0, 0, "K,V", ha="center", va="center", fontsize=style.SMALL, color="white")
        ax_g.set_xlabel("key index j  (K/V tile in SRAM: green strip)")
        ax_g.set_ylabel("query index i  (Q tile: blue strip)")
        key = [Rectangle((0, 0), 1, 1, color=_TILE_CMAP(i), ec="k", lw=0.5) for i in (2, 1, 0, 3, 4)]
        key += [Rectangle((0, 0), 1, 1, color=style.COLORS[c]) for c in ("fa1", "fa2")]
        ax_g.legend(
            key,
            [_KEY[i] for i in (2, 1, 0, 3, 4)]
            + ["Q tile in SRAM (left strip)", "K, V tile in SRAM (top strip)"],
            loc="upper center",
            bbox_to_anchor=(0.5, -0.14),
            ncol=2,
            frameon=False,
        )
        # the whole run's traffic, faint (static), and the part up to the current step (moving)
        (self.moved_line,) = ax_t.plot([], [], color=style.COLORS["fa1"], lw=1.2, alpha=0.35)
        (self.so_far,) = ax_t.plot([], [], color=style.COLORS["fa1"], lw=2)
        (self.moved_dot,) = ax_t.plot([], [], "o", color=style.COLORS["highlight"], ms=8, mec="k")
        ax_t.set_xlabel("step (one block of S computed per step)")
        ax_t.set_ylabel("HBM elements moved so far")
        ax_t.grid(True, alpha=0.25)
        # the grid's title and the traffic curve change with the grid, not with the step
        return [
            self.grid,
            self.q_rect,
            self.kv_rect,
            self.q_text,
            self.kv_text,
            self.so_far,
            self.moved_dot,
            ax_t.title,
        ]

    def background_key(self, v: TileView):
        s = v.schedule
        return (s.N, s.block_r, s.block_c, s.order, s.causal)

    def draw(self, v: TileView) -> str:
        s, step = v.schedule, v.step
        N, last = s.N, s.steps - 1
        strip = max(N / 10, 1.5)
        self.grid.set_data(grid_image(s, step))
        self.grid.set_extent((0, N, N, 0))
        self.ax_g.set_xlim(-strip, N)
        self.ax_g.set_ylim(N, -strip)
        (r0, r1), (c0, c1) = s.q_tile[step], s.kv_tile[step]
        self.q_rect.set_bounds(-strip, r0, strip * 0.9, r1 - r0)
        self.kv_rect.set_bounds(c0, -strip, c1 - c0, strip * 0.9)
        self.q_text.set_position((-strip * 0.55, (r0 + r1) / 2))
        self.kv_text.set_position(((c0 + c1) / 2, -strip * 0.55))
        self.moved_line.set_data(np.arange(s.steps), s.moved)
        self.so_far.set_data(np.arange(step + 1), s.moved[: step + 1])
        self.moved_dot.set_data([step], [s.moved[step]])
        self.ax_t.set_xlim(-0.5, max(last, 1) + 0.5)
        self.ax_t.set_ylim(0, max(int(s.moved.max()), 1) * 1.08)
        loop = "K/V outer, Q inner" if s.order == "fa1" else "Q outer, K/V inner"
        self.ax_g.set_title(
            f"S = QKᵀ in blocks, {s.order} order ({loop})\n"
            f"N={N}, B_r={s.block_r}, B_c={s.block_c}" + (", causal" if s.causal else "")
        )
        self.ax_t.set_title(f"HBM traffic by the end of step {step}\n(steps 0-{last}, head dim {TILE_D})")
        held = f"Q rows {r0}–{r1 - 1}" + (
            " with O, l, m of those rows (read from HBM)"
            if s.order == "fa1"
            else " with their O, l, m accumulators (kept on chip)"
        )
        return (
            f"Step {step} of 0–{last}: SRAM holds {held}, and K, V rows {c0}–{c1 - 1}. "
            f"In all, the kernel computes {s.steps} blocks; the causal mask skips "
            f"{len(s.skipped)}. HBM elements moved by the end of this step: "
            f"{int(s.moved[step]):,} of {s.total:,}."
        )
