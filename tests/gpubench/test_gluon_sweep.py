"""gpubench.sweeps.gluon without a GPU: it imports, refuses a wrong mode, and `record` turns a run
into the recorded steps file's rows."""
import json

import pytest

from attnlab.gpubench.sweeps import gluon


def test_record_keeps_each_time_beside_its_check(tmp_path):
    run = {"device": "X", "torch": "t", "triton": "3.6", "cases": [
        {"shape": [1, 4, 256, 64], "causal": True,
         "tflops": {"gluon_split": 10.0, "gluon_no_ws": 8.0, "cudnn": 12.0},
         "check": {"split": {"ok": True, "err_o": 1e-3}, "no_ws": {"ok": False, "err_o": 0.5}}}]}
    rec = gluon.record(run, date="2026-12-02", commit="abc")
    got = {r["impl"]: (r["tflops"], r["checked"], r["max_err"]) for r in rec["rows"]}
    assert got == {"split": (10.0, True, 1e-3), "no_ws": (8.0, False, 0.5), "cudnn": (12.0, None, None)}
    assert rec["steps"] == list(gluon.RECORD_STEPS) and rec["commit"] == "abc"
    (tmp_path / "run.json").write_text(json.dumps(run))
    assert gluon.main(["record", str(tmp_path / "run.json"), str(tmp_path / "out.json"), "2026-12-02", "abc"]) == 0
    assert json.loads((tmp_path / "out.json").read_text()) == rec


def test_wrong_mode_is_refused():
    with pytest.raises(SystemExit, match="mode must be"):
        gluon.main(["fast"])
    with pytest.raises(SystemExit, match="usage"):
        gluon.main(["record", "a.json"])
