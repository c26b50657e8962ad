"""gpubench.core.measure, the one loop every section and sweep runs through, on a toy section of
CPU tensors (no kernels): rows in the run file's schema, each output checked against the
reference before it is timed (NaN refused, the tolerance), a failing implementation dropped
alone, a missing library's phase skipped and named, ranking, and interleaved repeats."""

import math
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from attnlab.gpubench.core import measure, phases  # noqa: E402

from attnlab.gpubench.declare import Impl, Launch, Section  # noqa: E402
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
    with pytest.raises(TypeError, match="dry must be True or False"):
        measure(_section(), dry="False")  # a str would be a full-size run on its truth


def _one(launches, **kw):
    return _section(impls=(Impl("good", launches, ours=True),), **kw)


@pytest.mark.parametrize(
    "make, exc, words",
    [
        (lambda: Launch(5, lambda: 0), TypeError, "name of a Launch must be a non-empty str"),
        (lambda: Launch("a", 5), TypeError, "fn of launch 'a' must be callable"),
        (lambda: Launch("a", abs, launch=[1]), TypeError, "launch of launch 'a' must be a dict"),
        (lambda: Launch("a", abs, timed=3), TypeError, "timed of launch 'a' must be callable or None"),
        (lambda: Impl("a", [1, 2]), TypeError, "launches of impl 'a' must be callable"),
        (lambda: Impl("a", _good, ours="False"), TypeError, "ours of impl 'a' must be True or False"),
        (lambda: Impl("a,b", _good), ValueError, "one word without commas"),
        (lambda: Impl("--peers", _good), ValueError, "not starting with '-'"),
        (lambda: _section(impls=(Impl("good", _good), Impl("good", _slow))), ValueError, "'good' twice"),
        (lambda: _section(impls=[Impl("good", _good)]), TypeError, "impls of section 'toy' must be"),
        (lambda: _section(impls=(_good,)), TypeError, "must hold gpubench.declare.Impl"),
        (lambda: _section(fields="n"), TypeError, "fields of section 'toy' must be a tuple"),
        (lambda: _section(cases=((1, 2),)), ValueError, "cases of section 'toy': each case holds 1"),
        (lambda: _section(dry_cases=(5,)), TypeError, "each case must be a tuple"),
        (lambda: _section(inputs=None), TypeError, "inputs of section 'toy' must be callable"),
        (lambda: _section(error="mean"), ValueError, "error of section 'toy'='mean' is not allowed"),
        (lambda: _section(tolerance=-1.0), ValueError, "tolerance of section 'toy'=-1.0"),
        (lambda: _section(repeats=0), ValueError, "repeats of section 'toy'=0 is out of range"),
        (lambda: _section(repeats=True), TypeError, "repeats of section 'toy' must be an integer"),
        (lambda: _section(untimed_rounds=-1), ValueError, "untimed_rounds of section 'toy'=-1"),
        (lambda: _section(timing={"rep": 3}), ValueError, "takes calls and reps"),
        (lambda: _section(subset="peers"), ValueError, "a flag must be '--name'"),
        (lambda: _section(subset="--out"), ValueError, "the flag '--out' is taken"),
        (lambda: _section(options=(("--x", "h"),)), TypeError, "(flag, help, type, default)"),
        (lambda: _section(options=(("--a-b", "h", int, 1), ("--a_b", "h", int, 1))), ValueError, "taken"),
        (lambda: _section(fields=None, check=lambda case: None), ValueError, "check of section 'toy' judges"),
        (lambda: _section(default_impls=("nope",)), ValueError, "default_impls of section 'toy'='nope'"),
    ],
)
def test_a_declaration_is_refused_by_name_when_made(make, exc, words):
    import re

    with pytest.raises(exc, match=re.escape(words)):
        make()


@pytest.mark.parametrize(
    "kw, exc, words",
    [
        ({"cases": [(3, 4)]}, ValueError, "cases: each case holds 1 value(s), n; got (3, 4)"),
        ({"cases": [3]}, TypeError, "each case must be a tuple"),
        ({"cases": []}, ValueError, "cases must hold at least one case"),
        ({"impls": "good"}, TypeError, "impls must be a tuple of names"),
        ({"seed": "1"}, TypeError, "seed must be an integer"),
        ({"options": {"page_sizes": (1,)}}, ValueError, "options of section 'toy'='page_sizes'"),
        ({"out": "no-such-folder/x.json"}, ValueError, "its folder does not exist"),
    ],
)
def test_measure_refuses_a_bad_argument_before_it_measures(kw, exc, words, monkeypatch):
    import re

    monkeypatch.setattr("attnlab.gpubench.core.header", lambda *a: pytest.fail("measured"))
    with pytest.raises(exc, match=re.escape(words)):
        measure(_section(), dry=True, **kw)


def _nan_count(torch, case, ctx):
    for c in _inputs(torch, case, ctx):
        c.flop = float("nan")
        yield c


