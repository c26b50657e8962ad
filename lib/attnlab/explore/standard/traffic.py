"""Where standard attention's HBM traffic goes (notebook 02, §2.1-2.2): Algorithm 0 tensor by
tensor, measured by the HBM counter on a small case, and its two parts against N.

Pure parts: `algorithm0_traffic` (the counter of `standard_attention`, tensor by tensor) and
`traffic_curves` (accesses per head by tensor against N) -> frozen dataclasses.

This file is long because the counter's table and the explorer's curves are §2.1-2.2's two views of
Algorithm 0's traffic (counted on a small case, then `iomodel.standard_io` against N), and the
explorer's two panels, their labels kept clear of the read-off line, are most of the lines.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.validate import as_int
from attnlab.core.attention import standard_attention
from attnlab.core.hbm import HBM
from attnlab.core.iomodel import standard_io
from attnlab.explore import style
from attnlab.explore._base import Explorer, readonly
from attnlab.explore._controls import steps

__all__ = [
    "Algorithm0Traffic",
    "algorithm0_traffic",
    "traffic_table",
    "TrafficCurves",
    "traffic_curves",
    "StandardTrafficExplorer",
    "TRAFFIC_DIMS",
    "TRAFFIC_N",
    "TRAFFIC_GRID",
]

#: What each tensor does in the three kernels (1: S = QK^T/sqrt(d); 2: P = softmax(S); 3: O = PV).
ROLES = {
    "Q": "read by kernel 1",
    "K": "read by kernel 1",
    "S": "written by 1, read by 2",
    "P": "written by 2, read by 3",
    "V": "read by kernel 3",
    "O": "written by kernel 3",
}
N_SQUARED = ("S", "P")
TRAFFIC_DIMS = [32, 64, 128, 256]
TRAFFIC_N = [1 << k for k in range(6, 18)]  # 64 .. 128K, the marker's stops
TRAFFIC_GRID = readonly(np.unique(np.round(16 * 2 ** (np.arange(0, 53) / 4)).astype(np.int64)))
STACK = ("S", "P", "Q", "K", "V", "O")  # bottom to top: the N x N part first


@dataclass(frozen=True)
class Algorithm0Traffic:
    N: int
    d: int
    rows: tuple  # {tensor, role, reads, writes, total} in the order the kernels touch them
    total: int  # the counter's total
    formula: int  # standard_io(N, d)
    sp: int  # accesses of S and P (the 4 N^2 term)

    @property
    def share(self) -> float:
        return self.sp / self.total


def algorithm0_traffic(N: int = 1000, d: int = 64, seed: int = 0) -> Algorithm0Traffic:
    """Run `standard_attention` on one head of seeded random inputs with an HBM counter.

    >>> t = algorithm0_traffic(1000, 64)
    >>> t.total, t.total == t.formula, t.sp, f"{t.share:.1%}"
    (4256000, True, 4000000, '94.0%')
    """
    N = as_int("N", N, 1, 4096)
    d = as_int("d", d, 1, 1024)
    rng = np.random.default_rng(as_int("seed", seed, 0, None))
    q, k, v = (rng.standard_normal((N, d)) for _ in range(3))
    hbm = HBM()
    standard_attention(q, k, v, hbm=hbm)
    rows = tuple(
        {"tensor": t, "role": ROLES[t], "reads": r, "writes": w, "total": r + w}
        for t, (r, w) in hbm.by_tensor().items()
    )
    sp = sum(r["total"] for r in rows if r["tensor"] in N_SQUARED)
    return Algorithm0Traffic(N, d, rows, hbm.total, standard_io(N, d), sp)


def traffic_table(result: Algorithm0Traffic) -> str:
    """`algorithm0_traffic`'s rows as a text table (elements), with a total line."""
    rows = [
        *result.rows,
        {
            "tensor": "all",
            "role": "",
            "reads": sum(r["reads"] for r in result.rows),
            "writes": sum(r["writes"] for r in result.rows),
            "total": result.total,
        },
    ]
    return style.table(
        rows,
        {
            "tensor": "tensor",
            "role": "in Algorithm 0",
            "reads": "reads",
            "writes": "writes",
            "total": "reads + writes",
        },
        {"reads": ",", "writes": ",", "total": ","},
    )


