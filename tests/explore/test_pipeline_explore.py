"""Notebook 03's pipeline explorer and its one step table: the numbers come from the model and the
recorded run, the verdicts from the run's own noise band."""

import json

import numpy as np
import pytest

from attnlab.explore.flash.pipeline import LONG, SHOWN, pipeline_numbers
from attnlab.explore.measured import reader, steps
from attnlab.machine.pipeline import schedule, stage_times


def test_numbers_are_the_models():
    r = pipeline_numbers("H100", 64, True, "independent", False, 3, reuse=4)
    assert len(r.x0) == SHOWN * (1 + 2 * 4)  # a load; QK^T, exp, FMA, PV per warpgroup
    assert np.all(r.x1 >= r.x0) and r.x1.max() == pytest.approx(r.makespan_us)
    tl = schedule(
        stage_times("H100", 64, reuse=4), tiles=LONG, consumers="independent", overlap=False, stages=3
    )
    assert r.tensor_share == pytest.approx(tl.tensor_share) and r.busy[1] == pytest.approx(tl.tensor_share)
    assert r.measured == ()  # the recorded run is an H200's


def test_measured_rows_are_the_recorded_medians():
    raw = json.loads((reader.measurements_dir() / steps.LADDER_FILE).read_text())
    want = sorted(
        float(np.median(x["tflops"]))
        for x in raw["rows"]
        if x["impl"] == "split_pp_ov_s3" and x["head_dim"] == 128 and not x["causal"]
    )
    r = pipeline_numbers("H200", 128, True, "pingpong", True, 3)
    assert sorted(m[2] for m in r.measured) == pytest.approx(want) and len(want) >= 2
    assert pipeline_numbers("H200", 256, True, "pingpong", True, 3).measured == ()


def fake_run(runs):
    rows = [
        {
            "batch": 1,
            "heads": 4,
            "N": 1024,
            "head_dim": 128,
            "causal": c,
            "impl": k,
            "tflops": t,
            "checked": True,
            "max_err": 0.0,
        }
        for k, t in runs.items()
        for c in (False, True)
    ]
    return {
        "device": "X",
        "date": "d",
        "torch": "t",
        "triton": "3.6",
        "repeats": 3,
        "steps": ["a", "b", "c"],
        "step_labels": {"a": "A", "b": "B", "c": "C"},
        "rows": rows,
    }


def test_a_change_inside_the_band_is_noise(monkeypatch):
    run = fake_run(
        {"a": [100, 101, 99], "b": [101.5, 102, 101], "c": [110, 111, 109], "cudnn": [120, 120, 120]}
    )
    monkeypatch.setattr(reader, "recorded", lambda name: run)
    got = {(r.impl, r.causal): r for r in steps.ladder_rows("x")}
    assert (
        got[("a", False)].verdict == "" and got[("b", False)].verdict == "noise"
    )  # +1.5 % inside a 2 % band
    assert got[("c", False)].verdict == "gain" and got[("c", False)].change == pytest.approx(110 / 101.5 - 1)
    assert got[("a", False)].band == pytest.approx(0.02) and got[("cudnn", True)].verdict == ""
    run["rows"][0]["checked"] = False
    with pytest.raises(ValueError, match="failed its check"):
        steps.ladder_rows("x")


def test_the_recorded_table_fits_100_characters():
    text = steps.ladder_summary()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert text.count("cuDNN") == 3 and "noise" in text


def test_between_machines_is_the_ratio_of_the_two_files_medians():
    load = lambda n: json.loads((reader.measurements_dir() / n).read_text())  # noqa: E731
    a, b = load(steps.LADDER_FILE), load(steps.OTHER_MACHINE)
    key = lambda r: (r["impl"], r["batch"], r["N"], r["head_dim"], r["causal"])  # noqa: E731
    there = {key(r): np.median(r["tflops"]) for r in b["rows"]}
    q = [there[key(r)] / np.median(r["tflops"]) for r in a["rows"] if r["impl"] == "cudnn"]
    line = next(ln for ln in steps.between_machines().splitlines() if ln.startswith("cuDNN"))
    assert line.split()[-3:] == [f"{min(q):.2f}", f"{max(q):.2f}", str(len(q))]