def test_a_broken_declaration_stops_the_loop_and_a_non_tensor_is_dropped():
    with pytest.raises(TypeError, match="launches of impl 'good' must yield Launches .*got None"):
        measure(_one(lambda torch, c, ctx: None), dry=True)
    with pytest.raises(TypeError, match="must yield Launches; got 5"):
        measure(_one(lambda torch, c, ctx: iter([5])), dry=True)

    def twice(torch, c, ctx):
        for _ in range(2):
            yield Launch("good", lambda: torch.softmax(c.x, -1), launch={"dim": -1})

    with pytest.raises(ValueError, match="launches 'good dim=-1' on case 'n 5' a second time"):
        measure(_one(twice), dry=True)
    with pytest.raises(TypeError, match="must yield Cases with .case .* without \\['flop'\\]"):
        measure(_section(inputs=lambda torch, case, ctx: iter([SimpleNamespace(case={}, ref=None, bytes=1)])))
    for kw, exc, words in (
        ({"extra": lambda c, launch, us, ctx: None}, TypeError, "extra of section 'toy' must return a dict"),
        ({"repeats": 2, "extra": lambda c, launch, us, ctx: None}, TypeError, "must return a dict"),
        ({"inputs": _nan_count}, ValueError, "section 'toy', launch 'good': flop=nan is out of range"),
    ):
        with pytest.raises(exc, match=words):  # the same refusal with and without repeats
            measure(_one(_good, **kw), cases=[(4,)], dry=True)
    res = measure(_one(lambda torch, c, ctx: iter([Launch("good", lambda: 1.0)])), dry=True)
    assert (
        res["rows"] == []
        and [d["reason"] for d in res["dropped"]]
        == ["TypeError: fn of launch 'good' must return a tensor or a tuple of tensors; got 1.0"] * 2
    )


def test_an_unranked_implementation_named_as_a_ranked_launch_leaves_its_rank():
    def named_x(torch, c, ctx):
        yield Launch("x", lambda: torch.softmax(c.x, -1), launch={"dim": -1})

    def also_x(torch, c, ctx):  # the same row name, another launch: unranked by its Impl only
        yield Launch("x", lambda: torch.softmax(c.x, 1), launch={"dim": 1})

    sec = _section(impls=(Impl("a", named_x, ours=True), Impl("b", also_x, ranked=False)))
    rows = measure(sec, cases=[(4,)], dry=True)["rows"]
    assert [(r["impl"], r["ratio_to_best"]) for r in rows] == [("x dim=-1", 1.0), ("x dim=1", None)]


def test_a_launch_whose_timing_fails_in_one_round_has_no_row():
    calls = []

    def flaky(torch, c, ctx):
        def timed():
            calls.append(1)
            if len(calls) == 3:  # the second round's first call (the CPU timer calls twice)
                raise RuntimeError("lost the device")
            return torch.softmax(c.x, -1)

        yield Launch("f", lambda: torch.softmax(c.x, -1), timed=timed)
        yield Launch("g", lambda: torch.softmax(c.x, -1))

    res = measure(_one(flaky, repeats=3), cases=[(4,)], dry=True)
    assert [r["impl"] for r in res["rows"]] == ["g"] and len(res["rows"][0]["extra"]["repeat_us"]) == 3
    assert [(d["impl"], d["stage"]) for d in res["dropped"]] == [("f", "timing failed")]
    assert len(calls) == 3  # two calls of round 1, the failing one of round 2, none after


def test_a_crash_mid_section_leaves_a_file_of_schema_rows(tmp_path, monkeypatch):
    """The rows are written after every case; a crash in the next keeps them, and a crash while
    writing keeps the file written before (a new file replaces it whole)."""
    import json

    from attnlab import runfile

    def inputs(torch, case, ctx):
        if case == (9,):
            raise RuntimeError("the machine went away")
        yield from _inputs(torch, case, ctx)

    out = tmp_path / "toy.json"
    with pytest.raises(RuntimeError, match="went away"):
        measure(_section(inputs=inputs), cases=[(5,), (9,)], dry=True, out=str(out))
    saved = json.loads(out.read_text())
    assert {r["what"] for r in saved["rows"]} == {"n 5"}
    runfile.check({"schema": runfile.SCHEMA, "sections": {"toy": {}}, "rows": saved["rows"]})

    def broken_dump(obj, f, **kw):
        f.write('{"rows": [')
        raise OSError("disk full")

    monkeypatch.setattr(json, "dump", broken_dump)
    with pytest.raises(OSError, match="disk full"):
        measure(_section(), cases=[(6,)], dry=True, out=str(out))
    assert json.loads(out.read_text()) == saved  # the file before, whole
    run = {"schema": runfile.SCHEMA, "sections": {"toy": {}}, "rows": saved["rows"]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    with pytest.raises(OSError, match="disk full"):
        runfile.write(path, run)
    assert runfile.read(path) == run  # and no half-written file is left beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json", "toy.json"]
