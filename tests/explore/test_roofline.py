"""Notebook 01's numbers: the roofline against the JSON's own figures, the operators' intensities
counted again by hand, the fusion byte counts, attention's share of a Llama-3-8B prefill, and
bad input that names the offending value."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from matplotlib.text import Text

from attnlab.explore.roofline import (
    GRID,
    I_MAX,
    I_MIN,
    SOFTMAX_FLOPS,
    attention_share,
    fusion_rows,
    fusion_traffic,
    memory_levels,
    operators,
    RooflineExplorer,
    roofline_points,
    spec_sources,
)
from attnlab.explore.roofline import memory_table
from attnlab.explore.roofline.explorer import KEY as _KEY
from attnlab.catalog import data_path
from attnlab.machine.hardware import get_gpu, gpus
from attnlab.machine.models import attention_linear_crossover, linear_flops_per_token


def _spec(name):
    with open(data_path("gpus.json"), encoding="utf-8") as f:
        return next(e for e in json.load(f)["gpus"] if e["name"] == name)


CHIPS = ["A100-80GB-SXM", "H100-SXM", "H200-SXM", "B200"]


# --- the roofline -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CHIPS)
def test_ridge_point_is_peak_over_bandwidth_from_the_json(name):
    raw = _spec(name)
    for dtype, flops in raw["peak_flops"].items():
        r = roofline_points(name, dtype, 1.0)
        assert r.ridge == pytest.approx(flops / raw["hbm_bandwidth"], rel=1e-12)
        assert r.peak == flops and r.bandwidth == raw["hbm_bandwidth"]


def test_lecture_ridge_points():
    assert roofline_points("H100-SXM", "bf16").ridge == pytest.approx(295.34, abs=0.01)
    assert roofline_points("A100", "bf16").ridge == pytest.approx(153.02, abs=0.01)


@pytest.mark.parametrize("name", CHIPS)
def test_attainable_at_a_few_intensities(name):
    raw = _spec(name)
    p, bw = raw["peak_flops"]["bf16"], raw["hbm_bandwidth"]
    ridge = p / bw
    for i in (0.1, 1.0, ridge / 2, ridge, 2 * ridge, 10_000.0):
        u = roofline_points(name, "bf16", i).user
        assert u.attainable == pytest.approx(min(p, i * bw), rel=1e-12)
        assert u.fraction == pytest.approx(min(p, i * bw) / p, rel=1e-12)
        assert u.bound == ("memory-bound" if i < ridge else "compute-bound")


def test_h100_bf16_at_10_flop_per_byte():
    u = roofline_points("H100", "bf16", 10).user
    assert u.attainable == pytest.approx(33.5e12)
    assert u.fraction == pytest.approx(33.5 / 989.4)


def test_roof_curve_spans_the_axis_and_is_the_min_of_two_roofs():
    r = roofline_points("H200", "fp8", 3.0)
    assert GRID[0] == pytest.approx(I_MIN) and GRID[-1] == pytest.approx(I_MAX)
    steps = np.diff(np.log(GRID))
    assert np.allclose(steps, steps[0])  # log-spaced
    expected = np.minimum(1978.9e12, GRID * 4.8e12)
    assert np.allclose(r.roof, expected, rtol=1e-12)
    assert np.all(np.diff(r.roof) >= 0)


# --- operators counted by hand ------------------------------------------------------------------


def _by_key(ops):
    return {o.key: o for o in ops}


@pytest.mark.parametrize("dtype,b", [("bf16", 2), ("fp32", 4), ("fp8", 1)])
def test_operator_intensities_by_hand(dtype, b):
    ops = _by_key(operators(dtype))
    N, d, L, n = 4096, 128, 4096, 4096
    assert ops["elementwise"].intensity == pytest.approx(1 / (2 * b))
    assert ops["softmax"].intensity == pytest.approx(5 / (2 * b))
    assert SOFTMAX_FLOPS == 5
    assert ops["decode"].intensity == pytest.approx(4 * L * d / ((2 * L * d + 2 * d) * b))
    assert ops["decode"].intensity == pytest.approx(2 / b, rel=1e-3)  # "about 1" in bf16
    # standard attention: Q, K read, S written; S read, P written; P, V read, O written
    std_elements = (N * d + N * d + N * N) + (N * N + N * N) + (N * N + N * d + N * d)
    assert ops["standard"].bytes == std_elements * b
    assert ops["standard"].intensity == pytest.approx(4 * N * N * d / (std_elements * b))
    # FlashAttention, FA2 order, M = 100,000: B_r = min(ceil(M / 4d), d) = 128 -> 32 Q blocks;
    # Q read once, K and V re-read for every Q block, O written once
    br = min(math.ceil(100_000 / (4 * d)), d)
    assert br == 128
    fa_elements = N * d + (N // br) * 2 * N * d + N * d
    assert ops["flash"].bytes == fa_elements * b
    assert ops["flash"].intensity == pytest.approx(4 * N * N * d / (fa_elements * b))
    assert ops["matmul"].intensity == pytest.approx(2 * n**3 / (3 * n * n * b))
    assert ops["flash_l2"].intensity == pytest.approx(N / b)


def test_bf16_operator_numbers_quoted_in_the_notebook():
    ops = _by_key(operators("bf16"))
    assert ops["elementwise"].intensity == 0.25
    assert ops["softmax"].intensity == 1.25
    assert ops["standard"].intensity == pytest.approx(62.06, abs=0.01)
    assert ops["flash"].intensity == pytest.approx(124.12, abs=0.01)
    assert ops["matmul"].intensity == pytest.approx(1365.33, abs=0.01)
    assert ops["flash_l2"].intensity == 2048


def test_operators_on_the_h100_and_the_a100_fp32_roof():
    r = roofline_points("H100-SXM", "bf16")
    bound = {o.key: o.bound for o in r.operators}
    assert [k for k, v in bound.items() if v == "compute-bound"] == ["matmul", "flash_l2"]
    for o in r.operators:
        assert o.attainable == pytest.approx(min(989.4e12, o.intensity * 3.35e12))
        assert o.time_s == pytest.approx(max(o.flops / 989.4e12, o.bytes / 3.35e12))
    # on the CUDA cores (fp32) the A100's ridge is below 10: even standard attention is compute-bound
    a = {o.key: o.bound for o in roofline_points("A100", "fp32").operators}
    assert a["standard"] == "compute-bound" and a["softmax"] == "memory-bound"


def test_operators_are_frozen():
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        operators("bf16")[0].intensity = -1
    assert operators("bf16")[0].intensity == 0.25
    with pytest.raises(ValueError, match="read-only"):
        roofline_points().roof[0] = 0.0


# --- fusion ------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_fusion_bytes_and_time_by_hand(k):
    N = 32768
    f = fusion_traffic(k, N, "H100-SXM", "bf16")
    assert f["unfused_bytes"] == k * (N * N * 2 + N * N * 2)
    assert f["fused_bytes"] == N * N * 2 + N * N * 2
    assert f["unfused_s"] == pytest.approx(f["unfused_bytes"] / 3.35e12)
    assert f["fused_s"] == pytest.approx(f["fused_bytes"] / 3.35e12)
    assert f["speedup"] == pytest.approx(k)


def test_fusion_lecture_example_and_table():
    f = fusion_traffic(4, 32768)
    assert f["unfused_bytes"] == 17_179_869_184 and f["fused_bytes"] == 4_294_967_296
    assert f["unfused_s"] == pytest.approx(5.128e-3, rel=1e-3)
    assert f["fused_s"] == pytest.approx(1.282e-3, rel=1e-3)
    rows = fusion_rows((1, 3), N=1024, gpu="A100", dtype="fp16")
    assert [r["k"] for r in rows] == [1, 3]
    assert rows[1]["unfused_bytes"] == 3 * 4 * 1024 * 1024


def test_fusion_with_heavy_elementwise_work_becomes_compute_bound():
    # 1000 FLOPs per element: each unfused kernel at 250 FLOP/byte stays under the H100's ridge,
    # the fused one (4000 FLOPs per 4 bytes) is above it
    N, k, fpe = 4096, 4, 1000.0
    f = fusion_traffic(k, N, "H100", "bf16", flops_per_element=fpe)
    p, bw = 989.4e12, 3.35e12
    assert f["unfused_s"] == pytest.approx(k * max(fpe * N * N / p, 4 * N * N / bw))
    assert f["fused_s"] == pytest.approx(max(k * fpe * N * N / p, 4 * N * N / bw))
    assert 1 < f["speedup"] < k


# --- 1.1 and 1.2 ---------------------------------------------------------------------------------


def test_attention_share_llama3_8b_by_hand():
    rows = {r["N"]: r for r in attention_share("Llama-3-8B", (1024, 32768))}
    linear = 2 * 8_030_261_248  # 2 x params, embedding included (notebooks 01 and 02 agree)
    r = rows[32768]
    assert r["linear_flops"] == linear == linear_flops_per_token("Llama-3-8B")
    assert r["attn_flops"] == pytest.approx(4 * 32 * 32 * 128 * (32768 + 1) / 2)
    assert r["attn_share"] == pytest.approx(r["attn_flops"] / (r["attn_flops"] + linear))
    assert r["score_bytes"] == 32768**2 * 2 == 2_147_483_648  # the lecture's "2 GB"
    assert r["kv_bytes"] == 2 * 32 * 8 * 128 * 32768 * 2 == 4 * 2**30
    assert rows[1024]["attn_share"] < 0.02 < 0.3 < r["attn_share"] < 0.4


def test_attention_equals_linear_at_the_crossover():
    """Notebook 01's check-yourself answer and notebook 02's bend of the compute curve are the
    same number: params / (layers x heads x d) = 61,266 tokens for Llama-3-8B."""
    n = attention_linear_crossover("Llama-3-8B")
    assert n == pytest.approx(8_030_261_248 / (32 * 32 * 128))
    assert round(n) == 61_266
    below, above = attention_share("Llama-3-8B", (int(n) - 2, int(n) + 1))
    assert below["attn_share"] < 0.5 < above["attn_share"]


def test_memory_table_states_hbm_to_l2_ratios():
    rows = {r["gpu"]: r for r in memory_levels()}
    for name in CHIPS:
        raw = _spec(name)
        assert rows[name]["hbm_per_l2"] == pytest.approx(raw["hbm_bytes"] / raw["l2_bytes"])
    ratios = sorted(r["hbm_per_l2"] for r in rows.values())
    assert 1_400 < ratios[0] < 1_500 and 2_350 < ratios[-1] < 2_450  # B200 .. H200
    text = memory_table()
    assert "HBM / L2" in text and "2,048x" in text and "79.6 GiB" in text and "140.4 GiB" in text


def test_memory_levels_from_the_json():
    rows = {r["gpu"]: r for r in memory_levels()}
    assert list(rows) == CHIPS
    for name in CHIPS:
        raw = _spec(name)
        r = rows[name]
        assert r["hbm_bytes"] == raw["hbm_bytes"] and r["hbm_bandwidth"] == raw["hbm_bandwidth"]
        assert r["sram_total"] == raw["sram_per_sm"] * raw["sms"]
        assert r["l2_bytes"] == raw["l2_bytes"]
    assert rows["A100-80GB-SXM"]["sram_bandwidth"] == 19e12
    assert rows["A100-80GB-SXM"]["sram_total"] == 108 * 192 * 1024
    assert math.isnan(rows["H100-SXM"]["sram_bandwidth"])


@pytest.mark.parametrize("name", CHIPS)
def test_every_memory_number_has_a_source(name):
    text = spec_sources(name)
    assert text.startswith(name)
    assert "[none]" not in text
    for field in ("hbm_bytes", "hbm_bandwidth", "sms", "sram_per_sm", "l2_bytes"):
        assert field + " [" in text


def test_a100_sram_bandwidth_cites_the_flashattention_paper():
    text = spec_sources("A100")
    assert "sram_bandwidth [4]" in text and "arxiv.org/abs/2205.14135" in text


# --- bad input ---------------------------------------------------------------------------------


def test_unknown_gpu_names_the_value():
    with pytest.raises(ValueError, match="H300"):
        roofline_points("H300", "bf16", 1.0)
    with pytest.raises(ValueError, match="H300"):
        fusion_traffic(2, 1024, gpu="H300")
    with pytest.raises(ValueError, match="H300"):
        memory_levels(["H300"])


def test_dtype_the_gpu_lacks_names_the_value():
    with pytest.raises(ValueError, match="fp8.*A100"):
        roofline_points("A100", "fp8", 1.0)
    with pytest.raises(ValueError, match="fp4"):
        roofline_points("H100", "fp4", 1.0)
    with pytest.raises(ValueError, match="int3"):
        operators("int3")


@pytest.mark.parametrize("bad", [0, 0.0, -1.0, float("nan"), float("inf")])
def test_intensity_must_be_positive_and_finite(bad):
    with pytest.raises(ValueError, match="intensity"):
        roofline_points("H100", "bf16", bad)


def test_other_bad_arguments():
    with pytest.raises(ValueError, match="k=0"):
        fusion_traffic(0, 1024)
    with pytest.raises(TypeError, match="N"):
        attention_share("Llama-3-8B", (1.5,))
    with pytest.raises(ValueError, match="GPT-5"):
        attention_share("GPT-5")
    with pytest.raises(ValueError, match="gpu='nope'"):
        RooflineExplorer(gpu="nope")


# --- the explorer's glue -------------------------------------------------------------------------


def test_gpu_change_offers_only_its_dtypes_in_one_redraw():
    ex = RooflineExplorer("H100-SXM", "fp8", 10.0)
    before = ex.renders
    ex.widgets["gpu"].value = "A100-80GB-SXM"  # as a learner picks it in the dropdown
    assert ex.renders == before + 1
    assert "fp8" not in ex.widgets["dtype"].options
    assert ex.values["dtype"] == "bf16"  # fp8 is gone, so bf16
    ex.set(gpu="B200", dtype="fp4")
    assert "fp4" in ex.widgets["dtype"].options
    ex.set(gpu="H200-SXM")
    assert ex.values["dtype"] == "bf16"


def test_your_kernel_point_and_summary_follow_the_slider():
    ex = RooflineExplorer("H100-SXM", "bf16", 10.0)
    assert "memory-bound" in ex.summary.value and "33.5 TFLOP/s" in ex.summary.value
    ex.set(intensity=1000.0)
    assert "compute-bound" in ex.summary.value and "989 TFLOP/s" in ex.summary.value
    star = next(l for l in ex.figure.axes[0].lines if l.get_marker() == "*")
    x, y = star.get_data()
    assert x[0] == pytest.approx(1000.0) and y[0] == pytest.approx(989.4)
    assert "H100-SXM" in ex.figure.axes[0].get_title() and "bf16" in ex.figure.axes[0].get_title()


def _label(ex, key_text):
    ax = ex.figure.axes[0]
    return next(t for t in ax.texts if t.get_text().startswith(key_text))


@pytest.mark.parametrize(
    "gpu,dtype",
    [("H100-SXM", "bf16"), ("H200-SXM", "fp8"), ("B200", "fp4"), ("A100", "fp32"), ("B200", "tf32")],
)
def test_compute_bound_labels_point_at_their_own_markers(gpu, dtype):
    """matmul's label lies below the roof and ends left of its marker; FA-with-L2's lies above the
    roof; both have a leader line to their marker, and neither leaves the axes."""
    ex = RooflineExplorer(gpu, dtype, 10.0)
    ops = {o.key: o for o in roofline_points(gpu, dtype).operators}
    fig = ex.figure
    fig.canvas.draw()
    ax = fig.axes[0]
    to_px = ax.transData.transform
    box = ax.get_window_extent()
    mm = _label(ex, "matmul")
    l2 = _label(ex, "FA, L2")
    renderer = fig.canvas.get_renderer()
    text_box = lambda lab: Text.get_window_extent(lab, renderer)  # noqa: E731 - without the leader
    for lab, key in ((mm, "matmul"), (l2, "flash_l2")):
        assert lab.arrow_patch is not None  # leader line
        assert lab.xy == pytest.approx((ops[key].intensity, ops[key].attainable / 1e12))
        bb = text_box(lab)
        assert box.x0 <= bb.x0 and bb.x1 <= box.x1 + 1 and box.y0 <= bb.y0 and bb.y1 <= box.y1
    mx, my = to_px((ops["matmul"].intensity, ops["matmul"].attainable / 1e12))
    lx, ly = to_px((ops["flash_l2"].intensity, ops["flash_l2"].attainable / 1e12))
    mb, lb = text_box(mm), text_box(l2)
    assert mb.y1 < my and mb.x1 < mx  # below and left of matmul's dot
    assert lb.y0 > ly  # above FA-with-L2's dot
    if lb.x0 < mx < lb.x1:  # when it spans matmul's x (fp8, fp4)
        assert lb.y0 > my + 15  # it stands well clear of that dot


def test_key_explains_the_hollow_marker():
    assert "hollow" in _KEY and "FA, L2" in _KEY
    ex = RooflineExplorer()
    dot = next(
        l for l in ex.figure.axes[0].lines if l.get_marker() == "o" and l.get_markerfacecolor() == "white"
    )
    assert dot.get_xdata()[0] == pytest.approx(2048.0)


def test_labels_stay_off_the_lines_on_every_chip_and_dtype():
    """No operator label is crossed by the ridge line (the two with leader lines on the flat roof sit
    on a white box), covers a marker or another label; the region labels sit on a box drawn over
    your kernel's dotted line (fp32 on the H100: the line at 10
    FLOP/byte passes under "memory-bound", standard attention's 31 sits just right of the ridge)."""
    for gpu in gpus():
        for dtype in get_gpu(gpu).dtypes:
            ex = RooflineExplorer(gpu, dtype, 10.0)
            fig, ax = ex.figure, ex.figure.axes[0]
            fig.canvas.draw()
            renderer = fig.canvas.get_renderer()
            ridge = ax.transData.transform((roofline_points(gpu, dtype).ridge, 1.0))[0]
            labels = [
                (t.get_text(), Text.get_window_extent(t, renderer))
                for t in ax.texts
                if type(t).__name__ == "Annotation" and t.get_text()
            ]
            boxed = {t.get_text() for t in ax.texts if t.get_bbox_patch() is not None}
            dots = [
                ax.transData.transform((o.intensity, o.attainable / 1e12))
                for o in roofline_points(gpu, dtype).operators
            ]
            where = f"{gpu} {dtype}"
            for i, (text, b) in enumerate(labels):
                assert text in boxed or not b.x0 <= ridge <= b.x1, f"{where}: the ridge line crosses {text!r}"
                assert not any(b.x0 - 3 <= x <= b.x1 + 3 and b.y0 - 3 <= y <= b.y1 + 3 for x, y in dots), (
                    f"{where}: {text!r} covers a marker"
                )
                assert not any(b.overlaps(b2) for _, b2 in labels[i + 1 :]), f"{where}: {text!r} overlaps"
            user = next(ln for ln in ax.lines if ln.get_linestyle() == ":")
            for region in ("memory-bound", "compute-bound"):
                t = _label(ex, region)
                assert t.get_bbox_patch() is not None and t.get_zorder() > user.get_zorder(), region
