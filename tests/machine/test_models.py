"""LLM shapes and the prefill cost model. The cost model is recomputed here from the formula with
hand-written standard/FA1 access counts (not through attnlab.core.iomodel), and checked against the
lecture's Llama-3-8B-on-H100 numbers."""

from __future__ import annotations

import dataclasses
import json
import math
import time

import numpy as np
import pytest

from attnlab.catalog import data_path
from attnlab.machine.hardware import get_gpu
from attnlab.machine.models import (
    Model,
    PrefillCost,
    attention_linear_crossover,
    get_model,
    linear_flops_per_token,
    models,
    prefill_cost,
    prefill_cost_curve,
)

REQUIRED = (
    "name",
    "layers",
    "hidden",
    "q_heads",
    "kv_heads",
    "head_dim",
    "intermediate",
    "vocab",
    "params",
    "source",
)
INTS = REQUIRED[1:-1]

# H100 SXM, written out so a wrong JSON value makes these tests fail
H100_BF16 = 989.4e12
H100_BW = 3.35e12
H100_HBM = 81_559 * 2**20  # nvidia-smi memory.total of an H100 80GB


def _raw():
    with open(data_path("models.json"), encoding="utf-8") as f:
        return json.load(f)["models"]


def _std(N, d):
    return 4 * N * d + 4 * N * N


