"""Notebook 02's pure functions (attnlab.explore.standard) and the vectorised prefill cost
(models.prefill_cost_curve), checked against formulas written out here by hand: nothing below
calls iomodel or prefill_cost to get an expected value, except where the point is that the
vectorised companion equals the scalar function."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from attnlab.explore import standard as st
from attnlab.hardware import gpus
from attnlab.models import get_model, models, prefill_cost, prefill_cost_curve

# Llama-3-8B and H100 SXM, written out so a wrong JSON value or a wrong formula fails here
L8 = dict(params=8_030_261_248, layers=32, heads=32, d=128)
H100 = dict(peak=989.4e12, bw=3.35e12, hbm=80 * 2**30)
M = 100_000


def std_hand(N, d):
    return 2 * N * d + 2 * N * d + 4 * N * N          # read Q, K, V; write O; S, P each way


def fa1_hand(N, d, sram=M):
    bc = math.ceil(sram / (4 * d))
    return 2 * N * d + math.ceil(N / bc) * N * (3 * d + 4)


def by_hand(N, *, params, layers, heads, d, peak, bw, hbm, bpe=2):
    compute = (2 * params * N + 2 * layers * heads * N * N * d) / peak
    extra = layers * heads * (std_hand(N, d) - fa1_hand(N, d)) * bpe / bw
    flash = layers * heads * fa1_hand(N, d) * bpe / bw
    sp = 2 * heads * N * N * bpe
    return {"compute_s": compute, "extra_raw_s": extra, "extra_s": max(extra, 0.0),
            "flash_s": flash, "sp_bytes": sp, "ml_bytes": heads * N * 2 * 4, "fits": sp <= hbm}


# --- Algorithm 0 tensor by tensor ----------------------------------------------------------------

@pytest.mark.parametrize("N,d", [(1000, 64), (257, 32), (1, 8)])
def test_counter_by_tensor_matches_algorithm0(N, d):
    r = st.algorithm0_traffic(N, d, seed=3)
    got = {row["tensor"]: (row["reads"], row["writes"]) for row in r["rows"]}
    assert list(got) == ["Q", "K", "S", "P", "V", "O"]        # kernel 1, 2, 3 order
    assert got == {"Q": (N * d, 0), "K": (N * d, 0), "S": (N * N, N * N), "P": (N * N, N * N),
                   "V": (N * d, 0), "O": (0, N * d)}
    assert r["total"] == r["formula"] == 4 * N * d + 4 * N * N
    assert r["sp"] == 4 * N * N
    assert r["share"] == pytest.approx(N / (N + d), rel=1e-15)


def test_lecture_case_table():
    r = st.algorithm0_traffic(1000, 64, seed=0)
    assert r["total"] == 4_256_000 and r["sp"] == 4_000_000
    text = st.traffic_table(r)
    assert "4,256,000" in text and "2,192,000" in text and "2,064,000" in text
    assert text.splitlines()[-1].split()[0] == "all"


def test_traffic_curves_shares_and_crossing_at_d():
    r = st.traffic_curves(d=64, n=64)
    N = r["N"].astype(float)
    for t in ("Q", "K", "V", "O"):
        np.testing.assert_array_equal(r[t], N * 64)
    for t in ("S", "P"):
        np.testing.assert_array_equal(r[t], 2 * N * N)
    np.testing.assert_allclose(r["share"], N / (N + 64), rtol=1e-15)
    assert r["point"]["share"] == 0.5                            # N = d: equal parts
    assert st.traffic_curves(d=64, n=4096)["point"]["share"] == pytest.approx(4096 / 4160)
    # for N >> d the N^2 part dominates: above 98 % from N = 64 d
    big = N >= 64 * 64
    assert np.all(r["share"][big] > 0.98)


# --- prefill curves against the hand-written time model ------------------------------------------

def test_prefill_point_llama3_8b_h100_32k():
    r = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, 32768)
    want = by_hand(32768, **L8, **H100)
    p = r["point"]
    for k in ("compute_s", "extra_s", "extra_raw_s", "flash_s", "sp_bytes", "ml_bytes"):
        assert p[k] == pytest.approx(want[k], rel=1e-12), k
    assert p["fits"] is False
    assert p["total_ratio"] == pytest.approx((want["compute_s"] + want["extra_s"]) / want["compute_s"])
    # the lecture's numbers: ~0.82 s compute, ~1.32 s extra, 2.6x (lecture: ~2.5x), 64 GiB of S
    assert p["compute_s"] == pytest.approx(0.816, abs=0.005)
    assert p["extra_s"] == pytest.approx(1.325, abs=0.005)
    assert round(p["total_ratio"], 1) == 2.6
    assert p["sp_bytes"] == 2 * 32 * 32768**2 * 2 == 128 * 2**30
    assert p["ml_bytes"] == 32 * 32768 * 2 * 4 == 8 * 2**20        # exercise 2: 8 MiB
    assert (r["heads"], r["layers"], r["head_dim"]) == (32, 32, 128)


@pytest.mark.parametrize("N", [1024, 5000, 16384, 131072])
def test_prefill_grid_and_point_match_hand(N):
    r = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, N)
    want = by_hand(N, **L8, **H100)
    for k in ("compute_s", "extra_s", "flash_s", "sp_bytes"):
        assert r["point"][k] == pytest.approx(want[k], rel=1e-12)
    for i, n in enumerate(r["N"]):
        w = by_hand(int(n), **L8, **H100)
        assert r["compute_s"][i] == pytest.approx(w["compute_s"], rel=1e-12)
        assert r["extra_s"][i] == pytest.approx(w["extra_s"], rel=1e-12)
        assert r["flash_s"][i] == pytest.approx(w["flash_s"], rel=1e-12)


def test_head_dim_keeps_heads_times_d():
    """d = 64: Llama-3-8B becomes 64 heads x 64 (same width 4096, same FLOPs, twice the S+P)."""
    r64 = st.prefill_curves("Llama-3-8B", "H100-SXM", 64, 32768)
    r128 = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, 32768)
    want = by_hand(32768, **{**L8, "heads": 64, "d": 64}, **H100)
    assert r64["heads"] == 64 and r64["own_head_dim"] == 128
    for k in ("compute_s", "extra_s", "flash_s", "sp_bytes", "ml_bytes"):
        assert r64["point"][k] == pytest.approx(want[k], rel=1e-12), k
    np.testing.assert_allclose(r64["compute_s"], r128["compute_s"], rtol=1e-15)
    assert r64["point"]["sp_bytes"] == 2 * r128["point"]["sp_bytes"]
    m = st.with_head_dim("Llama-3-8B", 256)
    assert (m.q_heads, m.kv_heads, m.head_dim) == (16, 4, 256)
    assert st.with_head_dim("Llama-3-8B", 128) is get_model("Llama-3-8B")


def test_head_dim_256_extra_time_clamped_at_zero():
    """With M = 100,000 and d = 256, B_c = 98: FA1 moves more than standard attention, so the
    model's signed extra time is negative; the explorer clamps it at 0 (ratio 1)."""
    r = st.prefill_curves("Gemma-2-9B", "H100-SXM", 256, 32768)
    gemma = dict(params=9_241_705_984, layers=42, heads=16, d=256)
    want = by_hand(32768, **gemma, **H100)
    assert want["extra_raw_s"] < 0
    assert r["point"]["extra_raw_s"] == pytest.approx(want["extra_raw_s"], rel=1e-12)
    assert r["point"]["extra_s"] == 0.0 and r["point"]["total_ratio"] == 1.0
    assert np.all(r["extra_s"] == 0.0)
    assert r["crossover_n"] is None
    assert r["block_c"] == math.ceil(M / (4 * 256)) == 98


