"""The course's controls: thin factories over ipywidgets, each laid out so its whole description
shows (no "queries/step l_…"), each range being the valid input range of the model behind it."""

from __future__ import annotations

import numbers

import ipywidgets as widgets
import numpy as np

from attnlab.validate import short

__all__ = [
    "slider",
    "steps",
    "dropdown",
    "toggle",
    "button_width",
    "checkbox",
    "text",
    "check_value",
    "accepted",
    "options_of",
]

_STYLE = {"description_width": "initial"}
_WIDTH = "440px"


def slider(description: str, value, lo, hi, step=1, *, log: bool = False, readout_format=None):
    """An int, float or log slider; `log` spaces stops by `step` decades."""
    kw = {} if readout_format is None else {"readout_format": readout_format}
    common = dict(
        description=description,
        style=_STYLE,
        layout=widgets.Layout(width=_WIDTH),
        continuous_update=True,
        **kw,
    )
    if log:
        return widgets.FloatLogSlider(
            value=value, base=10, min=np.log10(lo), max=np.log10(hi), step=step, **common
        )
    ints = all(isinstance(x, int) for x in (value, lo, hi, step))
    cls = widgets.IntSlider if ints else widgets.FloatSlider
    return cls(value=value, min=lo, max=hi, step=step, **common)


def steps(description: str, options, value):
    """A slider over a fixed list of values (powers of two, SRAM sizes): every stop is valid.
    `options` may hold (label, value) pairs."""
    return widgets.SelectionSlider(
        options=list(options),
        value=value,
        description=description,
        style=_STYLE,
        layout=widgets.Layout(width=_WIDTH),
        continuous_update=True,
    )


def dropdown(description: str, options, value=None):
    """A dropdown over `options` (a list, or {label: value}); `value` defaults to the first."""
    if value is None:
        value = list(options.values())[0] if isinstance(options, dict) else list(options)[0]
    return widgets.Dropdown(
        options=options,
        value=value,
        description=description,
        style=_STYLE,
        layout=widgets.Layout(width=_WIDTH),
    )


_BUTTON_MIN = 76  # px: the narrowest toggle button, as wide as a short label needs
_BUTTON_PAD = 20  # px: a button's padding, 10 on each side
_CHAR_PX = 8.5  # px per character of a 13 px label, rounded up ("FP8 e4m3": 65 px)


def button_width(labels) -> str:
    """The width (CSS px) at which the longest of `labels` shows whole on a toggle button: at least
    76 px, wider for a longer label ("FP8 e4m3" needs 85, and gets 88)."""
    longest = max((len(str(x)) for x in labels), default=0)
    return f"{max(_BUTTON_MIN, int(np.ceil(_BUTTON_PAD + _CHAR_PX * longest)))}px"


def toggle(description: str, options, value=None, *, width: str | None = None):
    """Buttons for a few named choices (loop order, dtype), the description on their left in the
    same row. `options` may hold (label, value) pairs; every button is as wide as the longest
    label needs (`button_width`), or `width` (CSS, e.g. "96px") when given."""
    options = list(options)
    labels = [o[0] if isinstance(o, tuple) else o for o in options]
    return widgets.ToggleButtons(
        options=options,
        value=value,
        description=description,
        style={**_STYLE, "button_width": width or button_width(labels)},
        layout=widgets.Layout(display="flex", flex_flow="row nowrap", align_items="baseline"),
    )


def checkbox(description: str, value: bool = False):
    return widgets.Checkbox(
        value=value, description=description, indent=False, layout=widgets.Layout(width=_WIDTH)
    )


def text(description: str, value: str, width: str = "560px"):
    """A text box that reports its value on Enter or when it loses focus."""
    return widgets.Text(
        value=value,
        description=description,
        style=_STYLE,
        continuous_update=False,
        layout=widgets.Layout(width=width),
    )


