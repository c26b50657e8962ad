"""HBM traffic against N and against SRAM size (notebook 03, §3.4): standard attention, FA1 and
FA2 order, with the N²d²/M order of the lower bound.

Each loop order is drawn under a tile rule (`attnlab.core.attention.block_sizes`): FA1 under the
paper's (B_c = ceil(M/4d), B_r = min(ceil(M/4d), d)); FA2 under its own by default (a tall Q block:
B_r = ceil(M/4d), B_c = min(ceil(M/4d), d)), or under the paper's cap B_r <= d, which the lecture's
table uses and under which the FA2 count stops falling with M.

Pure part: `io_curves(...)` -> IOCurves; every count is `attnlab.core.iomodel`'s closed form, called
once per curve on an array of N (or of M).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.validate import as_bool, as_int, choice
from attnlab.core.attention import RULES, block_sizes
from attnlab.core.iomodel import flash_io, lower_bound, standard_io
from attnlab.explore import style
from attnlab.explore._base import Explorer, readonly
from attnlab.explore._controls import checkbox, steps, toggle

__all__ = [
    "IOCurves",
    "io_curves",
    "IOExplorer",
    "SRAM_STEPS",
    "N_MAX_STEPS",
    "HEAD_DIMS",
    "FA2_TILES",
    "fa2_label",
]

SRAM_STEPS = [12_500, 25_000, 50_000, 100_000, 200_000, 400_000, 800_000]
N_MAX_STEPS = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
HEAD_DIMS = [32, 64, 96, 128, 256]
N_MIN = 128
M_GRID = np.unique(np.round(np.geomspace(SRAM_STEPS[0], SRAM_STEPS[-1], 25)).astype(np.int64))
#: the 1/M guide is drawn this far below the flash curve it follows (FA1's, or FA2's when only
#: the FA2 order is shown) so that both stay visible where they coincide
GUIDE_SHIFT = 0.5
#: the FA2 tiles control: its label -> the tile rule of `block_sizes`
FA2_TILES = {"own": "fa2", "FA1's": "fa1"}


def fa2_label(rule: str) -> str:
    """The FA2 curve's legend entry, naming its tile rule."""
    return "FA2 order, own tiles" if rule == "fa2" else "FA2 order, FA1's tiles"


@dataclass(frozen=True)
class IOCurves:
    """HBM accesses (elements, one head) against N and against M. Arrays are read-only."""

    d: int
    sram: int  # M, elements
    n_max: int
    causal: bool
    N: np.ndarray  # 128 .. n_max: powers of two and their geometric midpoints
    standard: np.ndarray  # standard_io(N, d)
    fa1: np.ndarray  # flash_io(N, d, M, "fa1", causal): the paper's rule
    fa2: np.ndarray  # flash_io(N, d, M, "fa2", causal, rule=fa2_rule)
    bound: np.ndarray  # N² d² / M
    M: np.ndarray  # SRAM sizes >= 4d (the smallest that holds a row of Q, K, V, O)
    fa1_M: np.ndarray  # FA1 at N = n_max for each M
    fa2_M: np.ndarray  # FA2 (under fa2_rule) at N = n_max for each M
    block_r: int  # the paper's rule at M (FA1's blocks)
    block_c: int
    fa2_rule: str = "fa2"  # the tile rule of the FA2 curves: "fa2" (its own) or "fa1"
    fa2_block_r: int = 0  # FA2's blocks under fa2_rule at M
    fa2_block_c: int = 0

    @property
    def standard_at_nmax(self) -> int:
        return int(self.standard[-1])

    @property
    def ratio(self) -> float:
        """standard / FA1 at n_max."""
        return float(self.standard[-1] / self.fa1[-1])

    @property
    def ratio_fa2(self) -> float:
        return float(self.standard[-1] / self.fa2[-1])


