"""gpubench.sweeps.ragged without a GPU: `best` picks each decoder's fastest configuration per batch
and its ratio to FlashInfer on that batch, and the command line refuses what it cannot run."""

import pytest

from attnlab.gpubench.sweeps import ragged


def test_best_is_the_fastest_configuration_of_each_decoder_per_batch():
    rows = [
        {"batch": 4, "impl": "flashinfer-tc", "us": 12.0, "max_err": 0.0},
        {"batch": 4, "impl": "paged", "waves": 2, "min_chunk": 1024, "us": 16.0, "max_err": 1e-3},
        {"batch": 4, "impl": "paged", "waves": 4, "min_chunk": 256, "us": 10.0, "max_err": 1e-3},
        {"batch": 4, "impl": "scheduled", "min_chunk": 128, "fused": True, "us": 15.0, "max_err": 1e-3},
        {"batch": 1, "impl": "paged", "waves": 1, "min_chunk": 512, "us": 7.0, "max_err": 1e-3},
    ]
    got = ragged.best(rows)
    assert [g["batch"] for g in got] == [1, 4]
    assert got[0] == {
        "batch": 1,
        "flashinfer_us": None,
        "paged": {"waves": 1, "min_chunk": 512, "us": 7.0, "ratio": None},
    }
    assert got[1]["paged"] == {"waves": 4, "min_chunk": 256, "us": 10.0, "ratio": pytest.approx(1.2)}
    assert got[1]["scheduled"]["ratio"] == pytest.approx(0.8) and got[1]["flashinfer_us"] == 12.0


def test_the_grid_covers_the_shipped_rules():
    from attnlab.kernels.tuning import MIN_CHUNK, WAVES

    assert (WAVES, MIN_CHUNK) in ragged.PAGED_RULES and 1 in ragged.FLOORS and 128 in ragged.FLOORS
    assert len(set(ragged.LAUNCHES)) == len(ragged.LAUNCHES)


@pytest.mark.parametrize("argv", [[], ["--out"], ["out.json"], ["--dry", "x"]])
def test_usage_is_refused(argv):
    with pytest.raises(SystemExit, match="usage"):
        ragged.main(argv)


def test_the_recorded_sweep_is_what_best_makes_of_its_rows():
    import json
    from attnlab.explore.measured.reader import measurements_dir

    rec = json.loads((measurements_dir() / "h200-2026-12-02-ragged.json").read_text())
    assert ragged.best(rec["rows"]) == rec["best"]
    assert {r["batch"] for r in rec["rows"]} == set(ragged.BATCHES)
    assert all(r["max_err"] <= 0.05 for r in rec["rows"])  # every timed answer was checked
    per_rule = {}  # no rule reaches 0.95 at batch 4-16
    fi = {r["batch"]: r["us"] for r in rec["rows"] if r["impl"].startswith("flashinfer")}
    for r in rec["rows"]:
        if r["impl"] == "paged" and r["batch"] in (4, 8, 16):
            per_rule[r["batch"]] = max(per_rule.get(r["batch"], 0.0), fi[r["batch"]] / r["us"])
    assert max(per_rule.values()) < 0.95 and len(per_rule) == 3
