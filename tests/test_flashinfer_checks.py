"""The checks notebook 05 prints reproduce the lecture's numbers (block tables as BSR, 76 vs 31
blocks, variants equal to their definitions, bitwise-reproducible merges) and can fail: each
number is parsed back out of the text and compared with what the lecture states."""
from __future__ import annotations

import re

import pytest

from attnlab.explore.flashinfer import (bsr_check, composable_check, determinism_check, paper_table,
                                        variants_check)


def _floats(text, label):
    m = re.search(re.escape(label) + r"\s*=?\s*([0-9.e+-]+)", text)
    assert m, f"{label!r} not in {text!r}"
    return float(m.group(1))


def test_bsr_check_is_the_lecture_example():
    text = bsr_check()
    assert "kv_indptr        = [0, 5, 8, 16]" in text
    assert "kv_last_page_len = [3, 2, 1]" in text
    assert "indptr and indices equal" in text
    tables = [eval(t) for t in re.findall(r"block table (\[[^\]]*\])", text)]
    assert [len(t) for t in tables] == [5, 3, 8]
    indices = eval(re.search(r"kv_indices\s*= (\[[^\]]*\])", text).group(1))
    assert indices == tables[0] + tables[1] + tables[2]
    assert sorted(indices) != indices                    # a shuffled pool, not 0, 1, 2, ...
    assert _floats(text, "contiguous attention| =") == 0.0


@pytest.mark.parametrize("n, prefix, own", [(4, 15, 4), (3, 2, 0), (5, 1, 7)])
def test_composable_check_counts_blocks(n, prefix, own):
    text = composable_check(n, prefix, own)
    single, comp = map(int, re.search(r"single format (\d+), composable (\d+)", text).groups())
    assert (single, comp) == (n * (prefix + own), prefix + n * own)
    assert _floats(text, "per-request attention| =") < 1e-5


def test_composable_check_lecture_numbers():
    assert "single format 76, composable 31" in composable_check()


def test_variants_check_agrees_with_definitions_and_differs_from_plain():
    text = variants_check(n=97, d=16)
    rows = re.findall(r"^([a-z]\S+)\s+([0-9.e+-]+)\s+([0-9.e+-]+)$", text, re.M)
    assert [r[0] for r in rows] == ["soft_cap(5)", "sliding_window(64)", "sigmoid(-2)"]
    for _, err, plain in rows:
        assert float(err) < 1e-12 and float(plain) > 0.1


def test_determinism_check_fixed_order_is_bitwise_and_random_is_not():
    text = determinism_check(batch=3, d=64)
    assert "3 runs: bitwise identical" in text
    diffs = re.search(r"fixed order = (.*)$", text, re.M).group(1).split(", ")
    assert len(diffs) == 3 and all(0 < float(x) < 1e-5 for x in diffs)


def test_paper_table_names_its_figures():
    text = paper_table()
    for figure in ("29-69 %", "28-30 %", "13-17 %"):
        assert figure in text


def test_paged_summary_reads_the_recorded_run_and_its_ratios():
    from attnlab.explore import measured, runs
    res = runs.section(runs.newest_run(), "paged")
    text = measured.paged_summary(res)
    assert res["device"] in text and res["flashinfer"] in text
    rows = [line.split() for line in text.splitlines() if re.match(r"\s*\d+ x \d+K", line)]
    assert len(rows) == len({(r["batch"], r["context"], r["page_size"]) for r in res["rows"] if r["page_size"]})
    for cells in rows:
        b, ps = int(cells[0]), int(cells[3])
        at = [r for r in res["rows"] if r["batch"] == b and r["page_size"] == ps]
        ours = min(r["us"] for r in at if r["impl"] == "paged" and not r.get("auto"))
        fi = next(r["us"] for r in at if r["impl"] == "flashinfer-tc")
        assert float(cells[4]) == round(ours, 1) and float(cells[-1]) == round(fi / ours, 2)


def test_variants_summary_ratios_come_from_the_recorded_rows():
    from attnlab.explore import measured, runs
    sec = runs.section(runs.newest_run(), "variants")
    text = measured.variants_summary(sec)
    rows = sec["rows"]
    cases = {(r["batch"], r["N"], r["variant"]) for r in rows}
    assert {r["impl"] for r in rows} >= {"ours", "ours-hopper", "flex"} and len(cases) == 8
    lines = [line for line in text.splitlines() if re.match(r"\d+ x [\d,]+\s", line)]
    assert len(lines) == len(cases)
    for b, n, var in cases:
        at = {r["impl"]: r["us"] for r in rows if (r["batch"], r["N"], r["variant"]) == (b, n, var)}
        best = min(v for k, v in at.items() if k not in ("ours", "ours-hopper"))
        line = next(s for s in lines if s.startswith(f"{b} x {n:,} ") and f" {var} " in f" {s} ")
        assert line.split()[-2:] == [f"{best / at['ours']:.2f}", f"{best / at['ours-hopper']:.2f}"]
