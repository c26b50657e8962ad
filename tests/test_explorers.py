"""Every explorer, driven as a learner drives it, against the one contract of explore/_base.py:
every reachable control value renders, compute runs once per change and returns a frozen
dataclass with read-only arrays, the fast (blitted) redraw shows the same picture as a full
redraw, a refused value is shown in the figure and never raises out of a slider, values a control
cannot take are refused by name, and every axis is labelled with fonts a learner can read."""
from __future__ import annotations

import dataclasses
import io
import warnings

import numpy as np
import pytest
from matplotlib.text import Text
from PIL import Image

from attnlab.explore import EXPLORERS, Explorer, style
from attnlab.explore._drive import candidate_values, extremes


def _pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)


@pytest.fixture(params=list(EXPLORERS))
def explorer(request):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)      # no NaN/overflow warnings at defaults
        return EXPLORERS[request.param]()


def test_registry_holds_every_explorer_class():
    assert len(EXPLORERS) >= 10
    for name, cls in EXPLORERS.items():
        assert issubclass(cls, Explorer) and cls.name == name
        for method in ("controls", "compute", "build", "draw"):
            assert getattr(cls, method) is not getattr(Explorer, method), f"{name} lacks {method}"


def test_the_widget_shows_the_png_and_the_summary(explorer):
    """What a notebook displays: the controls, the PNG image widget and the summary HTML."""
    import ipywidgets
    assert isinstance(explorer.image, ipywidgets.Image) and isinstance(explorer.summary, ipywidgets.HTML)
    box = explorer.widget
    assert explorer.image in box.children and explorer.summary in box.children


def test_build_may_not_rebind_the_base_attributes():
    class Bad(Explorer):
        def controls(self):
            from attnlab.explore._controls import slider
            return {"x": slider("x", 1, 0, 2)}

        def compute(self, x):
            return x

        def build(self, fig):
            self.image = fig.subplots().imshow(np.zeros((2, 2)))
            return [self.image]

        def draw(self, r):
            return ""
    with pytest.raises(TypeError, match="image"):
        Bad()


def test_every_control_value_renders_once(explorer):
    """Slider extremes and every discrete stop: no exception, no RuntimeWarning, one compute and
    one new PNG per change."""
    defaults = explorer.values
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for name, w in explorer.widgets.items():
            for value in candidate_values(w) + extremes(w):
                before, computes = explorer.renders, explorer.computes
                explorer.set(**{name: value})
                assert explorer.renders == before + 1
                assert explorer.computes == computes + 1
                assert explorer.image.value[:8] == b"\x89PNG\r\n\x1a\n"
            explorer.set(**{name: defaults[name]})


def test_hold_changes_several_controls_as_one(explorer):
    before = explorer.computes
    with explorer.hold():
        for name, w in explorer.widgets.items():
            other = [v for v in candidate_values(w) if v != w.value]
            if other:
                w.value = other[0]                    # as a linked widget or a learner would
    assert explorer.computes == before + 1


def test_compute_returns_a_frozen_dataclass_with_readonly_arrays(explorer):
    r = explorer.compute(**explorer.values)
    assert dataclasses.is_dataclass(r) and not isinstance(r, dict)
    field = dataclasses.fields(r)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(r, field, None)

    def arrays(x, depth=0):
        if isinstance(x, np.ndarray):
            yield x
        elif dataclasses.is_dataclass(x) and depth < 3:
            for f in dataclasses.fields(x):
                yield from arrays(getattr(x, f.name), depth + 1)
        elif isinstance(x, (tuple, list)) and depth < 3:
            for y in x:
                yield from arrays(y, depth + 1)
        elif isinstance(x, dict) and depth < 3:
            for y in x.values():
                yield from arrays(y, depth + 1)
    for a in arrays(r):
        assert not a.flags.writeable, f"{explorer.name}: a result array is writable"


def test_slider_move_changes_the_picture(explorer):
    """Every control changes the pixels when moved away from its default."""
    for name, w in explorer.widgets.items():
        base = _pixels(explorer.image.value)
        default = w.value
        changed = False
        for value in candidate_values(w):
            if value != default:
                explorer.set(**{name: value})
                img = _pixels(explorer.image.value)
                changed = img.shape != base.shape or bool(np.any(img != base))
                if changed:
                    break
        explorer.set(**{name: default})
        assert changed, f"{explorer.name}: moving {name} does not change the picture"


def test_blitted_redraw_equals_full_redraw(explorer):
    """The fast path (cached background, panels redrawn alone) draws what a full redraw draws."""
    for name, w in explorer.widgets.items():
        for value in [v for v in candidate_values(w) if v != explorer.values[name]][-2:]:
            explorer.set(**{name: value})
            fast = _pixels(explorer.image.value)
            full = _pixels(explorer.png(full=True))
            assert fast.shape == full.shape
            diff = np.abs(fast - full).max(axis=2)
            # anti-aliasing of a redrawn edge may differ by a few levels; no region may differ
            assert (diff > 40).mean() < 1e-3, f"{explorer.name}: blit differs after {name}={value!r}"


