"""gpubench.sweeps.gluon without a GPU: it imports, refuses a wrong mode, and `record` turns a run
into the recorded steps file's rows."""

import json

import pytest

from attnlab.gpubench.sweeps import gluon


def test_record_keeps_each_time_beside_its_check(tmp_path):
    run = {
        "device": "X",
        "torch": "t",
        "triton": "3.6",
        "cases": [
            {
                "shape": [1, 4, 256, 64],
                "causal": True,
                "tflops": {"gluon_split": 10.0, "gluon_no_ws": 8.0, "cudnn": 12.0},
                "check": {"split": {"ok": True, "err_o": 1e-3}, "no_ws": {"ok": False, "err_o": 0.5}},
            }
        ],
    }
    rec = gluon.record(run, date="2026-12-02", commit="abc")
    got = {r["impl"]: (r["tflops"], r["checked"], r["max_err"]) for r in rec["rows"]}
    assert got == {"split": (10.0, True, 1e-3), "no_ws": (8.0, False, 0.5), "cudnn": (12.0, None, None)}
    assert rec["steps"] == list(gluon.RECORD_STEPS) and rec["commit"] == "abc"
    (tmp_path / "run.json").write_text(json.dumps(run))
    assert (
        gluon.main(["record", str(tmp_path / "run.json"), str(tmp_path / "out.json"), "2026-12-02", "abc"])
        == 0
    )
    assert json.loads((tmp_path / "out.json").read_text()) == rec


def test_wrong_mode_is_refused():
    with pytest.raises(SystemExit, match="mode must be"):
        gluon.main(["fast"])
    with pytest.raises(SystemExit, match="usage"):
        gluon.main(["record", "a.json"])


def test_reference_caps_and_windows_as_the_harness_reference_does(monkeypatch):
    torch = pytest.importorskip("torch")
    from attnlab.gpubench.reference import reference as harness_reference

    monkeypatch.setattr(gluon, "torch", torch, raising=False)  # the sweep imports torch in _torch()
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 50, 64, generator=g).to(torch.bfloat16)
    k, v = (torch.randn(2, 2, 30, 64, generator=g).to(torch.bfloat16) for _ in "kv")
    for causal, cap, w in (
        (False, 30.0, 0),
        (True, 0.0, 0),
        (False, 0.0, 1),
        (True, 5.0, 7),
        (False, 0.0, 99),
    ):
        o, lse = gluon.reference(q, k, v, causal, 64**-0.5, cap, w)
        want = harness_reference(torch, q, k, v, causal=causal or w > 0, soft_cap=cap or None, window=w)
        # float32 both; with a soft cap the two tanh calls may take different float32 paths (after
        # the kernel tests ran in the same process they were 7.6e-5 apart): a wrong mask, cap or
        # window is off by O(0.1), far outside either bound
        assert torch.allclose(o, want, atol=5e-4 if cap else 1e-5), (causal, cap, w)
        no_key = torch.isinf(lse)  # N_q > N_k: the first 20 rows see no key
        assert bool(no_key[..., :20].all()) == (causal or w > 0) and not no_key[..., 20:].any()
        assert not o[no_key].any()


def test_smoke_covers_the_variants_edges():
    cases = gluon.SMOKE
    assert any(c[8] == 1 for c in cases) and any(c[8] > c[4] for c in cases)  # window 1, wider than N_k
    assert any(c[7] and c[1] != c[2] and c[3] != c[4] for c in cases)  # soft-cap with GQA, N_q != N_k
    assert any(c[8] and c[3] > c[4] for c in cases) and any(c[7] and c[6] and c[3] > c[4] for c in cases)
    assert any(c[7] and c[8] for c in cases) and {c[5] for c in cases if c[7] or c[8]} == {64, 128}


def test_every_step_set_of_every_mode_is_a_launch_the_kernel_takes():
    from attnlab.kernels.gluon_fa3 import GLUON_STEPS, config_for

    assert set(gluon.EARLY_SMOKE) <= set(gluon.EARLY)
    for table in (gluon.VARIANTS, gluon.FINAL, gluon.EARLY):
        for name, (steps, stages, block_n, dims) in table.items():
            assert steps is None or set(steps) <= set(GLUON_STEPS), name
            for d in dims:  # fits shared memory, or config_for refuses it
                config_for(d, frozenset(steps or ()), stages, block_n)
    assert all("early_k_release" in gluon.EARLY[n][0] for n in gluon.EARLY_SMOKE)


def test_an_early_k_run_is_recorded_under_its_own_step_names(tmp_path):
    run = {
        "device": "X",
        "torch": "t",
        "triton": "3.6",
        "cases": [
            {
                "shape": [1, 4, 256, 128],
                "causal": False,
                "tflops": {"gluon_split_ek": 9.0, "cudnn": 12.0},
                "check": {"split_ek": {"ok": True, "err_o": 2e-3}},
            }
        ],
    }
    (tmp_path / "run.json").write_text(json.dumps(run))
    assert (
        gluon.main(["record", str(tmp_path / "run.json"), str(tmp_path / "o.json"), "d", "c", "early_k"]) == 0
    )
    rec = json.loads((tmp_path / "o.json").read_text())
    assert rec["steps"] == list(gluon.EARLY) == list(gluon.RECORD_EARLY)  # every set of the mode has a label
    assert {r["impl"]: r["checked"] for r in rec["rows"]} == {"split_ek": True, "cudnn": None}
    with pytest.raises(SystemExit, match="usage"):
        gluon.main(["record", "a.json", "b.json", "d", "c", "late_k"])


def test_record_ladder_keeps_every_repeat_and_its_check():
    run = {
        "device": "X",
        "torch": "t",
        "triton": "3.6",
        "cases": [
            {
                "shape": [2, 4, 256, 128],
                "causal": False,
                "check": {"ws": {"ok": True, "err_o": 1e-3}},
                "tflops": {"ws": [3.0, 1.0, 2.0], "cudnn": [5.0, 4.0, 6.0]},
            }
        ],
    }
    rec = gluon.record_ladder(run, date="2026-12-04", commit="abc")
    got = {r["impl"]: (r["tflops"], r["checked"]) for r in rec["rows"]}
    assert got == {"ws": ([1.0, 2.0, 3.0], True), "cudnn": ([4.0, 5.0, 6.0], True)}
    assert rec["repeats"] == 3 and rec["steps"] == list(gluon.LADDER)
    other = json.loads(json.dumps(run))
    other["cases"][0]["tflops"]["ws"] = [4.0, 5.0, 6.0]
    other["cases"][0]["check"]["ws"] = {"ok": False, "err_o": 0.5}
    both = gluon.record_ladder([run, other], date="d", commit="c")
    got = {r["impl"]: (r["tflops"], r["checked"], r["max_err"]) for r in both["rows"]}
    assert got["ws"] == ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], False, 0.5) and both["repeats"] == 6
    other["cases"][0]["causal"] = True
    with pytest.raises(ValueError, match="same cases"):
        gluon.record_ladder([run, other], date="d", commit="c")
