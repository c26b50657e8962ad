"""The GPU run file and its views: attnlab.runfile (the one set of columns, ratio_to_best's one
direction, reading, writing, converting older files) and explore.measured (what notebooks 03-06
print), checked against the recorded rows themselves and against small synthetic sections whose
answers are worked out by hand. No GPU and no torch needed."""

from __future__ import annotations

import json
import re

import pytest

from attnlab.explore import measured
from attnlab.explore.measured import reader
from attnlab.gpubench.run import default_path
from attnlab.runfile import COLUMNS, SCHEMA, case_text, impl_text, rank, row, to_schema


def _prefill(impl, us, causal=True, flop=5e9, nbytes=1e6, err=1e-3, ours=False):
    return row(
        "prefill",
        {"batch": 1, "N": 8, "causal": causal},
        impl,
        {},
        ours=ours,
        time_us=us,
        flop=flop,
        nbytes=nbytes,
        error=err,
        commit="c" * 40,
    )


def test_rows_and_their_ranks_by_hand():
    hop, cudnn, flex, std, alone = rank(
        [
            _prefill("ours-hopper", 10.0, ours=True),
            _prefill("sdpa-cudnn", 8.0, err=2e-3),
            _prefill("flex", 20.0),
            _prefill("standard", 1.0, nbytes=1e8, err=0.0),
            _prefill("ours-fa2", 4.0, causal=False, flop=1e9, err=0.0, ours=True),
        ],
        unranked=("standard",),
    )
    assert all(tuple(r) == COLUMNS for r in (hop, cudnn, flex, std, alone))
    assert hop["what"] == "batch 1, N 8, causal" and alone["what"] == "batch 1, N 8"
    assert hop["ours"] and not cudnn["ours"] and alone["ours"] and hop["commit"] == "c" * 40
    # best time / this time: higher is better, 1.0 = the fastest ("standard" takes no part)
    assert cudnn["ratio_to_best"] == 1.0 and hop["ratio_to_best"] == pytest.approx(8 / 10)
    assert flex["ratio_to_best"] == pytest.approx(8 / 20) and std["ratio_to_best"] is None
    assert alone["ratio_to_best"] == 1.0
    assert hop["tflops"] == pytest.approx(5e9 / 10e-6 / 1e12)
    assert hop["tbps"] == pytest.approx(1e6 / 10e-6 / 1e12)
    assert hop["error"] == 1e-3 and hop["shape"] == {"batch": 1, "N": 8, "causal": True}


def test_impl_and_case_texts_name_the_launch():
    assert impl_text("paged", {"page_size": 16, "splits": 4, "auto": True}) == "paged ps16 s4 auto"
    assert impl_text("flashinfer-tc", {"page_size": 16, "splits": None}) == "flashinfer-tc ps16"
    assert impl_text("sched", {"auto": False, "ctas": 264}) == "sched ctas=264"
    assert case_text({"n": 2, "prefix": 4, "unique": 1}) == "n 2, prefix 4, unique 1"
    assert (
        case_text({"batch": 1, "N": 8, "causal": False, "variant": "causal"})
        == "batch 1, N 8, variant causal"
    )
    a = row("paged", {"batch": 2}, "paged", {"page_size": 16}, ours=True, time_us=2.0, extra={"plan_us": 3.0})
    assert a["flop"] is None and a["tflops"] is None and a["extra"] == {"plan_us": 3.0}


def test_bad_input_names_the_parameter():
    with pytest.raises(ValueError, match="time_us must be a positive number"):
        row("paged", {"batch": 1}, "paged", {}, ours=True, time_us=float("nan"))
    with pytest.raises(ValueError, match="time_us must be a positive number"):
        row("paged", {"batch": 1}, "paged", {}, ours=True, time_us=0.0)
    with pytest.raises(TypeError, match="ours must be True or False"):
        row("paged", {"batch": 1}, "paged", {}, ours="False", time_us=1.0)
    with pytest.raises(TypeError, match="case must be a dict"):
        row("paged", [1], "paged", {}, ours=True, time_us=1.0)
    with pytest.raises(TypeError, match="name must be a non-empty str"):
        row("paged", {"batch": 1}, "", {}, ours=True, time_us=1.0)
    with pytest.raises(ValueError, match="old must be a run file"):
        to_schema({"rows": []})
    with pytest.raises(ValueError, match="no section of a file recorded before the schema"):
        to_schema({"sections": {"nope": {"rows": [{"us": 1.0}]}}})
    with pytest.raises(ValueError, match="rows: each row needs a number under 'us'"):
        to_schema({"sections": {"paged": {"rows": [{"us": None}]}}})