@pytest.mark.parametrize("N", [16384, 32768, 65536])
def test_extra_time_and_memory_grow_as_n_squared(N):
    a = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, N)["point"]
    b = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, 2 * N)["point"]
    assert 3.9 <= b["extra_s"] / a["extra_s"] <= 4.1
    assert b["sp_bytes"] == 4 * a["sp_bytes"]
    assert b["ml_bytes"] == 2 * a["ml_bytes"]                    # FlashAttention: linear


def test_crossover_near_16k_for_llama3_8b_on_h100():
    r = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, 32768)
    assert 15_000 < r["crossover_n"] < 17_500
    below, above = by_hand(8192, **L8, **H100), by_hand(32768, **L8, **H100)
    assert below["extra_s"] < below["compute_s"] and above["extra_s"] > above["compute_s"]


def test_faster_memory_less_extra_time():
    h100 = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, 32768)["point"]["extra_s"]
    h200 = st.prefill_curves("Llama-3-8B", "H200-SXM", 128, 32768)["point"]["extra_s"]
    assert h200 == pytest.approx(h100 * 3.35 / 4.8, rel=1e-12)


def test_max_fitting_n():
    n = st.max_fitting_n("Llama-3-8B", "H100-SXM")
    assert n == math.isqrt(80 * 2**30 // (2 * 32 * 2)) == 25_905
    assert 2 * 32 * n**2 * 2 <= 80 * 2**30 < 2 * 32 * (n + 1) ** 2 * 2
    assert st.max_fitting_n("Llama-3-8B", "B200") > st.max_fitting_n("Llama-3-8B", "H200") > n


def test_dense_models_exclude_mla():
    assert "DeepSeek-V3" in models()
    assert "DeepSeek-V3" not in st.dense_models()
    assert {"Llama-3-8B", "Llama-3-70B", "Mistral-7B", "Gemma-2-9B"} <= set(st.dense_models())


def test_every_setting_fits_the_fixed_axes():
    """Axes never rescale, so a slider move only redraws the moving artists."""
    lo_t, hi_t = st.TIME_LIM
    lo_m, hi_m = st.MEM_LIM
    for model, gpu, d in itertools.product(st.dense_models(), gpus(), st.HEAD_DIMS):
        r = st.prefill_curves(model, gpu, d, st.N_STEPS[0])
        for k in ("compute_s", "flash_s"):
            assert lo_t <= r[k].min() and r[k].max() <= hi_t, (model, gpu, d, k)
        pos = r["extra_s"][r["extra_s"] > 0]
        assert pos.size == 0 or (lo_t <= pos.min() and pos.max() <= hi_t)
        for k in ("sp_bytes", "ml_bytes"):
            assert lo_m <= r[k].min() and r[k].max() <= hi_m, (model, gpu, d, k)
        assert lo_m <= r["hbm_bytes"] <= hi_m


def test_prefill_table_has_the_lecture_rows():
    text = st.prefill_table("Llama-3-8B", "H100-SXM", [16384, 32768])
    lines = text.splitlines()
    assert "0.99" in lines[2] and "yes" in lines[2]           # extra ~ compute near 16K
    assert "2.62" in lines[3] and "128 GiB" in lines[3] and lines[3].rstrip().endswith("no")


def test_binary_bytes():
    assert st.binary_bytes(64 * 2**30) == "64 GiB"
    assert st.binary_bytes(256 * 2**10) == "256 KiB"
    assert st.binary_bytes(80 * 2**30) == "80 GiB"
    assert st.binary_bytes(512) == "512 B"


def test_summary_line_states_the_point():
    ex = st.prefill_cost_explorer()
    s = ex.summary.value
    assert "N = 32,768" in s and "2.62x" in s and "128 GiB" in s and "does not fit" in s
    assert "8 MiB" in s
    ex.set(head_dim=256)
    assert "MORE than standard" in ex.summary.value
    assert ex.figure.axes[0].get_title().startswith("Prefill time")


# --- the vectorised companion in models.py --------------------------------------------------------

@pytest.mark.parametrize("model,gpu", [("Llama-3-8B", "H100-SXM"), ("Llama-3-70B", "A100"),
                                       ("Gemma-2-9B", "B200"), ("DeepSeek-V3", "H200")])
def test_curve_equals_prefill_cost(model, gpu):
    Ns = [1, 7, 100, 1000, 4096, 12345, 32768, 131072]
    r = prefill_cost_curve(model, gpu, Ns)
    for i, N in enumerate(Ns):
        c = prefill_cost(model, gpu, N)
        assert r["N"][i] == N
        assert r["compute_s"][i] == pytest.approx(c.compute_s, rel=1e-12)
        assert r["extra_io_s"][i] == pytest.approx(c.extra_io_s, rel=1e-12, abs=1e-18)
        assert r["total_ratio"][i] == pytest.approx(c.total_ratio, rel=1e-12)
        assert r["s_bytes_per_layer"][i] == c.s_bytes_per_layer
        assert r["sp_bytes_per_layer"][i] == c.sp_bytes_per_layer
        assert bool(r["fits"][i]) is c.fits


def test_curve_flash_time_by_hand_and_sram():
    r = prefill_cost_curve("Llama-3-8B", "H100", [4096], sram=50_000)
    want = 32 * 32 * fa1_hand(4096, 128, sram=50_000) * 2 / 3.35e12
    assert r["flash_io_s"][0] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("bad,exc", [([0], ValueError), ([1024, -5], ValueError),
                                     ([1.5], TypeError), (["8"], TypeError), ([], ValueError),
                                     ([1 << 25], ValueError)])
def test_curve_bad_lengths(bad, exc):
    with pytest.raises(exc):
        prefill_cost_curve("Llama-3-8B", "H100", bad)


# --- bad input names the value --------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,match", [
    ({"n": 0}, "n=0"), ({"n": 131073}, "n=131073"), ({"n": 512}, "n=512"),
    ({"model": "GPT-9"}, "GPT-9"), ({"gpu": "H900"}, "H900"),
    ({"head_dim": 96}, "head_dim=96"), ({"head_dim": 32}, "head_dim=32"),
    ({"model": "DeepSeek-V3"}, "DeepSeek-V3"),
])
def test_bad_input_raises_value_error_naming_it(kwargs, match):
    with pytest.raises(ValueError, match=match):
        st.prefill_curves(**kwargs)


def test_bad_input_elsewhere():
    with pytest.raises(ValueError, match="N=0"):
        st.algorithm0_traffic(0, 64)
    with pytest.raises(ValueError, match="d=0"):
        st.traffic_curves(d=0)
    with pytest.raises(ValueError, match="n=0"):
        st.traffic_curves(n=0)
    with pytest.raises(ValueError, match="H900"):
        st.max_fitting_n("Llama-3-8B", "H900")
    with pytest.raises(TypeError, match="n must be an integer"):
        st.prefill_curves(n=1024.5)
