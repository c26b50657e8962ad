"""GPU specs and the roofline: the JSON is complete and sourced, the numbers the lecture uses come
out, the roofline terms are recomputed here by hand, and bad input names the offending value."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from attnlab.machine import hardware as hw
from attnlab.catalog import data_path
from attnlab.machine.hardware import (
    DTYPE_BYTES,
    GPU,
    attainable,
    get_gpu,
    gpus,
    peak,
    ridge_point,
    roofline_time,
)

REQUIRED = (
    "name",
    "sms",
    "hbm_bytes",
    "hbm_bandwidth",
    "sram_per_sm",
    "l2_bytes",
    "peak_flops",
    "sources",
    "notes",
)
NUMERIC = ("sms", "hbm_bytes", "hbm_bandwidth", "sram_per_sm", "l2_bytes")


def _raw():
    with open(data_path("gpus.json"), encoding="utf-8") as f:
        return json.load(f)["gpus"]


def _numeric_paths(obj, prefix=""):
    """Dotted paths of every number in a JSON object (lists of numbers count as one value)."""
    out = []
    for k, v in obj.items():
        path = f"{prefix}{k}"
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)) or (
            isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v)
        ):
            out.append(path)
        elif isinstance(v, dict) and k != "sources":
            out.extend(_numeric_paths(v, path + "."))
    return out


# --- the data file --------------------------------------------------------------------------------


def test_data_path_points_at_repository_data():
    p = data_path("gpus.json")
    assert p.is_file() and p.parent.name == "data"
    assert (p.parent.parent / "lib" / "attnlab" / "machine" / "hardware.py").is_file()
    with pytest.raises(FileNotFoundError, match="nope.json"):
        data_path("nope.json")


def test_json_has_the_required_chips():
    names = {e["name"] for e in _raw()}
    assert {"A100-80GB-SXM", "H100-SXM", "H200-SXM", "B200"} <= names
    assert gpus() == [e["name"] for e in _raw()]


@pytest.mark.parametrize("entry", _raw(), ids=lambda e: e["name"])
def test_every_entry_complete_positive_and_sourced(entry):
    for key in REQUIRED:
        assert key in entry, f"{entry['name']} lacks {key}"
    for key in NUMERIC:
        assert isinstance(entry[key], (int, float)) and entry[key] > 0, (entry["name"], key)
    assert {"fp32", "tf32", "fp16", "bf16"} <= set(entry["peak_flops"])
    assert all(v > 0 for v in entry["peak_flops"].values())
    assert set(entry["peak_flops"]) <= set(DTYPE_BYTES)
    assert len(entry["sources"]) >= 1
    assert any(s.get("url", "") and s["url"].startswith("https://") for s in entry["sources"])
    for s in entry["sources"]:
        assert s["document"].strip()
        assert s["url"] is None or s["url"].startswith("https://")
        assert s["supports"]
    # every number in the entry is backed by at least one source
    supported = {f for s in entry["sources"] for f in s["supports"]}
    missing = set(_numeric_paths(entry)) - supported
    assert not missing, f"{entry['name']}: no source for {sorted(missing)}"
    assert isinstance(entry["notes"], str) and entry["notes"].strip()


def test_lower_precision_is_never_slower_and_dtype_availability():
    for name in gpus():
        g = get_gpu(name)
        pf = g.peak_flops
        assert pf["fp32"] < pf["tf32"] < pf["bf16"] == pf["fp16"]
        if "fp8" in pf:
            assert pf["fp8"] == pytest.approx(2 * pf["bf16"], rel=0.01)
        if "fp4" in pf:
            assert pf["fp4"] == pytest.approx(2 * pf["fp8"], rel=0.01)
    assert "fp8" not in get_gpu("A100-80GB-SXM").peak_flops
    assert [n for n in gpus() if "fp4" in get_gpu(n).peak_flops] == ["B200"]


def test_sizes_are_plausible():
    # SRAM per SM between 100 KB and 1 MB, L2 between 10 and 500 MB, HBM between 16 and 512 GB
    for name in gpus():
        g = get_gpu(name)
        assert 100e3 < g.sram_per_sm < 1e6
        assert 10e6 < g.l2_bytes < 500e6
        assert 16e9 < g.hbm_bytes < 512e9
        assert 1e12 < g.hbm_bandwidth < 20e12
        assert 50 < g.sms < 300


def test_hbm_capacity_is_what_nvidia_smi_reports():
    """hbm_bytes is memory.total as nvidia-smi prints it (MiB): never above what a card reports.
    A100 80GB: 81,920 MiB (exactly 80 GiB); H100 80GB HBM3: 81,559 MiB; H200: 143,771 MiB
    (measured for this course); B200: 183,359 MiB."""
    mib = {"A100-80GB-SXM": 81_920, "H100-SXM": 81_559, "H200-SXM": 143_771, "B200": 183_359}
    for name, m in mib.items():
        assert get_gpu(name).hbm_bytes == m * 2**20, name
    assert get_gpu("H100").hbm_bytes / 2**30 == pytest.approx(79.65, abs=0.01)
    assert get_gpu("H200").hbm_bytes / 2**30 == pytest.approx(140.40, abs=0.01)
    assert 180e9 < get_gpu("B200").hbm_bytes < 180 * 2**30  # between decimal and binary "180 GB"
    for name in ("H100-SXM", "H200-SXM", "B200"):
        notes = get_gpu(name).notes
        assert "nvidia-smi" in notes and f"{mib[name]:,} MiB" in notes, name


def test_flashattention_paper_a100_figures():
    a100 = get_gpu("A100")
    assert a100.sms == 108
    assert a100.sram_per_sm == 192 * 1024
    paper = a100.extra["flashattention_paper"]
    assert tuple(paper["hbm_bandwidth_range"]) == (1.5e12, 2.0e12)
    assert tuple(paper["hbm_bytes_range"]) == (40e9, 80e9)
    assert a100.extra["sram_bandwidth"] == pytest.approx(19e12)
    assert 1.5e12 <= a100.hbm_bandwidth <= 2.1e12


# --- lookup ----------------------------------------------------------------------------------------


def test_get_gpu_case_insensitive_aliases_and_objects():
    g = get_gpu("H100-SXM")
    assert get_gpu("h100-sxm") is g
    assert get_gpu("H100 SXM") is g
    assert get_gpu("h100") is g
    assert get_gpu(g) is g
    assert isinstance(g, GPU)
    assert get_gpu("b200").name == "B200"


def test_gpu_is_frozen_and_hashable():
    g = get_gpu("H200")
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.sms = 1
    with pytest.raises(TypeError):
        g.peak_flops["bf16"] = 1.0
    assert {g: 1}[get_gpu("h200-sxm")] == 1


def test_json_loaded_once():
    hw._load.cache_clear()
    gpus()
    get_gpu("H100")
    peak("A100", "bf16")
    assert hw._load.cache_info().misses == 1


# --- peak, ridge point, roofline ------------------------------------------------------------------


def test_h100_bf16_peak_and_ridge_point():
    assert peak("H100-SXM", "bf16") == pytest.approx(989.4e12)
    assert get_gpu("H100-SXM").hbm_bandwidth == pytest.approx(3.35e12)
    r = ridge_point("H100-SXM")
    assert 290 <= r <= 300
    assert r == pytest.approx(989.4e12 / 3.35e12)
    assert ridge_point("H100-SXM", "fp8") == pytest.approx(2 * r, rel=0.01)


def test_ridge_point_is_peak_over_bandwidth_for_every_chip_and_dtype():
    for name in gpus():
        g = get_gpu(name)
        for dt, p in g.peak_flops.items():
            assert ridge_point(name, dt) == pytest.approx(p / g.hbm_bandwidth)


def test_dtype_bytes():
    assert dict(DTYPE_BYTES) == {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp4": 0.5}


def test_attainable_linear_below_ridge_and_flat_above():
    g = get_gpu("H100-SXM")
    bw, p = 3.35e12, 989.4e12
    r = p / bw
    below = np.array([0.0, 0.5, 1.0, 10.0, 100.0, 0.99 * r])
    np.testing.assert_allclose(attainable(below, g), below * bw, rtol=1e-12)
    above = np.array([1.01 * r, 400.0, 1e3, 1e6])
    np.testing.assert_allclose(attainable(above, g), np.full(4, p), rtol=1e-12)
    assert attainable(r, g) == pytest.approx(p)
    # doubling intensity doubles FLOP/s below the ridge, changes nothing above
    assert attainable(20.0, g) == pytest.approx(2 * attainable(10.0, g))
    assert attainable(2000.0, g) == attainable(1000.0, g)
    assert isinstance(attainable(10, "H100"), float)
    assert attainable(np.ones((2, 3)), "H100").shape == (2, 3)


def test_roofline_time_is_max_of_the_two_terms():
    rng = np.random.default_rng(0)
    flops = rng.uniform(1e9, 1e15, size=50)
    nbytes = rng.uniform(1e6, 1e12, size=50)
    for name, dt in (("H100-SXM", "bf16"), ("A100-80GB-SXM", "fp16"), ("B200", "fp4"), ("H200-SXM", "fp8")):
        g = get_gpu(name)
        expected = np.array([max(f / g.peak_flops[dt], b / g.hbm_bandwidth) for f, b in zip(flops, nbytes)])
        np.testing.assert_allclose(roofline_time(flops, nbytes, name, dt), expected, rtol=1e-12)
    # a 4096^3 bf16 matmul on the H100 is compute-bound: 2*4096^3 / 989.4e12 s
    t = roofline_time(2 * 4096**3, 3 * 4096**2 * 2, "H100")
    assert isinstance(t, float)
    assert t == pytest.approx(2 * 4096**3 / 989.4e12)
    # a pure copy is memory-bound: bytes / bandwidth
    assert roofline_time(0, 1e9, "H100") == pytest.approx(1e9 / 3.35e12)
    # broadcasting
    assert roofline_time(np.ones(4), 1.0, "H100").shape == (4,)


# --- bad input --------------------------------------------------------------------------------------


def test_unknown_gpu_names_value_and_lists_valid():
    with pytest.raises(ValueError, match="X100") as e:
        get_gpu("X100")
    for name in gpus():
        assert name in str(e.value)
    with pytest.raises(TypeError, match="42"):
        get_gpu(42)


def test_unknown_dtype_names_value_and_lists_available():
    with pytest.raises(ValueError, match="fp8") as e:
        peak("A100", "fp8")
    assert "bf16" in str(e.value) and "tf32" in str(e.value)
    with pytest.raises(ValueError, match="fp4"):
        ridge_point("H100", "fp4")
    with pytest.raises(ValueError, match="int3"):
        attainable(1.0, "H100", "int3")
    with pytest.raises(TypeError, match="16"):
        peak("H100", 16)


@pytest.mark.parametrize("bad", [-1.0, np.nan, np.inf, [1.0, -2.0]])
def test_negative_or_nonfinite_intensity_rejected(bad):
    with pytest.raises(ValueError, match="intensity"):
        attainable(bad, "H100")


def test_roofline_time_rejects_bad_values():
    with pytest.raises(ValueError, match="-5"):
        roofline_time(-5, 1, "H100")
    with pytest.raises(ValueError, match="bytes"):
        roofline_time(1, -1, "H100")
    with pytest.raises(TypeError, match="abc"):
        roofline_time("abc", 1, "H100")