def io_curves(
    d: int = 64, sram: int = 100_000, n_max: int = 32768, causal: bool = False, fa2_rule: str = "fa2"
) -> IOCurves:
    """The curves of the IO explorer; `fa2_rule` is the FA2 curves' tile rule ("fa2", its own,
    or "fa1", the paper's cap B_r <= d of the lecture's table).

    >>> r = io_curves(64, 100_000, 4096)
    >>> int(r.standard[-1]), int(r.fa1[-1]), round(r.ratio, 1), int(r.fa2[-1])
    (68157440, 9355264, 7.3, 6291456)
    >>> int(io_curves(64, 100_000, 4096, fa2_rule="fa1").fa2[-1])      # the lecture's table
    34078720
    """
    d = as_int("d", d, 1, 1024)
    sram = as_int("sram", sram, 4 * d, None)
    n_max = as_int("n_max", n_max, N_MIN, 1 << 20)
    causal = as_bool("causal", causal)
    fa2_rule = choice("fa2_rule", fa2_rule, RULES)
    Ns = np.unique(np.round(np.geomspace(N_MIN, n_max, 2 * int(np.log2(n_max / N_MIN)) + 1)).astype(np.int64))
    Ms = M_GRID[M_GRID >= 4 * d]
    br, bc = block_sizes(d, sram)
    br2, bc2 = block_sizes(d, sram, fa2_rule)
    curves = (
        standard_io(Ns, d),
        flash_io(Ns, d, sram, "fa1", causal),
        flash_io(Ns, d, sram, "fa2", causal, rule=fa2_rule),
        lower_bound(Ns, d, sram),
    )
    by_m = [
        np.array([flash_io(n_max, d, int(m), o, causal, rule=r) for m in Ms])
        for o, r in (("fa1", "fa1"), ("fa2", fa2_rule))
    ]
    return IOCurves(
        d,
        sram,
        n_max,
        causal,
        readonly(Ns),
        *readonly(*curves),
        readonly(Ms),
        *readonly(*by_m),
        br,
        bc,
        fa2_rule,
        br2,
        bc2,
    )


def _fewer(ratio: float) -> str:
    """'7.9x fewer' or, when FlashAttention's count is larger, '2.0x more than standard'."""
    return f"{ratio:.1f}x fewer" if ratio >= 1 else f"{1 / ratio:.1f}x more than standard"


