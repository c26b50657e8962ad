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
H100 = dict(peak=989.4e12, bw=3.35e12, hbm=81_559 * 2**20)  # nvidia-smi: 81,559 MiB
M = 100_000


def std_hand(N, d):
    return 2 * N * d + 2 * N * d + 4 * N * N  # read Q, K, V; write O; S, P each way


def fa1_hand(N, d, sram=M):
    bc = math.ceil(sram / (4 * d))
    return 2 * N * d + math.ceil(N / bc) * N * (3 * d + 4)


def fa1_causal_hand(N, d, sram=M):
    """FA1 with causal block skipping, by a loop: K/V block j (B_c keys from j B_c) is visited by
    the Q blocks whose last row reaches key j B_c, i.e. all rows from B_r floor(j B_c / B_r)."""
    bc = math.ceil(sram / (4 * d))
    br = min(bc, d)
    visits = sum(N - br * (j * bc // br) for j in range(math.ceil(N / bc)))
    return 2 * N * d + visits * (3 * d + 4)


def by_hand(N, *, params, layers, heads, d, peak, bw, hbm, bpe=2, flash_io=None):
    """One prefill, every kernel at its roofline, kernels one after another: the linear layers
    compute-bound; FlashAttention one kernel (causal FLOPs, causal FA1 traffic); standard
    attention three (QK^T and PV full GEMMs; Q, K -> S; S -> P; P, V -> O)."""
    lh = layers * heads
    linear = 2 * params * N / peak
    attn = 2 * lh * N * N * d / peak  # causal half of QK^T and PV
    gemm = 2 * lh * N * N * d / peak  # one full GEMM
    fio = lh * (fa1_causal_hand(N, d) if flash_io is None else flash_io) * bpe / bw
    k1 = lh * (2 * N * d + N * N) * bpe / bw
    k2 = lh * 2 * N * N * bpe / bw
    k3 = lh * (N * N + 2 * N * d) * bpe / bw
    flash = linear + max(attn, fio)
    standard = linear + max(gemm, k1) + k2 + max(gemm, k3)
    sp = 2 * heads * N * N * bpe
    return {
        "compute_s": linear + attn,
        "standard_s": standard,
        "flash_s": flash,
        "extra_raw_s": standard - flash,
        "extra_s": max(standard - flash, 0.0),
        "flash_io_s": fio,
        "ratio": standard / flash,
        "sp_bytes": sp,
        "ml_bytes": heads * N * 2 * 4,
        "fits": sp <= hbm,
    }


# --- Algorithm 0 tensor by tensor ----------------------------------------------------------------


@pytest.mark.parametrize("N,d", [(1000, 64), (257, 32), (1, 8)])
def test_counter_by_tensor_matches_algorithm0(N, d):
    r = st.algorithm0_traffic(N, d, seed=3)
    got = {row["tensor"]: (row["reads"], row["writes"]) for row in r.rows}
    assert list(got) == ["Q", "K", "S", "P", "V", "O"]  # kernel 1, 2, 3 order
    assert got == {
        "Q": (N * d, 0),
        "K": (N * d, 0),
        "S": (N * N, N * N),
        "P": (N * N, N * N),
        "V": (N * d, 0),
        "O": (0, N * d),
    }
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
    assert r.at_n["share"] == 0.5  # N = d: equal parts
    assert st.traffic_curves(d=64, n=4096).at_n["share"] == pytest.approx(4096 / 4160)
    # for N >> d the N^2 part dominates: above 98 % from N = 64 d
    big = N >= 64 * 64
    assert np.all(r.share[big] > 0.98)


# --- prefill curves against the hand-written time model ------------------------------------------


def test_prefill_point_llama3_8b_h100_32k():
    r = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, 32768)
    want = by_hand(32768, **L8, **H100)
    p = r.at_n
    for k in (
        "compute_s",
        "standard_s",
        "flash_s",
        "extra_s",
        "extra_raw_s",
        "flash_io_s",
        "sp_bytes",
        "ml_bytes",
    ):
        assert p[k] == pytest.approx(want[k], rel=1e-12), k
    assert p["fits"] is False
    assert p["total_ratio"] == pytest.approx(want["ratio"], rel=1e-12)
    # 0.82 s of matmuls; FlashAttention's kernel is held by its own traffic (0.66 s against
    # 0.28 s of attention FLOPs), so its prefill takes 1.19 s; standard 3.17 s: 2.66x
    assert p["compute_s"] == pytest.approx(0.816, abs=0.0005)
    assert p["flash_s"] == pytest.approx(1.193, abs=0.0005)
    assert p["standard_s"] == pytest.approx(3.168, abs=0.0005)
    assert round(p["total_ratio"], 2) == 2.66
    assert p["sp_bytes"] == 2 * 32 * 32768**2 * 2 == 128 * 2**30
    assert p["ml_bytes"] == 32 * 32768 * 2 * 4 == 8 * 2**20  # exercise 2: 8 MiB
    assert (r.heads, r.layers, r.head_dim) == (32, 32, 128)


def test_one_accounting_for_both():
    """The old model charged standard attention's extra traffic while assuming FlashAttention's
    own hidden; with one accounting FlashAttention's time includes its traffic where that is
    larger than its FLOPs, and the ratio is the ratio of the two times."""
    c = prefill_cost("Llama-3-8B", "H100-SXM", 32768)
    assert c.flash_s > c.compute_s and not c.flash_io_hidden  # its traffic is not hidden
    assert c.flash_s == pytest.approx(
        c.compute_s - 2 * 1024 * 32768**2 * 128 / H100["peak"] + c.flash_io_s, rel=1e-12
    )
    assert c.total_ratio == pytest.approx(c.standard_s / c.flash_s, rel=1e-15)
    assert c.extra_io_s == pytest.approx(c.standard_s - c.flash_s, rel=1e-15)
    hidden = prefill_cost("Llama-3-8B", "H100-SXM", 32768, causal_skip=False)
    assert hidden.flash_io_s > c.flash_io_s  # no skipping: more traffic


@pytest.mark.parametrize("N", [1024, 5000, 16384, 131072])
def test_prefill_grid_and_point_match_hand(N):
    r = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, N)
    want = by_hand(N, **L8, **H100)
    for k in ("compute_s", "standard_s", "flash_s", "extra_s", "sp_bytes"):
        assert r.at_n[k] == pytest.approx(want[k], rel=1e-12)
    for i, n in enumerate(r.N):
        w = by_hand(int(n), **L8, **H100)
        for k in ("compute_s", "standard_s", "flash_s", "extra_s", "flash_io_s"):
            assert getattr(r, k)[i] == pytest.approx(w[k], rel=1e-12), (k, n)