@pytest.mark.parametrize(
    "kw, exc, words",
    [
        ({"flop": float("nan")}, ValueError, "flop=nan is out of range"),
        ({"flop": float("inf")}, ValueError, "flop=inf is out of range"),
        ({"flop": -1.0}, ValueError, "flop=-1.0 is out of range"),
        ({"flop": True}, TypeError, "flop must be None or a finite number"),
        ({"nbytes": "4e6"}, TypeError, "nbytes must be None or a finite number"),
        ({"error": float("nan")}, ValueError, "error=nan is out of range"),
        ({"error": "0.1"}, TypeError, "error must be None"),
        ({"error": False}, TypeError, "error must be None"),
        ({"time_us": float("inf")}, ValueError, "time_us must be a positive number"),
        ({"time_us": "2"}, TypeError, "time_us must be a positive number"),
        ({"commit": 5}, TypeError, "commit must be None or a commit"),
        ({"extra": [1]}, TypeError, "extra must be a dict"),
        ({"case": {1: 2}}, TypeError, "case's keys must be non-empty str"),
        ({"launch": {2: 1}}, TypeError, "launch's keys must be non-empty str"),
        ({"launch": {"batch": 2}}, ValueError, "names 'batch', a parameter of the case"),
    ],
)
def test_row_refuses_a_value_no_column_can_hold(kw, exc, words):
    args = {"case": {"batch": 1}, "launch": {}, "time_us": 1.0, **kw}
    case, launch = args.pop("case"), args.pop("launch")
    with pytest.raises(exc, match=re.escape(words)):
        row("paged", case, "paged", launch, ours=True, **args)


def test_rank_refuses_a_repeated_launch_and_a_str_of_names():
    a, b = (row("paged", {"batch": 1}, "paged", {}, ours=True, time_us=t) for t in (1.0, 2.0))
    with pytest.raises(ValueError, match="rows\\[1\\] repeats section 'paged', case 'batch 1', impl 'paged'"):
        rank([a, b])
    with pytest.raises(TypeError, match="unranked must be a tuple"):
        rank([a], "standard")  # a str would match by substring: "pa" in "paged"
    other = row("decode", {"batch": 1}, "paged", {}, ours=True, time_us=4.0)  # another section: its own best
    assert [r["ratio_to_best"] for r in rank([a, other])] == [1.0, 1.0]


def test_convert_keeps_every_section_row_and_drops_x_best():
    old = {
        "commit": "a" * 40,
        "commits_by_section": {"paged": "b" * 40},
        "rows": [{"x_best": 2.0}],
        "sections": {
            "paged": {
                "shape": {"heads": 32},
                "rows": [
                    {
                        "batch": 1,
                        "context": 8,
                        "impl": "paged",
                        "page_size": 16,
                        "splits": 2,
                        "us": 4.0,
                        "bytes": 4e6,
                        "tb_per_s": 1.0,
                        "max_err": 0.0,
                        "x_best": 0.5,
                    }
                ],
            },
            "decode": {"rows": [{"batch": 1, "context": 8, "splits": 1, "us": 2.0, "rel_err": 1e-3}]},
        },
    }
    new = to_schema(old)
    assert new["schema"] == SCHEMA and new["sections"] == {"paged": {"shape": {"heads": 32}}, "decode": {}}
    assert [r["commit"] for r in new["rows"]] == ["b" * 40, "a" * 40]
    p, d = new["rows"]
    assert (p["what"], p["impl"], p["shape"]) == (
        "batch 1, context 8",
        "paged ps16 s2",
        {"batch": 1, "context": 8, "page_size": 16, "splits": 2},
    )
    assert (p["time_us"], p["bytes"], p["tbps"], p["error"], p["ours"]) == (4.0, 4e6, 1.0, 0.0, True)
    assert p["extra"] == {"impl": "paged"}  # x_best (two meanings) and the derived TB/s are gone
    assert (d["impl"], d["error"], d["ours"]) == ("ours s1", 1e-3, True)  # decode's error: rel_err
    assert to_schema(new) is new