class IOExplorer(Explorer):
    """Sliders: SRAM size M, head dim d, largest N, loop order, FA2's tiles, causal.

    Left: HBM accesses against N (log-log) for standard, FA1, FA2 and the N²d²/M order.
    Right: accesses against M at N = n_max (the 1/M relation), the chosen M marked. The legends
    list the loop orders shown, the FA2 entry names its tile rule, and the 1/M guide follows the
    flash curve it is drawn under.
    """

    name = "io_vs_n"
    size = (style.WIDTH, 4.3)

    def __init__(
        self,
        d: int = 64,
        sram: int = 100_000,
        n_max: int = 32768,
        order: str = "both",
        causal: bool = False,
        fa2_tiles: str = "own",
    ):
        super().__init__(d=d, sram=sram, n_max=n_max, order=order, fa2_tiles=fa2_tiles, causal=causal)

    def controls(self):
        return {
            "sram": steps("SRAM M (elements)", SRAM_STEPS, 100_000),
            "d": steps("head dim d", HEAD_DIMS, 64),
            "n_max": steps("largest N (tokens)", N_MAX_STEPS, 32768),
            "order": toggle("loop order", ["both", "fa1", "fa2"], "both"),
            "fa2_tiles": toggle("FA2's tiles", list(FA2_TILES), "own"),
            "causal": checkbox("causal (skip fully masked blocks)", False),
        }

    def compute(self, sram, d, n_max, order, fa2_tiles, causal):
        choice("order", order, ("both", "fa1", "fa2"))
        return io_curves(d, sram, n_max, causal, FA2_TILES[choice("fa2_tiles", fa2_tiles, tuple(FA2_TILES))])

    def build(self, fig):
        ax_n, ax_m = self.ax_n, self.ax_m = fig.subplots(1, 2)
        c = style.COLORS
        # FA2 dashed: where its count nearly equals FA1's, both must stay visible
        self.lines = {
            k: ax_n.plot([], [], "--" if k == "fa2" else "-", marker="o", ms=3, color=c[k])[0]
            for k in ("standard", "fa1", "fa2")
        }
        self.lines["bound"] = ax_n.plot([], [], "--", color=c["bound"])[0]
        self.m_lines = {
            k: ax_m.plot([], [], "--" if k == "fa2" else "-", marker="o", ms=3, color=c[k])[0]
            for k in ("standard", "fa1", "fa2")
        }
        (self.m_inv,) = ax_m.plot([], [], ":", color="k", lw=1.5)
        self.m_mark = ax_m.axvline(100_000, color=c["highlight"], lw=2, alpha=0.8)
        style.log_axis(ax_n, "y", 1e4, 1e12, formatter=style.count)
        style.pow2_axis(ax_n, N_MIN, N_MAX_STEPS[-1], every=2)
        ax_n.set_xlim(N_MIN / 1.3, N_MAX_STEPS[-1] * 1.3)  # fixed: every setting fits
        style.log_axis(
            ax_m,
            "x",
            M_GRID[0] / 1.3,
            M_GRID[-1] * 1.3,
            ticks=[1e4, 1e5, 1e6],
            formatter=lambda x, _p: style.si(x),
        )
        style.log_axis(ax_m, "y", 1e5, 1e12, formatter=style.count)
        for ax in (ax_n, ax_m):
            ax.grid(True, alpha=0.25)
            ax.set_ylabel("HBM accesses per head (elements)")
        ax_n.set_xlabel("sequence length N (tokens)")
        ax_m.set_xlabel("SRAM size M (elements)")
        # one pair of legends per loop-order setting, only the current one visible: a legend
        # lists exactly the curves drawn
        self.legends = {}
        for order in ("fa1", "fa2", "both"):  # the last (largest) stays each axis' own legend,
            # the one constrained layout makes room for; the others are added as artists
            shown = [k for k in ("fa1", "fa2") if order in ("both", k)]
            guide = "FA2" if order == "fa2" else "FA1"
            left = style.legend_below(
                ax_n,
                [self.lines["standard"], *(self.lines[k] for k in shown), self.lines["bound"]],
                [
                    "standard (Alg. 0)",
                    *(("FA1 order" if k == "fa1" else fa2_label("fa2")) for k in shown),
                    "N²d²/M (bound's order)",
                ],
            )
            right = style.legend_below(
                ax_m,
                [self.m_lines["standard"], *(self.m_lines[k] for k in shown), self.m_inv, self.m_mark],
                [
                    "standard",
                    *(("FA1 order" if k == "fa1" else fa2_label("fa2")) for k in shown),
                    f"∝ 1/M (×{GUIDE_SHIFT}, below {guide})",
                    "your M",
                ],
            )
            if order != "both":
                for ax, leg in ((ax_n, left), (ax_m, right)):
                    ax.add_artist(leg)
                    leg.set_clip_on(False)  # add_artist clips to the axes: undo it, so it
                    # is drawn below the panel and counted by the layout while visible
            self.legends[order] = (left, right)
        return [
            *self.lines.values(),
            *self.m_lines.values(),
            self.m_inv,
            self.m_mark,
            ax_n.title,
            ax_m.title,
            *(leg for pair in self.legends.values() for leg in pair),
        ]

    def draw(self, r: IOCurves) -> str:
        order = self.values["order"]
        for k in ("standard", "fa1", "fa2", "bound"):
            self.lines[k].set_data(r.N, getattr(r, k))
        self.m_lines["standard"].set_data(r.M, np.full(r.M.shape, r.standard_at_nmax))
        self.m_lines["fa1"].set_data(r.M, r.fa1_M)
        self.m_lines["fa2"].set_data(r.M, r.fa2_M)
        for k in ("fa1", "fa2"):
            self.lines[k].set_visible(order in ("both", k))
            self.m_lines[k].set_visible(order in ("both", k))
        for key, pair in self.legends.items():
            for leg in pair:
                leg.set_visible(key == order)
                for t in leg.get_texts():
                    if t.get_text().startswith("FA2 order"):
                        t.set_text(fa2_label(r.fa2_rule))
        anchor = r.fa2_M if order == "fa2" else r.fa1_M
        self.m_inv.set_data(r.M, GUIDE_SHIFT * anchor[0] * r.M[0] / r.M)
        self.m_mark.set_xdata([r.sram, r.sram])
        mask = ", causal" if r.causal else ""
        self.ax_n.set_title(f"HBM accesses vs N\nd={r.d}, M={r.sram:,} elements{mask}")
        self.ax_m.set_title(f"HBM accesses vs SRAM size\nN={r.n_max:,}, d={r.d}{mask}")
        tiles = (
            "its own tiles, B<sub>r</sub> = ⌈M/4d⌉"
            if r.fa2_rule == "fa2"
            else "FA1's tiles, B<sub>r</sub> ≤ d"
        )
        fa1 = (
            f"FA1 ({r.block_r} × {r.block_c} tiles, the paper's rule) {style.si(r.fa1[-1])} "
            f"(<b>{_fewer(r.ratio)}</b>)"
        )
        fa2 = (
            f"FA2 order ({tiles}, {r.fa2_block_r} × {r.fa2_block_c}) {style.si(r.fa2[-1])} "
            f"({_fewer(r.ratio_fa2)})"
        )
        shown = {"both": f"{fa1}, {fa2}", "fa1": fa1, "fa2": fa2}[order]
        return (
            f"Tiles B<sub>r</sub> × B<sub>c</sub> at M = {r.sram:,}. At N = {r.n_max:,}: "
            f"standard {style.si(r.standard[-1])}, {shown}."
        )
