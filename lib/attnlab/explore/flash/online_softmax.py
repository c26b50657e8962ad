"""Online softmax, step by step (notebook 03, §3.2): type a vector, choose how many numbers arrive
per step, and watch the running max m and running sum l, with the rescale factor each step
applies to what was summed before.

Pure part: `softmax_steps(x, chunk)` -> SoftmaxSteps. The steps themselves come from
`attnlab.core.softmax.online_softmax_trace`; nothing here re-derives them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.validate import as_int
from attnlab.core.softmax import SoftmaxStep, online_softmax, online_softmax_trace, softmax
from attnlab.explore import style
from attnlab.explore._base import Explorer, readonly
from attnlab.explore._controls import slider, text

__all__ = [
    "parse_vector",
    "SoftmaxSteps",
    "softmax_steps",
    "softmax_table",
    "OnlineSoftmaxExplorer",
    "LECTURE_X",
    "MAX_VALUES",
]

LECTURE_X = "1, 3, 2, 5, 4"
MAX_VALUES = 32
#: |x| above this cannot be exponentiated against its neighbours without overflow in e^(x - m)
#: sums of 32 terms: ±1e300 still works, ±1e308 overflows their differences to inf.
MAX_ABS = 1e300


def parse_vector(text: str) -> np.ndarray:
    """'1, 3, 2, 5, 4' -> array([1., 3., 2., 5., 4.]); commas or spaces; '-inf' allowed (a masked
    entry; a row of nothing but -inf is a fully masked row, whose softmax is all zeros). The
    errors name the vector x as the explorer labels it: no numbers, too many, NaN, +inf, a
    magnitude above 1e300 (its differences would overflow), or text that is not a number.

    >>> parse_vector("1, 3 2,5  4")
    array([1., 3., 2., 5., 4.])
    """
    if not isinstance(text, str):
        raise TypeError(f"x must be a string of numbers, got {text!r} ({type(text).__name__})")
    parts = [p for p in text.replace(",", " ").split() if p]
    if not parts:
        raise ValueError("x holds no numbers; type e.g. '1, 3, 2, 5, 4'")
    if len(parts) > MAX_VALUES:
        raise ValueError(f"x holds {len(parts)} numbers; valid: 1 to {MAX_VALUES}")
    try:
        x = np.array([float(p) for p in parts])
    except ValueError:
        raise ValueError(f"x = {text!r} is not a list of numbers") from None
    if np.isnan(x).any() or np.isposinf(x).any():
        raise ValueError(f"x = {text!r} holds nan or +inf; valid: finite numbers or -inf (masked)")
    big = np.isfinite(x) & (np.abs(x) > MAX_ABS)
    if big.any():
        raise ValueError(f"x holds {x[big][0]:g}; valid: |x| <= {MAX_ABS:g} (or -inf, masked)")
    return x


@dataclass(frozen=True)
class SoftmaxSteps:
    """The online pass over x in chunks of `chunk` numbers."""

    x: np.ndarray  # the vector (read-only)
    chunk: int  # numbers per step
    steps: tuple[SoftmaxStep, ...]  # one per chunk: its max and sum, rescale factors, new m and l
    p: np.ndarray  # softmax from the final (m, l)
    error: float  # max |p - one-pass softmax|


def softmax_steps(x, chunk: int = 2) -> SoftmaxSteps:
    """The online pass over x (a vector or the text a learner typed), `chunk` numbers per step.

    >>> r = softmax_steps("1, 3, 2, 5, 4", chunk=2)
    >>> [s.m for s in r.steps], round(r.steps[-1].l, 4)
    ([3.0, 5.0, 5.0], 1.5713)
    """
    x = parse_vector(x) if isinstance(x, str) else np.asarray(x, dtype=np.float64)
    chunk = as_int("chunk", chunk, 1, MAX_VALUES)
    trace = tuple(online_softmax_trace(x, chunk))
    p = online_softmax(x, chunk)
    err = float(np.abs(p - softmax(x)).max())  # an all -inf row: both are zeros
    return SoftmaxSteps(readonly(x), chunk, trace, readonly(p), err)


def softmax_table(trace) -> str:
    """The online pass as a text table: one row per step (chunk, its max and sum, rescale, m, l)."""
    rows = [
        {
            "step": i,
            "chunk": ", ".join(f"{v:g}" for v in s.chunk),
            "m_chunk": s.m_chunk,
            "l_chunk": s.l_chunk,
            "rescale": s.rescale,
            "chunk_scale": s.chunk_scale,
            "m": s.m,
            "l": s.l,
        }
        for i, s in enumerate(trace, 1)
    ]
    return style.table(
        rows,
        {
            "step": "step",
            "chunk": "chunk",
            "m_chunk": "chunk max",
            "l_chunk": "chunk sum",
            "m": "new m",
            "rescale": "x old l",
            "chunk_scale": "x chunk sum",
            "l": "new l",
        },
        {"m_chunk": "g", "l_chunk": ".4f", "rescale": ".4f", "chunk_scale": ".4f", "m": "g", "l": ".4f"},
    )


def _html_table(r: SoftmaxSteps) -> str:
    cell = "style='padding:2px 10px;text-align:right'"
    head = "".join(
        f"<th {cell}>{h}</th>"
        for h in ("step", "chunk", "chunk max", "chunk sum", "new m", "× old l", "× chunk sum", "new l")
    )
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td {cell}>{v}</td>"
            for v in (
                i,
                ", ".join(f"{v:g}" for v in s.chunk),
                f"{s.m_chunk:g}",
                f"{s.l_chunk:.4f}",
                f"{s.m:g}",
                f"{s.rescale:.4f}",
                f"{s.chunk_scale:.4f}",
                f"{s.l:.4f}",
            )
        )
        + "</tr>"
        for i, s in enumerate(r.steps, 1)
    )
    return (
        f"<table style='border-collapse:collapse'><tr>{head}</tr>{rows}</table>"
        f"softmax = [{', '.join(f'{v:.4f}' for v in r.p)}]; largest difference from the "
        f"one-pass softmax: {style.magnitude(r.error)}"
    )


class OnlineSoftmaxExplorer(Explorer):
    """Edit the vector, move the chunk size; see the running max m and sum l after each chunk.

    Left: the entries as bars (colour: which step reads them), masked entries as crosses, and the
    running max m as a step line. Right: l and the rescale factor e^(m_old - m_new) per step.
    """

    name = "online_softmax"
    size = (style.WIDTH, 3.6)

    def __init__(self, text: str = LECTURE_X, chunk: int = 2):
        super().__init__(text=text, chunk=chunk)

    def controls(self):
        return {"text": text("x =", LECTURE_X), "chunk": slider("chunk size (numbers per step)", 2, 1, 8)}

    def compute(self, text, chunk):
        return softmax_steps(text, chunk)

    def build(self, fig):
        ax_x, ax_l = self.ax_x, self.ax_l = fig.subplots(1, 2)
        c = style.COLORS
        idx = np.arange(MAX_VALUES)
        self.bars = ax_x.bar(idx, np.zeros(MAX_VALUES), alpha=0.6, color=c["fa1"])
        (self.m_line,) = ax_x.step([], [], where="post", color=c["standard"], lw=2)
        (self.masked,) = ax_x.plot([], [], "x", color=c["bound"], ms=9, mew=2)
        ax_x.set_xlabel("position i in x")
        ax_x.set_ylabel("value")
        style.legend_below(
            ax_x,
            [self.bars[0], self.m_line, self.masked],
            ["x (colour: its step)", "running max m", "masked entry (-inf)"],
        )
        (self.l_line,) = ax_l.plot([], [], "-o", color=c["fa1"], label="running sum l")
        (self.r_line,) = ax_l.plot([], [], "s:", color=c["memory"], label="rescale e^(m_old - m_new)")
        ax_l.set_xlabel("step (chunks seen)")
        ax_l.set_ylabel("l and the rescale factor")
        style.legend_below(ax_l)
        ax_l.grid(True, alpha=0.25)
        return [*self.bars, self.m_line, self.masked, self.l_line, self.r_line, ax_x.title, ax_l.title]

    def draw(self, r: SoftmaxSteps) -> str:
        c = style.COLORS
        x, n = r.x, r.x.size
        finite = np.isfinite(x)
        for i, bar in enumerate(self.bars):
            bar.set_visible(i < n)
            if i < n:
                bar.set_height(x[i] if finite[i] else 0.0)
                bar.set_color(c["fa1"] if (i // r.chunk) % 2 == 0 else c["fa2"])
        masked = np.flatnonzero(~finite)
        self.masked.set_data(masked, np.zeros(masked.size))
        seen = x[finite] if finite.any() else np.zeros(1)  # an all -inf row: only crosses
        lo, hi = min(seen.min(), 0.0), max(seen.max(), 0.0)
        pad = 0.12 * (hi - lo) if hi > lo else 1.0
        self.ax_x.set_ylim(lo - pad, hi + pad)
        self.ax_x.set_xlim(-0.6, n - 0.4)
        trace = r.steps
        ends = [s.stop - 0.5 for s in trace]
        self.m_line.set_data(
            [s.start - 0.5 for s in trace] + [ends[-1]], [s.m for s in trace] + [trace[-1].m]
        )
        k = np.arange(1, len(trace) + 1)
        self.l_line.set_data(k, [s.l for s in trace])
        self.r_line.set_data(k, [s.rescale for s in trace])
        self.ax_l.set_xlim(0.5, len(trace) + 0.5)
        self.ax_l.set_xticks(k if len(trace) <= 16 else k[::4])
        self.ax_l.set_ylim(-0.05, max(1.05, max(s.l for s in trace) * 1.1))
        self.ax_x.set_title(f"x ({n} entries) and the running max m\n{r.chunk} number(s) per step")
        self.ax_l.set_title(f"running sum l after each step\n{len(trace)} steps")
        return _html_table(r)