def test_head_dim_keeps_heads_times_d():
    """d = 64: Llama-3-8B becomes 64 heads x 64 (same width 4096, same FLOPs, twice the S+P)."""
    r64 = st.prefill_curves("Llama-3-8B", "H100-SXM", 64, 32768)
    r128 = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, 32768)
    want = by_hand(32768, **{**L8, "heads": 64, "d": 64}, **H100)
    assert r64.heads == 64 and r64.own_head_dim == 128
    for k in ("compute_s", "standard_s", "flash_s", "extra_s", "sp_bytes", "ml_bytes"):
        assert r64.at_n[k] == pytest.approx(want[k], rel=1e-12), k
    np.testing.assert_allclose(r64.compute_s, r128.compute_s, rtol=1e-15)
    assert r64.at_n["sp_bytes"] == 2 * r128.at_n["sp_bytes"]
    m = st.with_head_dim("Llama-3-8B", 256)
    assert (m.q_heads, m.kv_heads, m.head_dim) == (16, 4, 256)
    assert st.with_head_dim("Llama-3-8B", 128) is get_model("Llama-3-8B")


def test_head_dim_256_no_gain_in_this_accounting():
    """With M = 100,000 and d = 256, B_c = 98: FA1 (causal) moves about as much as standard
    attention, so the two prefills take about the same time."""
    r = st.prefill_curves("Gemma-2-9B", "H100-SXM", 256, 32768)
    gemma = dict(params=9_241_705_984, layers=42, heads=16, d=256)
    want = by_hand(32768, **gemma, **H100)
    for k in ("standard_s", "flash_s", "extra_raw_s"):
        assert r.at_n[k] == pytest.approx(want[k], rel=1e-12), k
    assert abs(r.at_n["total_ratio"] - 1) < 0.05
    assert r.block_c == math.ceil(M / (4 * 256)) == 98
    assert np.all(r.extra_s >= 0) and np.all(r.extra_s <= 0.05 * r.flash_s)