def options_of(w) -> tuple:
    """The values a selection control (slider of stops, dropdown, buttons) can take."""
    vals = getattr(w, "_options_values", None)
    if vals is None:
        vals = [o[1] if isinstance(o, tuple) else o for o in w.options]
    return tuple(vals)


def _is_bool(v) -> bool:
    return isinstance(v, (bool, np.bool_))


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not _is_bool(v)


def _kind(v) -> str:
    return "bool" if _is_bool(v) else "number" if _is_number(v) else "str" if isinstance(v, str) else "other"


def check_value(name: str, w, v):
    """`v` as control `w` (named `name`) takes it, or an error: what a widget would silently coerce
    is refused. A slider clamps out-of-range numbers and an IntSlider truncates 2.5 to 2; a bool is
    not a number (True is not 1 split); a Checkbox takes 'False' as truthy; a Text takes only
    strings; None, NaN and inf are no value of any control. Wrong type -> TypeError, wrong value ->
    ValueError, both naming the control, the value and what it accepts. Nothing is assigned here."""
    got = f"{short(v)} ({type(v).__name__})"
    if v is None and not (hasattr(w, "options") and None in options_of(w)):
        raise ValueError(f"{name}=None is not a value of this control; valid: {accepted(w)}")
    if isinstance(w, widgets.Checkbox):
        if not _is_bool(v):
            raise TypeError(f"{name} must be True or False, got {got}")
        return bool(v)
    if isinstance(w, widgets.Text):
        if not isinstance(v, str):
            raise TypeError(f"{name} must be a string, got {got}")
        return v
    if hasattr(w, "options"):
        opts = options_of(w)
        kinds = {_kind(o) for o in opts}
        if _kind(v) not in kinds:
            want = " or ".join(
                sorted(
                    {"bool": "True or False", "number": "a number", "str": "a string", "other": "an option"}[
                        k
                    ]
                    for k in kinds
                )
            )
            raise TypeError(f"{name} must be {want} (one of {accepted(w)}), got {got}")
        for o in opts:
            if _kind(o) != _kind(v):
                continue
            try:
                same = bool(o == v)
            except (TypeError, ValueError):
                same = False
            if same:
                return o
        raise ValueError(f"{name}={short(v)} is not one of the options; valid: {accepted(w)}")
    if isinstance(w, (widgets.IntSlider, widgets.FloatSlider, widgets.FloatLogSlider)):
        if not _is_number(v):
            raise TypeError(f"{name} must be a number, got {got}")
        try:
            f = float(v)
        except OverflowError:  # an int beyond float64
            f = float("inf")
        if not np.isfinite(f):
            raise ValueError(f"{name}={short(v)} is not a finite number; valid: {accepted(w)}")
        lo, hi = (w.base**w.min, w.base**w.max) if isinstance(w, widgets.FloatLogSlider) else (w.min, w.max)
        if isinstance(w, widgets.IntSlider):
            if not f.is_integer():
                raise ValueError(f"{name}={short(v)} is not an integer; valid: integers {accepted(w)}")
            v = int(v) if isinstance(v, numbers.Integral) else int(f)
            if not lo <= v <= hi:
                raise ValueError(f"{name}={v!r} is out of range; valid: {accepted(w)}")
            return v
        tol = 1e-12 * max(abs(lo), abs(hi))
        if not lo - tol <= f <= hi + tol:
            raise ValueError(f"{name}={short(v)} is out of range; valid: {accepted(w)}")
        return min(max(f, lo), hi)
    return v


def accepted(w) -> str:
    """What control `w` accepts, in words, for an error message."""
    if hasattr(w, "options") and w.options:
        return ", ".join(map(repr, options_of(w)))
    if isinstance(w, widgets.FloatLogSlider):
        return f"{w.base**w.min:g} to {w.base**w.max:g}"
    if hasattr(w, "min") and hasattr(w, "max"):
        return f"{w.min} to {w.max}"
    if isinstance(w, widgets.Checkbox):
        return "True or False"
    return "a string" if isinstance(w, widgets.Text) else type(w).__name__
