"""One place for the course's plot style: colours, sizes, fonts, tick formatters, number formats
and text tables. Explorers and static figures take every one of these from here."""

from __future__ import annotations

import contextlib
import textwrap

import matplotlib as mpl
import numpy as np
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

# Figures here are never attached to pyplot (explorers draw through their own Agg canvas), so the
# learner's own matplotlib backend is left alone.
from matplotlib.figure import Figure

from attnlab.fmt import binary_bytes, magnitude, seconds, si, table  # noqa: F401  (the notebooks' names)

COLORS = {
    "standard": "#d62728",
    "fa1": "#1f77b4",
    "fa2": "#2ca02c",
    "bound": "#7f7f7f",
    "compute": "#9467bd",
    "memory": "#ff7f0e",
    "highlight": "#ffbf00",
    "muted": "#c7c7c7",
}
LABELS = {
    "standard": "standard (Alg. 0)",
    "fa1": "FlashAttention (FA1 order)",
    "fa2": "FlashAttention-2 order",
    "bound": "N²d²/M (lower-bound order)",
}

DPI = 100  # explorer PNGs: 1,000 px wide, sharp at 100 % zoom (200 dpi doubles the cost: README)
STATIC_DPI = 120  # committed figures: no time budget, so a little sharper
WIDTH = 10.0  # inches; two panels side by side
#: Fonts no smaller than 9 pt anywhere (legends and annotations included).
RC = {
    "font.size": 10,
    "axes.titlesize": 10.5,
    "axes.labelsize": 10,
    "xtick.labelsize": 9.5,
    "ytick.labelsize": 9.5,
    "legend.fontsize": 9,
    "legend.title_fontsize": 9,
    "figure.titlesize": 11,
}
MARGIN = (0.02, 0.0, 0.965, 0.99)  # explorer layout rect: room for ticks that move to an edge
SMALL = 9  # the smallest font size used (annotations, keys)
ERROR_COLOR = "#b2182b"
#: How a refused value shows inside a figure: one style for every explorer.
ERROR = {
    "fontsize": 11,
    "color": ERROR_COLOR,
    "wrap": False,
    "bbox": {"boxstyle": "round,pad=0.6", "fc": "#fff5f0", "ec": ERROR_COLOR, "lw": 1.2},
}


@contextlib.contextmanager
def context():
    """rc settings under which every course figure is made (fonts are fixed at creation)."""
    with mpl.rc_context(RC):
        yield


def wrap(text: str, width: int = 70) -> str:
    return "\n".join(textwrap.wrap(str(text), width)) or str(text)


def new_figure(ncols: int = 1, height: float = 3.6, width: float = WIDTH) -> Figure:
    """A static figure not attached to pyplot (so it never pops up twice), with `ncols` axes."""
    with context():
        fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
        fig.subplots(1, ncols)
    return fig


def count(x, _pos=None) -> str:
    """Tick label for a count in SI units: 1e12 -> '1 T', 5e4 -> '50 k'."""
    return si(x)


def legend_below(ax, handles=None, labels=None, ncol: int = 2, **kw):
    """A legend under its own panel, off the data (constrained layout makes room for it)."""
    if handles is not None:
        kw["handles"] = handles
    if labels is not None:
        kw["labels"] = labels
    return ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.17),
        ncol=ncol,
        frameon=False,
        columnspacing=1.2,
        handlelength=1.8,
        **kw,
    )


def plain(x, _pos=None) -> str:
    """Tick label as a plain number: 0.5 -> '0.5', 8192 -> '8,192'."""
    return f"{x:g}" if abs(x) < 1 else f"{x:,.0f}"


def decades(lo: float, hi: float) -> list[float]:
    """Powers of ten from below `lo` to above `hi`."""
    return [10.0**e for e in range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)]


def log_axis(ax, which: str, lo: float, hi: float, ticks=None, formatter=plain) -> None:
    """A fixed log axis from lo to hi with ticks at the decades (or `ticks`), labelled as plain
    numbers, no minor ticks: the one log-axis style of the course."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    (ax.set_xlim if which == "x" else ax.set_ylim)(lo, hi)
    ticks = [t for t in decades(lo, hi) if lo <= t <= hi] if ticks is None else list(ticks)
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(formatter))
    axis.set_minor_locator(NullLocator())


def k_label(n: int) -> str:
    """Token counts as on the lecture's axes: 1024 -> '1K', 32768 -> '32K', 100 -> '100'."""
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def pow2_axis(ax, lo: float, hi: float, every: int = 1) -> None:
    """A log2 x axis with ticks at the powers of two between lo and hi, labelled 64, 1K, 32K."""
    ax.set_xscale("log", base=2)
    ticks = [1 << k for k in range(int(np.ceil(np.log2(lo))), int(np.floor(np.log2(hi))) + 1)]
    ticks = ticks[::every]
    ax.set_xticks(ticks, [k_label(t) for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())


def show(fig, dpi: int = STATIC_DPI):
    """A figure as a static PNG output (IPython Image): readable in the committed notebook
    without a kernel, and independent of the matplotlib backend in use."""
    import io

    from IPython.display import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return Image(data=buf.getvalue(), format="png")
