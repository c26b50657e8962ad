"""Notebook 06's library against hand calculations: FA4's third roof (attnlab.machine.roofs), MLA decode
intensity (attnlab.core.mla), low-precision rounding and error (attnlab.core.lowprec) and the fastest peer
per measured case (explore.since.backends)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from attnlab.core import lowprec as lp
from attnlab.explore.measured import newest_run
from attnlab.explore.since import fastest_per_case, kv_cache_rows, lowprec_numbers, mla_rows
from attnlab.machine.hardware import get_gpu, ridge_point
from attnlab.core.decode import intensity
from attnlab.core.mla import DEEPSEEK_V3, MLAShape, mla_decode_cost, mla_forms, mla_intensity
from attnlab.explore.since.mla import mla_statement, mla_verdicts
from refs.reference import attention_head

from attnlab.machine.roofs import POLY_FMA_OPS, SOFTMAX_FMA_OPS, exp_rate, fma_rate, score_times


# --- FA4's third roof ------------------------------------------------------------------------------


def test_h100_hand_numbers():
    # H100 SXM: 989.4e12 dense bf16 FLOP/s; MUFU 16 exp2 per clock per SM x 132 SMs x 1.83e9 Hz
    assert exp_rate("H100") == pytest.approx(16 * 132 * 1.83e9)  # 3.865e12 exp/s
    t = score_times("H100", 128)
    assert t.mma == pytest.approx(4 * 128 / 989.4e12)  # 5.175e-13 s per score
    assert t.exp_mufu == pytest.approx(1 / 3.86496e12)  # 2.587e-13 s
    assert t.exp_mufu / t.mma == pytest.approx(0.4999, abs=1e-3)  # exp hides under the matmuls
    assert not t.exp_binds and t.binding == "tensor cores"
    # d = 64 halves the matmul: 256 / 989.4e12 = 2.587e-13, the same as the exp
    assert score_times("H100", 64).exp_mufu / score_times("H100", 64).mma == pytest.approx(1.0, abs=1e-3)


def test_b200_exp_binds_below_d128_and_the_counter_measures():
    # B200: 2.25e15 bf16, 148 SMs, 1.856e9 Hz (estimate): 16 x 148 x 1.856e9 = 4.395e12 exp/s
    g = get_gpu("B200")
    assert g.extra["boost_clock"]["estimate"] is True and g.extra["exp_unit"]["estimate"] is False
    t = score_times("B200", 64)
    assert t.mma == pytest.approx(256 / 2.25e15) and t.exp_mufu == pytest.approx(1 / (16 * 148 * 1.856e9))
    assert (
        t.exp_binds
        and t.binding == "exp unit (MUFU)"
        and t.tensor_utilization == pytest.approx(0.5, abs=0.01)
    )
    # half the exps on the FMA pipe: MUFU time halves; FMA pipe gets 0.5 x 5 ops + 2 + 64/128
    h = score_times("B200", 64, poly_share=0.5)
    assert h.exp_mufu == pytest.approx(t.exp_mufu / 2)
    assert h.fma == pytest.approx((0.5 * POLY_FMA_OPS + SOFTMAX_FMA_OPS + 64 / 128) / (75e12 / 2))
    # ... which now binds (5 ops / 37.5e12 per exp), still faster than all on MUFU
    assert not h.exp_binds and h.binding == "FMA pipe" and h.total < t.total
    # skipping every rescale removes d / 128 FMA ops per score, nothing else
    s = score_times("B200", 128, skip=1.0)
    assert s.fma_rescale == 0 and score_times("B200", 128).fma_rescale == pytest.approx(1 / fma_rate("B200"))


def test_roofs_refuse_bad_input_by_name():
    with pytest.raises(ValueError, match="poly_share"):
        score_times("H100", 128, poly_share=1.5)
    with pytest.raises(ValueError, match="skip"):
        score_times("H100", 128, skip=-0.1)
    with pytest.raises(TypeError, match="d must be an integer"):
        score_times("H100", 12.5)


# --- MLA -------------------------------------------------------------------------------------------


def test_mla_absorbed_by_hand():
    # 128 heads x 8192 tokens x (2 x 576 + 2 x 512) FLOPs; bytes 2 x (8192 x 576 + 128 x 576 + 128 x 512)
    f, b = mla_decode_cost("absorbed", 8192)
    assert f == 128 * 8192 * (2 * 576 + 2 * 512) == 2_281_701_376
    assert b == 2 * (8192 * 576 + 128 * 576 + 128 * 512) == 9_715_712
    assert mla_intensity("absorbed", 10**9) == pytest.approx(128 * 2176 / 1152, rel=1e-6)  # 241.8
    # the absorbed form sits above the A100 and H200 ridges, below the H100's and the B200's
    i = f / b
    assert i / ridge_point("A100") > 1 and i / ridge_point("H200") > 1
    assert 0.79 < i / ridge_point("H100") < 0.81 and i / ridge_point("B200") < 1


def test_mla_materialised_is_mha():
    f, b = mla_decode_cost("materialised", 8192)
    assert f == 128 * 8192 * (2 * 192 + 2 * 128)
    assert b == 2 * (128 * 8192 * 320 + 128 * 192 + 128 * 128)
    assert mla_intensity("materialised", 8192) == pytest.approx(1.0, abs=1e-3)
    rows = {r["case"]: r for r in mla_rows(8192)}
    assert rows["MLA gqa_view (lecture: g = 128)"]["I"] == pytest.approx(128 * 8192 / 8320)
    assert mla_decode_cost("absorbed", 8192, shape=MLAShape(heads=1))[0] == 8192 * 2176


def test_mla_gqa_view_is_the_lecture_g128():
    # the lecture's view: 4 g l_kv w FLOPs over 2 (2 g w + 2 l_kv w) bytes, w = 576: g l_kv / (g + l_kv)
    f, b = mla_decode_cost("gqa_view", 8192)
    assert f == 4 * 128 * 8192 * 576 and b == 2 * (2 * 128 * 576 + 2 * 8192 * 576)
    forms = mla_forms(8192)
    assert list(forms) == ["gqa_view", "absorbed", "materialised"]
    assert forms["gqa_view"] == pytest.approx(128 * 8192 / (128 + 8192))
    assert forms["gqa_view"] == pytest.approx(intensity(128, 1, 8192))  # notebook 04's number
    assert forms["absorbed"] == mla_intensity("absorbed", 8192)
    assert round(forms["gqa_view"]) == 126 and round(forms["absorbed"], 1) == 234.8


def test_mla_verdicts_per_gpu():
    v = mla_verdicts(("H100", "H200", "A100", "B200"))
    forms = mla_forms(8192)
    for form, by_gpu in v.items():  # against each ridge, computed independently
        for gpu, verdict in by_gpu.items():
            below = forms[form] < ridge_point(gpu)
            assert verdict == ("memory-bound" if below else "compute-bound")
    assert v["absorbed"]["H100-SXM"] == "memory-bound" and v["absorbed"]["H200-SXM"] == "compute-bound"
    assert set(v["gqa_view"].values()) == {"memory-bound"}
    text = mla_statement()
    assert "gqa_view          126.0" in text and "absorbed          234.8" in text
    assert "compute (1.14x)" in text and "memory (0.80x)" in text
    assert max(map(len, mla_statement(("A100", "H100", "H200", "B200")).splitlines())) <= 100
    with pytest.raises(TypeError, match="gpus"):
        mla_verdicts("H100")
    with pytest.raises(ValueError, match="gpus"):
        mla_verdicts(())


def test_mla_bad_input():
    with pytest.raises(ValueError, match="form"):
        mla_decode_cost("compressed", 8192)
    with pytest.raises(TypeError, match="shape"):
        mla_decode_cost("absorbed", 8192, shape=(128, 512))
    assert DEEPSEEK_V3.latent + DEEPSEEK_V3.rope == 576


# --- low precision ---------------------------------------------------------------------------------


def test_quantise_is_ml_dtypes_rounding_at_scale_one():
    x = np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32) * 50
    for fmt, t in (("fp8_e4m3", ml_dtypes.float8_e4m3fn), ("fp4_e2m1", ml_dtypes.float4_e2m1fn)):
        np.testing.assert_array_equal(lp.quantise(x, fmt, scale=1.0), x.astype(t).astype(np.float32))


def test_fp4_values_lie_on_the_e2m1_grid_times_the_scale():
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])
    x = np.random.default_rng(2).standard_normal((128, 16)) * 3
    for block in (None, 16):
        q = lp.quantise(x, "fp4_e2m1", block)
        groups = [x] if block is None else [x[i : i + block] for i in range(0, 128, block)]
        qs = [q] if block is None else [q[i : i + block] for i in range(0, 128, block)]
        for g, qg in zip(groups, qs):
            s = np.abs(g).max() / 6
            assert np.all(np.isin(np.abs(qg / np.float32(s)).round(5), grid))
            assert np.abs(qg).max() == pytest.approx(np.abs(g).max(), rel=1e-6)  # amax maps to 6


def test_transform_is_orthogonal_and_keeps_scores():
    m = lp.random_orthogonal(64, 3)
    np.testing.assert_allclose(m @ m.T, np.eye(64), atol=1e-12)
    q, k, v, _ = lp.outlier_inputs(128, 64, 30.0)
    np.testing.assert_allclose((q @ m) @ (k @ m).T, q @ k.T, atol=1e-9)
    # the transform spreads the outlier channels: the largest |k| drops
    assert np.abs(k @ m).max() < 0.7 * np.abs(k).max()


def test_attention64_matches_a_direct_float64_reference():
    q, k, v, _ = lp.outlier_inputs(64, 16, 10.0, seed=4)
    s = q @ k.T / 4.0
    p = np.exp(s) / np.exp(s).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(lp.attention64(q, k, v), p @ v, rtol=1e-12)
    out = attention_head(q, k, v)
    np.testing.assert_allclose(lp.attention64(q, k, v), out[0] if isinstance(out, tuple) else out, rtol=1e-10)


def test_errors_are_ordered_and_seeded():
    bf = lp.attention_error("bf16", None, False, 30.0, 256, 64)
    f8 = lp.attention_error("fp8_e4m3", None, False, 30.0, 256, 64)
    f4 = lp.attention_error("fp4_e2m1", None, False, 30.0, 256, 64)
    assert bf.rmse < f8.rmse < f4.rmse
    assert lp.attention_error("fp8_e4m3", 64, True, 30.0, 256, 64) == lp._error.__wrapped__(
        "fp8_e4m3", 64, True, 30.0, 256, 64, 4, 0
    )  # deterministic
    r = lowprec_numbers("fp8_e4m3", 0, 30, False)
    assert r.rmse == r.baseline


def test_lowprec_bad_input():
    with pytest.raises(ValueError, match="fmt"):
        lp.quantise(np.ones(3), "fp6")
    with pytest.raises(ValueError, match="d=48"):
        lp.random_orthogonal(48, 0)
    with pytest.raises(TypeError, match="transform"):
        lp.attention_error("fp8_e4m3", None, "yes")


# --- backends --------------------------------------------------------------------------------------


def test_fastest_per_case_on_a_small_run():
    run = {
        "rows": [
            {"section": "prefill", "what": "N 4096", "impl": "sdpa-cudnn", "time_us": 10.0},
            {"section": "prefill", "what": "N 4096", "impl": "flashinfer-fa3", "time_us": 12.0},
            {"section": "prefill", "what": "N 4096", "impl": "ours-hopper", "time_us": 5.0},  # ours: left out
            {"section": "paged", "what": "b 1", "impl": "flashinfer-tc ps16", "time_us": 9.0},
            {
                "section": "paged",
                "what": "b 1",
                "impl": "flashinfer-tc ps1",
                "time_us": 8.0,
            },  # fastest page size
            {"section": "paged", "what": "b 1", "impl": "sdpa-flash", "time_us": 8.8},
        ]
    }
    rows = fastest_per_case(run)
    assert [(r["phase"], r["impl"], r["us"], r["peers"]) for r in rows] == [
        ("prefill", "sdpa-cudnn", 10.0, 2),
        ("decode", "flashinfer-tc", 8.0, 2),
    ]
    assert rows[0]["margin"] == pytest.approx(0.2) and rows[1]["margin"] == pytest.approx(0.1)


def test_fastest_per_case_on_the_recorded_h200_run():
    run = newest_run()
    rows = {(r["section"], r["case"]): r for r in fastest_per_case(run)}
    libs = ("sdpa-cudnn", "flashinfer-fa3", "flashinfer-tc ps16", "flashinfer-tc ps1")
    for case in ("batch 1, N 16384, causal", "batch 1, N 4096", "batch 256, context 4096"):
        sec = "paged" if "context" in case else "prefill"
        times = {
            r["impl"]: r["time_us"]
            for r in run["rows"]
            if (r["section"], r["what"]) == (sec, case) and r["impl"] in libs
        }  # straight from the schema rows
        fastest = min(times, key=times.get).replace(" ps16", "").replace(" ps1", "")
        assert rows[(sec, case)]["impl"] == fastest and rows[(sec, case)]["us"] == min(times.values())
    assert all(
        not r["impl"].startswith(("ours", "sched", "paged", "contiguous", "cascade")) for r in rows.values()
    )


def test_lowprec_explorer_format_readable_and_n():
    import ipywidgets as widgets
    from attnlab.explore.since import LowPrecExplorer

    x = LowPrecExplorer(fmt="fp4_e2m1", block=64, strength=30, transform=True, n=64)
    fmt = x.widgets["fmt"]
    assert isinstance(fmt, widgets.ToggleButtons)  # every choice is a labelled button
    assert [label for label, _ in fmt.options] == ["FP8 e4m3", "FP4 e2m1"] and fmt.value == "fp4_e2m1"
    r = lowprec_numbers("fp4_e2m1", 64, 30, True, n=64)  # the explorer computes at its own N
    assert f"{r.baseline / r.rmse:.2f}x" in x.summary.value and "N = 64," in x.summary.value
    assert "N = 64" in x.ax_e.get_title()
    with pytest.raises(ValueError, match="n=8"):
        LowPrecExplorer(n=8)
    with pytest.raises(TypeError, match="n"):
        LowPrecExplorer(n="256")


def test_tables_fit_in_100_characters_and_name_no_commit():
    """06's tables as committed: at most 100 characters a line (a URL apart), every measured case
    in the fastest-library table under its phase, the library by its short name, and no commit."""
    from attnlab.explore.since import SHORT, fa4_table, fastest_table, lowprec_table, models_side_by_side

    run = newest_run()
    text = fastest_table(run)
    assert max(map(len, text.splitlines())) <= 100 and "commit" not in text
    lines = text.splitlines()
    for r in fastest_per_case(run):
        row = next(ln for ln in lines if ln.startswith(r["case"] + "  "))
        assert row.split("  ")[1:] and SHORT[r["impl"]] in row, r["case"]
        assert lines.index(r["phase"]) < lines.index(row)
    for t in (fa4_table(), lowprec_table(n=256), models_side_by_side()):
        assert max(map(len, t.splitlines())) <= 100
    side = models_side_by_side(("DeepSeek-V3", "Llama-3.1-70B"), "H200", batch=64, context=8192)
    assert "70,272 B" in side and "327,680 B" in side and "(does not fit)" in side
    assert "234.8 (absorbed)" in side and "126.0" in side  # the mla_forms rows at 8K, bf16


# --- the FP8 KV cache ------------------------------------------------------------------------------


def test_kv_cache_rows_halve_the_memory_bound_step():
    from attnlab.machine.hardware import get_gpu

    r = kv_cache_rows(("Llama-3-8B",), "H200", batch=64, context=8192)[0]
    assert (r["bf16"], r["fp8"], r["fp8_token"]) == (2 * 8 * 128 * 2, 2 * 8 * 128, 2 * 8 * 128 + 64)
    assert r["all_bf16"] == 32 * r["bf16"]
    kv = 64 * 8192 * 32 * 8 * 2 * 128  # elements read per step
    bw = get_gpu("H200").hbm_bandwidth
    assert r["t_bf16"] > kv * 2 / bw and r["t_fp8_e4m3"] > kv / bw  # memory-bound: bytes / bandwidth
    assert r["t_fp8_e4m3"] == pytest.approx(r["t_bf16"] / 2, rel=0.01)
    with pytest.raises(ValueError, match="DeepSeek-V3"):
        kv_cache_rows(("DeepSeek-V3",))
    from attnlab.explore.since import kv_cache_table, kv_error_table

    for t in (kv_cache_table(), kv_error_table(strengths=(0, 30), n=256)):
        assert max(map(len, t.splitlines())) <= 100


def test_kv_error_rows_against_the_inputs_only_model():
    from attnlab.core import kvquant as kq
    from attnlab.explore.since import kv_error_rows

    r = kv_error_rows((30,), n=256)[0]
    assert r["qkv"] == lp.attention_error("fp8_e4m3", None, False, 30, 256, 64).relative
    assert r["head"] == kq.kv_cache_error("fp8_e4m3", "head", 30, 256).relative
    assert r["token"] < r["head"] < r["qkv"] and r["within"] is True  # Q unrounded: less error


# --- what 06 says about its tables and its explorer -------------------------------------------------


def test_fa2_ratio_is_sdpa_flash_over_the_fastest():
    run = {
        "rows": [
            {"section": "prefill", "what": "N 4096", "impl": "sdpa-cudnn", "time_us": 10.0},
            {"section": "prefill", "what": "N 4096", "impl": "sdpa-flash", "time_us": 19.0},
            {"section": "paged", "what": "b 1", "impl": "flashinfer-tc ps1", "time_us": 8.0},
        ]
    }
    rows = fastest_per_case(run)
    assert rows[0]["fa2_ratio"] == pytest.approx(1.9) and rows[1]["fa2_ratio"] != rows[1]["fa2_ratio"]
    rec = newest_run()
    want = [
        max(
            r["time_us"]
            for r in rec["rows"]
            if (r["section"], r["what"], r["impl"]) == ("prefill", c, "sdpa-flash")
        )
        / min(
            r["time_us"]
            for r in rec["rows"]
            if (r["section"], r["what"]) == ("prefill", c)
            and r["impl"] in ("sdpa-cudnn", "sdpa-flash", "flex", "flashinfer-fa2", "flashinfer-fa3")
        )
        for c in dict.fromkeys(r["what"] for r in rec["rows"] if r["section"] == "prefill")
    ]
    got = [r["fa2_ratio"] for r in fastest_per_case(rec) if r["section"] == "prefill"]
    assert got == pytest.approx(want, rel=1e-12)
    assert 1.7 <= min(got) and max(got) <= 2.05  # 06's "1.7-2x slower"
    from attnlab.explore.since import fastest_table

    assert f"{max(got):.2f}x" in fastest_table(rec)


def test_lowprec_explorer_default_shows_the_lesson():
    """At the explorer's own N and defaults, per-block scales beat per tensor and the transform adds
    to them (06's text); a scale per 64 rows at N = 256 is hardly finer than the tensor's."""
    from attnlab.explore.since import LOWPREC_DEFAULTS, N_EXPLORE, LowPrecExplorer, block_headroom

    x = LowPrecExplorer()
    assert {k: w.value for k, w in x.widgets.items()} == LOWPREC_DEFAULTS
    d = LOWPREC_DEFAULTS
    on = lowprec_numbers(d["fmt"], d["block"], d["strength"], True, n=N_EXPLORE)
    off = lowprec_numbers(d["fmt"], d["block"], d["strength"], False, n=N_EXPLORE)
    assert on.baseline / on.rmse > 1.25 and on.rmse < off.rmse < off.baseline
    q, k, v, _ = lp.outlier_inputs(N_EXPLORE, 64, 30.0)
    by_hand = np.median(np.abs(q).max() / np.abs(q).reshape(-1, 64, 64).max(axis=(1, 2)))
    small, large = block_headroom(N_EXPLORE, 64), block_headroom(2048, 64)
    assert small["q"] == pytest.approx(by_hand) and small["q"] < 1.5 < 2 < large["q"]
    with pytest.raises(TypeError, match="block"):
        block_headroom(256, 6.5)
