"""HBM traffic against N and against SRAM size (notebook 03, §3.6): standard attention, FA1 and
FA2 order, with the N²d²/M order of the lower bound.

Pure part: `io_curves(...)` -> IOCurves; every count is `attnlab.core.iomodel`'s closed form, called
once per curve on an array of N (or of M).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.validate import as_bool, as_int, choice
from attnlab.core.attention import block_sizes
from attnlab.core.iomodel import flash_io, lower_bound, standard_io
from attnlab.explore import style
from attnlab.explore._base import Explorer, readonly
from attnlab.explore._controls import checkbox, steps, toggle

__all__ = ["IOCurves", "io_curves", "IOExplorer", "SRAM_STEPS", "N_MAX_STEPS", "HEAD_DIMS"]

SRAM_STEPS = [12_500, 25_000, 50_000, 100_000, 200_000, 400_000, 800_000]
N_MAX_STEPS = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
HEAD_DIMS = [32, 64, 96, 128, 256]
N_MIN = 128
M_GRID = np.unique(np.round(np.geomspace(SRAM_STEPS[0], SRAM_STEPS[-1], 25)).astype(np.int64))
#: the 1/M guide is drawn this far below FA1 so that both stay visible where they coincide
GUIDE_SHIFT = 0.5


@dataclass(frozen=True)
class IOCurves:
    """HBM accesses (elements, one head) against N and against M. Arrays are read-only."""
    d: int
    sram: int                 # M, elements
    n_max: int
    causal: bool
    N: np.ndarray             # 128 .. n_max: powers of two and their geometric midpoints
    standard: np.ndarray      # standard_io(N, d)
    fa1: np.ndarray           # flash_io(N, d, M, "fa1", causal)
    fa2: np.ndarray           # flash_io(N, d, M, "fa2", causal)
    bound: np.ndarray         # N² d² / M
    M: np.ndarray             # SRAM sizes >= 4d (the smallest that holds a row of Q, K, V, O)
    fa1_M: np.ndarray         # FA1 at N = n_max for each M
    fa2_M: np.ndarray         # FA2 at N = n_max for each M
    block_r: int              # the paper's rule at M
    block_c: int

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


def io_curves(d: int = 64, sram: int = 100_000, n_max: int = 32768, causal: bool = False) -> IOCurves:
    """The curves of the IO explorer.

    >>> r = io_curves(64, 100_000, 4096)
    >>> int(r.standard[-1]), int(r.fa1[-1]), round(r.ratio, 1)
    (68157440, 9355264, 7.3)
    """
    d = as_int("d", d, 1, 1024)
    sram = as_int("sram", sram, 4 * d, None)
    n_max = as_int("n_max", n_max, N_MIN, 1 << 20)
    causal = as_bool("causal", causal)
    Ns = np.unique(np.round(np.geomspace(N_MIN, n_max, 2 * int(np.log2(n_max / N_MIN)) + 1))
                   .astype(np.int64))
    Ms = M_GRID[M_GRID >= 4 * d]
    br, bc = block_sizes(d, sram)
    curves = (standard_io(Ns, d), flash_io(Ns, d, sram, "fa1", causal),
              flash_io(Ns, d, sram, "fa2", causal), lower_bound(Ns, d, sram))
    by_m = [np.array([flash_io(n_max, d, int(m), o, causal) for m in Ms]) for o in ("fa1", "fa2")]
    return IOCurves(d, sram, n_max, causal, readonly(Ns), *readonly(*curves), readonly(Ms),
                    *readonly(*by_m), br, bc)


def _fewer(ratio: float) -> str:
    """'7.9x fewer' or, when FlashAttention's count is larger, '2.0x more than standard'."""
    return f"{ratio:.1f}x fewer" if ratio >= 1 else f"{1 / ratio:.1f}x more than standard"