def _fa1(N, d, M=100_000):
    """FA1 with the lecture's tiles and causal block skipping: K/V block j is visited by the query
    rows from B_r floor(j B_c / B_r) on."""
    bc = math.ceil(M / (4 * d))
    br = min(bc, d)
    return 2 * N * d + sum(N - br * (j * bc // br) for j in range(math.ceil(N / bc))) * (3 * d + 4)


def _by_hand(N, *, params=8.03e9, layers=32, q_heads=32, d=128, bpe=2, peak=H100_BF16, bw=H100_BW, M=100_000):
    """(compute, flash, standard) seconds, every kernel at its roofline, kernels in sequence."""
    lh = layers * q_heads
    linear, attn = 2 * params * N / peak, 2 * lh * N**2 * d / peak
    gemm = attn  # one full GEMM of Algorithm 0
    k1, k2, k3 = (
        lh * (2 * N * d + N * N) * bpe / bw,
        lh * 2 * N * N * bpe / bw,
        lh * (N * N + 2 * N * d) * bpe / bw,
    )
    flash = linear + max(attn, lh * _fa1(N, d, M) * bpe / bw)
    return linear + attn, flash, linear + max(gemm, k1) + k2 + max(gemm, k3)


def _check_fields(c, times, *, layers, q_heads, d, bpe=2, bw=H100_BW, M=100_000):
    """Every PrefillCost field against the hand formula; no field that is a time is negative."""
    compute, flash, standard = times
    assert c.compute_s == pytest.approx(compute, rel=1e-12)
    assert c.flash_s == pytest.approx(flash, rel=1e-12)
    assert c.standard_s == pytest.approx(standard, rel=1e-12)
    assert c.extra_io_s == pytest.approx(max(0.0, standard - flash), rel=1e-12, abs=1e-18)
    assert c.total_ratio == pytest.approx(standard / flash, rel=1e-12)
    assert c.standard_io_s == pytest.approx(layers * q_heads * _std(c.N, d) * bpe / bw, rel=1e-12)
    assert c.flash_io_s == pytest.approx(layers * q_heads * _fa1(c.N, d, M) * bpe / bw, rel=1e-12)
    assert c.standard_minus_flash_io_s == pytest.approx(c.standard_io_s - c.flash_io_s, rel=1e-9, abs=1e-18)
    assert c.flash_moves_more is (_fa1(c.N, d, M) > _std(c.N, d))
    for f in dataclasses.fields(c):
        if f.name.endswith("_s") and f.name != "standard_minus_flash_io_s":
            assert getattr(c, f.name) >= 0.0, f.name


# --- the data file --------------------------------------------------------------------------------


def test_json_has_the_required_models():
    names = {e["name"] for e in _raw()}
    assert {"Llama-3-8B", "Llama-3-70B", "Mistral-7B", "Gemma-2-9B"} <= names
    assert models() == [e["name"] for e in _raw()]


@pytest.mark.parametrize("entry", _raw(), ids=lambda e: e["name"])
def test_every_entry_complete_positive_and_sourced(entry):
    for key in REQUIRED:
        assert key in entry, f"{entry['name']} lacks {key}"
    for key in INTS:
        assert isinstance(entry[key], int) and entry[key] > 0, (entry["name"], key)
    assert entry["q_heads"] % entry["kv_heads"] == 0
    assert entry["source"].startswith("https://") and entry["source"].endswith("config.json")


# The dense models' parameter counts, recomputed from their shapes (untied LM head unless noted).
@pytest.mark.parametrize(
    "name,tied,norms_per_layer",
    [("Llama-3-8B", False, 2), ("Llama-3-70B", False, 2), ("Mistral-7B", False, 2), ("Gemma-2-9B", True, 4)],
)
def test_params_match_shapes(name, tied, norms_per_layer):
    m = get_model(name)
    h, d = m.hidden, m.head_dim
    attn = h * m.q_heads * d + 2 * h * m.kv_heads * d + m.q_heads * d * h
    mlp = 3 * h * m.intermediate
    emb = m.vocab * h * (1 if tied else 2)
    assert m.params == emb + m.layers * (attn + mlp + norms_per_layer * h) + h


def test_known_shapes_and_groups():
    l8 = get_model("Llama-3-8B")
    assert (l8.layers, l8.hidden, l8.q_heads, l8.kv_heads, l8.head_dim) == (32, 4096, 32, 8, 128)
    assert l8.params == pytest.approx(8.03e9, rel=1e-3)
    assert l8.group == 4
    assert get_model("Llama-3-70B").group == 8
    assert get_model("Mistral-7B").group == 4
    g2 = get_model("Gemma-2-9B")
    assert (g2.group, g2.head_dim, g2.q_heads * g2.head_dim) == (2, 256, 4096)
    ds = get_model("DeepSeek-V3")
    assert ds.group == 128 == ds.extra["mla_equivalent_group"]
    assert ds.head_dim == ds.extra["kv_lora_rank"] + ds.extra["qk_rope_head_dim"]
    assert ds.active_params < ds.params
    assert l8.active_params == l8.params


def test_get_model_lookup_and_frozen():
    m = get_model("Llama-3-8B")
    assert get_model("llama-3-8b") is m
    assert get_model("LLAMA_3_8B") is m
    assert get_model("Meta-Llama-3-8B") is m
    assert get_model(m) is m
    assert isinstance(m, Model)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.layers = 1


# --- prefill cost: the lecture's numbers -----------------------------------------------------------


def test_llama3_8b_h100_32k_matches_formula_and_lecture():
    N = 32768
    c = prefill_cost("Llama-3-8B", "H100-SXM", N)
    assert isinstance(c, PrefillCost)
    times = _by_hand(N, params=get_model("Llama-3-8B").params)
    assert c.N == N
    _check_fields(c, times, layers=32, q_heads=32, d=128)
    # the lecture's rounded figures: 0.82 s of compute, extra time past the compute, ~2.5x
    assert c.compute_s == pytest.approx(0.82, abs=0.01)
    assert 2.3 <= c.total_ratio <= 2.8
    assert c.extra_io_s > c.compute_s


def test_linear_flops_per_token_is_two_per_parameter():
    """One convention for notebooks 01 and 02: 2 x params, the input embedding included."""
    assert linear_flops_per_token("Llama-3-8B") == 2 * 8_030_261_248 == 16_060_522_496
    m = get_model("Llama-3-8B")
    assert m.vocab * m.hidden / m.params == pytest.approx(0.065, abs=0.001)  # the embedding share
    ds = get_model("DeepSeek-V3")
    assert linear_flops_per_token(ds) == 2 * ds.active_params < 2 * ds.params
    for name in models():
        assert linear_flops_per_token(name) == 2 * get_model(name).active_params


@pytest.mark.parametrize("N", [1, 1000, 32768])
def test_prefill_compute_uses_linear_flops_per_token(N):
    m = get_model("Llama-3-8B")
    c = prefill_cost(m, "H100-SXM", N)
    attn = 2 * m.layers * m.q_heads * N * N * m.head_dim
    assert c.compute_s == pytest.approx((linear_flops_per_token(m) * N + attn) / H100_BF16, rel=1e-12)
    curve = prefill_cost_curve(m, "H100-SXM", [N])
    assert curve["compute_s"][0] == pytest.approx(c.compute_s, rel=1e-12)


def test_attention_linear_crossover():
    n = attention_linear_crossover("Llama-3-8B")
    assert n == pytest.approx(8_030_261_248 / (32 * 32 * 128)) and round(n) == 61_266
    m = get_model("Llama-3-8B")
    # where prefill_cost's N^2 term equals its linear term
    assert 2 * m.layers * m.q_heads * n * n * m.head_dim == pytest.approx(linear_flops_per_token(m) * n)


def test_s_and_p_sizes_and_fit():
    c = prefill_cost("Llama-3-8B", "H100-SXM", 32768)
    assert c.s_bytes_per_layer == 32 * 32768**2 * 2 == 64 * 2**30
    assert c.s_bytes_per_layer == pytest.approx(68.7e9, rel=1e-3)
    assert c.sp_bytes_per_layer == 2 * c.s_bytes_per_layer
    assert c.fits is False
    assert c.sp_bytes_per_layer > H100_HBM
    small = prefill_cost("Llama-3-8B", "H100-SXM", 2048)
    assert small.s_bytes_per_layer == 32 * 2048**2 * 2
    assert small.fits is True


def test_crossover_between_8k_and_32k():
    at8 = prefill_cost("Llama-3-8B", "H100-SXM", 8192)
    at16 = prefill_cost("Llama-3-8B", "H100-SXM", 16384)
    at32 = prefill_cost("Llama-3-8B", "H100-SXM", 32768)
    assert at8.extra_io_s < at8.compute_s  # the crossing is near 10,300 tokens
    assert at16.extra_io_s > at16.compute_s and at32.extra_io_s > at32.compute_s


@pytest.mark.parametrize("N", [16384, 32768, 65536])
def test_extra_io_grows_as_n_squared(N):
    a = prefill_cost("Llama-3-8B", "H100-SXM", N).extra_io_s
    b = prefill_cost("Llama-3-8B", "H100-SXM", 2 * N).extra_io_s
    assert 3.9 <= b / a <= 4.1


@pytest.mark.parametrize("N", [1, 7, 100, 1000, 4096, 12345])
def test_formula_at_many_sizes(N):
    c = prefill_cost("Llama-3-8B", "H100-SXM", N)
    _check_fields(c, _by_hand(N, params=get_model("Llama-3-8B").params), layers=32, q_heads=32, d=128)
    if N <= 7:  # FA1's 3d + 4 per visit outweighs 4 N^2 at tiny N
        assert c.flash_moves_more and c.extra_io_s == 0.0 and c.total_ratio < 1


def test_gemma_2_9b_32k_about_even():
    """head_dim 256 at M = 100,000: B_c = 98, so FA1 with causal skipping moves about as much as
    standard attention, and the two prefills take about the same time."""
    m = get_model("Gemma-2-9B")
    N = 32768
    c = prefill_cost(m, "H100-SXM", N)
    assert (m.layers, m.q_heads, m.head_dim) == (42, 16, 256)
    _check_fields(
        c,
        _by_hand(N, params=m.params, layers=m.layers, q_heads=m.q_heads, d=m.head_dim),
        layers=42,
        q_heads=16,
        d=256,
    )
    assert abs(c.total_ratio - 1) < 0.05 and c.flash_io_hidden is False
    curve = prefill_cost_curve(m, "H100-SXM", [N])
    assert curve["standard_minus_flash_io_s"][0] == c.standard_minus_flash_io_s


@pytest.mark.parametrize("name", ["Llama-3-8B", "Gemma-2-9B", "DeepSeek-V3", "Llama-3-70B"])
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_curve_equals_scalar_exactly_every_field(name, dtype):
    rng = np.random.default_rng(len(name))
    Ns = np.unique(np.concatenate([[1, 2, 7, 1 << 24], rng.integers(1, 1 << 24, size=40)]))
    r = prefill_cost_curve(name, "H100", Ns, dtype=dtype)
    assert set(r) == {f.name for f in dataclasses.fields(PrefillCost)}
    assert r["N"].dtype == np.int64 and r["fits"].dtype == bool and r["flash_moves_more"].dtype == bool
    for i, n in enumerate(Ns.tolist()):
        c = prefill_cost(name, "H100", n, dtype=dtype)
        for f in dataclasses.fields(c):
            assert getattr(c, f.name) == r[f.name][i], (n, f.name)
        assert c.extra_io_s >= 0 and c.total_ratio > 0


def test_16m_tokens_is_quick():
    t = time.perf_counter()
    c = prefill_cost("Llama-3-8B", "H100-SXM", 1 << 24)
    r = prefill_cost_curve("Llama-3-8B", "H100-SXM", [1 << 24, 1 << 23])
    assert time.perf_counter() - t < 1.0
    _check_fields(c, _by_hand(1 << 24, params=get_model("Llama-3-8B").params), layers=32, q_heads=32, d=128)
    assert r["compute_s"][0] == c.compute_s


def test_other_models_gpus_dtypes_and_sram():
    m, g = get_model("Gemma-2-9B"), get_gpu("B200")
    N, M = 8192, 50_000
    c = prefill_cost(m, g, N, sram=M, dtype="fp8")
    times = _by_hand(
        N,
        params=m.params,
        layers=m.layers,
        q_heads=m.q_heads,
        d=m.head_dim,
        bpe=1,
        peak=g.peak_flops["fp8"],
        bw=g.hbm_bandwidth,
        M=M,
    )
    _check_fields(c, times, layers=m.layers, q_heads=m.q_heads, d=m.head_dim, bpe=1, bw=g.hbm_bandwidth, M=M)
    assert c.s_bytes_per_layer == m.q_heads * N * N * 1
    # a bigger SRAM means fewer FA1 passes, so more "extra" for standard attention
    more_sram = prefill_cost(m, g, N, sram=4 * M, dtype="fp8")
    assert more_sram.standard_minus_flash_io_s > c.standard_minus_flash_io_s
    assert more_sram.extra_io_s >= c.extra_io_s
    # the faster chip has less extra time at the same N
    assert (
        prefill_cost("Llama-3-8B", "H200", 32768).extra_io_s
        < prefill_cost("Llama-3-8B", "H100", 32768).extra_io_s
    )


def test_moe_uses_active_params():
    ds = get_model("DeepSeek-V3")
    c = prefill_cost(ds, "H100", 4096)
    compute = _by_hand(4096, params=37e9, layers=61, q_heads=128, d=576)[0]
    assert c.compute_s == pytest.approx(compute, rel=1e-12)


def test_result_is_frozen():
    c = prefill_cost("Llama-3-8B", "H100", 1024)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.N = 2


# --- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad,exc", [(0, ValueError), (-3, ValueError), (1.5, TypeError), ("1024", TypeError)]
)
def test_bad_n(bad, exc):
    with pytest.raises(exc, match=str(bad)):
        prefill_cost("Llama-3-8B", "H100", bad)


def test_unknown_model_gpu_dtype():
    with pytest.raises(ValueError, match="GPT-9") as e:
        prefill_cost("GPT-9", "H100", 1024)
    assert "Llama-3-8B" in str(e.value)
    with pytest.raises(ValueError, match="H900"):
        prefill_cost("Llama-3-8B", "H900", 1024)
    with pytest.raises(ValueError, match="fp4"):
        prefill_cost("Llama-3-8B", "H100", 1024, dtype="fp4")
    with pytest.raises(ValueError, match="int4"):
        prefill_cost("Llama-3-8B", "H100", 1024, dtype="int4")
    with pytest.raises(TypeError, match="None"):
        get_model(None)


def test_sram_too_small_names_it():
    with pytest.raises(ValueError, match="sram=100"):
        prefill_cost("Llama-3-8B", "H100", 1024, sram=100)