def test_the_recorded_file_is_in_the_schema_and_its_sections_read_back():
    res = reader.load(reader.run_files()[-1])
    with open(reader.run_files()[-1]) as f:
        raw = json.load(f)
    assert raw["schema"] == SCHEMA and all(tuple(r) == COLUMNS for r in raw["rows"])
    assert all("rows" not in sec for sec in raw["sections"].values())
    assert measured.section(res, "paged")["rows"] == [r for r in raw["rows"] if r["section"] == "paged"]
    for r in raw["rows"]:  # one direction: 1.0 = the fastest of its case
        if r["ratio_to_best"] is not None:
            assert 0 < r["ratio_to_best"] <= 1.0
    assert {"prefill", "decode", "paged", "cascade", "scheduled", "variants"} <= set(res["sections"])
    assert re.fullmatch(r"[0-9a-f]{40}", res["commit"]) and res["sms"] == 132
    # every section names the commit its kernels were measured at in the file; the lesson's
    # provenance line shows device, versions and ceilings, not the commit or the notes
    assert set(res["commits_by_section"]) == set(res["sections"])
    for name, commit in res["commits_by_section"].items():
        assert re.fullmatch(r"[0-9a-f]{40}", commit), name
        text = measured.provenance(res, name)
        assert commit[:7] not in text and "note:" not in text and max(map(len, text.splitlines())) <= 100
    with pytest.raises(KeyError, match="no 'nonexistent' section"):
        measured.provenance(res, "nonexistent")
    bare = {k: v for k, v in res.items() if k not in ("ceilings", "commit", "commits_by_section")}
    assert "measured ceilings: copy" in measured.provenance(bare, "paged")  # paged's own ceilings


def test_newest_run_goes_by_the_date_in_the_name(tmp_path, monkeypatch):
    for name, date in (
        ("h200-2026-11-30.json", "a"),
        ("a100-2026-12-02.json", "b"),
        ("h200-2026-12-01.json", "c"),
        ("h200-2026-12-09-paged.json", "not a run file"),
    ):
        (tmp_path / name).write_text(json.dumps({"mark": date, "schema": SCHEMA, "sections": {}, "rows": []}))
    monkeypatch.setattr(reader, "measurements_dir", lambda: tmp_path)
    assert [p.name for p in measured.run_files()] == [
        "h200-2026-11-30.json",
        "h200-2026-12-01.json",
        "a100-2026-12-02.json",
    ]
    assert measured.newest_run()["mark"] == "b"
    (tmp_path / "b100-2026-12-03.json").write_text(json.dumps({"mark": "old", "sections": {}}))
    with pytest.raises(ValueError, match="not a run file in schema .*python -m attnlab.runfile"):
        measured.newest_run()
    for p in tmp_path.iterdir():
        p.unlink()
    with pytest.raises(FileNotFoundError, match="no run file"):
        measured.newest_run()


def test_default_path_names_the_gpu_and_date():
    assert default_path("NVIDIA H200", "2026-12-01").endswith("measurements/h200-2026-12-01.json")


def test_section_refuses_a_missing_one_by_name():
    with pytest.raises(KeyError, match="no 'variants' section; it has"):
        measured.section({"sections": {"prefill": {}}}, "variants")


def _cells(text, start):
    return [line.split() for line in text.splitlines() if re.match(start, line)]