class IOExplorer(Explorer):
    """Sliders: SRAM size M, head dim d, largest N, loop order, causal.

    Left: HBM accesses against N (log-log) for standard, FA1, FA2 and the N²d²/M order.
    Right: accesses against M at N = n_max (the 1/M relation), the chosen M marked.
    """
    name = "io_vs_n"
    size = (style.WIDTH, 4.3)

    def __init__(self, d: int = 64, sram: int = 100_000, n_max: int = 32768, order: str = "both",
                 causal: bool = False):
        super().__init__(d=d, sram=sram, n_max=n_max, order=order, causal=causal)

    def controls(self):
        return {"sram": steps("SRAM M (elements)", SRAM_STEPS, 100_000),
                "d": steps("head dim d", HEAD_DIMS, 64),
                "n_max": steps("largest N (tokens)", N_MAX_STEPS, 32768),
                "order": toggle("loop order", ["both", "fa1", "fa2"], "both"),
                "causal": checkbox("causal (skip fully masked blocks)", False)}

    def compute(self, sram, d, n_max, order, causal):
        choice("order", order, ("both", "fa1", "fa2"))
        return io_curves(d, sram, n_max, causal)

    def build(self, fig):
        ax_n, ax_m = self.ax_n, self.ax_m = fig.subplots(1, 2)
        c, lab = style.COLORS, style.LABELS
        # FA2 dashed: at d = 128 its count nearly equals FA1's, and both must stay visible
        self.lines = {k: ax_n.plot([], [], "--" if k == "fa2" else "-", marker="o", ms=3, color=c[k],
                                   label=lab[k])[0] for k in ("standard", "fa1", "fa2")}
        self.lines["bound"] = ax_n.plot([], [], "--", color=c["bound"], label=lab["bound"])[0]
        self.m_lines = {k: ax_m.plot([], [], "--" if k == "fa2" else "-", marker="o", ms=3, color=c[k])[0]
                        for k in ("standard", "fa1", "fa2")}
        self.m_inv, = ax_m.plot([], [], ":", color="k", lw=1.5)
        self.m_mark = ax_m.axvline(100_000, color=c["highlight"], lw=2, alpha=0.8)
        style.log_axis(ax_n, "y", 1e4, 1e12, formatter=style.count)
        style.pow2_axis(ax_n, N_MIN, N_MAX_STEPS[-1], every=2)
        ax_n.set_xlim(N_MIN / 1.3, N_MAX_STEPS[-1] * 1.3)   # fixed: every setting fits
        style.log_axis(ax_m, "x", M_GRID[0] / 1.3, M_GRID[-1] * 1.3, ticks=[1e4, 1e5, 1e6],
                       formatter=lambda x, _p: style.si(x))
        style.log_axis(ax_m, "y", 1e5, 1e12, formatter=style.count)
        for ax in (ax_n, ax_m):
            ax.grid(True, alpha=0.25)
            ax.set_ylabel("HBM accesses per head (elements)")
        ax_n.set_xlabel("sequence length N (tokens)")
        ax_m.set_xlabel("SRAM size M (elements)")
        style.legend_below(ax_n, list(self.lines.values()),
                           ["standard (Alg. 0)", "FA1 order", "FA2 order", "N²d²/M (bound's order)"])
        style.legend_below(ax_m, [*self.m_lines.values(), self.m_inv, self.m_mark],
                           ["standard", "FA1 order", "FA2 order", f"∝ 1/M (×{GUIDE_SHIFT}, below FA1)",
                            "your M"])
        return [*self.lines.values(), *self.m_lines.values(), self.m_inv, self.m_mark, ax_n.title,
                ax_m.title]

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
        self.m_inv.set_data(r.M, GUIDE_SHIFT * r.fa1_M[0] * r.M[0] / r.M)
        self.m_mark.set_xdata([r.sram, r.sram])
        mask = ", causal" if r.causal else ""
        self.ax_n.set_title(f"HBM accesses vs N\nd={r.d}, M={r.sram:,} elements{mask}")
        self.ax_m.set_title(f"HBM accesses vs SRAM size\nN={r.n_max:,}, d={r.d}{mask}")
        return (f"Blocks by the paper's rule: B<sub>r</sub> = {r.block_r}, B<sub>c</sub> = {r.block_c}. "
                f"At N = {r.n_max:,}: standard {style.si(r.standard[-1])}, FA1 {style.si(r.fa1[-1])} "
                f"(<b>{_fewer(r.ratio)}</b>), FA2 order {style.si(r.fa2[-1])} ({_fewer(r.ratio_fa2)}).")
