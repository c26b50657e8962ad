"""The one explorer contract: controls -> pure numbers -> artists moved in place -> a PNG.

A subclass says four things and nothing else:

    class IOExplorer(Explorer):
        name = "io_vs_n"                          # key in attnlab.explore.EXPLORERS
        def controls(self) -> dict:               # name -> ipywidget, at the lecture's defaults
        def compute(self, **values) -> Result:    # pure: control values -> a frozen dataclass
        def build(self, figure) -> list:          # make axes and artists once; return the moving ones
        def draw(self, result) -> str:            # move those artists; return the summary (HTML)

and may override `linked(name, value)` to adjust other controls when one changes (a new GPU offers
other dtypes; a new grid size moves the last step), always inside the base's `hold()`.

The base does the rest, once for every explorer:
- `compute` runs exactly once per change (`set(a=1, b=2)` or `with ex.hold():` is one change);
- the figure is made once; what `build` returns is drawn over a cached background (axes, ticks,
  labels, legends), redrawn in full only when an axis limit or scale changed: blitting;
- a `ValueError` from `compute` (a learner's typed value the model refuses) is shown inside the
  figure in one style, over the last good picture, and in the summary line;
- `set()` refuses unknown controls (ValueError) and values a control cannot take (`check_value`:
  TypeError for a wrong type, a bool for a number included; ValueError for None, NaN, inf, out of
  range, not an option), naming the control and what it accepts (never a raw traitlets error), and
  a refused `set()` leaves the controls, the picture and the error state exactly as they were.

Nothing here re-derives a formula: numbers come from layers 1 and 2 through `compute`.

This file is long because it is the whole contract every explorer shares (checking and rolling
back control values, one compute per change, blitting, errors in the figure): split, each part
would reach into the others' state.
"""

from __future__ import annotations

import contextlib
import struct
import time
import zlib
from collections import OrderedDict
from typing import ClassVar

import ipywidgets as widgets
import numpy as np
import traitlets
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.transforms import Bbox, IdentityTransform

from attnlab.explore import style
from attnlab.explore._controls import accepted, check_value

__all__ = ["Explorer", "REGISTRY", "readonly", "png_rgb"]

#: Backgrounds kept per explorer (one per recent axis state; ~2 MB each at 100 dpi).
BACKGROUNDS = 24
#: Panel outlines kept per explorer (a few numbers each): what a panel redrawn alone must wipe.
BOXES = 512
#: Attributes the base owns; `build` must not rebind them (an artist named `image` would hide the
#: PNG widget the notebook shows).
_RESERVED = ("widgets", "image", "summary", "figure", "canvas")
#: Every concrete explorer class, by name, in the order their modules were imported.
REGISTRY: dict[str, type["Explorer"]] = {}


def readonly(*arrays):
    """Read-only float/int arrays for a result (a caller writing into one would corrupt every
    later call that shares a cache). One array in, one out; several in, a tuple out."""
    out = []
    for a in arrays:
        a = np.array(a, copy=True)
        a.setflags(write=False)
        out.append(a)
    return out[0] if len(out) == 1 else tuple(out)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_rgb(rgb: np.ndarray) -> bytes:
    """An (h, w, 3) uint8 picture as a PNG, every row unfiltered, zlib at its fastest level. A
    plot is flat colour, so a row filter buys little size, and choosing one per row (what PIL
    does) takes longer than compressing: this writes it in half of PIL's time, the same pixels."""
    h, w, _ = rgb.shape
    rows = np.zeros((h, 3 * w + 1), np.uint8)  # each row: filter type 0, then RGB
    rows[:, 1:] = rgb.reshape(h, 3 * w)
    head = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", head)
        + _chunk(b"IDAT", zlib.compress(rows.data, 1))
        + _chunk(b"IEND", b"")
    )


