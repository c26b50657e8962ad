"""The prefill-cost explorer (notebook 02, §2.3): time and memory of one prefill with standard
attention against the prompt length, for a model (at its own head dim, or reshaped) on a GPU."""

from __future__ import annotations

import numpy as np

from attnlab.machine.hardware import get_gpu, gpus
from attnlab.explore import style
from attnlab.explore._base import Explorer
from attnlab.explore._controls import dropdown, steps, toggle
from attnlab.explore.standard.prefill import (
    HEAD_DIMS,
    MEM_LIM,
    N_GRID,
    N_STEPS,
    SRAM,
    TIME_LIM,
    PrefillCurves,
    dense_model,
    dense_models,
    prefill_curves,
)

__all__ = ["PrefillCostExplorer"]


class PrefillCostExplorer(Explorer):
    """Controls: prompt length N, GPU, head dim (picking a model sets its own; another value
    reshapes it keeping heads x d), model.

    Left: time of one prefill against N (log-log), every kernel at its roofline: with standard
    attention, with FlashAttention, the extra time between them and the compute at peak; N marked. Right: S + P of one
    layer against N, FlashAttention's m and l beside it, the GPU's HBM as a horizontal line.
    """

    name = "prefill_cost"
    size = (style.WIDTH, 4.4)

    def __init__(
        self, model: str = "Llama-3-8B", gpu: str = "H100-SXM", head_dim: int | None = None, n: int = 32768
    ):
        m = dense_model(model)
        super().__init__(
            n=n, gpu=get_gpu(gpu).name, model=m.name, head_dim=m.head_dim if head_dim is None else head_dim
        )

    def controls(self):
        return {
            "n": steps("prompt length N", [(style.k_label(v), v) for v in N_STEPS], 32768),
            "gpu": dropdown("GPU", gpus(), "H100-SXM"),
            "head_dim": toggle("head dim d", list(HEAD_DIMS), 128),
            "model": dropdown("model", dense_models(), "Llama-3-8B"),
        }

    def linked(self, name, value):
        if name == "model":  # a model comes with its own head dim
            self.widgets["head_dim"].value = dense_model(value).head_dim

    def compute(self, n, gpu, head_dim, model):
        return prefill_curves(model, gpu, head_dim, n)

    def build(self, fig):
        ax_t, ax_m = self.ax_t, self.ax_m = fig.subplots(1, 2)
        c = style.COLORS
        (self.t_comp,) = ax_t.plot(
            [], [], color=c["compute"], lw=1.5, ls=(0, (1, 1.5)), label="compute at peak (matmuls)"
        )
        (self.t_std,) = ax_t.plot([], [], color=c["standard"], lw=2, label="prefill, standard attention")
        (self.t_flash,) = ax_t.plot(
            [], [], color=c["fa1"], lw=2, ls=(0, (5, 2)), label="prefill, FlashAttention"
        )
        (self.t_extra,) = ax_t.plot(
            [],
            [],
            color=c["standard"],
            lw=5,
            alpha=0.3,
            solid_capstyle="butt",
            label="extra: standard − FlashAttention",
            zorder=2,
        )
        (self.t_dots,) = ax_t.plot([], [], "o", color="black", ms=5, zorder=3)
        self.t_mark = ax_t.axvline(32768, color="black", lw=1.2, ls=":")
        self.t_note = ax_t.text(
            0.97,
            0.04,
            "",
            transform=ax_t.transAxes,
            ha="right",
            va="bottom",
            fontsize=style.SMALL,
            color=c["standard"],
            bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": "none"},
        )
        (self.m_sp,) = ax_m.plot([], [], color=c["standard"], lw=2, label="S + P, standard (one layer)")
        (self.m_ml,) = ax_m.plot(
            [], [], color=c["fa1"], lw=1.5, ls="--", label="m, ℓ in fp32, FlashAttention"
        )
        self.m_hbm = ax_m.axhline(MEM_LIM[0], color=c["bound"], lw=2, label="the GPU's HBM capacity")
        self.m_hbm_txt = ax_m.text(
            N_GRID[0] * 1.1, MEM_LIM[0], "", fontsize=style.SMALL, color="#444444", va="bottom"
        )
        (self.m_dots,) = ax_m.plot([], [], "o", color="black", ms=5, zorder=3)
        self.m_mark = ax_m.axvline(32768, color="black", lw=1.2, ls=":")
        x = N_GRID
        for ax in (ax_t, ax_m):
            ax.set_yscale("log")
            style.pow2_axis(ax, x[0], x[-1])
            ax.set_xlim(x[0] / 1.15, x[-1] * 1.15)
            ax.grid(True, alpha=0.25)
            ax.minorticks_off()
            ax.set_xlabel("prompt length N (tokens)")
        ax_t.set_ylim(*TIME_LIM)
        tt = [1e-4, 1e-3, 1e-2, 1e-1, 1, 10, 100, 1000]
        ax_t.set_yticks(tt, ["100 µs", "1 ms", "10 ms", "100 ms", "1 s", "10 s", "100 s", "1000 s"])
        ax_t.set_ylabel("time of one prefill (s)")
        ax_m.set_ylim(*MEM_LIM)
        mt = [2.0**k for k in range(20, 44, 5)]
        ax_m.set_yticks(mt, [style.binary_bytes(v) for v in mt])
        ax_m.set_ylabel("memory for one layer (bytes)")
        # two legends, one shown at a time: no extra entry when there is no extra time to draw
        self.leg_all = style.legend_below(ax_t, [self.t_comp, self.t_std, self.t_flash, self.t_extra], ncol=2)
        self.leg_no_extra = style.legend_below(ax_t, [self.t_comp, self.t_std, self.t_flash], ncol=2)
        ax_t.add_artist(self.leg_all)
        self.leg_all.set_clip_on(False)
        style.legend_below(ax_m, ncol=1)
        return [
            self.t_comp,
            self.t_std,
            self.t_flash,
            self.t_extra,
            self.t_dots,
            self.t_mark,
            self.t_note,
            self.leg_all,
            self.leg_no_extra,
            self.m_sp,
            self.m_ml,
            self.m_hbm,
            self.m_hbm_txt,
            self.m_dots,
            self.m_mark,
            ax_t.title,
            ax_m.title,
        ]

    def draw(self, r: PrefillCurves) -> str:
        x, p, n = r.N, r.at_n, r.at_n["N"]
        self.t_comp.set_data(x, r.compute_s)
        self.t_std.set_data(x, r.standard_s)
        self.t_flash.set_data(x, r.flash_s)
        self.t_extra.set_data(x, np.where(r.extra_s > 0, r.extra_s, np.nan))  # log axes: hide 0
        has_extra = bool(np.any(r.extra_s > 0))
        self.leg_all.set_visible(has_extra)
        self.leg_no_extra.set_visible(not has_extra)
        self.t_note.set_text(
            ""
            if has_extra
            else f"no extra band: at d = {r.head_dim} with M = {SRAM:,}, FA1's\n"
            f"count moves as much as standard attention,\n"
            f"so this model cannot show FlashAttention's benefit"
        )
        self.t_dots.set_data(
            [n] * 3, [p["standard_s"], p["flash_s"], p["extra_s"] if p["extra_s"] > 0 else np.nan]
        )
        self.m_sp.set_data(x, r.sp_bytes)
        self.m_ml.set_data(x, r.ml_bytes)
        self.m_hbm.set_ydata([r.hbm_bytes] * 2)
        self.m_hbm_txt.set_position((x[0] * 1.1, r.hbm_bytes * 1.15))
        self.m_hbm_txt.set_text(f"{r.gpu}: {style.binary_bytes(r.hbm_bytes)}")
        self.m_dots.set_data([n, n], [p["sp_bytes"], p["ml_bytes"]])
        self.t_mark.set_xdata([n, n])
        self.m_mark.set_xdata([n, n])
        shape = (
            f"{r.model} reshaped: {r.heads} heads × d={r.head_dim} (hypothetical)"
            if r.reshaped
            else f"{r.model}: {r.layers} layers × {r.heads} heads × d={r.head_dim}"
        )
        self.ax_t.set_title(f"Time of one prefill, {r.gpu}, bf16\n{shape}")
        self.ax_m.set_title(f"S+P memory of one layer\n{r.heads} heads, bf16")
        return summary(r)


