"""Drive an explorer's controls as a learner would: the values each control can take, its extremes.

Used by `make bench` (timing) and the tests (every extreme of every control must render).
"""

from __future__ import annotations

import ipywidgets as widgets

__all__ = ["candidate_values", "extremes", "TEXT_SAMPLE"]

TEXT_SAMPLE = "0.5, -inf, 4, 1, 1, 9, -2.5, 3"


def candidate_values(w) -> list:
    """Values a learner can reach on control `w`: every stop of a discrete control, or the ends,
    the middle and the default of a continuous slider."""
    if isinstance(
        w, (widgets.SelectionSlider, widgets.Dropdown, widgets.ToggleButtons, widgets.RadioButtons)
    ):
        return [o[1] if isinstance(o, tuple) else o for o in w.options]
    if isinstance(w, widgets.Checkbox):
        return [not w.value, w.value]
    if isinstance(w, widgets.FloatLogSlider):
        return [w.base**w.min, w.base**w.max, w.value]
    if hasattr(w, "min") and hasattr(w, "max"):
        mid = w.min + (w.max - w.min) / 2
        if isinstance(w.value, int):
            mid = int(round((mid - w.min) / w.step) * w.step + w.min)
        return [w.min, w.max, mid, w.value]
    if isinstance(w, widgets.Text):  # a learner's own vector, with a masked entry
        return [TEXT_SAMPLE, w.value]
    raise TypeError(f"no candidate values for control {type(w).__name__}")


def extremes(w) -> list:
    """The first and last value a control can take (both ends of a slider's range)."""
    if isinstance(w, widgets.FloatLogSlider):
        return [w.base**w.min, w.base**w.max]
    if hasattr(w, "min") and hasattr(w, "max") and not hasattr(w, "options"):
        return [w.min, w.max]
    vals = candidate_values(w)
    return [vals[0], vals[-1]]
