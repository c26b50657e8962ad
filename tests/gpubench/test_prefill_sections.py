"""The prefill section and the Hopper step sweep as declarations, run by gpubench.core.measure on
the CPU (dry shapes, the Triton interpreter): schema rows whose counts are worked out here, small
errors, the within_rule verdict, a planted wrong output (kept with a failing verdict in prefill,
dropped by the sweep's tolerance) and a NaN refused; the sweep's launches listed exactly."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
from attnlab.explore import measured  # noqa: E402
from attnlab.gpubench import prefill  # noqa: E402
from attnlab.gpubench.core import measure  # noqa: E402
from attnlab.gpubench.declare import Impl, Launch  # noqa: E402
from attnlab.gpubench.sweeps import hopper  # noqa: E402
from attnlab.runfile import COLUMNS, case_text  # noqa: E402


def _pairs(n: int, causal: bool) -> int:
    """Visible (query, key) pairs of a square mask, counted entry by entry."""
    mask = np.tril(np.ones((n, n), bool)) if causal else np.ones((n, n), bool)
    return int(mask.sum())


def _planted(torch, c, ctx):
    """Two wrong answers under names of ours: off by 0.5 everywhere, and NaN."""
    yield Launch("ours-wrong", lambda: (c.ref + 0.5).to(torch.bfloat16))
    yield Launch("ours-nan", lambda: torch.full_like(c.q, float("nan")))


def test_prefill_rows_are_schema_rows_with_counts_errors_and_verdicts(capsys):
    sec = dataclasses.replace(
        prefill.SECTION, impls=(*prefill.SECTION.impls, Impl("planted", _planted, ours=True))
    )
    n, sh = 17, prefill.SECTION.dry_shape
    res = measure(sec, [(1, n)], ("ours", "sdpa", "standard", "planted"), dry=True)
    rows = res["rows"]
    assert all(tuple(r) == COLUMNS for r in rows) and res["ceilings"] == {
        "copy_bytes_per_s": 1e9,
        "bf16_matmul_flops": 1e10,
    }
    plain, causal = f"batch 1, N {n}", f"batch 1, N {n}, causal"
    got = {(r["what"], r["impl"]) for r in rows}
    ours = ("ours-fa2", "ours-hopper", "sdpa", "ours-wrong")
    assert got == {(w, i) for w in (plain, causal) for i in ours} | {(plain, "standard")}
    assert "NaN or inf" in capsys.readouterr().out  # ours-nan refused, by name
    fused = 2 * sh["head_dim"] * (2 * sh["heads"] * n + 2 * sh["kv_heads"] * n)
    for r in rows:
        c = r["shape"]["causal"]
        assert r["flop"] == 4 * sh["head_dim"] * sh["heads"] * _pairs(n, c)
        std = sh["heads"] * (4 * n * sh["head_dim"] + 4 * n * n) * 2  # Algorithm 0: S and P to HBM
        assert r["bytes"] == (std if r["impl"] == "standard" else fused)
        model = max(r["flop"] / 1e10, r["bytes"] / 1e9) * 1e6
        assert r["extra"]["model_us"] == pytest.approx(model)
        bound = "memory" if r["bytes"] / 1e9 > r["flop"] / 1e10 else "compute"
        assert r["extra"]["model_bound"] == bound
        assert r["ours"] == r["impl"].startswith("ours")
        if r["impl"] == "ours-wrong":
            assert r["error"] == pytest.approx(0.5, abs=1e-2) and r["extra"]["within_rule"] is False
        else:
            assert r["error"] < 1e-2 and r["extra"].get("within_rule", True) is True
    assert [r["ratio_to_best"] for r in rows if r["impl"] == "standard"] == [None]  # not ranked
    assert all(r["ratio_to_best"] > 0 for r in rows if r["impl"] != "standard")


def test_prefill_cases_name_the_recorded_rows():
    from attnlab.explore.measured import reader

    run = reader.load(reader.measurements_dir() / "h200-2026-12-02.json")
    recorded = {r["what"] for r in run["rows"] if r["section"] == "prefill"}
    cases = prefill.SECTION.cases
    assert recorded == {case_text({"batch": b, "N": n, "causal": c}) for b, n in cases for c in (False, True)}
    names = {r["impl"] for r in run["rows"] if r["section"] == "prefill"}
    assert {"sdpa", "ours", "flex", "standard", "flashinfer"} == set(prefill.SECTION.impl_names())
    assert names == {"ours-fa2", "ours-hopper", "ours-gluon", "sdpa-flash", "sdpa-cudnn", "flex"} | {
        "standard",
        "flashinfer-fa2",
        "flashinfer-fa3",
    }


def test_the_sweep_lists_every_step_set_and_the_grid_but_its_default_launches(monkeypatch):
    from attnlab.kernels.hopper_kernel import HOPPER_STEPS

    # under the interpreter the default launch is 16 x 16 (16 x 32 with big_tiles), 4 warps, 3 stages
    monkeypatch.setattr(
        hopper, "DRY_GRID", {"block_m": (16,), "block_n": (16, 32), "num_warps": (4,), "num_stages": (3,)}
    )
    q = torch.zeros(1, 4, 16, 32)
    c = SimpleNamespace(q=q, k=q[:, :2], v=q[:, :2], causal=True)
    launches = list(hopper._steps(torch, c, SimpleNamespace(dry=True)))
    steps = ["base"] + ["+".join(HOPPER_STEPS[: i + 1]) for i in range(len(HOPPER_STEPS))]
    assert [(x.name, x.launch) for x in launches] == [("hopper", {"steps": s}) for s in steps] + [
        ("hopper", {"steps": tag, "block_m": 16, "block_n": 16, "num_warps": 4, "num_stages": 3})
        for tag in ("all", "all-ws")
    ]


def test_the_sweep_runs_through_the_one_loop_and_drops_a_wrong_answer(tmp_path, capsys):
    out = tmp_path / "h.json"
    assert hopper.main(["--dry", "--cases", "16", "--peers", "ours,fa2,sdpa", "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["steps"] and {r["impl"].split()[0] for r in saved["rows"]} == {"hopper", "fa2", "sdpa"}
    assert all(tuple(r) == COLUMNS and r["error"] < 1e-2 for r in saved["rows"])
    assert {r["what"] for r in saved["rows"]} == {"batch 1, N 16", "batch 1, N 16, causal"}
    assert len(saved["rows"]) == 2 * (len(saved["steps"]) + 1 + 2 + 2)  # steps, grid, fa2, sdpa
    text = measured.hopper_steps_summary(str(out))  # the view reads what the sweep wrote
    assert "wall clock (a dry run)" in text and text.count("best launch: all") == 2
    sec = dataclasses.replace(hopper.SECTION, impls=(*hopper.SECTION.impls, Impl("planted", _planted)))
    rows = measure(sec, [(16,)], ("sdpa", "planted"), dry=True)["rows"]
    printed = capsys.readouterr().out
    assert {r["impl"] for r in rows} == {"sdpa"}  # 0.5 off is over the sweep's tolerance, NaN refused
    assert "over the section's tolerance" in printed and "NaN or inf" in printed


def test_the_fa3_table_section_names_its_recorded_rows_and_draws_other_inputs():
    from attnlab.explore.measured import reader
    from attnlab.gpubench import prefill_fa3

    with open(reader.measurements_dir() / "h200-2026-12-04-prefill-fa3.json") as f:
        rows = json.load(f)["rows"]
    fields = ("batch", "N", "head_dim", "kv_heads")
    want = {(*case, c) for case in prefill_fa3.SECTION.cases for c in (False, True)}
    assert {(*(r["shape"][k] for k in fields), r["shape"]["causal"]) for r in rows} == want
    assert len(want) == 36 and {c[3] for c in prefill_fa3.SECTION.cases} == {32, 8}
    # on a CPU the Gluon kernel has no launch: the peers run alone, each draw its own inputs
    first = measure(prefill_fa3.SECTION, [(1, 33, 64, 2)], ("ours", "sdpa"), dry=True, options={"draw": 0})
    other = measure(prefill_fa3.SECTION, [(1, 33, 64, 2)], ("ours", "sdpa"), dry=True, options={"draw": 1})
    assert {r["impl"] for r in first["rows"]} == {"sdpa"} and len(first["rows"]) == 2
    assert [r["error"] for r in first["rows"]] != [r["error"] for r in other["rows"]]
    assert all(r["error"] < 1e-2 for r in first["rows"] + other["rows"])
