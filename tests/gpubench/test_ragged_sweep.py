"""gpubench.sweeps.ragged as a declaration: `best` picks each decoder's fastest configuration per
batch and its ratio to FlashInfer on that batch (also over the recorded sweep's rows), a dry run
of the smallest batch under Triton's interpreter writes checked schema rows, a wrong output drops
its rows only, and the command line refuses what it cannot run."""

from __future__ import annotations

import json

import pytest

from attnlab.gpubench.sweeps import ragged
from attnlab.runfile import COLUMNS, row

#: the launch parameters of each decoder's rows, and what the sweep records beside them
LAUNCH = {
    "paged": ("waves", "min_chunk", "block_n", "num_stages", "prefetch"),
    "scheduled": ("min_chunk", "block_n", "num_stages", "prefetch", "fused"),
}


def _row(batch, impl, us, **kw):
    keys = LAUNCH.get(impl, ())
    return row(
        "ragged-sweep",
        {"batch": batch},
        impl,
        {k: kw[k] for k in keys if k in kw},
        ours=impl in LAUNCH,
        time_us=us,
        error=kw.get("max_err"),
        extra={k: v for k, v in kw.items() if k not in keys and k != "max_err"},
    )


def test_best_is_the_fastest_configuration_of_each_decoder_per_batch():
    rows = [
        _row(4, "flashinfer-tc", 12.0),
        _row(4, "paged", 16.0, waves=2, min_chunk=1024),
        _row(4, "paged", 10.0, waves=4, min_chunk=256, splits=8),
        _row(4, "scheduled", 15.0, min_chunk=128, fused=True, items=40),
        _row(1, "paged", 7.0, waves=1, min_chunk=512),
    ]
    got = ragged.best(rows)
    assert [g["batch"] for g in got] == [1, 4]
    assert got[0] == {
        "batch": 1,
        "flashinfer_us": None,
        "paged": {"waves": 1, "min_chunk": 512, "us": 7.0, "ratio": None},
    }
    assert got[1]["paged"] == {
        "waves": 4,
        "min_chunk": 256,
        "splits": 8,
        "us": 10.0,
        "ratio": pytest.approx(1.2),
    }
    assert got[1]["scheduled"]["ratio"] == pytest.approx(0.8) and got[1]["flashinfer_us"] == 12.0
    assert got[1]["scheduled"]["items"] == 40


def test_the_grid_covers_the_shipped_rules():
    from attnlab.kernels.tuning import MIN_CHUNK, WAVES

    assert (WAVES, MIN_CHUNK) in ragged.PAGED_RULES and 1 in ragged.FLOORS and 128 in ragged.FLOORS
    assert len(set(ragged.LAUNCHES)) == len(ragged.LAUNCHES)


@pytest.mark.parametrize(
    "argv",
    [[], ["--out"], ["out.json"], ["--dry", "x"], ["--dry", "--out", "s.json", "--launches", "64x2"]],
)
def test_usage_is_refused(argv):
    with pytest.raises(SystemExit, match="usage"):
        ragged.main(argv)


def test_the_recorded_sweep_is_what_best_makes_of_its_rows():
    from attnlab.explore.measured.reader import measurements_dir

    rec = json.loads((measurements_dir() / "h200-2026-12-02-ragged.json").read_text())
    rows = [_row(r["batch"], r["impl"], r["us"], **{k: v for k, v in r.items() if k not in ("batch", "impl", "us")})
            for r in rec["rows"]]  # fmt: skip
    assert ragged.best(rows) == rec["best"]
    assert {r["batch"] for r in rec["rows"]} == set(s[0] for s in ragged.SECTION.cases)
    assert all(r["max_err"] <= ragged.SECTION.tolerance for r in rec["rows"])  # every answer was checked
    per_rule = {}  # no rule reaches 0.95 at batch 4-16
    fi = {r["batch"]: r["us"] for r in rec["rows"] if r["impl"].startswith("flashinfer")}
    for r in rec["rows"]:
        if r["impl"] == "paged" and r["batch"] in (4, 8, 16):
            per_rule[r["batch"]] = max(per_rule.get(r["batch"], 0.0), fi[r["batch"]] / r["us"])
    assert max(per_rule.values()) < 0.95 and len(per_rule) == 3


def _dry(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    out = tmp_path / "s.json"
    assert ragged.main(["--dry", "--cases", "1", "--impls", "paged,scheduled", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    return json.loads(out.read_text())["rows"], printed


def test_a_dry_run_writes_checked_schema_rows_and_the_best_per_batch(tmp_path, capsys):
    rows, printed = _dry(tmp_path, capsys)
    assert all(tuple(r) == COLUMNS and r["section"] == "ragged-sweep" for r in rows)
    grid = len(ragged.DRY["rules"]) * len(ragged.DRY["launches"])
    assert sorted(r["impl"].split(" ")[0] for r in rows) == ["paged"] * grid + ["scheduled"] * 2 * grid
    assert all(r["shape"]["batch"] == 1 and 0 <= r["error"] <= ragged.SECTION.tolerance for r in rows)
    assert {r["shape"]["fused"] for r in rows if r["impl"].startswith("scheduled")} == {False, True}
    assert json.dumps(ragged.best(rows)[0]) in printed  # the summary, one line a batch


def test_a_wrong_output_drops_its_rows_only(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    from attnlab.kernels import paged as kernel

    right = kernel.paged_decode
    monkeypatch.setattr(kernel, "paged_decode", lambda *a, **kw: right(*a, **kw) * 1.5)
    rows, _ = _dry(tmp_path, capsys)
    assert {r["impl"].split(" ")[0] for r in rows} == {"scheduled"} and len(rows) == 2
