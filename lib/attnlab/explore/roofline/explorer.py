"""The roofline explorer (notebook 01, §1.3): one log-log panel of attainable TFLOP/s against
arithmetic intensity for a chosen GPU and dtype, the typical operators of `operators()` on it
(orange: memory-bound, purple: compute-bound) and your kernel (the star)."""

from __future__ import annotations

import math

from matplotlib.text import Text

from attnlab.machine.hardware import get_gpu, gpus
from attnlab.explore import style
from attnlab.explore._base import Explorer
from attnlab.explore._controls import dropdown, slider
from attnlab.explore.roofline.numbers import I_MAX, I_MIN, RooflinePoints, roofline_points
from attnlab.explore.roofline.tables import intensity_label

__all__ = ["RooflineExplorer"]

Y_MIN, Y_MAX = 0.1, 100_000.0  # TFLOP/s: every chip and dtype in gpus.json fits

# Label offsets (points) and alignment per operator: neighbouring points get labels on opposite
# sides of the roof line, and no label leaves the axes for any chip or dtype in gpus.json.
_LABEL_POS = {
    "elementwise": ((7, -5), "left", "top"),
    "softmax": ((7, -5), "left", "top"),
    "decode": ((-7, 5), "right", "bottom"),
    "standard": ((-7, 5), "right", "bottom"),
    "flash": ((7, -5), "left", "top"),
    # the two compute-bound points sit close together on the flat roof: matmul's label goes
    # below and to the left, FA-with-L2's above, each joined to its marker by a leader line
    "matmul": ((-14, -16), "right", "top"),
    "flash_l2": ((14, 18), "left", "bottom"),
}
_LEADER = {"matmul", "flash_l2"}
# FA-with-L2's label turns to the left of its marker when less than this many decades of x axis
# remain to its right (fp8 and fp4 put it at 4,096 and 8,192 FLOP/byte)
_L2_LABEL_ROOM = 0.6
_L2_LABEL_LEFT = ((-3, 26), "right", "bottom")

