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
from attnlab.machine.hardware import gpus
from attnlab.machine.models import get_model, models, prefill_cost, prefill_cost_curve

# Llama-3-8B and H100 SXM, written out so a wrong JSON value or a wrong formula fails here
L8 = dict(params=8_030_261_248, layers=32, heads=32, d=128)
H100 = dict(peak=989.4e12, bw=3.35e12, hbm=81_559 * 2**20)     # nvidia-smi: 81,559 MiB
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
    got = {row["tensor"]: (row["reads"], row["writes"]) for row in r.rows}
    assert list(got) == ["Q", "K", "S", "P", "V", "O"]        # kernel 1, 2, 3 order
    assert got == {"Q": (N * d, 0), "K": (N * d, 0), "S": (N * N, N * N), "P": (N * N, N * N),
                   "V": (N * d, 0), "O": (0, N * d)}
    assert r.total == r.formula == 4 * N * d + 4 * N * N
    assert r.sp == 4 * N * N
    assert r.share == pytest.approx(N / (N + d), rel=1e-15)


def test_lecture_case_table():
    r = st.algorithm0_traffic(1000, 64, seed=0)
    assert r.total == 4_256_000 and r.sp == 4_000_000
    text = st.traffic_table(r)
    assert "4,256,000" in text and "2,192,000" in text and "2,064,000" in text
    assert text.splitlines()[-1].split()[0] == "all"


def test_traffic_curves_shares_and_crossing_at_d():
    r = st.traffic_curves(d=64, n=64)
    N = r.N.astype(float)
    for t in ("Q", "K", "V", "O"):
        np.testing.assert_array_equal(r.parts[t], N * 64)
    for t in ("S", "P"):
        np.testing.assert_array_equal(r.parts[t], 2 * N * N)
    np.testing.assert_allclose(r.share, N / (N + 64), rtol=1e-15)
    assert r.at_n["share"] == 0.5                            # N = d: equal parts
    assert st.traffic_curves(d=64, n=4096).at_n["share"] == pytest.approx(4096 / 4160)
    # for N >> d the N^2 part dominates: above 98 % from N = 64 d
    big = N >= 64 * 64
    assert np.all(r.share[big] > 0.98)


# --- prefill curves against the hand-written time model ------------------------------------------

def test_prefill_point_llama3_8b_h100_32k():
    r = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, 32768)
    want = by_hand(32768, **L8, **H100)
    p = r.at_n
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
    assert (r.heads, r.layers, r.head_dim) == (32, 32, 128)


@pytest.mark.parametrize("N", [1024, 5000, 16384, 131072])
def test_prefill_grid_and_point_match_hand(N):
    r = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, N)
    want = by_hand(N, **L8, **H100)
    for k in ("compute_s", "extra_s", "flash_s", "sp_bytes"):
        assert r.at_n[k] == pytest.approx(want[k], rel=1e-12)
    for i, n in enumerate(r.N):
        w = by_hand(int(n), **L8, **H100)
        assert r.compute_s[i] == pytest.approx(w["compute_s"], rel=1e-12)
        assert r.extra_s[i] == pytest.approx(w["extra_s"], rel=1e-12)
        assert r.flash_s[i] == pytest.approx(w["flash_s"], rel=1e-12)


def test_head_dim_keeps_heads_times_d():
    """d = 64: Llama-3-8B becomes 64 heads x 64 (same width 4096, same FLOPs, twice the S+P)."""
    r64 = st.prefill_curves("Llama-3-8B", "H100-SXM", 64, 32768)
    r128 = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, 32768)
    want = by_hand(32768, **{**L8, "heads": 64, "d": 64}, **H100)
    assert r64.heads == 64 and r64.own_head_dim == 128
    for k in ("compute_s", "extra_s", "flash_s", "sp_bytes", "ml_bytes"):
        assert r64.at_n[k] == pytest.approx(want[k], rel=1e-12), k
    np.testing.assert_allclose(r64.compute_s, r128.compute_s, rtol=1e-15)
    assert r64.at_n["sp_bytes"] == 2 * r128.at_n["sp_bytes"]
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
    assert r.at_n["extra_raw_s"] == pytest.approx(want["extra_raw_s"], rel=1e-12)
    assert r.at_n["extra_s"] == 0.0 and r.at_n["total_ratio"] == 1.0
    assert np.all(r.extra_s == 0.0)
    assert r.crossover_n is None
    assert r.block_c == math.ceil(M / (4 * 256)) == 98