class Explorer:
    """Controls plus one persistent figure; see the module docstring for the contract."""

    name: ClassVar[str] = ""
    #: figure size in inches (width, height); the DPI is style.DPI for every explorer
    size: ClassVar[tuple[float, float]] = (style.WIDTH, 3.9)
    #: where the box of a refused value sits (figure fraction) and its width in characters: a
    #: subclass moves it off a label it would cover
    error_xy: ClassVar[tuple[float, float]] = (0.5, 0.5)
    error_width: ClassVar[int] = 70

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.name:
            if cls.name in REGISTRY and REGISTRY[cls.name] is not cls:
                raise TypeError(f"two explorers are named {cls.name!r}")
            REGISTRY[cls.name] = cls

    # --- what a subclass provides ---------------------------------------------------------
    def controls(self) -> dict:
        raise NotImplementedError(f"{type(self).__name__} must define controls()")

    def compute(self, **values):
        raise NotImplementedError(f"{type(self).__name__} must define compute(**values)")

    def build(self, figure) -> list:
        raise NotImplementedError(f"{type(self).__name__} must define build(figure)")

    def draw(self, result) -> str:
        raise NotImplementedError(f"{type(self).__name__} must define draw(result)")

    def background_key(self, result):
        """What the static artists (those `build` did not return) show besides the axis limits,
        as a hashable value; `draw` may update static artists only when this changes. Default:
        nothing (static artists never change after `build`)."""
        return None

    def linked(self, name: str, value) -> None:
        """Called (inside `hold()`) when control `name` changed to `value`, before the refresh:
        adjust other controls here. Default: nothing is linked."""

    # --- the machinery --------------------------------------------------------------------
    def __init__(self, **values):
        self.widgets: dict[str, widgets.Widget] = dict(self.controls())
        self.renders = 0  # refreshes done (one per change)
        self.computes = 0  # calls of compute (equal to renders, by contract)
        self.full_draws = 0  # refreshes that redrew the whole background
        self.partial_draws = 0  # refreshes that redrew the background of some panels
        self.last_render_s = 0.0
        self.error: str | None = None
        self._shown: dict = {}  # the control values of the last good picture
        self._holds = 0
        self._restoring = False
        self._dirty = False
        self._background = None
        self._backgrounds: OrderedDict = OrderedDict()  # axis state -> rendered background
        self._boxes: OrderedDict = OrderedDict()  # (panel, its state, key) -> its outline drawn
        self._want_boxes = True  # outlines are kept from the start, and later once a panel was redrawn alone
        self._limits = None
        self._key = None
        self.image = widgets.Image(format="png", layout=widgets.Layout(width="auto"))
        self.summary = widgets.HTML()
        with style.context():
            self.figure = Figure(figsize=self.size, dpi=style.DPI, layout="constrained")
            # a margin for tick labels that move to the edge after the layout is frozen
            self.figure.get_layout_engine().set(rect=style.MARGIN)
            self.canvas = FigureCanvasAgg(self.figure)
            own = {n: getattr(self, n) for n in _RESERVED}
            self.dynamic = list(self.build(self.figure) or [])
            for n, value in own.items():
                if getattr(self, n) is not value:
                    raise TypeError(
                        f"{type(self).__name__}.build replaced the base's attribute {n!r} "
                        f"(reserved: {', '.join(_RESERVED)}); give the artist another name"
                    )
            self._error_text = self.figure.text(
                *self.error_xy, "", ha="center", va="center", visible=False, zorder=100, **style.ERROR
            )
        self.dynamic.append(self._error_text)
        # white, in display coordinates: clears one panel's region before it is redrawn
        self._wipe = Rectangle(
            (0, 0),
            1,
            1,
            transform=IdentityTransform(),
            fc=self.figure.get_facecolor(),
            ec="none",
            lw=0,
            antialiased=False,
        )
        self._wipe.set_figure(self.figure)
        self._assign(values, link=True)  # before observing: no refresh per value
        result = self.compute(**self.values)  # a bad starting value fails here, by name
        for w in self.widgets.values():
            w.observe(self._on_change, names="value")
        self._render(result)
        # Lay the figure out once, then freeze it: constrained layout costs more than the draw.
        self.figure.set_layout_engine("none")
        self._background = None
        self._backgrounds.clear()
        self.render()  # the frozen layout's background: the first move blits
        self._want_boxes = False

    @property
    def values(self) -> dict:
        return {k: w.value for k, w in self.widgets.items()}

    def _assign(self, values: dict, link: bool = False) -> None:
        """Give the controls `values`, each checked by `check_value` just before it is assigned
        (a linked control's options may follow an earlier one: set(variant=..., param=...)). If
        any is refused, every control is put back as it was (options, ranges, labels, values) and
        nothing is refreshed: a refused set() leaves the explorer exactly as it was."""
        unknown = sorted(set(values) - set(self.widgets))
        if unknown:
            raise ValueError(
                f"unknown control(s) {unknown} for explorer {self.name!r}; valid: {sorted(self.widgets)}"
            )
        saved, dirty = self._save(), self._dirty
        try:
            for k, v in values.items():
                w = self.widgets[k]
                v = check_value(k, w, v)
                try:
                    w.value = v
                except (traitlets.TraitError, KeyError, TypeError) as e:
                    raise ValueError(
                        f"{k}={v!r} is not a value of control {w.description!r}; valid: {accepted(w)}"
                    ) from e
                if link:  # not observed yet: apply the links by hand
                    self.linked(k, w.value)
        except BaseException:
            self._restore(saved)
            self._dirty = dirty
            raise

    #: the traits of a control that `linked` may change, restored in this order (options first)
    _TRAITS = ("options", "min", "max", "step", "description", "disabled", "value")

    def _save(self) -> dict:
        return {
            k: {t: getattr(w, t) for t in self._TRAITS if w.has_trait(t)} for k, w in self.widgets.items()
        }

    def _restore(self, saved: dict) -> None:
        self._restoring = True  # no links, no refresh while putting back
        try:
            for k, traits in saved.items():
                w = self.widgets[k]
                order = [t for t in self._TRAITS if t in traits]
                if "min" in traits and "max" in traits and traits["min"] > w.max:
                    order[order.index("min")], order[order.index("max")] = "max", "min"
                for t in order:
                    if getattr(w, t) != traits[t]:
                        setattr(w, t, traits[t])
        finally:
            self._restoring = False

    @contextlib.contextmanager
    def hold(self):
        """Change several controls as one: `with ex.hold(): ...` refreshes once, at the end."""
        self._holds += 1
        try:
            yield self
        finally:
            self._holds -= 1
            if self._holds == 0 and self._dirty:
                self.refresh()

    def set(self, **values) -> "Explorer":
        """Set several controls at once (one refresh), as a learner moving sliders would."""
        with self.hold():
            self._assign(values)
            self._dirty = True
        return self

    def _on_change(self, change) -> None:
        if self._restoring:
            return
        with self.hold():
            self._dirty = True
            self.linked(self._name_of(change["owner"]), change["new"])

    def _name_of(self, widget) -> str:
        return next(k for k, w in self.widgets.items() if w is widget)

    def refresh(self) -> None:
        """Compute once from the controls' values, move the artists, send a new PNG."""
        self._dirty = False
        try:
            result = self.compute(**self.values)
        except ValueError as e:
            result, self.error = None, str(e)
        self._render(result)

    def _render(self, result) -> None:
        t0 = time.perf_counter()
        self.computes += 1
        if result is not None:
            self.error = None
            with style.context():  # texts set here get the course's fonts
                self.summary.value = self.draw(result) or ""
            self._key = self.background_key(result)
            self._error_text.set_visible(False)
            self._shown = self.values
        else:
            message = self._sentence(self.error) + self._stale_note()
            self._error_text.set_text(style.wrap(message, self.error_width))
            self._error_text.set_visible(True)
            self.summary.value = f"<span style='color:{style.ERROR_COLOR}'>{message}</span>"
        self.image.value = self.png()
        self.renders += 1
        self.last_render_s = time.perf_counter() - t0

    @staticmethod
    def _sentence(text: str) -> str:
        """`text` ending with a full stop (the note that may follow it is a sentence of its own)."""
        text = text.rstrip()
        return text if text.endswith((".", "!", "?")) else text + "."

    def _stale_note(self) -> str:
        """What the picture under a refused value shows: the last good values of the controls
        that moved since (its titles must not be read as the refused ones)."""
        old = {k: v for k, v in self._shown.items() if self.values.get(k) != v}
        if not old:
            return ""
        return (
            " The figure still shows the last valid values: "
            + ", ".join(f"{k} = {v}" for k, v in old.items())
            + "."
        )

    # --- drawing --------------------------------------------------------------------------
    def _axis_state(self):
        return [
            (ax.get_xlim(), ax.get_ylim(), ax.get_xscale(), ax.get_yscale(), ax.get_visible())
            for ax in self.figure.axes
        ]

    def render(self, full: bool = False) -> None:
        """Draw into the canvas: a background (axes, ticks, labels, legends) plus the moving
        artists. Backgrounds are kept for the last few axis states, so moving a slider back and
        forth redraws nothing but the moving artists; a new state redraws only the panels whose
        limits changed (a full draw costs several times a blit); `full` redraws everything.
        A panel redrawn alone is first wiped over its outline as drawn before and as it will be
        drawn now (tick labels that moved away leave no half glyph behind)."""
        axes = tuple(self._axis_state())
        state = (axes, self._key)
        for a in self.dynamic:
            a.set_animated(True)
        if full:
            self._backgrounds.clear()
            self._background = None
        if state == self._limits and self._background is not None:
            self.canvas.restore_region(self._background)  # nothing static changed
        elif state in self._backgrounds:
            self.canvas.restore_region(self._backgrounds[state])
            self._backgrounds.move_to_end(state)
        else:
            before = None if self._limits is None else self._limits[0]
            changed = (
                []
                if before is None or len(axes) != len(before) or self._limits[1] != self._key
                else [ax for ax, a, b in zip(self.figure.axes, axes, before) if a != b]
            )
            renderer = self.canvas.get_renderer()
            alone = self._background is not None and 0 < len(changed) < len(axes)
            where = [self.figure.axes.index(ax) for ax in changed]
            drawn = [self._boxes.get((i, before[i], self._limits[1])) for i in where] if alone else []
            self._want_boxes |= alone  # this explorer redraws panels alone
            if not alone or None in drawn:  # (a panel's old outline unknown: draw it all)
                self.canvas.draw()  # everything except the moving artists
                self.full_draws += 1
                if len(axes) > 1 and self._want_boxes:  # what a panel redrawn alone will wipe
                    for i, ax in enumerate(self.figure.axes):
                        self._box(i, axes[i], self._static_box(ax, renderer))
            else:
                self.canvas.restore_region(self._background)
                for i, ax, old in zip(where, changed, drawn):  # wipe the panels with their labels...
                    now = self._static_box(ax, renderer)
                    box = Bbox.union([now, old]).expanded(1.01, 1.01)
                    x0, y0, x1, y1 = np.floor(box.x0), np.floor(box.y0), np.ceil(box.x1), np.ceil(box.y1)
                    self._wipe.set_bounds(x0, y0, x1 - x0, y1 - y0)  # whole pixels, none half wiped
                    self._wipe.draw(renderer)
                    self._box(i, axes[i], now)
                for ax in changed:  # ...then redraw them (no wipe covers a redrawn one)
                    ax.draw(renderer)
                self.partial_draws += 1
            self._backgrounds[state] = self.canvas.copy_from_bbox(self.figure.bbox)
            while len(self._backgrounds) > BACKGROUNDS:
                self._backgrounds.popitem(last=False)
        self._background = self._backgrounds.get(state, self._background)
        self._limits = state
        for a in self.dynamic:
            if a.get_visible():
                self.figure.draw_artist(a)
        for a in self.dynamic:  # savefig and snapshots see a complete figure
            a.set_animated(False)

    @staticmethod
    def _static_box(ax, renderer):
        """The outline of what panel `ax` puts into the background: its axes, ticks, labels and
        title and the static artists, not the moving ones (drawn over the background anyway)."""
        still = [a for a in ax.get_default_bbox_extra_artists() if not a.get_animated()]
        return ax.get_tightbbox(renderer, bbox_extra_artists=still)

    def _box(self, i: int, state, box) -> None:
        """Remember panel i's outline as drawn in axis state `state` (with the current key)."""
        self._boxes[(i, state, self._key)] = box
        while len(self._boxes) > BOXES:
            self._boxes.popitem(last=False)

    def png(self, full: bool = False) -> bytes:
        """The current picture as PNG bytes (`png_rgb`: time matters more than size)."""
        self.render(full)
        return png_rgb(np.asarray(self.canvas.buffer_rgba())[..., :3])

    def snapshot(self):
        """The figure as a static PNG for a committed notebook output (readable without a kernel)."""
        return style.show(self.figure)

    @property
    def widget(self) -> widgets.Widget:
        """Controls in rows of two, then the image, then the summary line."""
        ws = list(self.widgets.values())
        rows = [widgets.HBox(ws[i : i + 2]) for i in range(0, len(ws), 2)]
        return widgets.VBox([*rows, self.image, self.summary])

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)

    def __repr__(self) -> str:
        vals = ", ".join(f"{k}={v!r}" for k, v in self.values.items())
        return f"<{type(self).__name__} {self.name!r}: {vals}>"
