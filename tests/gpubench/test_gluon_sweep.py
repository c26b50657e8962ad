"""The Gluon sweep without a GPU: its three declarations (their step sets are launches the kernel
takes; their cases cover the variants' edges), the lse check on CPU tensors against a float64
reference, a dry run of the declarations through the one loop (the Gluon kernel has no launches
off sm_90, so its peers run alone), and `record` / `record_ladder` turning schema rows into the
recorded step files that notebook 03's views read."""

import argparse
import json
import math

import pytest

from attnlab.gpubench.sweeps import gluon, gluon_record, gluon_sets, gluon_steps
from attnlab.runfile import row

torch = pytest.importorskip("torch")


def _run(rows, **kw):
    """A sweep's result as core.measure writes it: the header's provenance and schema rows."""
    return {"device": "X", "sms": 132, "torch": "t", "triton": "3.6", "seed": 1, "rows": rows, **kw}


def _row(section, impl, launch, *, causal=False, us=100.0, repeats=None, within=None, error=1e-3, d=128):
    case = dict(batch=2, heads=4, N=256, head_dim=d, causal=causal)
    extra = {"timing": "graph"}
    if repeats is not None:
        extra["repeat_us"] = list(repeats)
    if within is not None:
        extra["within_rule"] = within
    ours = impl in ("gluon", "hopper")
    return row(
        section, case, impl, launch, ours=ours, time_us=us, flop=4e6, error=error, commit="c", extra=extra
    )


def test_record_keeps_each_time_beside_its_check(tmp_path):
    rows = [
        _row("gluon-full", "gluon", {"steps": "split"}, us=2.0, within=True),
        _row("gluon-full", "gluon", {"steps": "no_ws"}, us=4.0, within=False, error=0.5),
        _row("gluon-full", "hopper", {}, us=5.0, within=True),
        _row("gluon-full", "sdpa-cudnn", {}, us=1.0),
        _row("gluon-full", "sdpa-flash", {}, us=8.0),
    ]
    rec = gluon_record.record(_run(rows), date="2026-12-02", commit="abc")
    got = {r["impl"]: (r["tflops"], r["checked"], r["max_err"]) for r in rec["rows"]}
    assert got == {
        "split": (2.0, True, 1e-3),  # 4e6 flop / 2 us = 2 TFLOP/s
        "no_ws": (1.0, False, 0.5),
        "hopper": (pytest.approx(0.8), None, None),
        "cudnn": (4.0, None, None),
        "sdpa_flash": (0.5, None, None),
    }
    assert {(r["batch"], r["heads"], r["N"], r["head_dim"], r["causal"]) for r in rec["rows"]} == {
        (2, 4, 256, 128, False)
    }
    assert rec["steps"] == list(gluon_record.RECORD_STEPS) and rec["commit"] == "abc" and rec["sms"] == 132
    (tmp_path / "run.json").write_text(json.dumps(_run(rows)))
    argv = ["record", str(tmp_path / "run.json"), str(tmp_path / "out.json"), "2026-12-02", "abc"]
    assert gluon.main(argv) == 0
    assert json.loads((tmp_path / "out.json").read_text()) == rec


