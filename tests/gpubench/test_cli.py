"""The harness's command lines (python -m attnlab.gpubench, each section, the sweeps, ncu): a bad
argument is a usage error before anything runs (exit status 2, one line on stderr naming the
argument, no traceback); without a GPU a full-size run is refused at once; --dry runs the small
cases on the CPU."""

import importlib
import json

import pytest

pytest.importorskip("torch")

MISSING = "no-such-folder/x.json"
#: what each entry point calls to start measuring: a refused command line never gets there
STARTS = {"ncu": "profile"}


def test_the_harness_finds_every_section_by_its_declaration():
    """run.SECTIONS (modules imported, a Section found) against the files' text: every module of
    gpubench/ that assigns `SECTION = Section(` at its top level, and no other."""
    import pathlib
    import re

    from attnlab.gpubench import run

    folder = pathlib.Path(run.__file__).parent
    declared = sorted(
        p.stem for p in folder.glob("*.py") if re.search(r"^SECTION = Section\(", p.read_text(), re.M)
    )
    assert run.SECTIONS == tuple(declared) and {"paged", "prefill", "scheduled"} <= set(declared)


def test_a_section_named_other_than_its_module_is_refused(tmp_path, monkeypatch):
    """run replaces a section's rows by its module's name; a SECTION named otherwise would leave
    the old rows beside the new ones on --merge."""
    from attnlab.gpubench import run

    pkg = tmp_path / "toy_sections"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "quick.py").write_text(
        "from attnlab.gpubench.core import Impl, Section\n"
        "SECTION = Section(name='slow', doc='', fields=None, cases=((1,),), dry_cases=((1,),),"
        " shape={}, dry_shape={}, inputs=print, impls=(Impl('a', print),))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="toy_sections.quick.SECTION is named 'slow'"):
        run._declared(str(pkg), "toy_sections")
    (pkg / "quick.py").write_text((pkg / "quick.py").read_text().replace("'slow'", "'quick'"))
    monkeypatch.delitem(__import__("sys").modules, "toy_sections.quick")
    assert run._declared(str(pkg), "toy_sections") == ("quick",)


def _no_start(monkeypatch, mod):
    """A declaration (a module with SECTION) starts in core.measure; the others where STARTS says."""
    m = importlib.import_module(f"attnlab.gpubench.{mod}")
    fail = lambda *a, **k: pytest.fail(f"{mod} started")  # noqa: E731
    if hasattr(m, "SECTION"):
        monkeypatch.setattr("attnlab.gpubench.core.measure", fail)
    else:
        monkeypatch.setattr(m, STARTS.get(mod, "run"), fail)


def _refused(capsys, mod, argv, names):
    """main(argv) exits 2 with one stderr line that names each of `names`; returns that line."""
    main = importlib.import_module(f"attnlab.gpubench.{mod}").main
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2, (mod, argv, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert all(n in lines[0] for n in names), (names, lines[0])
    return lines[0]


@pytest.mark.parametrize(
    "mod, argv, names",
    [
        ("run", ["--dry", "--sections", ","], ["--sections", "at least one"]),
        ("run", ["--dry", "--sections", "paged,pagd"], ["--sections", "'pagd'", "prefill"]),
        ("run", ["--dry", "--sections", "paged,paged"], ["--sections", "twice"]),
        ("run", ["--dry", "--merge"], ["--merge", "--out"]),
        ("run", ["--dry", "--out", MISSING], ["--out", "does not exist"]),
        ("paged", ["--dry", "--cases", "3xq"], ["--cases", "'q'", "positive integer"]),
        ("paged", ["--dry", "--cases", "1x2x3"], ["--cases", "batch x context", "'1x2x3'"]),
        ("paged", ["--dry", "--cases", "2x0"], ["--cases", "context", "'0'"]),
        ("paged", ["--dry", "--cases", "0x5"], ["--cases", "batch", "'0'"]),
        ("paged", ["--dry", "--cases", ","], ["--cases"]),
        ("paged", ["--dry", "--page-sizes", "0"], ["--page-sizes", "'0'"]),
        ("paged", ["--dry", "--peers", ","], ["--peers", "at least one"]),
        ("paged", ["--dry", "--out", MISSING], ["--out", "does not exist"]),
        ("prefill", ["--dry", "--cases", "4096"], ["--cases", "batch x N"]),
        ("prefill", ["--dry", "--peers", "ours,cudnn"], ["--peers", "'cudnn'", "flashinfer"]),
        ("prefill_fa3", ["--dry", "--cases", "1x40x96x2"], ["--cases", "head_dim", "96", "'1x40x96x2'"]),
        ("prefill_fa3", ["--dry", "--cases", "1x40x64x3"], ["--cases", "kv_heads", "32", "3"]),
        ("prefill_fa3", ["--dry", "--cases", "1x40x64"], ["--cases", "batch x N x head_dim x kv_heads"]),
        ("prefill_fa3", ["--dry", "--draw", "-1"], ["--draw", "'-1'"]),
        ("cascade", ["--dry", "--cases", "8x4096"], ["--cases", "requests x prefix x unique"]),
        ("cascade", ["--dry", "--cases", "2x20x5"], ["--cases", "prefix", "16 tokens", "'2x20x5'"]),
        ("decode", ["--dry", "--cases", "1x40"], ["--cases"]),  # decode's CASES hold its splits
        ("variants", ["--dry", "--variants", "causal,soft_cap"], ["--variants", "'soft_cap'"]),
        ("scheduled", ["--cases", "5"], ["--cases", "batch", "5", "--dry"]),  # not a recorded batch
        ("scheduled", ["--dry", "--plans", "balanced,greedy"], ["--plans", "'greedy'"]),
        ("scheduled", ["--dry", "--draw", "x"], ["--draw", "seed", "'x'"]),
        ("scheduled", ["--dry", "--draw", "-1"], ["--draw", "'-1'"]),
        ("sweeps.hopper", ["--dry", "--cases", "0"], ["--cases", "N"]),
        ("sweeps.paged", ["--out", MISSING], ["--out"]),
        ("sweeps.ragged", [], ["--out"]),
        ("sweeps.gluon", ["fast"], ["mode", "'fast'"]),
        ("sweeps.gluon", ["smoke", "latest"], ["'latest'", "early_k"]),
        ("sweeps.gluon", ["record", "run.json", "out.json", "d"], ["commit"]),
        ("ncu", ["--group", "all"], ["--group", "'all'"]),
        ("ncu", ["--out", "p.json"], ["--out", "--summarize"]),
        ("ncu", ["--summarize", "d.csv", "r.csv"], ["--summarize", "d.csv"]),
    ],
)
def test_a_bad_argument_is_one_usage_line(capsys, tmp_path, monkeypatch, mod, argv, names):
    monkeypatch.chdir(tmp_path)
    _no_start(monkeypatch, mod)
    _refused(capsys, mod, argv, names)


def test_merge_checks_the_file_it_keeps_before_running(capsys, tmp_path, monkeypatch):
    _no_start(monkeypatch, "run")
    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": [')
    _refused(capsys, "run", ["--dry", "--merge", "--out", str(bad)], ["--merge", str(bad), "JSON"])
    old = tmp_path / "old.json"  # recorded before the schema: no "schema"
    old.write_text(json.dumps({"device": "x", "sections": {"paged": {"rows": []}}, "rows": []}))
    line = _refused(capsys, "run", ["--dry", "--merge", "--out", str(old)], ["--merge", str(old)])
    assert "python -m attnlab.runfile" in line  # how to convert it, in the same line


@pytest.mark.parametrize(
    "mod, argv",
    [
        ("run", []),
        ("paged", []),
        ("prefill", ["--peers", "ours"]),
        ("decode", []),
        ("cascade", []),
        ("variants", []),
        ("scheduled", []),
        ("sweeps.hopper", []),
        ("sweeps.paged", []),
        ("sweeps.ragged", ["--out", "s.json"]),
        ("sweeps.gluon", ["smoke"]),
        ("ncu", []),
    ],
)
def test_without_a_gpu_a_full_size_run_is_refused_at_once(capsys, tmp_path, monkeypatch, mod, argv):
    import torch

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    _no_start(monkeypatch, mod)
    line = _refused(capsys, mod, argv, ["no CUDA GPU"])
    if mod.startswith("sweeps.") or mod == "ncu":
        return
    assert "--dry runs the small cases on the CPU" in line


def test_dry_runs_the_small_cases_on_the_cpu(capsys, tmp_path):
    """`python -m attnlab.gpubench.paged --dry` with one case of its own: its rows, every one checked."""
    import torch
    from attnlab.gpubench import paged

    if torch.cuda.is_available():
        pytest.skip("the dry run is for machines without a GPU")
    out = tmp_path / "p.json"
    assert (
        paged.main(
            [
                "--dry",
                "--cases",
                "2x20",
                "--page-sizes",
                "3",
                "--peers",
                "paged,contiguous",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = json.loads(out.read_text())["rows"]
    assert {(r["shape"]["batch"], r["shape"]["context"]) for r in rows} == {(2, 20)}
    assert {r["impl"].split()[0] for r in rows} == {"paged", "contiguous"}
    assert {r["shape"].get("page_size") for r in rows} == {3, None}  # the pool and the contiguous copy
    assert all(r["error"] < 5e-2 and r["ours"] for r in rows)
    assert "paged" in capsys.readouterr().out


def test_runfile_convert_checks_every_file_before_rewriting_any(tmp_path, capsys):
    from attnlab import runfile
    from attnlab.explore.measured import reader

    good, bad = tmp_path / "a.json", tmp_path / "b.json"
    good.write_text(reader.run_files()[-1].read_text())  # a run file, already in the schema
    bad.write_text("{not json")
    with pytest.raises(SystemExit) as e:
        runfile.main([str(good), str(bad)])
    out = capsys.readouterr()
    assert e.value.code == 2 and str(bad) in out.err and out.out == ""  # nothing done before the refusal
    with pytest.raises(SystemExit) as e:
        runfile.main([str(tmp_path / "missing.json")])
    assert e.value.code == 2
    broken = tmp_path / "c.json"  # says it is in the schema, and is not: not "already in the schema"
    broken.write_text(json.dumps({"schema": runfile.SCHEMA, "sections": {}, "rows": [{"us": 1.0}]}))
    with pytest.raises(SystemExit) as e:
        runfile.main([str(broken)])
    assert e.value.code == 2 and "rows[0] must have exactly the columns" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, kw, exc, words",
    [
        (("decode",), {}, TypeError, "sections must be a non-empty tuple"),  # a str: its letters
        ((("decode", "nope"),), {}, ValueError, "sections='nope' is not allowed"),
        ((("decode", "decode"),), {}, ValueError, "name a section twice"),
        ((("decode",),), {"dry": "False"}, TypeError, "dry must be True or False"),
        ((("decode",),), {"dry": True, "merge": True}, ValueError, "merge=True keeps the other sections"),
    ],
)
def test_run_refuses_a_bad_argument_before_it_measures(monkeypatch, args, kw, exc, words):
    import re

    from attnlab.gpubench import run

    monkeypatch.setattr("attnlab.gpubench.core.header", lambda *a: pytest.fail("measured"))
    with pytest.raises(exc, match=re.escape(words)):
        run.run(*args, **kw)
    with pytest.raises(TypeError, match="section must be a gpubench.declare.Section"):
        importlib.import_module("attnlab.gpubench.cli").section_main("paged", ["--dry"])


def test_a_section_that_crashes_leaves_the_run_file_of_those_before(tmp_path, monkeypatch):
    """run rewrites the file after each section: the sections before a crash stay, in the schema."""
    from attnlab import runfile
    from attnlab.gpubench import run

    def fake(section, **kw):
        if section.name == "paged":
            raise RuntimeError("the machine went away")
        r = runfile.row(section.name, {"batch": 1}, "ours", {}, ours=True, time_us=2.0, nbytes=4e6)
        return {"shape": {}, "rows": [r]}

    monkeypatch.setattr(run, "measure", fake)
    out = tmp_path / "run.json"
    res = run.run(("decode", "paged", "prefill"), dry=True, out=str(out))
    saved = runfile.read(out)  # checked against the schema
    assert saved == json.loads(json.dumps(res)) and set(saved["sections"]) == {"decode", "prefill"}
    assert [r["section"] for r in saved["rows"]] == ["decode", "prefill"]
