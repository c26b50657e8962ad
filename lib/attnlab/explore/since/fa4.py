"""FA4's third roof as an explorer (notebook 06, §6): per attention score, the Tensor Cores' time
against the exponential unit's and the FMA pipe's, and what a polynomial exp and skipped
rescales move between them.

Pure part: `fa4_numbers(gpu, d, poly_share, skip)` -> FA4Numbers from `attnlab.machine.roofs.score_times`
(at this d, and along the head-dim grid for the right panel).
"""

from __future__ import annotations

import textwrap

from dataclasses import dataclass

import numpy as np

from attnlab.machine.hardware import get_gpu, gpus
from attnlab.machine.roofs import POLY_FMA_OPS, UNITS, ScoreTimes, score_times
from attnlab.explore import style
from attnlab.explore._base import Explorer, readonly
from attnlab.explore._controls import dropdown, slider, steps

__all__ = ["FA4Numbers", "fa4_numbers", "fa4_table", "FA4RoofExplorer", "HEAD_DIMS"]

HEAD_DIMS = (32, 64, 96, 128, 192, 256)
PS = 1e12  # seconds -> picoseconds
#: the bar panel's top, per GPU: the Tensor Cores' time at the largest d (every unit fits under it,
#: the FMA pipe at 100 % polynomial included), so the limit moves only with the GPU
Y_HEADROOM = 1.2


@dataclass(frozen=True)
class FA4Numbers:
    t: ScoreTimes
    dims: np.ndarray  # HEAD_DIMS
    mma: np.ndarray  # Tensor Core ps per score at each
    nonmma: np.ndarray  # the slower of MUFU and FMA pipe at each (these settings)
    exp_only: np.ndarray  # every exp on MUFU, no counter-measure


def fa4_numbers(gpu="B200", d: int = 128, poly_share: float = 0.0, skip: float = 0.0) -> FA4Numbers:
    t = score_times(gpu, d, poly_share, skip)
    rows = [score_times(gpu, x, poly_share, skip) for x in HEAD_DIMS]
    return FA4Numbers(
        t,
        readonly(np.array(HEAD_DIMS)),
        readonly([r.mma * PS for r in rows]),
        readonly([max(r.exp_mufu, r.fma) * PS for r in rows]),
        readonly([r.exp_all_mufu * PS for r in rows]),
    )


def fa4_table(dims=(64, 128, 256), poly_share: float = 0.0, skip: float = 0.0) -> str:
    """ps per score on each unit, per GPU and head dim, and which unit binds."""
    rows = []
    for g in gpus():
        for d in dims:
            t = score_times(g, d, poly_share, skip)
            rows.append(
                {
                    "gpu": g,
                    "d": d,
                    "mma": t.mma * PS,
                    "exp": t.exp_mufu * PS,
                    "fma": t.fma * PS,
                    "ratio": t.exp_mufu / t.mma,
                    "binds": t.binding,
                    "util": t.tensor_utilization,
                }
            )
    head = (
        f"ps per score (one query row x one key); poly share {poly_share:.0%}, rescales skipped {skip:.0%}, "
        f"tiles of 128 keys; units overlapped, the slowest sets the pace"
    )
    head = textwrap.fill(head, 100) + "\n"
    return head + style.table(
        rows,
        {
            "gpu": "GPU",
            "d": "d",
            "mma": "tensor cores",
            "exp": "exp (MUFU)",
            "fma": "FMA pipe",
            "ratio": "exp / mma",
            "binds": "binds",
            "util": "tensor-core busy",
        },
        {"mma": ".3f", "exp": ".3f", "fma": ".3f", "ratio": ".2f", "util": ".0%"},
    )