@pytest.mark.parametrize("N", [16384, 32768, 65536])
def test_extra_time_and_memory_grow_as_n_squared(N):
    a = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, N).at_n
    b = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, 2 * N).at_n
    assert 3.9 <= b["extra_s"] / a["extra_s"] <= 4.1
    assert b["sp_bytes"] == 4 * a["sp_bytes"]
    assert b["ml_bytes"] == 2 * a["ml_bytes"]  # FlashAttention: linear


def test_crossover_near_10k_for_llama3_8b_on_h100():
    r = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, 32768)
    assert 10_000 < r.crossover_n < 10_600
    below, above = by_hand(10_000, **L8, **H100), by_hand(10_600, **L8, **H100)
    assert below["extra_s"] < below["compute_s"] and above["extra_s"] > above["compute_s"]


def test_faster_memory_less_extra_time():
    h100 = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, 32768).at_n["extra_s"]
    h200 = st.prefill_curves("Llama-3-8B", "H200-SXM", 128, 32768).at_n["extra_s"]
    assert h200 == pytest.approx(h100 * 3.35 / 4.8, rel=1e-9)  # both kernels memory-bound


def test_max_fitting_n():
    hbm = 81_559 * 2**20  # what nvidia-smi reports on an H100 80GB
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
        for k in ("compute_s", "flash_s", "standard_s"):
            assert lo_t <= getattr(r, k).min() and getattr(r, k).max() <= hi_t, (model, gpu, d, k)
        for k in ("sp_bytes", "ml_bytes"):
            assert lo_m <= getattr(r, k).min() and getattr(r, k).max() <= hi_m, (model, gpu, d, k)
        assert lo_m <= r.hbm_bytes <= hi_m


def test_prefill_table_has_the_lecture_rows():
    text = st.prefill_table("Llama-3-8B", "H100-SXM", [16384, 32768])
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "2.14" in lines[2] and "yes" in lines[2]
    assert "2.66" in lines[3] and "128 GiB" in lines[3] and lines[3].rstrip().endswith("no")


def test_binary_bytes():
    assert st.binary_bytes(64 * 2**30) == "64 GiB"
    assert st.binary_bytes(256 * 2**10) == "256 KiB"
    assert st.binary_bytes(80 * 2**30) == "80 GiB"
    assert st.binary_bytes(512) == "512 B"


def test_summary_line_states_the_point():
    ex = st.PrefillCostExplorer()
    s = ex.summary.value
    assert "N = 32,768" in s and "2.66x" in s and "128 GiB" in s and "does not fit" in s
    assert "8 MiB" in s and "every kernel at its roofline" in s
    assert "held by its own traffic" in s and "1.19 s" in s and "3.17 s" in s
    assert "(hypothetical)" not in ex.figure.axes[0].get_title()
    ex.set(head_dim=256)
    s = ex.summary.value
    assert "M = 100,000" in s and "about as much" in s
    assert "cannot show FlashAttention's benefit" in s and "does not mean FlashAttention gains" in s
    assert "memory benefit stands" in s and "L2" in s
    title = ex.figure.axes[0].get_title()
    assert title.startswith("Time of one prefill") and "reshaped: 16 heads × d=256 (hypothetical)" in title
    ex.set(model="Gemma-2-9B")  # its own d = 256: no "hypothetical"
    assert "hypothetical" not in ex.figure.axes[0].get_title()
    assert "cannot show FlashAttention's benefit" in ex.summary.value