def test_prefill_summary_ratios_come_from_the_rows():
    res = measured.newest_run()
    sec = measured.section(res, "prefill")
    text = measured.prefill_summary(res)
    assert res["device"] in text and res["flashinfer"] in text
    ours, libs = text.split("the libraries")
    assert len(_cells(libs, r"\d+ x \d+K\s")) == len(_cells(ours, r"\d+ x \d+K\s"))
    lines = _cells(ours, r"\d+ x \d+K\s")
    assert len(lines) == len({r["what"] for r in sec["rows"]})
    for cells in lines:
        b, n, causal = int(cells[0]), int(cells[2][:-1]) * 1024, cells[3] == "causal"
        what = case_text({"batch": b, "N": n, "causal": causal})
        at = {r["impl"]: r["time_us"] for r in sec["rows"] if r["what"] == what}
        best = min(v for k, v in at.items() if not k.startswith("ours") and k != "standard")
        ours = min(v for k, v in at.items() if k in ("ours-hopper", "ours-gluon"))  # our fastest kernel
        assert cells[-3] == f"{best / ours:.2f}"


def _part(text, title, start):
    """The rows after `title` of a summary whose every line fits 100 characters, split in cells."""
    assert max(len(line) for line in text.splitlines()) <= 100
    return _cells(text.split(title)[1], start)


def test_cascade_and_schedule_summaries_come_from_the_rows():
    res = measured.newest_run()
    cas = measured.section(res, "cascade")["rows"]
    counted = _part(measured.cascade_summary(res), "counted against measured", r"\s*\d+\s+4096\s")
    assert len(counted) == len({r["shape"]["n"] for r in cas})
    for cells in counted:
        at = [r for r in cas if r["shape"]["n"] == int(cells[0])]
        auto = next(r["time_us"] for r in at if r["impl"].startswith("cascade ") and r["shape"]["auto"])
        paged = next(r["time_us"] for r in at if r["impl"] == "paged")
        assert cells[-1] == f"{paged / auto:.2f}"
    sch = measured.section(res, "scheduled")["rows"]
    lines = _part(measured.schedules_summary(res), "\nbeside\n", r"\s*\d+\s+\d+\s+\d")
    assert len(lines) == len({r["shape"]["batch"] for r in sch})
    for cells in lines:
        at = [r for r in sch if r["shape"]["batch"] == int(cells[0])]
        fi = next(r["time_us"] for r in at if r["impl"] == "flashinfer-tc")
        bal = min(r["time_us"] for r in at if r["impl"] in ("sched balanced", "sched balanced-128+fused"))
        assert cells[-1] == f"{fi / bal:.2f}"


def test_hopper_steps_gains_are_ratios_of_consecutive_rows():
    text = measured.hopper_steps_summary()
    rows = [line.split() for line in text.splitlines() if re.match(r"\d+K", line)]
    prev = None
    for cells in rows:
        t = float(cells[-3]) if not cells[1].startswith("best") else None
        if cells[-2] != "nan" and prev is not None and t is not None:
            assert abs(float(cells[-2]) - t / prev) < 0.011  # rounded TFLOP/s in the table
        prev = t if cells[1] != "best" else None