class FA4RoofExplorer(Explorer):
    """Controls: GPU, head dim d, share of exps by polynomial on the FMA pipe, share of rescales
    skipped.

    Left: ps per score on the three units at these settings (the FMA pipe's bar stacked: softmax,
    polynomial exps, rescales); the slowest unit sets the time. Right: along d, the Tensor Cores'
    time, the exp unit's with no counter-measure, and the slower of MUFU and FMA pipe with yours.
    """

    name = "fa4_roofs"
    size = (style.WIDTH, 4.3)

    def __init__(self, gpu: str = "B200", d: int = 128, poly_share: float = 0.0, skip: float = 0.0):
        super().__init__(gpu=get_gpu(gpu).name, d=d, poly_share=poly_share, skip=skip)

    def controls(self):
        return {
            "gpu": dropdown("GPU", gpus(), "B200"),
            "d": steps("head dim d", HEAD_DIMS, 128),
            "poly_share": slider("exps by polynomial (share)", 0.0, 0.0, 1.0, 0.05),
            "skip": slider("rescales skipped (share)", 0.0, 0.0, 1.0, 0.05),
        }

    def compute(self, gpu, d, poly_share, skip):
        return fa4_numbers(gpu, d, poly_share, skip)

    def build(self, fig):
        ax, ax_d = self.ax, self.ax_d = fig.subplots(1, 2)
        c = style.COLORS
        x = np.arange(3)
        self.bar_mma = ax.bar(0, 0, 0.6, color=c["compute"], label="QKᵀ + PV (4d FLOP)")
        self.bar_exp = ax.bar(1, 0, 0.6, color=c["fa1"], label="exp2 on MUFU")
        self.bar_sm = ax.bar(2, 0, 0.6, color=c["muted"], label="softmax FMAs (2)")
        self.bar_poly = ax.bar(2, 0, 0.6, color=c["fa2"], label=f"polynomial exps ({POLY_FMA_OPS} FMAs)")
        self.bar_res = ax.bar(2, 0, 0.6, color=c["memory"], label="rescales (d/128 per score)")
        self.tops = [ax.text(i, 0, "", ha="center", va="bottom", fontsize=style.SMALL) for i in x]
        ax.set_xticks(x, ["tensor cores", "exp unit\n(MUFU)", "FMA pipe"])
        ax.set_xlim(-0.6, 2.6)
        ax.set_ylabel("time per score (ps)")
        ax.set_xlabel("unit")
        ax.grid(True, axis="y", alpha=0.25)
        ax.legend(loc="upper left", fontsize=style.SMALL)
        (self.l_mma,) = ax_d.plot([], [], "-o", ms=4, color=c["compute"], label="tensor cores")
        (self.l_exp,) = ax_d.plot([], [], "--", color=c["fa1"], label="exp, all on MUFU")
        (self.l_non,) = ax_d.plot([], [], "-s", ms=4, color=c["fa2"], label="slower of MUFU / FMA, yours")
        (self.dot,) = ax_d.plot([], [], "*", ms=14, color=c["highlight"], mec="k", mew=0.8)
        style.log_axis(ax_d, "x", 28, 290, ticks=list(HEAD_DIMS))
        style.log_axis(ax_d, "y", 0.05, 5)
        ax_d.set_xlabel("head dim d")
        ax_d.set_ylabel("time per score (ps)")
        ax_d.grid(True, alpha=0.25)
        ax_d.legend(loc="upper left", fontsize=style.SMALL)
        return [
            *self.bar_mma,
            *self.bar_exp,
            *self.bar_sm,
            *self.bar_poly,
            *self.bar_res,
            *self.tops,
            self.l_mma,
            self.l_exp,
            self.l_non,
            self.dot,
            ax.title,
            ax_d.title,
        ]

    def draw(self, r: FA4Numbers) -> str:
        t = r.t
        mma, exp_ = t.mma * PS, t.exp_mufu * PS
        sm, poly, res = t.fma_softmax * PS, t.fma_poly * PS, t.fma_rescale * PS
        self.bar_mma[0].set_height(mma)
        self.bar_exp[0].set_height(exp_)
        self.bar_sm[0].set_height(sm)
        self.bar_poly[0].set_y(sm)
        self.bar_poly[0].set_height(poly)
        self.bar_res[0].set_y(sm + poly)
        self.bar_res[0].set_height(res)
        top = Y_HEADROOM * max(r.mma.max(), r.exp_only.max(), t.fma * PS)
        if self.ax.get_ylim()[1] != top:
            self.ax.set_ylim(0, top)
        slow = int(np.argmax(t.times))
        for i, v in enumerate(t.times):
            self.tops[i].set_position((i, v * PS + 0.02 * top))
            self.tops[i].set_text(f"{v * PS:.3f}" + (" ◀ binds" if i == slow else ""))
        self.l_mma.set_data(r.dims, r.mma)
        self.l_exp.set_data(r.dims, r.exp_only)
        self.l_non.set_data(r.dims, r.nonmma)
        self.dot.set_data([t.d], [max(t.exp_mufu, t.fma) * PS])
        self.ax.set_title(f"{t.gpu}, d={t.d}: poly {t.poly_share:.0%}, skip {t.skip:.0%}")
        self.ax_d.set_title(f"{t.gpu} along d (poly {t.poly_share:.0%}, skip {t.skip:.0%})")
        return (
            f"{t.gpu}, d = {t.d}: tensor cores {mma:.3f} ps per score, exp unit {exp_:.3f}, FMA pipe "
            f"{t.fma * PS:.3f}: <b>{UNITS[slow]} bind{'s' if slow else ''}</b>; the tensor cores are busy "
            f"{t.tensor_utilization:.0%} of the time (all exps on MUFU: "
            f"{min(1.0, t.mma / max(t.exp_all_mufu, t.mma)):.0%})."
        )
