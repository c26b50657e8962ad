"""One place for the course's plot style: colours per algorithm, figure size and number formats."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg", force=False)  # explorers draw off-screen; notebooks show PNGs

from matplotlib.figure import Figure  # noqa: E402

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
