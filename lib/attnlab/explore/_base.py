"""Thin widget glue shared by every explorer: controls -> pure numbers -> artists updated in place.

An explorer keeps ONE matplotlib figure alive for its whole life. A slider move calls
`update(**values)`, which changes data on existing artists (never rebuilds axes), then the figure
is drawn once and sent to an `ipywidgets.Image` as a PNG. The same object shows its figure as a
static PNG (`explorer.figure`) for the committed notebook output, and pytest drives it by setting
control values (`explorer.set(N=1024)`) exactly as a learner's slider does.
"""
from __future__ import annotations

import io
import time
from typing import Callable

import ipywidgets as widgets
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from PIL import Image as PILImage

from . import style

__all__ = ["Explorer", "slider", "steps", "dropdown", "toggle", "checkbox"]


class Explorer:
    """Controls plus one persistent figure.

    controls: name -> ipywidget with a `.value`; the names are `update`'s keyword arguments.
    update:   called with every control's value; moves artists, returns an HTML summary line.
    compute:  the pure function behind the figure (params -> numbers), kept for tests and bench.
    """

    def __init__(self, name: str, controls: dict, figure, update: Callable[..., str],
                 compute: Callable | None = None, dynamic=()):
        self.name = name
        self.controls = dict(controls)
        self.figure = figure
        self.canvas = FigureCanvasAgg(figure)
        self._update = update
        self.compute = compute
        self.image = widgets.Image(format="png", layout=widgets.Layout(width="auto"))
        self.summary = widgets.HTML()
        self.renders = 0
        self.full_draws = 0
        self.last_render_s = 0.0
        self._hold = False
        self._refreshing = False
        # Blitting: artists that sliders move are drawn over a cached background (axes, ticks,
        # labels, legends); the background is redrawn only when some axis limit changed.
        self.dynamic = list(dynamic)
        self._background = None
        self._limits = None
        for w in self.controls.values():
            w.observe(self._on_change, names="value")
        self.refresh()
        # Lay the figure out once, then freeze it: constrained layout costs more than the draw.
        if self.figure.get_layout_engine() is not None:
            self.figure.set_layout_engine("none")
            self._background = None

    # --- state -----------------------------------------------------------------------------
    @property
    def values(self) -> dict:
        return {k: w.value for k, w in self.controls.items()}

    def set(self, **values) -> "Explorer":
        """Set several controls at once (one redraw), as a learner moving sliders would."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; valid: {sorted(self.controls)}")
        self._hold = True
        try:
            for k, v in values.items():
                self.controls[k].value = v
        finally:
            self._hold = False
        self.refresh()
        return self

    def _on_change(self, _change) -> None:
        # An update may itself adjust a control (clamp a step slider to a new maximum): that
        # change is already part of the refresh in progress.
        if not self._hold and not self._refreshing:
            self.refresh()

    # --- drawing ---------------------------------------------------------------------------
    def refresh(self) -> None:
        t0 = time.perf_counter()
        self._refreshing = True
        try:
            self.summary.value = self._update(**self.values) or ""
            self.image.value = self.png()
        finally:
            self._refreshing = False
            for a in self.dynamic:                  # keep savefig/static display complete
                a.set_animated(False)
        self.renders += 1
        self.last_render_s = time.perf_counter() - t0

    def _axis_state(self):
        return tuple((ax.get_xlim(), ax.get_ylim(), ax.get_xscale(), ax.get_yscale())
                     for ax in self.figure.axes)

    def draw(self) -> None:
        """Render into the canvas: background from cache plus the moving artists, or a full
        draw when the layout or a limit changed."""
        state = self._axis_state()
        if not self.dynamic or self._background is None or state != self._limits:
            for a in self.dynamic:
                a.set_animated(True)
            self.canvas.draw()                      # everything except the dynamic artists
            self._background = self.canvas.copy_from_bbox(self.figure.bbox)
            self._limits = state
            self.full_draws += 1
        else:
            self.canvas.restore_region(self._background)
        for a in self.dynamic:
            if a.get_visible():
                self.figure.draw_artist(a)

    def png(self) -> bytes:
        """Draw the figure and encode it fast (low zlib level: size matters less than time)."""
        self.draw()
        rgba = np.asarray(self.canvas.buffer_rgba())
        buf = io.BytesIO()
        PILImage.fromarray(rgba[..., :3]).save(buf, format="png", compress_level=1)
        return buf.getvalue()

    def snapshot(self):
        """The figure as a static PNG for a committed notebook output (readable without a kernel)."""
        return style.show(self.figure)

    @property
    def widget(self) -> widgets.Widget:
        rows, row = [], []
        for w in self.controls.values():
            row.append(w)
            if len(row) == 3:
                rows.append(widgets.HBox(row)); row = []
        if row:
            rows.append(widgets.HBox(row))
        return widgets.VBox([*rows, self.image, self.summary])

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)

    def __repr__(self) -> str:
        vals = ", ".join(f"{k}={v!r}" for k, v in self.values.items())
        return f"<{self.name} explorer: {vals}>"


def slider(description: str, value, lo, hi, step=1, *, log: bool = False, readout_format=None,
           width: str = "320px"):
    """An int/float/log slider with the course's layout; its range is the valid input range."""
    style = {"description_width": "110px"}
    layout = widgets.Layout(width=width)
    if log:
        kw = {} if readout_format is None else {"readout_format": readout_format}
        return widgets.FloatLogSlider(value=value, base=10, min=np.log10(lo), max=np.log10(hi),
                                      step=step, description=description, style=style,
                                      layout=layout, continuous_update=True, **kw)
    cls = widgets.IntSlider if all(isinstance(x, int) for x in (value, lo, hi, step)) else widgets.FloatSlider
    kw = {} if readout_format is None else {"readout_format": readout_format}
    return cls(value=value, min=lo, max=hi, step=step, description=description, style=style,
               layout=layout, continuous_update=True, **kw)


def dropdown(description: str, options, value=None, width: str = "320px"):
    """A dropdown over `options` (a list, or {label: value}); `value` defaults to the first."""
    if value is None:
        value = list(options.values())[0] if isinstance(options, dict) else list(options)[0]
    return widgets.Dropdown(options=options, value=value, description=description,
                            style={"description_width": "110px"}, layout=widgets.Layout(width=width))


def steps(description: str, options, value, width: str = "320px"):
    """A slider over a fixed list of values (powers of two, SRAM sizes): every stop is valid."""
    return widgets.SelectionSlider(options=list(options), value=value, description=description,
                                   style={"description_width": "110px"},
                                   layout=widgets.Layout(width=width), continuous_update=True)


def toggle(description: str, options, value=None):
    return widgets.ToggleButtons(options=options, value=value, description=description,
                                 style={"description_width": "110px", "button_width": "70px"})


def checkbox(description: str, value: bool = False):
    return widgets.Checkbox(value=value, description=description, indent=False)