# --- the vectorised companion in models.py --------------------------------------------------------


@pytest.mark.parametrize(
    "model,gpu",
    [("Llama-3-8B", "H100-SXM"), ("Llama-3-70B", "A100"), ("Gemma-2-9B", "B200"), ("DeepSeek-V3", "H200")],
)
def test_curve_equals_prefill_cost(model, gpu):
    Ns = [1, 7, 100, 1000, 4096, 12345, 32768, 131072]
    r = prefill_cost_curve(model, gpu, Ns)
    for i, N in enumerate(Ns):
        c = prefill_cost(model, gpu, N)
        assert r["N"][i] == N
        assert r["compute_s"][i] == pytest.approx(c.compute_s, rel=1e-12)
        assert r["extra_io_s"][i] == pytest.approx(c.extra_io_s, rel=1e-12, abs=1e-18)
        assert r["total_ratio"][i] == pytest.approx(c.total_ratio, rel=1e-12)
        assert r["standard_s"][i] == pytest.approx(c.standard_s, rel=1e-12)
        assert r["flash_s"][i] == pytest.approx(c.flash_s, rel=1e-12)
        assert r["s_bytes_per_layer"][i] == c.s_bytes_per_layer
        assert r["sp_bytes_per_layer"][i] == c.sp_bytes_per_layer
        assert bool(r["fits"][i]) is c.fits


def test_curve_flash_time_by_hand_and_sram():
    r = prefill_cost_curve("Llama-3-8B", "H100", [4096], sram=50_000)
    want = 32 * 32 * fa1_causal_hand(4096, 128, sram=50_000) * 2 / 3.35e12
    assert r["flash_io_s"][0] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize(
    "bad,exc",
    [
        ([0], ValueError),
        ([1024, -5], ValueError),
        ([1.5], TypeError),
        (["8"], TypeError),
        ([], ValueError),
        ([1 << 25], ValueError),
    ],
)
def test_curve_bad_lengths(bad, exc):
    with pytest.raises(exc):
        prefill_cost_curve("Llama-3-8B", "H100", bad)


# --- bad input names the value --------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"n": 0}, "n=0"),
        ({"n": 131073}, "n=131073"),
        ({"n": 512}, "n=512"),
        ({"model": "GPT-9"}, "GPT-9"),
        ({"gpu": "H900"}, "H900"),
        ({"head_dim": 96}, "head_dim=96"),
        ({"head_dim": 32}, "head_dim=32"),
        ({"model": "DeepSeek-V3"}, "DeepSeek-V3"),
    ],
)
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
    """The visible legend of the time panel lists exactly the lines that hold data."""
    ex = st.PrefillCostExplorer()
    ax = ex.figure.axes[0]
    for kw in ({}, {"head_dim": 256}, {"head_dim": 64}, {"gpu": "A100-80GB-SXM"}):
        ex.set(**kw)
        legs = [a for a in ax.get_children() if type(a).__name__ == "Legend" and a.get_visible()]
        assert len(legs) == 1
        shown = {t.get_text() for t in legs[0].get_texts()}
        drawn = {
            l.get_label()
            for l in ax.lines
            if not l.get_label().startswith("_") and np.isfinite(np.asarray(l.get_ydata(), float)).any()
        }
        assert shown == drawn, kw