@dataclass(frozen=True)
class TrafficCurves:
    """Accesses per head of Algorithm 0 on the grid N (16 .. 131,072), and at the marker n.
    Q, K, V, O move N d elements each; S and P 2 N^2 each (written once, read once)."""

    d: int
    n: int
    N: np.ndarray
    parts: dict  # tensor -> accesses on the grid
    nd: np.ndarray  # 4 N d
    n2: np.ndarray  # 4 N^2
    total: np.ndarray
    at_n: dict  # the same numbers at N = n: nd, n2, total, share

    @property
    def share(self) -> np.ndarray:
        """The N^2 part's share, N / (N + d): one half at N = d."""
        return self.n2 / self.total


def traffic_curves(d: int = 64, n: int = 4096) -> TrafficCurves:
    """Algorithm 0's traffic by tensor against N; the 4Nd and 4N^2 parts come from
    `iomodel.standard_io` (which is 4Nd + 4N^2), split by its two terms.

    >>> r = traffic_curves(64, 4096)
    >>> r.at_n["total"] == standard_io(4096, 64), round(r.at_n["share"], 4)
    (True, 0.9846)
    """
    d = as_int("d", d, 1, 1024)
    n = as_int("n", n, 1, int(TRAFFIC_GRID[-1]))

    def at(N):  # an int64 array of N, or one int
        total = standard_io(N, d)
        nd = 4 * N * d  # Q, K, V read once, O written once
        return nd, total - nd, total

    nd, n2, total = at(TRAFFIC_GRID)
    parts = {t: readonly(nd / 4) for t in ("Q", "K", "V", "O")}
    parts.update({t: readonly(n2 / 2) for t in N_SQUARED})
    pn = [int(x) for x in at(n)]
    return TrafficCurves(
        d,
        n,
        TRAFFIC_GRID,
        parts,
        *readonly(nd, n2, total),
        {"nd": pn[0], "n2": pn[1], "total": pn[2], "share": pn[1] / pn[2]},
    )