def summary(r: PrefillCurves) -> str:
    """The explorer's summary line: both prefill times and their ratio, or why this model shows
    no gain."""
    p = r.at_n
    own = f"hypothetical reshape, width kept; its own d = {r.own_head_dim}" if r.reshaped else "its own shape"
    head = (
        f"{r.model} ({r.heads} heads × d = {r.head_dim}, {own}) on {r.gpu}, "
        f"N = {p['N']:,}, every kernel at its roofline: compute {style.seconds(p['compute_s'])}"
    )
    fit = "fits" if p["fits"] else "<b>does not fit</b>"
    memory = (
        f"S+P of one layer {style.binary_bytes(p['sp_bytes'])} vs HBM "
        f"{style.binary_bytes(r.hbm_bytes)}: {fit}; FlashAttention keeps "
        f"{style.binary_bytes(p['ml_bytes'])} of m, ℓ."
    )
    bound = (
        f"its kernel held by its own traffic, {style.seconds(p['flash_io_s'])}"
        if p["flash_s"] > p["compute_s"]
        else "its kernel compute-bound"
    )
    times = (
        f"FlashAttention {style.seconds(p['flash_s'])} ({bound}), standard attention "
        f"{style.seconds(p['standard_s'])}"
    )
    if p["total_ratio"] >= 1.05:
        cross = r.crossover_n
        where = (
            f"the extra passes compute near N ≈ {round(cross, -2):,.0f}"
            if cross is not None
            else "the extra stays below compute up to 4M tokens"
        )
        return f"{head}; {times} → <b>{p['total_ratio']:.2f}x</b> ({where}). {memory}"
    return (
        f"{head}; {times}: <b>{p['total_ratio']:.2f}x</b>. At d = {r.head_dim} with "
        f"M = {SRAM:,} elements FA1's tiles are {r.block_c} rows, and its count moves about as "
        f"much HBM traffic as standard attention, so <b>this traffic model cannot show "
        f"FlashAttention's benefit here</b>; a ratio near 1 does not mean FlashAttention gains "
        f"nothing. {memory} That memory benefit stands, and on real GPUs most K/V re-reads hit "
        f"L2, which this model does not count."
    )
