"""The course's controls: thin factories over ipywidgets, each laid out so its whole description
shows (no "queries/step l_…"), each range being the valid input range of the model behind it."""
from __future__ import annotations

import ipywidgets as widgets
import numpy as np

__all__ = ["slider", "steps", "dropdown", "toggle", "checkbox", "text", "check_value", "accepted"]

_STYLE = {"description_width": "initial"}
_WIDTH = "440px"


def slider(description: str, value, lo, hi, step=1, *, log: bool = False, readout_format=None):
    """An int, float or log slider; `log` spaces stops by `step` decades."""
    kw = {} if readout_format is None else {"readout_format": readout_format}
    common = dict(description=description, style=_STYLE, layout=widgets.Layout(width=_WIDTH),
                  continuous_update=True, **kw)
    if log:
        return widgets.FloatLogSlider(value=value, base=10, min=np.log10(lo), max=np.log10(hi),
                                      step=step, **common)
    ints = all(isinstance(x, int) for x in (value, lo, hi, step))
    cls = widgets.IntSlider if ints else widgets.FloatSlider
    return cls(value=value, min=lo, max=hi, step=step, **common)


def steps(description: str, options, value):
    """A slider over a fixed list of values (powers of two, SRAM sizes): every stop is valid.
    `options` may hold (label, value) pairs."""
    return widgets.SelectionSlider(options=list(options), value=value, description=description,
                                   style=_STYLE, layout=widgets.Layout(width=_WIDTH),
                                   continuous_update=True)


def dropdown(description: str, options, value=None):
    """A dropdown over `options` (a list, or {label: value}); `value` defaults to the first."""
    if value is None:
        value = list(options.values())[0] if isinstance(options, dict) else list(options)[0]
    return widgets.Dropdown(options=options, value=value, description=description, style=_STYLE,
                            layout=widgets.Layout(width=_WIDTH))


def toggle(description: str, options, value=None):
    """Buttons for a few named choices (loop order, dtype)."""
    return widgets.ToggleButtons(options=list(options), value=value, description=description,
                                 style={**_STYLE, "button_width": "76px"})


def checkbox(description: str, value: bool = False):
    return widgets.Checkbox(value=value, description=description, indent=False,
                            layout=widgets.Layout(width=_WIDTH))


def text(description: str, value: str, width: str = "560px"):
    """A text box that reports its value on Enter or when it loses focus."""
    return widgets.Text(value=value, description=description, style=_STYLE,
                        continuous_update=False, layout=widgets.Layout(width=width))


def check_value(name: str, w, v) -> None:
    """Refuse what a widget would silently coerce: a slider clamps out-of-range numbers and an
    IntSlider truncates 2.5 to 2; a Checkbox takes 'False' as truthy; a Text takes only strings."""
    if isinstance(w, widgets.Checkbox):
        if not isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False, got {v!r} ({type(v).__name__})")
    elif isinstance(w, widgets.Text):
        if not isinstance(v, str):
            raise TypeError(f"{name} must be a string, got {v!r} ({type(v).__name__})")
    elif isinstance(w, (widgets.IntSlider, widgets.FloatSlider, widgets.FloatLogSlider)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must be a number, got {v!r} ({type(v).__name__})")
        if isinstance(w, widgets.IntSlider) and float(v) != int(v):
            raise ValueError(f"{name}={v!r} is not an integer; valid: integers {accepted(w)}")
        lo, hi = ((w.base ** w.min, w.base ** w.max) if isinstance(w, widgets.FloatLogSlider)
                  else (w.min, w.max))
        if not (np.isfinite(v) and lo * (1 - 1e-12) <= v <= hi * (1 + 1e-12)):
            raise ValueError(f"{name}={v!r} is out of range; valid: {accepted(w)}")


def accepted(w) -> str:
    """What control `w` accepts, in words, for an error message."""
    if hasattr(w, "options") and w.options:
        opts = [o[1] if isinstance(o, tuple) else o for o in w.options]
        return ", ".join(map(repr, opts))
    if isinstance(w, widgets.FloatLogSlider):
        return f"{w.base ** w.min:g} to {w.base ** w.max:g}"
    if hasattr(w, "min") and hasattr(w, "max"):
        return f"{w.min} to {w.max}"
    if isinstance(w, widgets.Checkbox):
        return "True or False"
    return "a string" if isinstance(w, widgets.Text) else type(w).__name__
