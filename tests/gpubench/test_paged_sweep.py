"""gpubench.sweeps.paged as a declaration: a dry run of the smallest case under Triton's interpreter
writes one schema row per configuration of its grid, each checked against the reference; a
wrong output drops its row only; `best` picks the fastest configuration beside FlashInfer."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnlab.gpubench.sweeps import paged as sweep  # noqa: E402
from attnlab.runfile import COLUMNS, row  # noqa: E402

ARGV = ["--dry", "--cases", "1x20", "--page-sizes", "4", "--impls", "paged", "--prefetch", "0,1"]


def _rows(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert sweep.main([*ARGV, "--out", str(out)]) == 0
    capsys.readouterr()
    return json.loads(out.read_text())["rows"]


def test_a_dry_run_writes_a_checked_schema_row_per_configuration(tmp_path, capsys):
    rows = _rows(tmp_path, capsys)
    assert all(tuple(r) == COLUMNS and r["section"] == "paged-sweep" and r["ours"] for r in rows)
    grid = {(r["shape"]["splits"], r["shape"]["prefetch"]) for r in rows}
    assert grid == {(s, pf) for s in sweep.DRY["splits"] for pf in (False, True)} and len(rows) == 4
    assert {(r["shape"]["batch"], r["shape"]["context"], r["shape"]["page_size"]) for r in rows} == {
        (1, 20, 4)
    }
    assert all(0 <= r["error"] <= sweep.SECTION.tolerance for r in rows)
    assert max(r["ratio_to_best"] for r in rows) == 1.0


def test_a_wrong_output_drops_its_row_only(tmp_path, capsys, monkeypatch):
    from attnlab.kernels import paged as kernel

    right = kernel.paged_decode

    def planted(*a, splits=None, **kw):  # two splits: the answer off by 0.1
        o = right(*a, splits=splits, **kw)
        return o + 0.1 if splits == 2 else o

    monkeypatch.setattr(kernel, "paged_decode", planted)
    rows = _rows(tmp_path, capsys)
    assert {r["shape"]["splits"] for r in rows} == {1} and len(rows) == 2


def test_best_is_the_fastest_configuration_of_each_case_and_page_size():
    def r(ps, impl, us, ours=True, **launch):
        return row("paged-sweep", {"batch": 1, "context": 64}, impl, {"page_size": ps, **launch},
                   ours=ours, time_us=us)  # fmt: skip

    rows = [
        r(16, "paged", 10.0, splits=2),
        r(16, "paged", 8.0, splits=4),
        r(16, "flashinfer-tc", 12.0, ours=False),
        r(1, "paged", 20.0, splits=2),
    ]
    got = sweep.best(rows)
    assert [(g["page_size"], g["best"], g["us"]) for g in got] == [
        (16, "paged ps16 s4", 8.0),
        (1, "paged ps1 s2", 20.0),
    ]
    assert got[0]["ratio"] == pytest.approx(1.5) and got[1]["ratio"] is None
