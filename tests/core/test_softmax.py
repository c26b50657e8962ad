"""Online softmax: the lecture's hand calculations, agreement with scipy, masking, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special

from attnlab.core.softmax import online_softmax, online_softmax_trace, softmax


# --- the lecture's worked example: x = [1, 3, 2, 5, 4], two numbers at a time -------------------

LECTURE_X = [1, 3, 2, 5, 4]


def test_lecture_trace_m_and_l():
    steps = online_softmax_trace(LECTURE_X, chunk=2)
    assert len(steps) == 3
    assert [s.m for s in steps] == [3.0, 5.0, 5.0]
    # by hand: chunk [1, 3] -> m=3, l1 = e^(1-3) + e^(3-3)
    l1 = math.exp(1 - 3) + math.exp(0)
    # chunk [2, 5] raises the max to 5: rescale l1 by e^(3-5), add e^(2-5) + e^(5-5)
    l2 = l1 * math.exp(3 - 5) + math.exp(2 - 5) + math.exp(0)
    # chunk [4] keeps m = 5: add e^(4-5)
    l3 = l2 * math.exp(0) + math.exp(4 - 5)
    for step, want in zip(steps, [l1, l2, l3]):
        assert step.l == pytest.approx(want, rel=1e-15, abs=0)
    # the lecture's rounded values
    assert [round(s.l, 4) for s in steps] == [1.1353, 1.2034, 1.5713]


def test_lecture_trace_step_fields():
    steps = online_softmax_trace(LECTURE_X, chunk=2)
    assert [(s.start, s.stop) for s in steps] == [(0, 2), (2, 4), (4, 5)]
    assert [s.chunk for s in steps] == [(1.0, 3.0), (2.0, 5.0), (4.0,)]
    assert [s.m_chunk for s in steps] == [3.0, 5.0, 4.0]
    assert steps[0].l_chunk == pytest.approx(math.exp(-2) + 1, rel=1e-15)
    assert steps[1].l_chunk == pytest.approx(math.exp(-3) + 1, rel=1e-15)
    assert steps[2].l_chunk == pytest.approx(1.0, rel=1e-15)
    # rescale = e^(m_before - m): first step starts from m = -inf, second lowers by e^-2
    assert steps[0].rescale == 0.0
    assert steps[1].rescale == pytest.approx(math.exp(-2), rel=1e-15)
    assert steps[2].rescale == 1.0


def test_lecture_final_softmax_equals_one_pass():
    x = np.array(LECTURE_X, dtype=np.float64)
    e = np.exp(x - x.max())
    one_pass = e / e.sum()
    got = online_softmax(x, chunk=2)
    assert np.max(np.abs(got - one_pass)) <= 1e-15
    assert np.max(np.abs(softmax(x) - one_pass)) <= 1e-15
    assert got.sum() == pytest.approx(1.0, abs=1e-15)


def test_exercise_x_2_1_4_chunk_1():
    x = [2, 1, 4]
    steps = online_softmax_trace(x, chunk=1)
    assert [s.m for s in steps] == [2.0, 2.0, 4.0]
    assert round(steps[-1].l, 4) == 1.1851
    assert steps[-1].l == pytest.approx(math.exp(-2) + math.exp(-3) + 1.0, rel=1e-15)
    p = online_softmax(x, chunk=1)
    assert np.round(p, 4).tolist() == [0.1142, 0.0420, 0.8438]


# --- random vectors against scipy ----------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 7, 13, 31])
@pytest.mark.parametrize("seed", [0, 1])
def test_random_every_chunk_matches_scipy(n, seed):
    rng = np.random.default_rng(1000 * seed + n)
    x = rng.standard_normal(n) * 5.0
    want = scipy.special.softmax(x)
    for chunk in range(1, n + 1):
        got = online_softmax(x, chunk=chunk)
        assert np.max(np.abs(got - want)) <= 1e-14, chunk
        steps = online_softmax_trace(x, chunk=chunk)
        assert len(steps) == -(-n // chunk)
        assert steps[-1].m == x.max()
        assert steps[-1].l == pytest.approx(np.exp(x - x.max()).sum(), rel=1e-14)
        # running max never decreases, running sum is positive once started
        ms = [s.m for s in steps]
        assert ms == sorted(ms)
        assert all(s.l >= 1.0 - 1e-15 for s in steps)  # includes e^(m - m) = 1


@pytest.mark.parametrize("seed", [2, 3])
def test_random_2d_softmax_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((5, 11)) * 3.0
    for axis in (0, 1, -1):
        got = softmax(x, axis=axis)
        assert np.max(np.abs(got - scipy.special.softmax(x, axis=axis))) <= 1e-14


# --- masked entries -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x",
    [
        [-np.inf, 1.0, -np.inf, 2.0],
        [-np.inf, -np.inf, 0.5, -np.inf, 3.0, -np.inf, -np.inf],
        [4.0, -np.inf, -np.inf],
    ],
)
def test_minus_inf_entries_no_nan(x):
    x = np.array(x)
    want = scipy.special.softmax(x)
    for chunk in range(1, x.size + 1):
        steps = online_softmax_trace(x, chunk=chunk)
        for s in steps:
            assert not math.isnan(s.m) and not math.isnan(s.l) and not math.isnan(s.rescale)
        got = online_softmax(x, chunk=chunk)
        assert not np.isnan(got).any()
        assert np.all(got[np.isneginf(x)] == 0.0)
        assert np.max(np.abs(got - want)) <= 1e-15


@pytest.mark.parametrize("n", [1, 2, 5])
def test_all_minus_inf_vector(n):
    x = np.full(n, -np.inf)
    for chunk in range(1, n + 1):
        steps = online_softmax_trace(x, chunk=chunk)
        for s in steps:
            assert not math.isnan(s.m) and not math.isnan(s.l) and not math.isnan(s.rescale)
            assert s.m == -np.inf and s.l == 0.0  # the identity state is kept
        got = online_softmax(x, chunk=chunk)
        assert not np.isnan(got).any() and np.all(got == 0.0)
    assert np.all(softmax(x) == 0.0)


def test_softmax_2d_fully_masked_row_gives_zeros():
    x = np.array([[-np.inf, -np.inf, -np.inf], [0.0, -np.inf, 1.0]])
    p = softmax(x, axis=-1)
    assert not np.isnan(p).any()
    assert np.all(p[0] == 0.0)
    assert p[1].sum() == pytest.approx(1.0, abs=1e-15)


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [online_softmax_trace, online_softmax])
@pytest.mark.parametrize(
    "chunk, exc, value",
    [
        (0, ValueError, "0"),
        (-1, ValueError, "-1"),
        (1.5, TypeError, "1.5"),
        ("2", TypeError, "2"),
    ],
)
def test_bad_chunk(fn, chunk, exc, value):
    with pytest.raises(exc, match=r"\bchunk\b") as info:
        fn([1.0, 2.0, 3.0], chunk=chunk)
    assert value in str(info.value)


@pytest.mark.parametrize("fn", [online_softmax_trace, online_softmax])
@pytest.mark.parametrize(
    "x",
    [
        [],
        np.zeros((0,)),
        [[1.0, 2.0], [3.0, 4.0]],
        [1.0, np.nan, 2.0],
        [np.nan],
    ],
)
def test_bad_x(fn, x):
    with pytest.raises((ValueError, TypeError), match=r"\bx\b"):
        fn(x, chunk=1)


# --- the online-softmax core the notebook prints is the code online_softmax runs ---------------------


def test_online_softmax_runs_the_trace(monkeypatch):
    import inspect

    import attnlab.core.softmax as sm

    calls = []
    real = sm.online_softmax_trace
    monkeypatch.setattr(sm, "online_softmax_trace", lambda x, chunk: calls.append(chunk) or real(x, chunk))
    x = np.random.default_rng(4).standard_normal(23) * 4
    assert np.max(np.abs(sm.online_softmax(x, 5) - scipy.special.softmax(x))) <= 1e-15
    assert calls == [5]
    assert 15 <= len(inspect.getsource(real).splitlines()) <= 30


def test_extreme_but_finite_values():
    x = np.array([1e308, -1e308, -np.inf, 0.0])
    for chunk in (1, 2, 4):
        p = online_softmax(x, chunk)
        assert p.tolist() == [1.0, 0.0, 0.0, 0.0]
    assert softmax(x).tolist() == [1.0, 0.0, 0.0, 0.0]
    assert softmax(np.arange(6).reshape(2, 3), axis=0).dtype == np.float64  # integers in, float64 out