def test_a_run_not_in_the_schema_is_refused_by_name(tmp_path, capsys):
    old = {"device": "X", "torch": "t", "triton": "3.6", "cases": [{"shape": [1, 4, 256, 64]}]}
    (tmp_path / "old.json").write_text(json.dumps(old))
    with pytest.raises(SystemExit) as e:
        gluon.main(["record", str(tmp_path / "old.json"), str(tmp_path / "o.json"), "d", "c"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "old.json" in err and "schema" in err
    with pytest.raises(ValueError, match="rows\\[0\\]"):
        gluon_record.record(_run([{"impl": "gluon"}]), date="d", commit="c")
    with pytest.raises(TypeError, match="date"):
        gluon_record.record(_run([]), date="", commit="c")


def test_wrong_mode_is_refused():
    with pytest.raises(SystemExit, match="mode must be"):
        gluon.main(["fast"])
    with pytest.raises(SystemExit, match="usage"):
        gluon.main(["record", "a.json"])
    with pytest.raises(ValueError, match="table"):
        gluon.run("ladder", "early_k")


def _lse64(q, k, causal, cap, w):
    """float64 lse, each query row's visible keys picked by index comparisons written out."""
    B, hq, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    out = torch.empty(B, hq, nq, dtype=torch.float64)
    for b in range(B):
        for h in range(hq):
            s = q[b, h].double() @ k[b, h // (hq // hkv)].double().T / math.sqrt(d)
            if cap:
                s = cap * torch.tanh(s / cap)
            for i in range(nq):
                diag = i + nk - nq  # bottom-right aligned
                seen = [j for j in range(nk) if (not (causal or w) or j <= diag) and (not w or j > diag - w)]
                out[b, h, i] = torch.logsumexp(s[i, seen], 0) if seen else -math.inf
    return out


def test_lse_reference_is_the_float64_lse_with_no_key_rows_at_minus_inf():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 30, 64, generator=g).to(torch.bfloat16)
    k = torch.randn(1, 2, 20, 64, generator=g).to(torch.bfloat16)
    for causal, cap, w in (
        (False, None, 0),
        (True, None, 0),
        (False, 30.0, 0),
        (False, None, 3),
        (True, 5.0, 7),
    ):
        got = gluon_steps.lse_reference(torch, q, k, causal=causal or w > 0, soft_cap=cap, window=w)
        want = _lse64(q, k, causal, cap, w)
        none = torch.isinf(want)
        assert torch.equal(torch.isinf(got), none) and bool(none[..., :10].all()) == (causal or w > 0)
        assert torch.allclose(got[~none].double(), want[~none], atol=1e-4), (causal, cap, w)


def test_lse_error_refuses_nan_a_wrong_no_key_row_and_a_large_error():
    want = torch.tensor([[-math.inf, 1.0, 2.0]])
    off = torch.tensor([[0.0, 2.0**-10, -(2.0**-9)]])  # exact in float32
    assert gluon_steps.lse_error(want + off, want) == 2.0**-9
    assert gluon_steps.lse_error(torch.full((1, 2), -math.inf), torch.full((1, 2), -math.inf)) == 0.0
    for bad, match in (
        (torch.tensor([[-math.inf, math.nan, 2.0]]), "NaN"),
        (torch.tensor([[0.0, 1.0, 2.0]]), "-inf rows"),  # a row that sees no key must be -inf
        (torch.tensor([[-math.inf, 1.0, -math.inf]]), "-inf rows"),
        (torch.tensor([[-math.inf, 1.0, 2.1]]), "over"),
    ):
        with pytest.raises(ValueError, match=match):
            gluon_steps.lse_error(bad, want)


def test_smoke_covers_the_variants_edges():
    cases = gluon_sets.SMOKE_CASES
    assert any(c[8] == 1 for c in cases) and any(c[8] > c[4] for c in cases)  # window 1, wider than N_k
    assert any(c[7] and c[1] != c[2] and c[3] != c[4] for c in cases)  # soft-cap with GQA, N_q != N_k
    assert any(c[8] and c[3] > c[4] for c in cases) and any(c[7] and c[6] and c[3] > c[4] for c in cases)
    assert any(c[7] and c[8] for c in cases) and {c[5] for c in cases if c[7] or c[8]} == {64, 128}


def test_every_step_set_of_every_table_is_a_launch_the_kernel_takes():
    from attnlab.kernels.gluon_fa3 import GLUON_STEPS, config_for

    for mode, tables in gluon_sets.TABLES.items():
        for table in tables.values():
            for name, (steps, stages, block_n, dims) in table.items():
                assert steps is None or set(steps) <= set(GLUON_STEPS), (mode, name)
                for d in dims:  # fits shared memory, or config_for refuses it
                    config_for(d, frozenset(steps or ()), stages, block_n)
    assert list(gluon_sets.TABLES["smoke"]["early_k"]) == list(gluon_sets.EARLY_SMOKE)
    assert all("early_k_release" in gluon_sets.EARLY[n][0] for n in gluon_sets.EARLY_SMOKE)
    assert list(gluon_sets.TABLES["ladder"][None]) == list(gluon_sets.LADDER)
    assert all(b is None or b in gluon_sets.LADDER for *_, b in gluon_sets.LADDER.values())


def test_the_declarations():
    for mode, sec in gluon.SECTIONS.items():
        assert sec.impl_names()[0] == "gluon" and sec.impls[0].ours and mode in sec.name
        assert all(len(c) == len(sec.fields) for c in (*sec.cases, *sec.dry_cases))
        flag, _, kind, default = sec.options[0]
        assert flag == "--sets" and default is gluon_sets.TABLES[mode][None]  # the default table
        assert all(kind(name) is table for name, table in gluon_sets.TABLES[mode].items() if name)
        with pytest.raises(argparse.ArgumentTypeError, match="'latest'"):
            kind("latest")
    assert gluon.SECTIONS["ladder"].repeats == gluon_sets.REPEATS > 1
    assert gluon.SECTIONS["full"].impl_names() == ("gluon", "hopper", "sdpa")
    assert set(gluon.FILES) == set(gluon.SECTIONS)


def test_a_dry_run_of_the_full_declaration_checks_and_times_the_peers(capsys):
    """On a CPU: hopper under the interpreter and SDPA, both masks, each checked against the float32
    reference; our rows get the rule's verdict; record reads the result."""
    from attnlab.gpubench.core import measure

    if torch.cuda.is_available():
        pytest.skip("the dry run is for machines without a GPU")
    res = measure(gluon.SECTIONS["full"], cases=[(1, 2, 24, 64)], dry=True)
    assert [(r["impl"], r["shape"]["causal"]) for r in res["rows"]] == [
        (i, c) for c in (False, True) for i in ("hopper", "sdpa")
    ]
    assert all(
        r["error"] < 2e-2 and r["flop"] == 4 * 2 * 24 * 24 * 64 / (2 if r["shape"]["causal"] else 1)
        for r in res["rows"]
    )
    assert [r["extra"].get("within_rule") for r in res["rows"]] == [True, None, True, None]
    assert res["seed"] == 0 and "split" in res["sets"]
    rec = gluon_record.record(res, date="d", commit="c")
    assert [r["impl"] for r in rec["rows"]] == ["hopper", "sdpa"] * 2


def test_a_dry_run_of_the_ladder_times_each_launch_round_robin():
    from attnlab.gpubench.core import measure

    if torch.cuda.is_available():
        pytest.skip("the dry run is for machines without a GPU")
    res = measure(gluon.SECTIONS["ladder"], cases=[(1, 2, 16, 64)], dry=True, seed=gluon_sets.LADDER_SEED)
    assert [r["impl"] for r in res["rows"]] == ["sdpa", "sdpa"]
    assert all(len(r["extra"]["repeat_us"]) == gluon_sets.REPEATS for r in res["rows"])
    rec = gluon_record.record_ladder([res, res], date="d", commit="c")
    assert rec["repeats"] == 2 * gluon_sets.REPEATS and rec["processes"] == 2
    assert all(len(r["tflops"]) == 2 * gluon_sets.REPEATS for r in rec["rows"])


def _ladder_rows(times: dict, within=True):
    return [
        _row(
            "gluon-ladder",
            "sdpa-cudnn" if n == "cudnn" else "gluon",
            {} if n == "cudnn" else {"steps": n},
            causal=c,
            us=sorted(t)[len(t) // 2],
            repeats=t,
            within=None if n == "cudnn" else within,
        )
        for c in (False, True)
        for n, t in times.items()
    ]


def test_record_ladder_pools_every_repeat_and_its_check():
    times = {n: [10.0, 8.0, 9.0] for n in gluon_sets.LADDER} | {"cudnn": [5.0, 4.0, 6.0]}
    rec = gluon_record.record_ladder(_run(_ladder_rows(times)), date="2026-12-04", commit="abc")
    got = {(r["impl"], r["causal"]): (r["tflops"], r["checked"]) for r in rec["rows"]}
    assert got[("ws", False)] == (pytest.approx([0.4, 4 / 9.0, 0.5]), True)  # 4e6 flop over 10, 9, 8 us
    assert got[("cudnn", True)] == (pytest.approx([4 / 6.0, 0.8, 1.0]), True)
    assert rec["repeats"] == 3 and rec["steps"] == list(gluon_sets.LADDER)
    assert rec["step_base"]["split_pp_ov"] == "split_pp" and "seed 1" in rec["method"]
    other = _run(_ladder_rows(times, within=False))
    other["rows"] = [r for r in other["rows"] if r["shape"].get("steps") != "split"]  # dropped there
    both = gluon_record.record_ladder([_run(_ladder_rows(times)), other], date="d", commit="c")
    got = {(r["impl"], r["causal"]): (len(r["tflops"]), r["checked"]) for r in both["rows"]}
    assert (
        got[("ws", False)] == (6, False)
        and got[("split", True)] == (3, False)
        and got[("cudnn", False)] == (6, True)
    )
    assert both["repeats"] == 6 and both["processes"] == 2
    swapped = _run(_ladder_rows(times)[::-1])
    with pytest.raises(ValueError, match="same cases"):
        gluon_record.record_ladder([_run(_ladder_rows(times)), swapped], date="d", commit="c")
    with pytest.raises(ValueError, match="one device"):
        gluon_record.record_ladder([_run([]), _run([], device="Y")], date="d", commit="c")


def test_the_recorded_ladder_file_is_what_the_step_table_reads(monkeypatch):
    from attnlab.explore.measured import reader, steps

    times = {n: [10.0 - i / 4, 10.0 - i / 4, 10.0 - i / 4] for i, n in enumerate(gluon_sets.LADDER)}
    rec = gluon_record.record_ladder(_run(_ladder_rows(times | {"cudnn": [5.0] * 3})), date="d", commit="c")
    monkeypatch.setattr(reader, "recorded", lambda name: json.loads(json.dumps(rec)))
    rows = {(r.impl, r.causal): r for r in steps.ladder_rows("x")}
    assert len(rows) == 2 * (len(gluon_sets.LADDER) + 1)
    ov = rows[("split_pp_ov", False)]  # measured against its base, split_pp
    assert ov.base == "split_pp" and ov.change == pytest.approx(9.25 / 8.5 - 1) and ov.verdict == "gain"
    assert rows[("cudnn", True)].median == pytest.approx(0.8)