#: the box under the region labels and the two leader-line labels (which may span the ridge line
#: on the flat roof): white, so a line passing behind them does not cross the text
_LABEL_BOX = {"boxstyle": "square,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.9}

KEY = (
    "orange: memory-bound, purple: compute-bound; the number is the operator's FLOP/byte\n"
    "elementwise, softmax: over a 4096 x 4096 matrix;  decode: one query, 4096 keys, MHA\n"
    "std attn, FA: prefill attention, N = 4096, d = 128;  matmul: 4096 x 4096 x 4096\n"
    "FA, L2 (hollow): FlashAttention if L2 serves its K, V re-reads (a best case)\n"
    "\u2605 your kernel (slider)"
)


class RooflineExplorer(Explorer):
    """Dropdowns: GPU, dtype (only those the chip has); log slider: your kernel's intensity."""

    name = "roofline"
    size = (9.0, 5.6)

    def __init__(self, gpu: str = "H100-SXM", dtype: str = "bf16", intensity: float = 10.0):
        super().__init__(gpu=get_gpu(gpu).name, dtype=dtype, intensity=intensity)

    def controls(self):
        return {
            "gpu": dropdown("GPU", gpus(), "H100-SXM"),
            "dtype": dropdown("dtype", list(get_gpu("H100-SXM").dtypes), "bf16"),
            "intensity": slider(
                "your kernel's intensity (FLOP/byte)",
                10.0,
                I_MIN,
                I_MAX,
                0.05,
                log=True,
                readout_format=".3g",
            ),
        }

    def linked(self, name, value):
        if name == "gpu":  # a new chip offers only its own dtypes (bf16 if gone)
            w = self.widgets["dtype"]
            options = list(get_gpu(value).dtypes)
            if list(w.options) != options:
                keep = w.value if w.value in options else "bf16"
                w.options = options
                w.value = keep

    def compute(self, gpu, dtype, intensity):
        return roofline_points(gpu, dtype, intensity)

    def build(self, fig):
        ax = self.ax = fig.subplots()
        c = style.COLORS
        style.log_axis(ax, "x", I_MIN, I_MAX)
        style.log_axis(ax, "y", Y_MIN, Y_MAX)
        ax.grid(True, alpha=0.25)
        ax.set_xlabel("arithmetic intensity (FLOP per byte moved to/from HBM)")
        ax.set_ylabel("attainable throughput (TFLOP/s)")
        fig.text(
            0.5, 0.0, KEY, ha="center", va="bottom", fontsize=style.SMALL, linespacing=1.35, color="#333333"
        )
        self.shade = ax.axvspan(I_MIN, 295, color=c["memory"], alpha=0.07, lw=0)
        (self.roof,) = ax.plot([], [], color="k", lw=2)
        self.ridge_line = ax.axvline(295, color=c["bound"], ls="--", lw=1)
        self.ridge_text = ax.text(0, 0, "", fontsize=style.SMALL, color="#404040", ha="right", va="bottom")
        # the two region labels sit on a white box over the lines (your kernel's dotted line
        # passes under "memory-bound" wherever the slider puts it below the label)
        self.mem_text = ax.text(
            0,
            0.025,
            "memory-bound",
            color=c["memory"],
            ha="right",
            va="bottom",
            transform=ax.get_xaxis_transform(),
            zorder=6,
            bbox=_LABEL_BOX,
        )
        self.cmp_text = ax.text(
            0,
            0.025,
            "compute-bound",
            color=c["compute"],
            ha="left",
            va="bottom",
            transform=ax.get_xaxis_transform(),
            zorder=6,
            bbox=_LABEL_BOX,
        )
        self.dots, self.labels = {}, {}
        for k, (off, ha, va) in _LABEL_POS.items():
            (self.dots[k],) = ax.plot([], [], "o", ms=7, mec="k", mew=0.6, zorder=3)
            leader = (
                {"arrowstyle": "-", "lw": 0.7, "color": "#555555", "shrinkA": 1, "shrinkB": 4.5}
                if k in _LEADER
                else None
            )
            self.labels[k] = ax.annotate(
                "",
                (1, 1),
                xytext=off,
                textcoords="offset points",
                fontsize=style.SMALL,
                ha=ha,
                va=va,
                zorder=4,
                arrowprops=leader,
                bbox=_LABEL_BOX if k in _LEADER else None,
            )
        self.dots["flash_l2"].set_markerfacecolor("white")
        (self.user_line,) = ax.plot([], [], ":", color=c["highlight"], lw=1.5, zorder=2)
        (self.user_dot,) = ax.plot(
            [], [], "*", ms=16, color=c["highlight"], mec="k", mew=0.8, zorder=5, clip_on=False
        )  # the whole star even at the ends of the slider
        fig.get_layout_engine().set(rect=(0.012, 0.17, 0.976, 0.82))  # room for the key under the axes
        return [
            self.shade,
            self.roof,
            self.ridge_line,
            self.ridge_text,
            self.mem_text,
            self.cmp_text,
            *self.dots.values(),
            *self.labels.values(),
            self.user_line,
            self.user_dot,
            ax.title,
        ]

    def _clear_of_ridge(self, lab, pos, ridge: float) -> None:
        """Put an operator's label on its side of the marker, or on the other side where the ridge
        line would run through the text (fp32's ridge of 20 next to standard attention's 31)."""
        (dx, dy), ha, va = pos
        lab.xyann = (dx, dy)
        lab.set_horizontalalignment(ha)
        lab.set_verticalalignment(va)
        renderer = self.canvas.get_renderer()
        lab.update_positions(renderer)
        box = Text.get_window_extent(lab, renderer)
        x = self.ax.transData.transform((ridge, 1.0))[0]
        if box.x0 - 2 <= x <= box.x1 + 2:  # to the other side; a label below the roof
            below = dy < 0  # goes above it there, away from the marker
            lab.xyann = (-dx, -dy if below else dy)  # below-left on the slope
            lab.set_horizontalalignment("left" if ha == "right" else "right")
            lab.set_verticalalignment("bottom" if below else va)

    def draw(self, r: RooflinePoints) -> str:
        c, tf = style.COLORS, 1e12
        self.roof.set_data(r.grid, r.roof / tf)
        ridge, pk = r.ridge, r.peak / tf
        self.shade.set_x(I_MIN)
        self.shade.set_width(ridge - I_MIN)
        self.ridge_line.set_xdata([ridge, ridge])
        self.ridge_text.set_position((ridge / 1.12, pk * 2.0))
        self.ridge_text.set_text(f"ridge point\n{intensity_label(ridge)} FLOP/byte")
        self.mem_text.set_x(ridge / 1.15)
        self.cmp_text.set_x(ridge * 1.15)
        for o in r.operators:
            k, y = o.key, o.attainable / tf
            colour = c["memory"] if o.bound == "memory-bound" else c["compute"]
            self.dots[k].set_data([o.intensity], [y])
            if k == "flash_l2":
                self.dots[k].set_markeredgecolor(colour)
                self.dots[k].set_markeredgewidth(2)
            else:
                self.dots[k].set_markerfacecolor(colour)
            lab = self.labels[k]
            lab.xy = (o.intensity, y)
            lab.set_text(f"{o.short} {intensity_label(o.intensity)}")
            if k not in _LEADER:
                self._clear_of_ridge(lab, _LABEL_POS[k], ridge)
            if k == "flash_l2":
                room = math.log10(I_MAX / o.intensity) >= _L2_LABEL_ROOM
                off, ha, _va = _LABEL_POS[k] if room else _L2_LABEL_LEFT
                lab.xyann = off
                lab.set_horizontalalignment(ha)
        u = r.user
        uy = u.attainable / tf
        self.user_line.set_data([u.intensity, u.intensity], [Y_MIN, uy])
        self.user_dot.set_data([u.intensity], [uy])
        self.ax.set_title(
            f"Roofline of the {r.gpu}, {r.dtype}: HBM {r.bandwidth / 1e12:.2f} TB/s, peak {pk:,.4g} TFLOP/s"
        )
        colour = c["memory"] if u.bound == "memory-bound" else c["compute"]
        need = (
            f"it would need {ridge / u.intensity:.3g}x more FLOPs per byte to reach the peak"
            if u.bound == "memory-bound"
            else "more FLOPs per byte would not make it faster"
        )
        return (
            f"Your kernel at <b>{intensity_label(u.intensity)} FLOP/byte</b> can reach at most "
            f"<b>{style.si(u.attainable, 'FLOP/s')}</b> ({100 * u.fraction:.3g} % of the "
            f"{style.si(r.peak, 'FLOP/s')} {r.dtype} peak): "
            f"<b style='color:{colour}'>{u.bound}</b>; {need}. "
            f"Ridge point {intensity_label(ridge)} FLOP/byte."
        )
