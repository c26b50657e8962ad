"""Query tile sizes (notebook 05, §5.5): tensor-core instructions take at least 16 rows, so a
request with few queries leaves most rows of its tile idle. FlashInfer packs the g query heads
that share a KV head into the rows (l_qo x g rows per request) and picks the tile T_q from the
batch's average packed length (`attnlab.machine.schedule.query_tile`): a 128-row tile suits prefill, a
16-row tile suits decode. Larger tiles read each request's KV fewer times (once per tile).

Under CUDA graphs (mode "cuda_graph") the tile is chosen for the worst case the captured batch
allows, one request holding all its rows but one per other request, since every replay runs the
captured kernel; a promised `uniform_q_len` narrows that to the one length.

Pure part: `tile_size_numbers(decode, prefill, prefill_len, g, head_dim, tile, mode)` ->
TileSizeNumbers, from `attnlab.machine.workload.tile_waste`; `tile_size_table()` for typical
batches; `graph_mode_table()` for the tile each mode picks.

This file is long because the explorer and the two tables read FlashInfer's one tile rule
(`machine.schedule.query_tile`) through `tile_size_numbers`, per batch and under a CUDA graph; the
explorer's two panels and the tables' doctests, which pin the printed output, are most of the lines.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.patches import Patch

from attnlab.validate import as_int, choice
from attnlab.machine.workload import MAX_BATCH, tile_waste
from attnlab.machine.schedule import TILE_MODES, query_tile
from attnlab.machine.schedule.pieces import INT32_MAX
from attnlab.explore import style
from attnlab.explore._base import Explorer, readonly
from attnlab.explore._controls import dropdown, slider, steps

__all__ = [
    "SIZES",
    "TileSizeNumbers",
    "tile_size_numbers",
    "tile_size_table",
    "graph_mode_table",
    "TileSizeExplorer",
]

SIZES = (16, 64, 128)  # the query tiles FlashInfer's rule chooses from
SHOWN = 16  # requests drawn in the left panel
VIEWS = (16, 32, 64, 128, 256, 512)  # x ranges of the left panel (query rows); longer rows run off
H = 0.78  # bar height (one request per unit)
IDLE = {"fc": "#f4f4f4", "ec": "#8c8c8c", "hatch": "//"}


def _boxes(x0, x1, y):
    """Rectangles [x0, x1] x [y - H/2, y + H/2] as PolyCollection vertices, (n, 4, 2)."""
    x0, x1, y = np.broadcast_arrays(x0, x1, y)
    lo, hi = y - H / 2, y + H / 2
    return np.stack([np.c_[x0, lo], np.c_[x1, lo], np.c_[x1, hi], np.c_[x0, hi]], axis=1)


@dataclass(frozen=True)
class TileSizeNumbers:
    """A batch of decode (l_qo = 1) and prefill requests in query tiles: the rule's T_q in the mode
    asked for, the T_q used (the rule's or a fixed one), and per request packed rows, tiles and
    idle rows at it."""

    decode: int
    prefill: int
    prefill_len: int
    g: int
    head_dim: int
    avg_packed: float  # mean of l_qo x g over the batch (per batch the rule reads its integer part)
    mode: str  # "batch" (plan() per step) or "cuda_graph" (the captured worst case)
    worst_packed: int  # (rows - n + 1) x g: the longest request a graph captured here allows
    batch_rule: int  # FlashInfer's T_q per batch
    graph_rule: int  # FlashInfer's T_q under a CUDA graph captured with this batch
    rule: int  # FlashInfer's T_q in this mode
    tile_q: int  # the T_q used below (== rule unless fixed)
    packed: np.ndarray  # per request, decode first: l_qo x g rows
    tiles: np.ndarray  # ceil(packed / tile_q)
    idle: np.ndarray  # tiles x tile_q - packed
    idle_fraction: float  # idle rows / launched rows over the batch
    size_idle: np.ndarray  # idle fraction at each of SIZES
    size_tiles: np.ndarray  # tiles launched at each of SIZES
    decode_idle: tuple  # idle rows of one decode request's tile at each of SIZES
    shown: np.ndarray  # indices of the requests drawn (decode first, at most SHOWN)
    reserved: int  # query tiles the plan sizes its grid for: in graph mode
    # ceil(rows x g / T_q) + n - 1 (FlashInfer's bound), else the tiles

    @property
    def requests(self) -> int:
        return self.decode + self.prefill

    @property
    def fixed(self) -> bool:
        return self.tile_q != self.rule


def tile_size_numbers(
    decode: int = 32,
    prefill: int = 2,
    prefill_len: int = 512,
    g: int = 4,
    head_dim: int = 128,
    tile=None,
    mode: str = "batch",
) -> TileSizeNumbers:
    """Tiles and idle rows of `decode` requests of one query and `prefill` requests of
    `prefill_len` queries, g query heads packed per KV head; `tile` fixes T_q (None: the rule in
    `mode`, "batch" or "cuda_graph" with this batch as the captured one).

    >>> r = tile_size_numbers(32, 2, 512, g=4)
    >>> r.rule, int(r.tiles.sum()), int(r.idle.sum()), f"{r.idle_fraction:.1%}"
    (128, 64, 3968, '48.4%')
    >>> f"{tile_size_numbers(32, 2, 512, g=4, tile=16).idle_fraction:.1%}"   # decode: 12 of 16 idle
    '8.3%'
    """
    decode = as_int("decode", decode, 0, MAX_BATCH)
    prefill = as_int("prefill", prefill, 0, MAX_BATCH - decode)
    prefill_len = as_int("prefill_len", prefill_len, 1, INT32_MAX)
    g = as_int("g", g, 1, INT32_MAX // prefill_len if prefill else INT32_MAX)
    head_dim = as_int("head_dim", head_dim, 1, None)
    tile = None if tile is None else as_int("tile", tile, 1, INT32_MAX)
    mode = choice("mode", mode, TILE_MODES)
    if decode + prefill == 0:
        raise ValueError("decode=0 and prefill=0: no requests; valid: at least one request")
    l_qo = [1] * decode + [prefill_len] * prefill
    n, rows = len(l_qo), sum(l_qo)
    batch_rule = query_tile(l_qo, head_dim, group=g)
    graph_rule = query_tile(l_qo, head_dim, group=g, mode="cuda_graph")
    rule = tile_waste(l_qo, g, head_dim, batch_rule if mode == "batch" else graph_rule)
    used = rule if tile in (None, rule.tile_q) else tile_waste(l_qo, g, head_dim, tile)
    by_size = [tile_waste(l_qo, g, head_dim, t) for t in SIZES]
    n_pre = min(prefill, max(SHOWN // 2, SHOWN - decode))
    n_dec = min(decode, SHOWN - n_pre)
    shown = np.r_[np.arange(n_dec), decode + np.arange(n_pre)]
    tiles = int(used.tiles.sum())
    reserved = -(-rows * g // used.tile_q) + n - 1 if mode == "cuda_graph" else tiles
    return TileSizeNumbers(
        decode,
        prefill,
        prefill_len,
        g,
        head_dim,
        float(rule.packed.mean()),
        mode,
        (rows - n + 1) * g,
        batch_rule,
        graph_rule,
        rule.tile_q,
        used.tile_q,
        used.packed,
        used.tiles,
        used.idle,
        used.idle_fraction,
        readonly([w.idle_fraction for w in by_size]),
        readonly([int(w.tiles.sum()) for w in by_size]),
        tuple(int(tile_waste([1], g, head_dim, t).idle[0]) for t in SIZES),
        readonly(shown),
        reserved,
    )


def tile_size_table() -> str:
    """The rule's T_q and the idle rows it leaves for a few typical batches, beside 16 and 128.

    >>> print(tile_size_table())
    batch                        g  avg rows  rule's T_q  tiles  idle at rule  idle at 16  idle at 128
    ---------------------------  -  --------  ----------  -----  ------------  ----------  -----------
    64 decode                    1       1.0          16     64         93.8%       93.8%        99.2%
    64 decode                    8       8.0          16     64         50.0%       50.0%        93.8%
    4 prefill x 512              1     512.0         128     16          0.0%        0.0%         0.0%
    32 decode + 2 prefill x 512  4     124.2         128     64         48.4%        8.3%        48.4%
    32 decode + 2 prefill x 129  1       8.5          16     50         63.7%       63.7%        93.7%
    """
    batches = [(64, 0, 1, 1), (64, 0, 1, 8), (0, 4, 512, 1), (32, 2, 512, 4), (32, 2, 129, 1)]
    rows = []
    for dec, pre, length, g in batches:
        r = tile_size_numbers(dec, pre, length, g)
        name = " + ".join(([f"{dec} decode"] if dec else []) + ([f"{pre} prefill x {length}"] if pre else []))
        rows.append(
            {
                "batch": name,
                "g": g,
                "avg": r.avg_packed,
                "rule": r.rule,
                "tiles": int(r.tiles.sum()),
                "idle": r.idle_fraction,
                "i16": r.size_idle[0],
                "i128": r.size_idle[-1],
            }
        )
    return style.table(
        rows,
        {
            "batch": "batch",
            "g": "g",
            "avg": "avg rows",
            "rule": "rule's T_q",
            "tiles": "tiles",
            "idle": "idle at rule",
            "i16": "idle at 16",
            "i128": "idle at 128",
        },
        {"avg": ".1f", "idle": ".1%", "i16": ".1%", "i128": ".1%"},
    )


def graph_mode_table() -> str:
    """The query tile FlashInfer picks per batch and under a CUDA graph captured with the same
    batch, with the idle share of the tile rows each leaves, for a few batches.

    >>> print(graph_mode_table())
    batch                 g  per batch: T_q  idle  CUDA graph: T_q  idle  graph, uniform_q_len
    --------------------  -  --------------  ----  ---------------  ----  --------------------
    64 decode             4              16   75%               16   75%                    16
    63 decode + 1 x 64    4              16   60%              128   94%                     -
    32 decode + 2 x 512   4             128   48%              128   48%                     -
    8 x 3 (draft tokens)  4              16   25%              128   91%                    16
    """
    batches = [
        ("64 decode", [1] * 64),
        ("63 decode + 1 x 64", [1] * 63 + [64]),
        ("32 decode + 2 x 512", [1] * 32 + [512] * 2),
        ("8 x 3 (draft tokens)", [3] * 8),
    ]
    rows = []
    for name, l_qo in batches:
        per, graph = (tile_waste(l_qo, 4, 128, query_tile(l_qo, group=4, mode=m)) for m in TILE_MODES)
        uniform = (
            query_tile(l_qo, group=4, mode="cuda_graph", uniform_q_len=l_qo[0])
            if len(set(l_qo)) == 1
            else "-"
        )
        rows.append(
            {
                "batch": name,
                "g": 4,
                "t0": per.tile_q,
                "i0": per.idle_fraction,
                "t1": graph.tile_q,
                "i1": graph.idle_fraction,
                "u": uniform,
            }
        )
    return style.table(
        rows,
        {
            "batch": "batch",
            "g": "g",
            "t0": "per batch: T_q",
            "i0": "idle",
            "t1": "CUDA graph: T_q",
            "i1": "idle",
            "u": "graph, uniform_q_len",
        },
        {"i0": ".0%", "i1": ".0%"},
    )


class TileSizeExplorer(Explorer):
    """Controls: decode requests (l_qo = 1), prefill requests and their query length, group size
    g, head dim, and the query tile (FlashInfer's rule or a fixed 16, 64, 128).

    Titles: the batch and g (left), head dim, average packed rows and the rule's T_q (right).
    Left: each request's packed query rows (up to 16 requests, decode on top) cut into T_q-row
    tiles: used rows filled, idle rows of the last tile hatched; rows beyond the view say their
    length and tile count. Right: the batch's idle-row fraction at each tile size, the rule's
    choice highlighted, the tile of the left panel outlined, tiles launched above each bar.
    """

    name = "tile_size"
    size = (style.WIDTH, 4.6)

    def __init__(
        self,
        decode: int = 32,
        prefill: int = 2,
        prefill_len: int = 512,
        g: int = 4,
        head_dim: int = 128,
        tile="rule",
        mode: str = "batch",
    ):
        super().__init__(
            decode=decode,
            prefill=prefill,
            prefill_len=prefill_len,
            g=g,
            head_dim=head_dim,
            tile=tile,
            mode=mode,
        )

    def controls(self):
        return {
            "decode": slider("decode requests (l_qo = 1)", 32, 0, 64),
            "prefill": slider("prefill requests", 2, 0, 16),
            "prefill_len": slider("prefill query length l_qo", 512, 16, 4096),
            "g": steps("group size g (query heads per KV head)", (1, 2, 4, 8), 4),
            "head_dim": steps("head dim", (64, 128, 256), 128),
            "tile": dropdown(
                "query tile T_q",
                [("FlashInfer's rule", "rule"), ("16 rows", 16), ("64 rows", 64), ("128 rows", 128)],
                "rule",
            ),
            "mode": dropdown(
                "rule's mode",
                [("per batch (plan each step)", "batch"), ("CUDA graph of this batch", "cuda_graph")],
                "batch",
            ),
        }

    def compute(self, decode, prefill, prefill_len, g, head_dim, tile, mode):
        return tile_size_numbers(
            decode, prefill, prefill_len, g, head_dim, None if tile == "rule" else tile, mode
        )

    def build(self, fig):
        ax, ax_s = self.ax, self.ax_s = fig.subplots(1, 2, width_ratios=(1.35, 1))
        c = style.COLORS
        self.used = PolyCollection([], lw=0)
        self.idle = PolyCollection([], fc=IDLE["fc"], ec=IDLE["ec"], lw=0.8, hatch=IDLE["hatch"])
        self.cuts = LineCollection([], colors="white", lw=1.2)
        for art in (self.used, self.idle, self.cuts):
            ax.add_collection(art)
        self.more = ax.text(
            0,
            0,
            "",
            ha="right",
            va="center",
            color="white",
            fontsize=style.SMALL,
            fontweight="bold",
            bbox={"fc": c["fa1"], "ec": "none", "pad": 1},
        )
        ax.set_ylim(SHOWN - 0.4, -0.6)
        ax.set_yticks([])
        ax.set_xlim(0, VIEWS[-1])
        ax.set_xlabel("packed query rows of a request (l_qo × g rows)")
        ax.set_ylabel("requests (decode on top)")
        style.legend_below(
            ax,
            [Patch(color=c["memory"]), Patch(color=c["fa1"]), Patch(**IDLE)],
            ["decode rows", "prefill rows", "idle rows"],
            ncol=3,
        )
        x = np.arange(len(SIZES))
        self.bars = ax_s.bar(x, np.zeros(len(SIZES)), width=0.6, color=c["muted"])
        self.tops = [ax_s.text(i, 0, "", ha="center", va="bottom", fontsize=style.SMALL) for i in x]
        ax_s.set_xticks(x, [str(t) for t in SIZES])
        ax_s.set_xlim(-0.6, len(SIZES) - 0.4)
        ax_s.set_ylim(0, 135)
        ax_s.set_yticks([0, 25, 50, 75, 100])
        ax_s.grid(True, axis="y", alpha=0.25)
        ax_s.set_xlabel("query tile size T_q (rows)")
        ax_s.set_ylabel("idle tensor-core rows (% of launched)")
        style.legend_below(
            ax_s,
            [Patch(color=c["highlight"]), Patch(fc="white", ec="k", lw=2)],
            ["FlashInfer's rule", "tile on the left"],
            ncol=2,
        )
        return [self.used, self.idle, self.cuts, self.more, *self.bars, *self.tops, ax.title, ax_s.title]

    def draw(self, r: TileSizeNumbers) -> str:
        c, tq = style.COLORS, r.tile_q
        ext = r.tiles[r.shown] * tq
        view = next((v for v in VIEWS if v >= ext.max()), VIEWS[-1])
        self.ax.set_xlim(0, view)
        self.ax.set_xticks(np.linspace(0, view, 5))  # quarters of the view: tile boundaries
        self.ax.set_ylim(max(len(r.shown), 4) - 0.4, -0.6)
        n = len(r.shown)
        packed, y = r.packed[r.shown], np.arange(n)
        self.used.set_verts(_boxes(0, np.minimum(packed, view), y))
        self.used.set_facecolor(np.where(r.shown < r.decode, c["memory"], c["fa1"]))
        some = packed < ext
        self.idle.set_verts(_boxes(packed[some], ext[some], y[some]))
        xs, ys = np.meshgrid(np.arange(tq, view, tq), y)
        keep = xs < ext[:, None]  # tile boundaries inside each request's rows
        self.cuts.set_segments(
            np.stack([np.c_[xs[keep], ys[keep] - H / 2], np.c_[xs[keep], ys[keep] + H / 2]], axis=1)
        )
        long = np.flatnonzero(ext > view)  # only prefill rows run off, all of one length
        self.more.set_visible(long.size > 0)
        if long.size:
            j = r.shown[long[0]]
            self.more.set_position((view * 0.985, long.mean()))
            self.more.set_text(f"{r.packed[j]:,} rows, {r.tiles[j]:,} tiles each ▸")
        for k, t in enumerate(SIZES):
            b = self.bars[k]
            b.set_height(100 * r.size_idle[k])
            b.set_facecolor(c["highlight"] if t == r.rule else c["muted"])
            b.set_edgecolor("k" if t == tq else "none")
            b.set_linewidth(2 if t == tq else 0)
            self.tops[k].set_position((k, 100 * r.size_idle[k] + 2))
            self.tops[k].set_text(
                ("rule's pick\n" if t == r.rule else "") + f"{r.size_idle[k]:.1%}\n{r.size_tiles[k]:,} tiles"
            )
            self.tops[k].set_fontweight("bold" if t == r.rule else "normal")
        mix = " + ".join(
            ([f"{r.decode} decode"] if r.decode else [])
            + ([f"{r.prefill} prefill × {r.prefill_len:,}"] if r.prefill else [])
        )
        more = f" ({len(r.shown)} of {r.requests} shown)" if len(r.shown) < r.requests else ""
        self.ax.set_title(f"{mix}, g = {r.g}{more}")
        avg = f"{r.avg_packed:,.1f}" if r.avg_packed < 100 else f"{r.avg_packed:,.0f}"
        if r.mode == "batch":
            self.ax_s.set_title(f"head dim {r.head_dim}, mean {avg} rows → T_q = {r.rule}")
        else:
            self.ax_s.set_title(f"d = {r.head_dim}, graph: worst {r.worst_packed:,} rows → T_q = {r.rule}")
        launched = int(r.tiles.sum()) * tq
        dec, (many, few) = r.decode_idle, (r.size_tiles[0], r.size_tiles[-1])
        kv = (
            f"Larger tiles read each request's KV fewer times: {few:,} tiles at 128 against {many:,} at 16."
            if few < many
            else f"Every tile size launches the same {few:,} tiles here: the smallest wastes least."
        )
        if r.mode == "batch":
            why = (
                f"Average packed query length {r.avg_packed:,.1f} rows (l_qo × g), read as the integer "
                f"{int(r.avg_packed):,} → FlashInfer's rule picks <b>T_q = {r.rule}</b>"
            )
        else:
            why = (
                f"A CUDA graph captured with this batch must allow one request of {r.worst_packed:,} "
                f"packed rows (all rows but one per other request, × g) → <b>T_q = {r.rule}</b> "
                f"(per batch: {r.batch_rule}); the grid is sized for {r.reserved:,} tiles"
            )
        return (
            why
            + (f"; shown at a fixed T_q = {tq}" if r.fixed else "")
            + f". At T_q = {tq}: <b>{int(r.tiles.sum()):,} tiles</b> launched, {int(r.idle.sum()):,} of "
            f"{launched:,} tensor-core rows idle (<b>{r.idle_fraction:.1%}</b>). A decode request "
            f"packs g = {r.g} row{'s' if r.g > 1 else ''}: a 128-row tile leaves {dec[-1]} of 128 rows "
            f"idle, a 16-row tile {dec[0]} of 16. {kv}"
        )