def test_the_harness_runs_a_section_end_to_end_on_the_cpu(tmp_path):
    """`python -m attnlab.gpubench --dry`: a tiny decode section under the interpreter, one file."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from attnlab.gpubench import run as bench

    out = tmp_path / "run.json"
    res = bench.run(("decode",), dry=True, out=str(out))
    saved = json.loads(out.read_text())
    assert saved["rows"] == res["rows"] and {r["section"] for r in res["rows"]} == {"decode"}
    assert all(tuple(r) == COLUMNS for r in saved["rows"]) and "rows" not in saved["sections"]["decode"]
    assert all(r["error"] is not None and r["error"] < 1e-2 for r in res["rows"])  # checked before timed
    assert saved["commits_by_section"] == {"decode": saved["commit"]}
    assert "decode " in bench.table(res) and "best/us" in bench.table(res)
    saved["sections"]["paged"], saved["commits_by_section"]["paged"] = {}, "0" * 40
    saved["notes"] = ["paged: kept from an older run", "decode: about rows this run replaces"]
    saved["flashinfer"] = "0.7.2.post1"  # the kept section's library, absent here
    out.write_text(json.dumps(saved))
    again = bench.run(("decode",), dry=True, out=str(out), merge=True)  # --merge keeps sections
    assert set(again["sections"]) == {"decode", "paged"} and len(again["rows"]) == len(res["rows"])
    assert again["commits_by_section"]["paged"] == "0" * 40
    assert again["notes"] == ["paged: kept from an older run"]  # and their notes
    assert again["flashinfer"] == "0.7.2.post1"


def test_prefill_verdicts_apply_the_kernel_rule_per_case():
    from attnlab.gpubench.prefill import verdicts

    rows = [
        _prefill("sdpa-flash", 1.0, causal=False, err=4e-3),
        _prefill("sdpa-cudnn", 1.0, causal=False, err=2e-3),
        _prefill("ours-gluon", 1.0, causal=False, err=5e-3, ours=True),
        _prefill("ours-hopper", 1.0, causal=False, err=5.1e-3, ours=True),
        _prefill("ours-fa2", 1.0, err=1e-3, ours=True),  # causal: no SDPA row of its case
    ]
    verdicts(rows)
    assert [r["extra"].get("within_rule") for r in rows] == [None, None, True, False, None]  # 2 x 2e-3 + 1e-3


def test_gluon_steps_summary_comes_from_the_recorded_file(tmp_path, monkeypatch):
    import json

    from attnlab.explore.measured import reader

    name = "h200-2026-12-02-gluon-steps.json"
    res = json.loads((reader.measurements_dir() / name).read_text())
    lines = _cells(measured.gluon_steps_summary(name), r"\d+ x \d+K,")
    assert len(lines) == len({(r["batch"], r["N"], r["head_dim"], r["causal"]) for r in res["rows"]})
    for cells in lines:
        b, n, d, causal = int(cells[0]), int(cells[2][:-2]) * 1024, int(cells[3]), cells[4] == "causal"
        at = {
            r["impl"]: r["tflops"]
            for r in res["rows"]
            if (r["batch"], r["N"], r["head_dim"], r["causal"]) == (b, n, d, causal)
        }
        assert cells[5:-1] == [f"{at[k]:.0f}" for k in (*res["steps"], "hopper", "cudnn")]
        assert cells[-1] == f"{max(at[s] for s in res['steps']) / at['cudnn']:.2f}"
    res["rows"][0]["checked"] = False  # a step that failed its check has no time to show
    (tmp_path / name).write_text(json.dumps(res))
    monkeypatch.setattr(reader, "measurements_dir", lambda: tmp_path)
    with pytest.raises(ValueError, match="failed its check"):
        measured.gluon_steps_summary(name)


@pytest.mark.parametrize("name", ["h200-2026-12-02-gluon-steps.json", "h200-2026-12-03-gluon-early-k.json"])
def test_gluon_steps_figure_draws_every_checked_step_of_the_file(name, tmp_path, monkeypatch):
    import json

    from attnlab.explore.measured import reader

    res = json.loads((reader.measurements_dir() / name).read_text())
    fig = measured.gluon_steps_figure(name)
    for ax, causal in zip(fig.axes, (False, True)):
        want = sorted(
            r["tflops"]
            for r in res["rows"]
            if r["head_dim"] == 128 and r["causal"] == causal and r["impl"] in res["steps"]
        )
        assert sorted(p.get_height() for p in ax.patches) == pytest.approx(want)  # one bar per step and case
        assert ax.get_xlabel() and "TFLOP/s" in ax.get_ylabel() and ("causal" in ax.get_title()) == causal
    res["rows"][0]["checked"] = False  # rows[0] is a step's: it failed, so no bar
    (tmp_path / name).write_text(json.dumps(res))
    monkeypatch.setattr(reader, "measurements_dir", lambda: tmp_path)
    with pytest.raises(ValueError, match="failed their check"):
        measured.gluon_steps_figure(name)
    with pytest.raises(ValueError, match="head_dim=96"):
        measured.gluon_steps_figure(name, head_dim=96)


def test_profile_summary_shares_are_the_recorded_stalls_over_cycles_per_issue(tmp_path, monkeypatch):
    with open(reader.measurements_dir() / "h200-2026-12-02-ncu.json") as f:
        rec = {k["call"]: k for k in json.load(f)["kernels"]}
    text = measured.profile_summary(("gluon", "sdpa-cudnn"))
    assert max(len(ln) for ln in text.splitlines()) <= 100
    units, waits = (
        [ln for ln in part.splitlines() if ln.startswith(("gluon", "sdpa-cudnn"))]
        for part in text.split("where the warps wait")
    )
    assert len(units) == len(waits) == sum(c.startswith(("gluon", "sdpa-cudnn")) for c in rec) == 8
    for unit, wait in zip(units, waits):
        k = rec[unit[: unit.index("  ")].replace("no mask", "non-causal")]
        assert wait.split()[-5:] == [
            f"{k['stalls'][s] / k['cycles_per_issue']:.0%}" for s in reader.PROFILE_STALLS
        ]
        assert unit.split()[-3] == f"{k['tensor_pipe_active_pct']:.0f}"
    for bad, exc in (("", TypeError), (["gluon"], TypeError), ("nothing-like-this", ValueError)):
        with pytest.raises(exc, match="prefix|no call"):
            measured.profile_summary(bad)
    no_stalls = {**rec["gluon default 1x4096 causal"]}
    del no_stalls["stalls"]
    (tmp_path / "p.json").write_text(json.dumps({"kernels": [no_stalls]}))
    monkeypatch.setattr(reader, "measurements_dir", lambda: tmp_path)
    with pytest.raises(ValueError, match="no stall counters"):
        measured.profile_summary("gluon", "p.json")


def test_the_run_file_reads_back_what_it_wrote_and_refuses_a_broken_one(tmp_path):
    """runfile.write then runfile.read give the same run; a file that is not JSON, not in the
    schema, or whose row lacks a column is refused by name, before or after writing."""
    from attnlab import runfile

    rows = [row("paged", {"batch": 1, "context": 8}, "paged", {}, ours=True, time_us=2.0, nbytes=4e6)]
    run = {"schema": SCHEMA, "device": "x", "sections": {"paged": {}}, "rows": rows}
    path = tmp_path / "x-2026-01-01.json"
    runfile.write(path, run)
    assert runfile.read(path) == run and reader.load(path)["sections"]["paged"]["rows"][0]["time_us"] == 2.0
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json is not JSON"):
        runfile.read(tmp_path / "bad.json")
    with pytest.raises(ValueError, match=r"rows\[0\] must have exactly the columns"):
        runfile.write(path, {**run, "rows": [{k: v for k, v in rows[0].items() if k != "error"}]})
    with pytest.raises(ValueError, match="not a run file in schema 2; `python -m attnlab.runfile old.json`"):
        runfile.check({"sections": {}, "rows": []}, "old.json")
    with pytest.raises(TypeError, match="path must be a file name"):
        runfile.write(None, run)
    for col, bad in (("time_us", "2.0"), ("ours", "yes"), ("shape", [1]), ("error", float("nan"))):
        with pytest.raises(ValueError, match=rf"rows\[0\]\['{col}'\] must be"):
            runfile.write(path, {**run, "rows": [{**rows[0], col: bad}]})
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="list.json is not a run file: a run file is a JSON object"):
        runfile.read(tmp_path / "list.json")
    assert runfile.read(path) == run  # the refused writes left the file alone


def test_the_live_cells_refuse_an_unknown_section_by_name():
    from attnlab.gpubench import live

    from attnlab.gpubench.run import SECTIONS

    valid = ", ".join(repr(s) for s in SECTIONS)  # every declared section, by name
    with pytest.raises(ValueError, match=re.escape(f"sections='nope' is not allowed; valid: {valid}")):
        live.live_run(("prefill", "nope"))
    with pytest.raises(TypeError, match="sections must be a tuple"):
        live.live_run("paged")