class StandardTrafficExplorer(Explorer):
    """Sliders: head dim d, the N to read off.

    Left: each tensor's share of Algorithm 0's HBM traffic against N (stacked to 100 %), S and P
    in warm colours at the bottom, so the marked point's height is their share. Right: the two
    parts on log-log axes, 4Nd and 4N^2, crossing at N = d.
    """

    name = "standard_traffic"
    size = (style.WIDTH, 4.0)

    def __init__(self, d: int = 64, n: int = 4096):
        super().__init__(d=d, n=n)

    def controls(self):
        return {
            "d": steps("head dim d", TRAFFIC_DIMS, 64),
            "n": steps("read off at N", [(style.k_label(v), v) for v in TRAFFIC_N], 4096),
        }

    def compute(self, d, n):
        return traffic_curves(d, n)

    def build(self, fig):
        ax_s, ax_a = self.ax_s, self.ax_a = fig.subplots(1, 2)
        c = style.COLORS
        shades = {
            "Q": "#c6dbef",
            "K": "#9ecae1",
            "V": "#6baed6",
            "O": "#3182bd",
            "S": c["standard"],
            "P": c["memory"],
        }
        x = TRAFFIC_GRID
        self.fills = {
            t: ax_s.fill_between(
                x, 0, 0, color=shades[t], lw=0, label=t + ("  (N×N)" if t in N_SQUARED else "  (N×d)")
            )
            for t in STACK
        }
        self.s_mark = ax_s.axvline(4096, color="black", lw=1.2, ls="--")
        (self.s_dot,) = ax_s.plot([], [], "o", color="black", ms=5, zorder=3)
        self.s_txt = ax_s.annotate(
            "",
            (4096, 50),
            xytext=(-6, -8),
            textcoords="offset points",
            fontsize=style.SMALL,
            ha="right",
            va="top",
            zorder=4,
            bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": "none", "alpha": 0.85},
        )
        ax_s.set_ylim(0, 100)
        ax_s.set_ylabel("share of HBM traffic (%)")
        ax_s.legend(
            handles=[self.fills[t] for t in reversed(STACK)],
            loc="center left",
            bbox_to_anchor=(1.0, 0.5),
            frameon=False,
        )
        (self.a_tot,) = ax_a.plot([], [], color="black", lw=2, label="all: 4Nd + 4N²")
        (self.a_n2,) = ax_a.plot([], [], color=c["standard"], lw=1.5, ls="--", label="S, P: 4N²")
        (self.a_nd,) = ax_a.plot([], [], color=c["fa1"], lw=1.5, ls="--", label="Q, K, V, O: 4Nd")
        self.a_eq = ax_a.axvline(64, color=c["bound"], lw=1, ls=":")
        self.a_eq_txt = ax_a.text(
            64,
            2e11,
            "",
            fontsize=style.SMALL,
            color="#555555",
            va="top",
            zorder=4,
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.9},
        )
        self.a_mark = ax_a.axvline(4096, color="black", lw=1.2, ls="--")
        (self.a_dot,) = ax_a.plot([], [], "o", color="black", ms=5)
        style.log_axis(
            ax_a,
            "y",
            1e2,
            1e12,
            ticks=[1e2, 1e4, 1e6, 1e8, 1e10, 1e12],
            formatter=lambda y, _p: f"1e{int(round(np.log10(y)))}",
        )
        ax_a.set_ylabel("HBM accesses per head (elements)")
        ax_a.legend(loc="lower right")
        for ax in (ax_s, ax_a):
            style.pow2_axis(ax, x[0], x[-1], every=2)
            ax.set_xlim(x[0], x[-1])
            ax.set_xlabel("sequence length N (tokens)")
            ax.grid(True, alpha=0.25)
        return [
            *self.fills.values(),
            self.s_mark,
            self.s_dot,
            self.s_txt,
            self.a_tot,
            self.a_n2,
            self.a_nd,
            self.a_eq,
            self.a_mark,
            self.a_dot,
            ax_s.title,
            ax_a.title,
            self.a_eq_txt,
        ]  # last: its white box covers the read-off line

    def draw(self, r: TrafficCurves) -> str:
        x, d, n = r.N, r.d, r.n
        bottom = np.zeros(x.shape)
        for t in STACK:
            top = bottom + 100 * r.parts[t] / r.total
            self.fills[t].set_data(x, bottom, top)
            bottom = top
        p = r.at_n
        for m in (self.s_mark, self.a_mark):
            m.set_xdata([n, n])
        self.s_dot.set_data([n], [100 * p["share"]])
        self.s_txt.xy = (n, 100 * p["share"])
        right = n <= 256  # near the left edge: label to the right
        self.s_txt.xyann = (6, -8) if right else (-6, -8)
        self.s_txt.set_horizontalalignment("left" if right else "right")
        self.s_txt.set_text(f"S, P: {100 * p['share']:.1f} %")
        self.a_tot.set_data(x, r.total)
        self.a_n2.set_data(x, r.n2)
        self.a_nd.set_data(x, r.nd)
        self.a_eq.set_xdata([d, d])
        # the label sits beside its dotted line, on the side away from the read-off line (the
        # label spans about a factor 8 in N); left only where it fits inside the axis
        left = d < n <= 8 * d and d / 8 >= TRAFFIC_GRID[0]
        self.a_eq_txt.set_position((d / 1.15 if left else d * 1.15, 2e11))
        self.a_eq_txt.set_horizontalalignment("right" if left else "left")
        self.a_eq_txt.set_text(f"N = d = {d}:\nequal parts")
        self.a_dot.set_data([n], [p["total"]])
        self.ax_s.set_title(f"Where Algorithm 0's traffic goes (d = {d})")
        self.ax_a.set_title(f"HBM accesses per head, by part (d = {d})")
        return (
            f"At N = {n:,}, d = {d}: Q, K, V, O move {p['nd']:,} elements, S and P "
            f"{p['n2']:,}: <b>{100 * p['share']:.1f} %</b> of the {p['total']:,} "
            f"accesses per head are the N×N matrices (N/(N+d) = {n}/{n + d}; the black dot "
            f"on the left, the total on the right)."
        )
