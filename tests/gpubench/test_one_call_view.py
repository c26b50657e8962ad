"""Notebook 05's view of the one decode call (`explore.measured.one_call`), checked against the
recorded run's raw rows, the decoder rule of `kernels.tuning` on the batches' real lengths, and
the earlier run's FlashInfer times for the band."""

from __future__ import annotations

import json

import pytest

from attnlab.explore.measured import one_call
from attnlab.explore.measured.reader import measurements_dir


def _raw(name):
    with open(measurements_dir() / name) as f:
        return json.load(f)


def test_rows_are_flashinfers_time_over_ours_from_the_raw_rows():
    raw = _raw(one_call.ONE_CALL_FILE)
    rows = one_call.one_call_rows()
    tail = [r for r in rows if r["draw"] is not None]
    assert len(tail) == 4 * 9 and len(rows) - len(tail) == 8  # 4 draws x 9 batches; 4 uniform x 2 pages
    for r in tail:
        sec = raw["scheduled"][str(r["draw"])]["rows"]
        at = [x for x in sec if x["shape"]["batch"] == r["batch"]]
        ours = next(x for x in at if x["impl"].startswith("decode_paged"))
        fi = next(x for x in at if x["impl"] == "flashinfer-tc")
        assert r["ratio"] == pytest.approx(fi["time_us"] / ours["time_us"], rel=1e-12)
        # the decoder is the tuning table's on the batch's real lengths (the plan from 64 requests)
        assert r["decoder"] == ("plan" if r["batch"] >= 64 else "split")
        if r["decoder"] == "split":  # one request: its count; an uneven batch: the fill rule
            assert r["rule"] == ("lengths" if r["batch"] == 1 else "fill")
            assert r["rule"] == ours["extra"]["rule"]


def test_summary_fits_and_its_numbers_are_the_rows():
    text = one_call.one_call_summary()
    assert max(len(line) for line in text.splitlines()) <= 100
    rows = [r for r in one_call.one_call_rows() if r["draw"] is not None]
    lo, hi = min(r["ratio"] for r in rows), max(r["ratio"] for r in rows)
    assert f"long-tailed: {lo:.2f} to {hi:.2f}" in text
    before = _raw(one_call.BEFORE_FILE)["draws"]
    moves = [
        abs(r["fi"] / before[str(r["draw"])][str(r["batch"])]["flashinfer_tc_us"] - 1)
        for r in rows
        if str(r["draw"]) in before
    ]
    assert len(moves) == 27 and f"own calls moved by up to {max(moves):.0%}" in text
    # the ratio's own noise: where both runs launched the same (one request; the plan from 64)
    same = [
        abs(r["fi"] / r["ours"] / (v["flashinfer_tc_us"] / v["decode_paged_us"]) - 1)
        for r in rows
        if str(r["draw"]) in before and (r["batch"] == 1 or r["batch"] >= 64)
        for v in [before[str(r["draw"])][str(r["batch"])]]
    ]
    assert len(same) == 12 and f"the ratio moved by up to {max(same):.0%}" in text
    losing = sorted({r["batch"] for r in rows if r["ratio"] < 1})
    assert f"below 1 at batch {', '.join(map(str, losing))}" in text
