"""gpubench.core.measure, the one loop every section and sweep runs through, on a toy section of
CPU tensors (no kernels): rows in the run file's schema, each output checked against the
reference before it is timed (NaN refused, the tolerance), a failing implementation dropped
alone, a missing library's phase skipped and named, ranking, and interleaved repeats."""

import math
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from attnlab.gpubench.core import Impl, Launch, Section, measure, phases  # noqa: E402
from attnlab.runfile import COLUMNS  # noqa: E402


def _softmax_rows(x):
    """float64 softmax of each row, written out (the toy section's reference)."""
    out = []
    for row in x.tolist():
        m = max(row)
        e = [math.exp(v - m) for v in row]
        out.append([v / sum(e) for v in e])
    return torch.tensor(out, dtype=torch.float32)


def _inputs(torch, case, ctx):
    (n,) = case
    x = torch.randn(3, n, generator=torch.Generator().manual_seed(ctx.seed + n))
    yield SimpleNamespace(
        x=x, ref=_softmax_rows(x), case={"n": n}, flop=5.0 * x.numel(), bytes=8.0 * x.numel()
    )


def _good(torch, c, ctx):
    for dim in (-1, 1):
        yield Launch("good", lambda dim=dim: torch.softmax(c.x, dim=dim), launch={"dim": dim})


def _slow(torch, c, ctx):
    for launch in _good(torch, c, ctx):
        yield Launch("slow", launch.fn, launch=launch.launch)


def _wrong(torch, c, ctx):
    yield Launch("wrong", lambda: torch.softmax(c.x, dim=0))  # the wrong axis: over the tolerance


def _nan(torch, c, ctx):
    yield Launch("nan", lambda: torch.full_like(c.x, float("nan")))


def _raises(torch, c, ctx):
    yield Launch("raises", lambda: 1 / 0)


def _section(**kw):
    base = dict(
        name="toy",
        doc="A toy section.",
        fields=("n",),
        cases=((7,),),
        dry_cases=((5,), (9,)),
        shape={},
        dry_shape={},
        inputs=_inputs,
        tolerance=1e-5,
        impls=(
            Impl("good", _good, ours=True),
            Impl("wrong", _wrong),
            Impl("nan", _nan),
            Impl("raises", _raises),
            Impl("slow", _slow, ranked=False),
        ),
    )
    return Section(**{**base, **kw})


def test_rows_are_schema_rows_checked_before_they_are_timed(capsys):
    res = measure(_section(), dry=True)
    rows = res["rows"]
    assert all(tuple(r) == COLUMNS for r in rows)
    # the wrong axis, the NaN and the exception are dropped, each named; the good launches stay
    assert {r["impl"] for r in rows} == {"good dim=-1", "good dim=1", "slow dim=-1", "slow dim=1"}
    assert {r["what"] for r in rows} == {"n 5", "n 9"}  # the dry cases
    out = capsys.readouterr().out
    assert "over the section's tolerance" in out and "NaN or inf" in out and "ZeroDivisionError" in out
    # and the file keeps why each has no row
    why = {(d["what"], d["impl"]): d["reason"] for d in res["dropped"]}
    assert set(why) == {(w, i) for w in ("n 5", "n 9") for i in ("wrong", "nan", "raises")}
    assert why["n 5", "wrong"].startswith("RuntimeError: error") and "NaN" in why["n 9", "nan"]
    assert why["n 5", "raises"] == "ZeroDivisionError: division by zero"
    for r in rows:
        assert r["error"] <= 1e-5 and r["ours"] == (r["impl"].startswith("good"))
        assert r["tflops"] == pytest.approx(r["flop"] / r["time_us"] * 1e-6)
        assert r["extra"]["timing"] == "wall"


def test_ratio_to_best_is_over_the_ranked_rows_of_a_case():
    rows = measure(_section(), dry=True)["rows"]
    for what in ("n 5", "n 9"):
        ranked = [r for r in rows if r["what"] == what and r["impl"].startswith("good")]
        best = min(r["time_us"] for r in ranked)
        assert [r["ratio_to_best"] for r in ranked] == [best / r["time_us"] for r in ranked]
        assert all(r["ratio_to_best"] is None for r in rows if r["impl"].startswith("slow"))


def test_relative_error_and_no_reference():
    def inputs(torch, case, ctx):
        for c in _inputs(torch, case, ctx):
            yield c
            c.ref = None  # the second Case of the same input has no reference: error None
            c.case = {"n": case[0], "unchecked": True}
            yield c

    rows = measure(
        _section(inputs=inputs, error="relative", impls=(Impl("good", _good, ours=True),)),
        cases=[(6,)],
        dry=True,
    )["rows"]
    checked = [r for r in rows if "unchecked" not in r["shape"]]
    assert len(checked) == 2 and all(0 <= r["error"] <= 1e-6 for r in checked)
    assert [r["error"] for r in rows if "unchecked" in r["shape"]] == [None, None]


def test_a_missing_library_skips_its_phase_and_says_why(capsys):
    sec = _section(impls=(Impl("good", _good, ours=True), Impl("lib", _good, library="no_such_library_here")))
    res = measure(sec, dry=True)
    assert {r["impl"].split()[0] for r in res["rows"]} == {"good"}
    assert res["no_such_library_here"].startswith("absent (ModuleNotFoundError")


def test_phases_put_each_library_after_the_rest():
    a, b, c = Impl("a", _good), Impl("fi", _good, library="flashinfer"), Impl("c", _good)
    assert phases([b, a, c]) == [[a, c], [b]]
    assert phases([b]) == [[b]]


def test_repeats_time_every_launch_round_robin():
    order = []

    def counted(torch, c, ctx):
        for name in ("p", "q"):

            def fn(name=name):
                order.append(name)
                return torch.softmax(c.x, dim=-1)

            yield Launch(name, fn)

    rows = measure(_section(impls=(Impl("p", counted),), repeats=3), cases=[(4,)], dry=True)["rows"]
    assert [len(r["extra"]["repeat_us"]) for r in rows] == [3, 3]
    for r in rows:
        assert r["time_us"] == sorted(r["extra"]["repeat_us"])[1]  # the median of three
    # first each launch's check (one call each), then three rounds of (p, q), two calls per timing
    assert order == ["p", "q"] + ["p", "p", "q", "q"] * 3
    order.clear()
    rows = measure(_section(impls=(Impl("p", counted),), untimed_rounds=1), cases=[(4,)], dry=True)["rows"]
    assert [len(r["extra"].get("repeat_us", [0])) for r in rows] == [1, 1]  # one timed round
    assert order == ["p", "q"] + ["p", "p", "q", "q"] * 2  # and one round before it, untimed


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(TypeError, match="section"):
        measure("paged")
    with pytest.raises(ValueError, match="impls"):
        measure(_section(), impls=("good", "nope"), dry=True)
