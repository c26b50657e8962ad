"""Every explorer's toggle buttons show their labels whole and sit beside their description."""

from __future__ import annotations

import ipywidgets as widgets
import pytest

from attnlab.explore import EXPLORERS
from attnlab.explore._controls import button_width, toggle


def test_button_width_fits_the_longest_label():
    assert button_width(["fa1", "fa2"]) == "76px"  # short labels keep 76 px
    assert int(button_width(["FP8 e4m3", "FP4 e2m1"])[:-2]) >= 85  # measured: the text needs 85
    assert toggle("x", ["a", "b"], "a", width="96px").style.button_width == "96px"


def _controls(cls):
    """An explorer's controls at its defaults; `controls()` computes nothing, so most explorers
    give them without building a figure."""
    try:
        return cls.__new__(cls).controls()
    except AttributeError:  # controls read what __init__ sets
        return cls().widgets


@pytest.mark.parametrize("name", list(EXPLORERS))
def test_toggles_show_every_label_in_one_row(name):
    for key, w in _controls(EXPLORERS[name]).items():
        if not isinstance(w, widgets.ToggleButtons):
            continue
        need = 20 + 8 * max(len(label) for label in w._options_labels)  # 10 px padding a side
        assert int(w.style.button_width[:-2]) >= need, (name, key, w._options_labels)
        assert w.layout.display == "flex" and w.layout.flex_flow.startswith("row"), (name, key)