def test_prefill_lines_are_told_apart():
    """Standard and FlashAttention prefill times (solid and dashed), the extra time a wide pale band."""
    ex = st.PrefillCostExplorer()
    lines = {l.get_label(): l for l in ex.figure.axes[0].lines}
    r = st.prefill_curves()
    np.testing.assert_allclose(lines["prefill, standard attention"].get_ydata(), r.standard_s)
    np.testing.assert_allclose(lines["prefill, FlashAttention"].get_ydata(), r.flash_s)
    extra = lines["extra: standard − FlashAttention"]
    np.testing.assert_allclose(extra.get_ydata(), r.extra_s)
    assert extra.get_linewidth() >= 2 * lines["prefill, FlashAttention"].get_linewidth()
    assert lines["prefill, FlashAttention"].get_linestyle() != "-"


def test_traffic_dot_sits_at_the_share_the_summary_states():
    for d, n in ((64, 4096), (128, 64), (32, 131072)):
        ex = st.StandardTrafficExplorer(d=d, n=n)
        share = 100 * n / (n + d)
        dot = next(l for l in ex.figure.axes[0].lines if l.get_marker() == "o")
        assert dot.get_xdata()[0] == n and dot.get_ydata()[0] == pytest.approx(share)
        assert f"{share:.1f} %" in ex.summary.value
        label = next(t for t in ex.figure.axes[0].texts if t.get_text().startswith("S, P:"))
        assert label.get_text() == f"S, P: {share:.1f} %"


def test_crossover_rows_from_the_library():
    r = st.prefill_curves("Llama-3-8B", "H100-SXM", 128, 32768)
    rows = {row["gpu"]: row for row in st.crossover_rows()}
    assert rows["H100-SXM"]["extra_n"] == pytest.approx(r.crossover_n)
    assert rows["H100-SXM"]["ratio"] == pytest.approx(by_hand(32768, **L8, **H100)["ratio"], rel=1e-12)
    assert rows["A100-80GB-SXM"]["extra_n"] > rows["H200-SXM"]["extra_n"] > rows["B200"]["extra_n"]
    text = st.crossover_table()
    assert "10,300" in text and "2.66" in text and max(map(len, text.splitlines())) <= 100


def test_ratio_conventions_by_hand():
    rows = st.ratio_conventions("Llama-3-8B", "H100-SXM", 32768)
    N, p = 32768, H100["peak"]
    base = by_hand(N, **L8, **H100)
    assert rows[0]["ratio"] == pytest.approx(base["ratio"], rel=1e-12)
    assert rows[1]["flash_s"] == pytest.approx(base["compute_s"], rel=1e-12)  # hidden
    no_skip = by_hand(N, **L8, **H100, flash_io=fa1_hand(N, 128))
    assert rows[2]["flash_s"] == pytest.approx(no_skip["flash_s"], rel=1e-12)
    assert rows[3]["flash_s"] < rows[0]["flash_s"]  # FA2's own tiles move less than FA1
    embed = 2 * 128_256 * 4096 * N / p
    assert rows[4]["standard_s"] == pytest.approx(base["standard_s"] - embed, rel=1e-12)
    assert [round(r["ratio"], 2) for r in rows] == [2.66, 3.88, 1.72, 3.25, 2.70]
    assert max(map(len, st.conventions_table().splitlines())) <= 100


def test_n_equals_d_label_is_not_crossed_by_the_read_off_line():
    """The "N = d" label sits on the side of its dotted line away from the read-off line where
    it fits; where it cannot, its white box is drawn after that line, so the line stops at it."""
    ex = st.StandardTrafficExplorer()
    renderer = ex.canvas.get_renderer()
    ax = ex.ax_a
    for d in st.TRAFFIC_DIMS:
        for n in st.TRAFFIC_N:
            ex.set(d=d, n=n)
            ex.png()
            box = ex.a_eq_txt.get_window_extent(renderer)
            x_mark = ax.transData.transform((n, 1e6))[0]
            if box.x0 <= x_mark <= box.x1:
                assert ex.a_eq_txt.get_bbox_patch() is not None
                assert ex.dynamic.index(ex.a_eq_txt) > ex.dynamic.index(ex.a_mark), (d, n)
                assert d / 8 < st.TRAFFIC_GRID[0] or not d < n <= 8 * d, (d, n)  # no room left of d