@pytest.mark.parametrize("N", [16384, 32768, 65536])
def test_extra_time_and_memory_grow_as_n_squared(N):
    a = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, N).at_n
    b = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, 2 * N).at_n
    assert 3.9 <= b["extra_s"] / a["extra_s"] <= 4.1
    assert b["sp_bytes"] == 4 * a["sp_bytes"]
    assert b["ml_bytes"] == 2 * a["ml_bytes"]                    # FlashAttention: linear


def test_crossover_near_16k_for_llama3_8b_on_h100():
    r = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, 32768)
    assert 15_000 < r.crossover_n < 17_500
    below, above = by_hand(8192, **L8, **H100), by_hand(32768, **L8, **H100)
    assert below["extra_s"] < below["compute_s"] and above["extra_s"] > above["compute_s"]


def test_faster_memory_less_extra_time():
    h100 = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, 32768).at_n["extra_s"]
    h200 = st.prefill_curves("Llama-3-8B", "H200-SXM", 128, 32768).at_n["extra_s"]
    assert h200 == pytest.approx(h100 * 3.35 / 4.8, rel=1e-12)


def test_max_fitting_n():
    hbm = 81_559 * 2**20                                   # what nvidia-smi reports on an H100 80GB
    n = st.max_fitting_n("Llama-3-8B", "H100-SXM")
    assert n == math.isqrt(hbm // (2 * 32 * 2)) == 25_848
    assert 2 * 32 * n**2 * 2 <= hbm < 2 * 32 * (n + 1) ** 2 * 2
    assert st.max_fitting_n("Llama-3-8B", "A100") == math.isqrt(80 * 2**30 // 128) == 25_905
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
            assert lo_t <= getattr(r, k).min() and getattr(r, k).max() <= hi_t, (model, gpu, d, k)
        pos = r.extra_s[r.extra_s > 0]
        assert pos.size == 0 or (lo_t <= pos.min() and pos.max() <= hi_t)
        for k in ("sp_bytes", "ml_bytes"):
            assert lo_m <= getattr(r, k).min() and getattr(r, k).max() <= hi_m, (model, gpu, d, k)
        assert lo_m <= r.hbm_bytes <= hi_m


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
    ex = st.PrefillCostExplorer()
    s = ex.summary.value
    assert "N = 32,768" in s and "2.62x" in s and "128 GiB" in s and "does not fit" in s
    assert "8 MiB" in s
    assert "(hypothetical)" not in ex.figure.axes[0].get_title()
    ex.set(head_dim=256)
    s = ex.summary.value
    assert "MORE HBM traffic than standard" in s and "M = 100,000" in s
    assert "cannot show FlashAttention's benefit" in s and "does not mean FlashAttention gains" in s
    assert "memory benefit stands" in s and "L2" in s
    assert "no extra time is charged" in s
    title = ex.figure.axes[0].get_title()
    assert title.startswith("Time of one prefill") and "reshaped: 16 heads × d=256 (hypothetical)" in title
    ex.set(model="Gemma-2-9B")                             # its own d = 256: no "hypothetical"
    assert "hypothetical" not in ex.figure.axes[0].get_title()
    assert "cannot show FlashAttention's benefit" in ex.summary.value


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


# --- the figures say what the summaries say -------------------------------------------------------

def test_legend_lists_only_drawn_lines():
    """d = 256: no extra time, so the red line is not drawn and its legend entry is hidden."""
    ex = st.PrefillCostExplorer()
    ax = ex.figure.axes[0]

    def shown_labels():
        legs = [a for a in ax.get_children() if type(a).__name__ == "Legend" and a.get_visible()]
        assert len(legs) == 1
        return [t.get_text() for t in legs[0].get_texts()]

    assert any(t.startswith("extra HBM time") for t in shown_labels())
    ex.set(head_dim=256)
    assert not any(t.startswith("extra HBM time") for t in shown_labels())
    red = next(l for l in ax.lines if l.get_label().startswith("extra HBM time"))
    assert np.all(np.isnan(red.get_ydata()))
    ex.set(head_dim=64)
    assert any(t.startswith("extra HBM time") for t in shown_labels())


def test_flash_and_extra_lines_are_told_apart():
    """At d = 128 the two HBM curves nearly coincide: they differ in width, style and markers."""
    ex = st.PrefillCostExplorer()
    lines = {l.get_label().split("\n")[0]: l for l in ex.figure.axes[0].lines}
    red = lines["extra HBM time of standard attention"]
    blue = lines["FlashAttention's own traffic (FA1 accounting, assumed hidden)"]
    r = st.prefill_curves()
    np.testing.assert_allclose(blue.get_ydata(), r.flash_s, rtol=0.2)    # they overlap ...
    np.testing.assert_allclose(red.get_ydata(), r.extra_s, rtol=0.2)
    assert red.get_linewidth() >= 2 * blue.get_linewidth()                  # ... yet look different
    assert red.get_linestyle() == "-" and blue.get_linestyle() != "-"
    assert blue.get_marker() not in (None, "None", "")


def test_traffic_dot_sits_at_the_share_the_summary_states():
    for d, n in ((64, 4096), (128, 64), (32, 131072)):
        ex = st.StandardTrafficExplorer(d=d, n=n)
        share = 100 * n / (n + d)
        dot = next(l for l in ex.figure.axes[0].lines if l.get_marker() == "o")
        assert dot.get_xdata()[0] == n and dot.get_ydata()[0] == pytest.approx(share)
        assert f"{share:.1f} %" in ex.summary.value
        label = next(t for t in ex.figure.axes[0].texts if t.get_text().startswith("S, P:"))
        assert label.get_text() == f"S, P: {share:.1f} %"


def test_flash_traffic_crossover_from_the_library():
    """Notebook 02 prints where FlashAttention's own traffic (FA1 accounting) reaches the compute
    time: about 16,900 tokens for Llama-3-8B on the H100, just after the extra time (16,700)."""
    r = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, 32768)
    assert 16_800 < r.flash_crossover_n < 16_950
    below, above = by_hand(16_800, **L8, **H100), by_hand(16_950, **L8, **H100)
    assert below["flash_s"] < below["compute_s"] and above["flash_s"] > above["compute_s"]
    rows = {row["gpu"]: row for row in st.crossover_rows()}
    assert rows["H100-SXM"]["flash_n"] == pytest.approx(r.flash_crossover_n)
    assert rows["H100-SXM"]["extra_n"] == pytest.approx(r.crossover_n)
    assert rows["A100-80GB-SXM"]["extra_n"] > rows["H200-SXM"]["extra_n"] > rows["B200"]["extra_n"]
    assert all(row["extra_n"] is None for row in st.crossover_rows(head_dim=256))
    assert "16,900" in st.crossover_table()


def test_ratio_conventions_by_hand():
    rows = st.ratio_conventions("Llama-3-8B", "H100-SXM", 32768)
    N, p = 32768, H100["peak"]
    base = by_hand(N, **L8, **H100)
    heads = L8["layers"] * L8["heads"]
    assert rows[0]["ratio"] == pytest.approx((base["compute_s"] + base["extra_s"]) / base["compute_s"])
    no_embed = base["compute_s"] - 2 * 128_256 * 4096 * N / p
    assert rows[1]["compute_s"] == pytest.approx(no_embed)
    full = base["compute_s"] + 2 * heads * N * N * 128 / p
    assert rows[2]["compute_s"] == pytest.approx(full)
    assert rows[3]["extra_s"] > base["extra_s"]            # causal FA1 moves less: more extra
    bc = math.ceil(M / (4 * 128))                          # causal FA1 by hand: K/V block j is
    n_blocks = -(-N // bc)                                 # read by the queries i >= j * bc
    causal_fa1 = 2 * N * 128 + sum((N - j * bc) * (3 * 128 + 4) for j in range(n_blocks))
    want = heads * (std_hand(N, 128) - causal_fa1) * 2 / H100["bw"]
    assert rows[3]["extra_s"] == pytest.approx(want, rel=0.01)
    assert [round(r["ratio"], 2) for r in rows] == [2.62, 2.70, 2.20, 3.42]