def test_axes_are_labelled_and_text_is_readable(explorer):
    fig = explorer.figure
    assert fig.dpi >= 100
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison:
            continue
        assert ax.get_xlabel().strip(), f"{explorer.name}: an axis has no x label"
        assert ax.get_ylabel().strip(), f"{explorer.name}: an axis has no y label"
        assert ax.get_title().strip(), f"{explorer.name}: an axis has no title"
    for t in fig.findobj(Text):
        if t.get_text().strip() and t.get_visible():
            assert t.get_fontsize() >= style.SMALL, f"{explorer.name}: {t.get_text()!r} is too small"


def test_every_text_and_legend_sits_inside_the_figure(explorer):
    """No title, label, annotation or legend is cut off at the figure's edge, at the defaults
    and after each control moves to its extremes."""
    def check():
        renderer = explorer.canvas.get_renderer()
        fb = explorer.figure.bbox
        boxes = [(ax.get_title() or "an axis", ax.get_tightbbox(renderer))
                 for ax in explorer.figure.axes if ax.get_visible()]
        boxes += [("a legend", leg.get_window_extent(renderer)) for leg in explorer.figure.legends]
        boxes += [(t.get_text(), t.get_window_extent(renderer)) for t in explorer.figure.texts
                  if t.get_visible() and t.get_text().strip()]
        for label, b in boxes:
            assert b.x0 >= fb.x0 - 1 and b.x1 <= fb.x1 + 1 and b.y0 >= fb.y0 - 1 and b.y1 <= fb.y1 + 1, \
                f"{explorer.name}: {label!r} (with its ticks, labels, legend) leaves the figure ({b})"
    check()
    for name, w in explorer.widgets.items():
        default = w.value
        for value in extremes(w):
            explorer.set(**{name: value})
            check()
        explorer.set(**{name: default})


def test_unknown_control_and_impossible_values_are_refused_by_name(explorer):
    with pytest.raises(ValueError, match="nonexistent"):
        explorer.set(nonexistent=1)
    for name, w in explorer.widgets.items():
        if hasattr(w, "options"):
            bad = "no such option"
        elif hasattr(w, "max"):
            bad = (w.base ** w.max if hasattr(w, "base") else w.max) * 10 + 1
        else:
            continue
        with pytest.raises(ValueError, match=name):
            explorer.set(**{name: bad})
        with pytest.raises((TypeError, ValueError), match=name):
            explorer.set(**{name: object()})
    assert explorer.error is None                     # refused values never reached the figure


def test_compute_error_is_shown_in_the_figure():
    ex = EXPLORERS["online_softmax"]()
    ex.set(text="1e308, -1e308")
    assert ex.error and "1e+308" in ex.error and ex._error_text.get_visible()
    assert "1e+308" in ex.summary.value
    ex.set(text="1, 2, nan")
    assert "nan" in ex.error
    ex.set(text="1, 3, 2")
    assert ex.error is None and not ex._error_text.get_visible()


def test_flags_must_be_bools():
    ex = EXPLORERS["io_vs_n"]()
    with pytest.raises(TypeError, match="causal"):
        ex.set(causal="False")
    with pytest.raises(TypeError, match="causal"):
        EXPLORERS["tile_grid"](causal=1)


def test_int_slider_refuses_fractions():
    ex = EXPLORERS["merge"]()
    with pytest.raises(ValueError, match="splits"):
        ex.set(splits=2.5)
    ex.set(splits=3.0)                                # an integral float is an integer
    assert ex.values["splits"] == 3


def test_random_walk_blits_what_a_full_redraw_draws(explorer):
    """A seeded walk of 24 control moves, back and forth, so cached backgrounds are reused and
    panels are redrawn alone: after every move the picture equals a full redraw."""
    rng = np.random.default_rng(len(explorer.name))
    names = list(explorer.widgets)
    for _ in range(24):
        name = names[rng.integers(len(names))]
        values = candidate_values(explorer.widgets[name])
        explorer.set(**{name: values[rng.integers(len(values))]})
        fast = _pixels(explorer.image.value)
        kept = dict(explorer._backgrounds)            # the full redraw must not empty the cache
        full = _pixels(explorer.png(full=True))
        explorer._backgrounds.update(kept)
        diff = np.abs(fast - full).max(axis=2)
        assert (diff > 40).mean() < 1e-3, f"{explorer.name}: blit differs after {name} at {explorer.values}"
