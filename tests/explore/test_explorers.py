"""Every explorer, driven as a learner drives it, against the one contract of explore/_base.py:
every reachable control value renders, compute runs once per change and returns a frozen
dataclass with read-only arrays, the fast (blitted) redraw shows the same picture as a full
redraw, a refused value is shown in the figure and never raises out of a slider, values a control
cannot take are refused by name and leave the explorer as it was, and every axis is labelled
with fonts a learner can read, inside the figure.

One explorer is built per class (module scope: a build costs 0.3-1 s) and one walk per explorer
checks every property after every move; the other tests reuse the same instance and put its
controls back at the defaults."""

from __future__ import annotations

import dataclasses
import io
import numbers
import warnings

import ipywidgets
import numpy as np
import pytest
from matplotlib.legend import Legend
from matplotlib.text import Text
from PIL import Image

from attnlab.explore import EXPLORERS, Explorer, style
from attnlab.explore._controls import options_of
from attnlab.explore._drive import candidate_values, extremes

#: anti-aliasing of a redrawn edge may differ by a few levels; no region may differ
LEVELS, AREA = 40, 1e-3


def _pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)


def _differs(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape != b.shape or (np.abs(a - b).max(axis=2) > LEVELS).mean() >= AREA


@pytest.fixture(scope="module", params=list(EXPLORERS))
def explorer(request):
    """One explorer per class for the whole module; `defaults` and `picture` (its first PNG's
    pixels) are kept on it, and each test that moves a control puts the defaults back."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no NaN/overflow warnings at defaults
        ex = EXPLORERS[request.param]()
    ex.defaults, ex.picture = ex.values, _pixels(ex.image.value)
    yield ex
    ex.figure.clear()


def _restore(ex) -> None:
    ex.set(**ex.defaults)
    assert ex.values == ex.defaults


# --- the class and the widget ---------------------------------------------------------------------


def test_registry_holds_every_explorer_class():
    assert len(EXPLORERS) >= 10
    for name, cls in EXPLORERS.items():
        assert issubclass(cls, Explorer) and cls.name == name
        for method in ("controls", "compute", "build", "draw"):
            assert getattr(cls, method) is not getattr(Explorer, method), f"{name} lacks {method}"


def test_the_widget_shows_the_png_and_the_summary(explorer):
    """What a notebook displays: the controls, the PNG image widget and the summary HTML."""
    assert isinstance(explorer.image, ipywidgets.Image) and isinstance(explorer.summary, ipywidgets.HTML)
    box = explorer.widget
    assert explorer.image in box.children and explorer.summary in box.children
    assert explorer.image.value[:8] == b"\x89PNG\r\n\x1a\n"


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


# --- the walk: every property after every move --------------------------------------------------


def _arrays(x, depth=0):
    if isinstance(x, np.ndarray):
        yield x
    elif dataclasses.is_dataclass(x) and depth < 3:
        for f in dataclasses.fields(x):
            yield from _arrays(getattr(x, f.name), depth + 1)
    elif isinstance(x, (tuple, list)) and depth < 3:
        for y in x:
            yield from _arrays(y, depth + 1)
    elif isinstance(x, dict) and depth < 3:
        for y in x.values():
            yield from _arrays(y, depth + 1)


def _check_result(ex, r) -> None:
    """What compute returned (seen by draw): a frozen dataclass whose arrays are read-only."""
    assert dataclasses.is_dataclass(r) and not isinstance(r, (dict, type))
    field = dataclasses.fields(r)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(r, field, None)
    for a in _arrays(r):
        assert not a.flags.writeable, f"{ex.name}: a result array is writable"


def _check_texts(ex, where: str, checked: set | None = None) -> None:
    """Labels and titles on every visible axis, fonts >= style.SMALL, dpi >= 100, and no title,
    label, annotation or legend cut off at the figure's edge. `checked`: the axis states (limits,
    scales, background key) whose axes were measured already; an axis with its ticks and labels
    is measured again only in a new state (its texts that move are measured every time)."""
    fig = ex.figure
    assert fig.dpi >= 100
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison:
            continue
        assert ax.get_xlabel().strip(), f"{ex.name}: an axis has no x label ({where})"
        assert ax.get_ylabel().strip(), f"{ex.name}: an axis has no y label ({where})"
        assert ax.get_title().strip(), f"{ex.name}: an axis has no title ({where})"
    for t in fig.findobj(Text):
        if t.get_text().strip() and t.get_visible():
            assert t.get_fontsize() >= style.SMALL, f"{ex.name}: {t.get_text()!r} is too small ({where})"
    renderer = ex.canvas.get_renderer()
    fb = fig.bbox
    state = (tuple(ex._axis_state()), ex._key)
    boxes = []
    if checked is None or state not in checked:
        boxes += [
            (ax.get_title() or "an axis", ax.get_tightbbox(renderer)) for ax in fig.axes if ax.get_visible()
        ]
        if checked is not None:
            checked.add(state)
    else:  # the same static picture: measure what moves
        boxes += [
            (t.get_text(), t.get_window_extent(renderer))
            for t in ex.dynamic
            if isinstance(t, Text) and t.get_visible() and t.get_text().strip()
        ]
        boxes += [
            ("a legend", a.get_window_extent(renderer))
            for a in ex.dynamic
            if isinstance(a, Legend) and a.get_visible()
        ]
    boxes += [("a legend", leg.get_window_extent(renderer)) for leg in fig.legends]
    boxes += [
        (t.get_text(), t.get_window_extent(renderer))
        for t in fig.texts
        if t.get_visible() and t.get_text().strip()
    ]
    for label, b in boxes:
        assert b.x0 >= fb.x0 - 1 and b.x1 <= fb.x1 + 1 and b.y0 >= fb.y0 - 1 and b.y1 <= fb.y1 + 1, (
            f"{ex.name}: {label!r} (with its ticks, labels, legend) leaves the figure ({b}) ({where})"
        )


def _move(ex, seen: list, values: dict, checked: set, *, full: bool = True) -> np.ndarray:
    """One learner's move (one set()), then every per-move property; returns the blitted picture.
    A move whose refresh drew the whole figure itself (a new state of every panel) is its own
    full redraw; every other one is compared with a full redraw made here."""
    before, computes, draws = ex.renders, ex.computes, (ex.full_draws, ex.partial_draws)
    seen.clear()
    ex.set(**values)
    where = f"after set({values}) at {ex.values}"
    assert ex.renders == before + 1 and ex.computes == computes + 1, f"{ex.name}: not one compute {where}"
    assert ex.image.value[:8] == b"\x89PNG\r\n\x1a\n"
    if ex.error is None:
        assert len(seen) == 1, f"{ex.name}: draw ran {len(seen)} times {where}"
        _check_result(ex, seen[0])
    fast = _pixels(ex.image.value)
    if full and (ex.full_draws, ex.partial_draws) != (draws[0] + 1, draws[1]):
        kept = dict(ex._backgrounds)  # the full redraw must not empty the cache
        ex.render(full=True)
        ref = np.asarray(ex.canvas.buffer_rgba())[..., :3].astype(np.int16)
        ex._backgrounds.update(kept)
        assert not _differs(fast, ref), f"{ex.name}: blit differs from a full redraw {where}"
    _check_texts(ex, where, checked)
    return fast


def test_walk_every_control_and_check_every_property(explorer):
    """Each control through every value a learner can reach (every stop; a slider's ends, middle
    and default), then back to its default; then a seeded walk that moves several controls away
    at once, back and forth, so cached backgrounds are reused and panels are redrawn alone. After
    every move: one compute and one new PNG, the result frozen and read-only, the blitted picture
    equal to a full redraw, text readable and inside the figure; back at the defaults the picture
    is the first one; and every control changes the picture. No RuntimeWarning anywhere."""
    ex, seen, checked = explorer, [], set()
    draw = ex.draw
    ex.draw = lambda r: (seen.append(r), draw(r))[1]  # the result compute handed to draw
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            _check_texts(ex, "at the defaults")
            for name, w in ex.widgets.items():
                default, changed = ex.values[name], False
                values = list({repr(v): v for v in candidate_values(w) + extremes(w)}.values())
                compare = [v for v in values if v != default][-2:]  # a full redraw costs 0.1-0.3 s
                for value in values:
                    fast = _move(ex, seen, {name: value}, checked, full=any(value is v for v in compare))
                    changed = changed or _differs(fast, ex.picture)
                assert changed or values == [default], f"{ex.name}: moving {name} does not change the picture"
                back = _move(ex, seen, ex.defaults, checked, full=False)  # linked controls come back too
                assert ex.values == ex.defaults
                assert not _differs(back, ex.picture), (
                    f"{ex.name}: back at {name}={default!r} the picture differs"
                )
            rng = np.random.default_rng(len(ex.name))
            names = list(ex.widgets)
            for _ in range(8):
                name = names[rng.integers(len(names))]
                values = candidate_values(ex.widgets[name])
                _move(ex, seen, {name: values[rng.integers(len(values))]}, checked)
    finally:
        del ex.draw
        _restore(ex)
    assert not _differs(_pixels(ex.image.value), ex.picture)


def test_hold_changes_several_controls_as_one(explorer):
    before = explorer.computes
    try:
        with explorer.hold():
            for name, w in explorer.widgets.items():
                other = [v for v in candidate_values(w) if v != w.value]
                if other:
                    w.value = other[0]  # as a linked widget or a learner would
        assert explorer.computes == before + 1
    finally:
        _restore(explorer)


# --- refusals -----------------------------------------------------------------------------------


def test_unknown_control_and_impossible_values_are_refused_by_name(explorer):
    with pytest.raises(ValueError, match="nonexistent"):
        explorer.set(nonexistent=1)
    for name, w in explorer.widgets.items():
        if hasattr(w, "options"):
            bad = "no such option"
        elif hasattr(w, "max"):
            bad = (w.base**w.max if hasattr(w, "base") else w.max) * 10 + 1
        else:
            continue
        # not an option of a list of names, or out of range: ValueError; a string for numbers: TypeError
        with pytest.raises(_expected(w, bad), match=name):
            explorer.set(**{name: bad})
        assert _expected(w, bad) is (
            TypeError
            if isinstance(bad, str) and not any(isinstance(o, str) for o in options_of(w))
            else ValueError
        )
        assert _expected(w, bad) is not None
        with pytest.raises((TypeError, ValueError), match=name):
            explorer.set(**{name: object()})
    assert explorer.error is None  # refused values never reached the figure


BAD = (None, True, np.True_, float("nan"), float("inf"), -float("inf"), "1", object())


def _expected(w, v):
    """The error a control must raise for `v` (None: `v` is a value it takes), written out from
    the rules: None, NaN, inf, a value out of range or not an option -> ValueError; a wrong type,
    a bool for a number included -> TypeError."""
    is_bool = isinstance(v, (bool, np.bool_))
    is_num = isinstance(v, numbers.Real) and not is_bool
    if isinstance(w, ipywidgets.Checkbox):
        return None if is_bool else ValueError if v is None else TypeError
    if isinstance(w, ipywidgets.Text):
        return None if isinstance(v, str) else ValueError if v is None else TypeError
    if v is None:
        return ValueError
    if hasattr(w, "options"):
        opts = options_of(w)
        strs = any(isinstance(o, str) for o in opts)
        nums = any(isinstance(o, numbers.Real) and not isinstance(o, (bool, np.bool_)) for o in opts)
        if (isinstance(v, str) and strs) or (is_num and nums):
            return None if any(type(o) is type(v) and o == v for o in opts) else ValueError
        return TypeError
    if not is_num:
        return TypeError
    lo, hi = (w.base**w.min, w.base**w.max) if hasattr(w, "base") else (w.min, w.max)
    return ValueError if not (np.isfinite(v) and lo <= v <= hi) else None


def test_every_control_refuses_every_bad_value_and_stays_as_it_was(explorer):
    """None, True, np.True_, NaN, +-inf, "1" and object() on every control: the error the rules
    give (`_expected`), naming the control; afterwards the values, the picture (the very PNG bytes)
    and the error state are unchanged, also when a good value came first in the same set();
    and a valid set() still works."""
    ex = explorer
    png, values, error, renders = ex.image.value, ex.values, ex.error, ex.renders
    names = list(ex.widgets)
    for name, w in ex.widgets.items():
        for v in BAD:
            want = _expected(w, v)
            if want is None:
                continue
            with pytest.raises(want, match=name) as info:
                ex.set(**{name: v})
            if want is ValueError and v is not None:
                assert "valid" in str(info.value), f"{ex.name}: {info.value} does not say what is valid"
            other = next((n for n in names if n != name), None)
            if other is not None:  # a good value first, then the bad one
                good = [x for x in candidate_values(ex.widgets[other]) if x != values[other]]
                if good:
                    with pytest.raises(want, match=name):
                        ex.set(**{other: good[0], name: v})
            assert ex.values == values, f"{ex.name}: {name}={v!r} was refused but left {ex.values}"
            assert ex.image.value == png and ex.error == error and ex.renders == renders
    name, w = names[0], ex.widgets[names[0]]
    good = [x for x in candidate_values(w) if x != values[name]]
    if good:
        try:
            ex.set(**{name: good[0]})
            assert ex.renders == renders + 1 and ex.values[name] == ex.widgets[name].value
        finally:
            _restore(ex)


@pytest.mark.parametrize("explorer", ["online_softmax"], indirect=True)
def test_compute_error_is_shown_in_the_figure(explorer):
    ex = explorer
    try:
        ex.set(text="1e308, -1e308")
        assert ex.error and "1e+308" in ex.error and ex._error_text.get_visible()
        assert "1e+308" in ex.summary.value
        ex.set(text="1, 2, nan")
        assert "nan" in ex.error
        ex.set(text="1, 3, 2")
        assert ex.error is None and not ex._error_text.get_visible()
    finally:
        _restore(ex)


@pytest.mark.parametrize("explorer", ["io_vs_n"], indirect=True)
def test_flags_must_be_bools(explorer):
    with pytest.raises(TypeError, match="causal"):
        explorer.set(causal="False")
    with pytest.raises(TypeError, match="causal"):
        EXPLORERS["tile_grid"](causal=1)


@pytest.mark.parametrize("explorer", ["merge"], indirect=True)
def test_int_slider_refuses_fractions(explorer):
    ex = explorer
    try:
        with pytest.raises(ValueError, match="splits"):
            ex.set(splits=2.5)
        ex.set(splits=3.0)  # an integral float is an integer
        assert ex.values["splits"] == 3 and type(ex.values["splits"]) is int
    finally:
        _restore(ex)


def test_reported_cases_are_refused_by_name():
    """Cases reported by hand: inf and NaN on an IntSlider (once a raw OverflowError), a bool as a
    number of splits or as a block size, None on a dropdown of names (once a raw KeyError) and on
    an options list that holds a string and numbers (once accepted)."""
    cases = [
        ("page_table", "page_size", float("inf"), ValueError),
        ("page_table", "page_size", float("nan"), ValueError),
        ("split_kv", "splits", True, TypeError),
        ("lowprec_error", "block", False, TypeError),
        ("scheduler", "batch", None, ValueError),
        ("variant_gallery", "variant", None, ValueError),
        ("tile_size", "tile", None, ValueError),
        ("tile_size", "tile", True, TypeError),
    ]
    built = {}
    for name, control, value, exc in cases:
        ex = built.setdefault(name, EXPLORERS[name]())
        before = ex.values
        with pytest.raises(exc, match=control):
            ex.set(**{control: value})
        assert ex.values == before
    built["scheduler"].set(batch=32)  # a refused None does not stick
    assert built["scheduler"].values["batch"] == 32
