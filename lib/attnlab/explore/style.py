"""One place for the course's plot style: colours, figure size, number formats and text tables."""
from __future__ import annotations

import math

# Figures here are never attached to pyplot (explorers draw through their own Agg canvas), so the
# learner's own matplotlib backend is left alone.
from matplotlib.figure import Figure

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
LABELS = {"standard": "standard (Alg. 0)", "fa1": "FlashAttention (FA1 order)",
          "fa2": "FlashAttention-2 order", "bound": "N²d²/M (lower-bound order)"}

DPI = 72          # small PNGs keep a slider move under 100 ms on a 2-core CPU
WIDTH = 10.0      # inches; two panels side by side


def new_figure(ncols: int = 1, height: float = 3.6, width: float = WIDTH) -> Figure:
    """A figure not attached to pyplot (so it never pops up twice), with `ncols` axes."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    fig.subplots(1, ncols)
    return fig


def si(x: float, unit: str = "", digits: int = 3) -> str:
    """Engineering format: si(9_355_264) -> '9.36 M', si(3.35e12, 'B/s') -> '3.35 TB/s'."""
    x = float(x)
    for f, p in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= f:
            return f"{x / f:.{digits}g} {p}{unit}"
    return f"{x:.{digits}g} {unit}".rstrip()


def seconds(t: float) -> str:
    """'1.32 s', '83.1 ms', '12.4 µs'."""
    t = float(t)
    if t >= 1:
        return f"{t:.3g} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3g} ms"
    return f"{t * 1e6:.3g} µs"


def magnitude(x: float) -> str:
    """An error's decade, stable across runs and library versions: 1.1e-16 -> '~1e-16',
    4.2e-07 -> '~1e-7', 0 -> '0'. (Strict nbval compares text; last digits may move.)"""
    x = abs(float(x))
    if x == 0:
        return "0"
    return f"~1e{math.floor(math.log10(x))}"


def table(rows, columns, formats=None) -> str:
    """Plain-text table for notebook output (reproducible under strict nbval).

    rows: list of dicts; columns: {key: header}; formats: {key: format spec or callable}.
    Text columns are left-aligned, numbers right-aligned.
    """
    formats = formats or {}
    cells, left = [], []
    for k in columns:
        left.append(all(isinstance(r[k], str) for r in rows))
    for r in rows:
        line = []
        for k in columns:
            f = formats.get(k, "")
            v = r[k]
            line.append(f(v) if callable(f) else format(v, f))
        cells.append(line)
    heads = list(columns.values())
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(heads)]

    def fmt(values):
        return "  ".join(v.ljust(w) if lft else v.rjust(w)
                         for v, w, lft in zip(values, widths, left)).rstrip()

    out = [fmt(heads), "  ".join("-" * w for w in widths)]
    out += [fmt(line) for line in cells]
    return "\n".join(out)


def show(fig, dpi: int = 90):
    """A figure as a static PNG output (IPython Image): readable in the committed notebook
    without a kernel, and independent of the matplotlib backend in use."""
    import io

    from IPython.display import Image
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return Image(data=buf.getvalue(), format="png")
