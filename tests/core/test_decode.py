"""Decode attention (lecture §4.1, §4.2, §4.4; exercises 4, 6, 7) against independent references.

- intensity: derived here from the FLOP and byte counts of §4.1, with an explicit head dim d;
- split-KV and cascade attention: against the float64 per-row reference (tests/refs/reference.py);
- the "SMs share the bandwidth" time model: re-implemented in reference.decode_time_ref from
  decode_time's docstring, with the GPU specs read from data/gpus.json by this file.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnlab.core.decode import (
    cascade_attention,
    cascade_intensity,
    intensity,
    split_bounds,
    split_kv_attention,
)
from attnlab.machine.hardware import SPLITS, best_split, decode_time, ridge_point, sm_share_time

from refs import reference as ref

F64_TOL = 1e-12
BF16 = 2  # bytes per element

with open(Path(__file__).resolve().parents[2] / "data" / "gpus.json", encoding="utf-8") as _f:
    GPU_SPECS = {g["name"]: (int(g["sms"]), float(g["hbm_bandwidth"])) for g in json.load(_f)["gpus"]}
H100 = GPU_SPECS["H100-SXM"]


# --- §4.1 arithmetic intensity -----------------------------------------------------------------


def _flops(g, l_qo, l_kv, d):
    """QK^T and PV: 2d FLOPs each per (query, key) pair, g l_qo queries, l_kv keys."""
    return 4 * g * l_qo * l_kv * d


def _bytes(g, l_qo, l_kv, d):
    """bf16: read Q and write O (g l_qo d each), read K and V (l_kv d each)."""
    return BF16 * (2 * g * l_qo * d + 2 * l_kv * d)


def _closed_form(g, l_qo, l_kv):
    return g * l_qo * l_kv / (g * l_qo + l_kv)


def test_intensity_formula_d_cancels():
    rng = np.random.default_rng(1)
    for _ in range(50):
        g, l_qo, l_kv = (
            int(x) for x in (rng.integers(1, 129), rng.integers(1, 17), rng.integers(1, 200_000))
        )
        ratios = [_flops(g, l_qo, l_kv, d) / _bytes(g, l_qo, l_kv, d) for d in (1, 64, 128, 576)]
        # d cancels: the same ratio for every head dim, and it is the closed form
        assert max(ratios) - min(ratios) <= 1e-12 * ratios[0]
        assert ratios[0] == pytest.approx(_closed_form(g, l_qo, l_kv), rel=1e-14)
        assert intensity(g, l_qo, l_kv) == pytest.approx(ratios[0], rel=1e-14)
        assert isinstance(intensity(g, l_qo, l_kv), float)


def test_intensity_vectorised():
    rng = np.random.default_rng(2)
    g = rng.integers(1, 129, size=(5, 1, 1)).astype(float)
    l_qo = rng.integers(1, 9, size=(1, 4, 1)).astype(float)
    l_kv = rng.integers(1, 100_000, size=(1, 1, 7)).astype(float)
    got = intensity(g, l_qo, l_kv)
    want = _flops(g, l_qo, l_kv, 128) / _bytes(g, l_qo, l_kv, 128)
    assert isinstance(got, np.ndarray) and got.shape == (5, 4, 7)
    assert np.allclose(got, want, rtol=1e-14, atol=0)
    flat = intensity([1, 8, 128], 1, 8192)
    assert np.allclose(flat, [_closed_form(x, 1, 8192) for x in (1, 8, 128)], rtol=1e-14)


def test_intensity_about_group_size():
    # l_kv >> g l_qo: I -> g from below
    for g in (1, 2, 4, 8, 32, 128):
        i = intensity(g, 1, 10**9)
        assert g * (1 - 1e-6) < i < g


def test_intensity_lecture_numbers():
    assert intensity(1, 1, 8192) == pytest.approx(1.0, abs=1e-3)  # MHA
    assert intensity(1, 1, 8192) < 1
    assert round(intensity(8, 1, 8192), 1) == 8.0  # exercise 4(a)
    assert intensity(8, 1, 8192) == pytest.approx(8 * 8192 / 8200, rel=1e-15)
    mla = intensity(128, 1, 8192)  # exercise 4(b)
    assert round(mla) == 126
    ridge = ridge_point("H100-SXM", "bf16")
    assert ridge == pytest.approx(295, abs=1)
    assert mla < ridge
    assert mla / intensity(8, 1, 8192) > 10  # "十几倍"


@pytest.mark.parametrize("batch", [1, 2, 7, 64, 256])
def test_batch_does_not_change_intensity(batch):
    # B requests, each with its own KV: FLOPs and bytes both scale by B
    g, l_qo, l_kv, d = 4, 1, 4096, 128
    total_flops = sum(_flops(g, l_qo, l_kv, d) for _ in range(batch))
    total_bytes = sum(_bytes(g, l_qo, l_kv, d) for _ in range(batch))
    assert intensity(g, l_qo, l_kv) == pytest.approx(total_flops / total_bytes, rel=1e-15)


def test_batch_of_mixed_lengths_stays_between_per_request_intensities():
    rng = np.random.default_rng(3)
    g, d = 8, 128
    l_kv = rng.integers(16, 32_768, size=32)
    agg = sum(_flops(g, 1, x, d) for x in l_kv) / sum(_bytes(g, 1, x, d) for x in l_kv)
    per = intensity(g, 1, l_kv)
    assert per.min() <= agg <= per.max() < g


@pytest.mark.parametrize(
    "name, args", [("g", (0, 1, 10)), ("l_qo", (1, -1, 10)), ("l_kv", (1, 1, 0)), ("l_kv", (1, 1, np.nan))]
)
def test_intensity_bad_input(name, args):
    with pytest.raises(ValueError, match=name):
        intensity(*args)


# --- split-KV ------------------------------------------------------------------------------------


def test_split_bounds_cover_without_gaps():
    rng = np.random.default_rng(10)
    cases = [(1, 1), (2, 2), (5, 2), (7, 7), (10, 3), (1000, 64), (32768, 33)]
    cases += [(int(n), int(rng.integers(1, n + 1))) for n in rng.integers(1, 5000, size=200)]
    for l_kv, splits in cases:
        b = split_bounds(l_kv, splits)
        assert len(b) == splits
        assert b[0][0] == 0 and b[-1][1] == l_kv
        assert all(x[1] == y[0] for x, y in zip(b, b[1:])), (l_kv, splits)
        sizes = [hi - lo for lo, hi in b]
        assert all(isinstance(v, int) for pair in b for v in pair)
        assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1, (l_kv, splits, sizes)
        assert sum(sizes) == l_kv


def _rand_qkv(rng, n_q, l_kv, d, d_v=None):
    d_v = d if d_v is None else d_v
    q = rng.standard_normal(d if n_q is None else (n_q, d))
    return q, rng.standard_normal((l_kv, d)), rng.standard_normal((l_kv, d_v))


@pytest.mark.parametrize("seed", range(10))
def test_split_kv_matches_reference(seed):
    rng = np.random.default_rng(20 + seed)
    l_kv = int(rng.integers(1, 90)) * 2 + 1  # odd
    d = int(rng.integers(1, 33))
    n_q = None if seed % 2 else int(rng.integers(1, 9))  # 1-D q and a GQA group
    q, k, v = _rand_qkv(rng, n_q, l_kv, d, int(rng.integers(1, 17)))
    want = ref.state_ref(q, k, v)
    splits_list = sorted({1, 2, l_kv, *rng.integers(1, l_kv + 1, size=4).tolist()})
    for splits in splits_list:
        o, lse, states = split_kv_attention(q, k, v, splits, return_states=True)
        assert len(states) == splits
        assert np.shape(o) == np.shape(want[0]) and np.shape(lse) == np.shape(want[1])
        assert np.max(np.abs(o - want[0])) <= F64_TOL, splits
        assert np.max(np.abs(lse - want[1])) <= F64_TOL, splits
        # a permuted merge order gives the same answer in float64
        o2, lse2 = split_kv_attention(q, k, v, splits, order=rng.permutation(splits))
        assert np.max(np.abs(o2 - want[0])) <= F64_TOL


def test_split_kv_per_chunk_states_are_chunk_attention():
    rng = np.random.default_rng(30)
    q, k, v = _rand_qkv(rng, 3, 23, 8)
    _, _, states = split_kv_attention(q, k, v, 4, return_states=True)
    for (lo, hi), (o, lse) in zip(split_bounds(23, 4), states):
        want = ref.state_ref(q, k[lo:hi], v[lo:hi])
        assert np.max(np.abs(o - want[0])) <= F64_TOL and np.max(np.abs(lse - want[1])) <= F64_TOL


@pytest.mark.parametrize(
    "splits, exc", [(0, ValueError), (-3, ValueError), (8, ValueError), (1.5, TypeError), ("2", TypeError)]
)
def test_split_kv_bad_splits(splits, exc):
    rng = np.random.default_rng(31)
    q, k, v = _rand_qkv(rng, None, 7, 4)
    with pytest.raises(exc, match="splits"):
        split_kv_attention(q, k, v, splits)
    with pytest.raises(exc, match="splits"):
        split_bounds(7, splits)


# --- §4.4 cascade attention -------------------------------------------------------------------


def _cascade_case(rng, n, prefix, unique, d, d_v=None):
    d_v = d if d_v is None else d_v
    queries = rng.standard_normal((n, d))
    pk, pv = rng.standard_normal((prefix, d)), rng.standard_normal((prefix, d_v))
    ukv = [(rng.standard_normal((u, d)), rng.standard_normal((u, d_v))) for u in unique]
    return queries, pk, pv, ukv


def _naive(queries, pk, pv, ukv):
    """Each request alone over prefix + its own KV; tokens counted request by request."""
    outs, lses, tokens = [], [], 0
    for i, (k, v) in enumerate(ukv):
        kk, vv = np.concatenate([pk, k]), np.concatenate([pv, v])
        tokens += kk.shape[0]
        o, lse = ref.state_ref(queries[i], kk, vv)
        outs.append(o)
        lses.append(lse)
    return np.array(outs), np.array(lses), tokens


@pytest.mark.parametrize("seed", range(6))
def test_cascade_matches_per_request_attention(seed):
    rng = np.random.default_rng(40 + seed)
    n = int(rng.integers(1, 9))
    prefix = int(rng.integers(0, 40)) * 2 + 1  # odd
    unique = rng.integers(0, 20, size=n).tolist()
    unique[0] = 0
    if n > 1:
        unique[1] = 1
    d = int(rng.integers(1, 17))
    queries, pk, pv, ukv = _cascade_case(rng, n, prefix, unique, d, int(rng.integers(1, 9)))
    res = cascade_attention(queries, pk, pv, ukv)
    o, lse, tokens_naive = _naive(queries, pk, pv, ukv)
    assert res.o.shape == o.shape and res.lse.shape == lse.shape
    assert np.max(np.abs(res.o - o)) <= F64_TOL
    assert np.max(np.abs(res.lse - lse)) <= F64_TOL
    tokens_read = pk.shape[0] + sum(k.shape[0] for k, _ in ukv)  # prefix once, then each own
    assert res.tokens_read == tokens_read
    assert res.tokens_naive == tokens_naive


def test_cascade_lecture_64_requests():
    rng = np.random.default_rng(50)
    n, prefix, unique = 64, 4096, 256
    queries, pk, pv, ukv = _cascade_case(rng, n, prefix, [unique] * n, 4)
    res = cascade_attention(queries, pk, pv, ukv)
    o, lse, tokens_naive = _naive(queries, pk, pv, ukv)
    assert np.max(np.abs(res.o - o)) <= F64_TOL and np.max(np.abs(res.lse - lse)) <= F64_TOL
    assert (res.tokens_read, res.tokens_naive) == (4096 + 64 * 256, tokens_naive) == (20_480, 278_528)
    saving = 1 - res.tokens_read / res.tokens_naive
    assert 0.925 <= saving <= 0.93
    ci = cascade_intensity(n, prefix, unique)
    assert ci["saving"] == pytest.approx(saving, rel=1e-15)
    assert (ci["tokens_cascade"], ci["tokens_naive"]) == (20_480, 278_528)


def test_cascade_exercise_7():
    rng = np.random.default_rng(51)
    queries, pk, pv, ukv = _cascade_case(rng, 8, 1000, [50] * 8, 8)
    res = cascade_attention(queries, pk, pv, ukv)
    o, lse, tokens_naive = _naive(queries, pk, pv, ukv)
    assert np.max(np.abs(res.o - o)) <= F64_TOL
    assert tokens_naive == 8 * 1050 == 8400
    assert res.tokens_naive == 8400 and res.tokens_read == 1000 + 8 * 50 == 1400
    assert round(100 * (1 - res.tokens_read / res.tokens_naive)) == 83
    ci = cascade_intensity(8, 1000, 50)
    assert (ci["tokens_naive"], ci["tokens_cascade"]) == (8400, 1400)
    assert round(100 * ci["saving"]) == 83
    # the prefix part behaves like a group size multiplied by n = 8
    assert ci["prefix"] == pytest.approx(_closed_form(4 * 8, 1, 1000), rel=1e-14)


def test_cascade_intensity_single_digits_to_hundreds():
    n, prefix, unique, g = 64, 4096, 256, 4
    ci = cascade_intensity(n, prefix, unique, g)
    assert ci["naive"] == pytest.approx(_closed_form(g, 1, prefix + unique), rel=1e-14)
    assert ci["prefix"] == pytest.approx(_closed_form(g, n, prefix), rel=1e-14)
    assert ci["unique"] == pytest.approx(_closed_form(g, 1, unique), rel=1e-14)
    assert ci["naive"] < 10  # single digits
    assert 200 < ci["prefix"] < ridge_point("H100-SXM")  # "两百多，接近屋脊点"


def test_cascade_bad_input():
    rng = np.random.default_rng(52)
    queries, pk, pv, ukv = _cascade_case(rng, 3, 5, [1, 2, 0], 4)
    with pytest.raises(ValueError, match="unique_kv"):
        cascade_attention(queries, pk, pv, ukv[:2])
    with pytest.raises(ValueError, match="unique_kv"):
        cascade_attention(queries, pk, pv, ukv + ukv[:1])
    with pytest.raises(ValueError, match="queries"):
        cascade_attention(queries[0], pk, pv, ukv[:1])
    with pytest.raises(ValueError, match="head dim"):
        cascade_attention(queries, pk[:, :3], pv, ukv)  # prefix head dim 3 vs 4
    bad = list(ukv)
    bad[1] = (rng.standard_normal((2, 5)), rng.standard_normal((2, 4)))
    with pytest.raises(ValueError, match="head dim"):
        cascade_attention(queries, pk, pv, bad)  # a unique head dim 5 vs 4


# --- §4.2 the simplified GPU -------------------------------------------------------------------


def _ref(batch, context, kv_heads=8, splits=1, gpu="H100-SXM", **kw):
    sms, bw = GPU_SPECS[gpu]
    return ref.decode_time_ref(batch, context, kv_heads, splits, sms=sms, bandwidth=bw, **kw)


def _check_against_ref(got, want):
    assert got.blocks == want["blocks"] and got.waves == want["waves"]
    for key in ("attn_time", "merge_time", "time", "utilization"):
        assert getattr(got, key) == pytest.approx(want[key], rel=1e-12, abs=0), key


def test_decode_time_matches_reference_random():
    rng = np.random.default_rng(60)
    names = sorted(GPU_SPECS)
    for _ in range(300):
        gpu = names[int(rng.integers(len(names)))]
        batch = int(rng.integers(1, 300))
        context = int(rng.integers(1, 70_000))
        kv_heads = int(rng.choice([1, 2, 4, 8, 16]))
        splits = int(rng.integers(1, min(context, 130) + 1))
        head_dim = int(rng.choice([64, 128, 256]))
        group = int(rng.choice([1, 4, 8]))
        dtype, nbytes = [("bf16", 2), ("fp8", 1), ("fp32", 4)][int(rng.integers(3))]
        got = decode_time(batch, context, kv_heads, splits, gpu, head_dim=head_dim, group=group, dtype=dtype)
        want = _ref(batch, context, kv_heads, splits, gpu, head_dim=head_dim, group=group, dtype_bytes=nbytes)
        _check_against_ref(got, want)
        assert (got.batch, got.context, got.kv_heads, got.splits) == (batch, context, kv_heads, splits)
        assert 0 < got.utilization <= 1


def test_sm_share_time_matches_reference_random():
    rng = np.random.default_rng(61)
    for name, (sms, bw) in GPU_SPECS.items():
        for _ in range(50):
            n_blocks = int(rng.integers(1, 5000))
            block_bytes = float(rng.uniform(0, 1e8))
            override = None if rng.random() < 0.5 else int(rng.integers(1, 300))
            w = sm_share_time(n_blocks, block_bytes, name, sms=override)
            s = sms if override is None else override
            waves = -(-n_blocks // s)
            block_time = block_bytes / (bw / s)
            assert w.waves == waves and w.blocks == n_blocks and w.sms == s
            assert w.block_time == pytest.approx(block_time, rel=1e-13)
            assert w.time == pytest.approx(waves * block_time, rel=1e-13)
            assert w.utilization == pytest.approx(n_blocks / (waves * s), rel=1e-15)
            assert w.utilization <= 1


def test_sm_share_time_wave_edges():
    sms, bw = H100
    for n, waves in [(1, 1), (sms - 1, 1), (sms, 1), (sms + 1, 2), (2 * sms, 2), (2 * sms + 1, 3)]:
        w = sm_share_time(n, 1e6, "H100-SXM")
        assert w.waves == waves, n
        assert w.time == pytest.approx(waves * 1e6 * sms / bw, rel=1e-14)


def test_lecture_batch1_32k():
    base = decode_time(1, 32768)  # Llama-3-8B: 8 KV heads
    _check_against_ref(base, _ref(1, 32768))
    assert base.blocks == 8 and base.waves == 1
    assert round(base.utilization, 2) == 0.06
    assert base.time == pytest.approx(661e-6, rel=2e-3)  # docstring: 661 us
    # the docstring's split: 16 chunks -> 128 blocks, 97 %, ~16x
    s16 = decode_time(1, 32768, splits=16)
    assert s16.blocks == 128 and round(s16.utilization, 2) == 0.97
    assert 15 <= base.time / s16.time <= 17
    # split-KV, best of 1..64
    runs = [decode_time(1, 32768, splits=s) for s in range(1, 65)]
    best = min(runs, key=lambda r: r.time)
    assert best.utilization > 0.9
    assert base.time / best.time >= 15
    s, runs2 = best_split(1, 32768, candidates=range(1, 65))
    assert s == best.splits and len(runs2) == 64


@pytest.mark.parametrize("context", [1024, 4096])
def test_lecture_large_batch_splitting_is_slower(context):
    one = decode_time(256, context, splits=1)
    many = decode_time(256, context, splits=64)
    _check_against_ref(many, _ref(256, context, splits=64))
    assert one.utilization > 0.9  # already enough blocks
    assert many.time > one.time


def test_exercise_6_best_split_is_8():
    s, runs = best_split(2, 16384)
    assert s == 8
    assert [r.splits for r in runs] == list(SPLITS) == [1, 2, 4, 8, 16, 32, 64]
    by = {r.splits: r for r in runs}
    for r in runs:
        _check_against_ref(r, _ref(2, 16384, splits=r.splits))
    assert by[8].blocks == 128 <= H100[0] and by[8].waves == 1
    for k in (16, 32, 64):
        assert by[k].waves > 1 and by[k].blocks > H100[0]
        assert by[k].attn_time == pytest.approx(by[8].attn_time, rel=1e-15)
        assert by[k].merge_time > by[8].merge_time
        assert by[k].time > by[8].time
    for k in (1, 2, 4):
        assert by[k].attn_time > by[8].attn_time


def test_utilization_never_exceeds_one():
    rng = np.random.default_rng(62)
    for _ in range(300):
        context = int(rng.integers(1, 200_000))
        r = decode_time(
            int(rng.integers(1, 1000)),
            context,
            int(rng.integers(1, 17)),
            int(rng.integers(1, min(context, 256) + 1)),
        )
        assert 0 < r.utilization <= 1
        assert r.blocks <= r.waves * H100[0]


def test_splitting_costs_at_most_the_merge():
    """Cutting the KV never makes the attention waves slower than not cutting it, up to the
    rounding of ceil(context / splits): attn(s) <= attn(1) * (context + s - 1) / context, and
    exactly attn(s) <= attn(1) when s divides the context. So time(s) <= attn(1) + merge(s)."""
    rng = np.random.default_rng(63)
    for _ in range(300):
        batch, heads = int(rng.integers(1, 300)), int(rng.choice([1, 2, 8, 16]))
        s = int(rng.integers(2, 129))
        context = int(rng.integers(s, 100_000))
        one = decode_time(batch, context, heads, 1)
        r = decode_time(batch, context, heads, s)
        assert r.attn_time <= one.attn_time * (context + s - 1) / context * (1 + 1e-12)
        c = (context // s) * s  # a context that s divides
        one, r = decode_time(batch, c, heads, 1), decode_time(batch, c, heads, s)
        assert r.attn_time <= one.attn_time * (1 + 1e-12)
        assert r.time <= (one.attn_time + r.merge_time) * (1 + 1e-12)


def test_merge_time_linear_in_splits():
    for batch, context, heads in [(1, 32768, 8), (2, 16384, 8), (16, 4096, 4), (3, 1000, 2)]:
        assert decode_time(batch, context, heads, 1).merge_time == 0.0
        m2 = decode_time(batch, context, heads, 2).merge_time
        assert m2 > 0
        for s in (2, 3, 4, 7, 8, 16, 64, 100):
            m = decode_time(batch, context, heads, s).merge_time
            assert m == pytest.approx(m2 * s / 2, rel=1e-14), s
        # and the documented byte count: o (head_dim fp32) + lse (fp32), written and read
        r = decode_time(batch, context, heads, 8, head_dim=64, group=2)
        assert r.merge_time == pytest.approx(2 * batch * heads * 2 * 8 * (64 + 1) * 4 / H100[1], rel=1e-14)


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"splits": 0}, "splits"),
        ({"splits": 33}, "splits"),
        ({"batch": 0}, "batch"),
        ({"context": 0}, "context"),
    ],
)
def test_decode_time_bad_input(kw, name):
    args = {"batch": 1, "context": 32, "splits": 1} | kw
    with pytest.raises(ValueError, match=name):
        decode_time(args["batch"], args["context"], splits=args["splits"])


def test_best_split_no_candidate():
    with pytest.raises(ValueError, match="context"):
        best_split(1, 1, candidates=(2, 4))


# --- decode_cost: FLOPs and bytes by hand; intensity is their ratio -------------------------------

from attnlab.core.decode import DecodeCost, decode_cost  # noqa: E402


@pytest.mark.parametrize("seed", range(6))
def test_decode_cost_matches_hand_formulas(seed):
    rng = np.random.default_rng(seed)
    for _ in range(50):
        g, l_qo, l_kv, d, batch = (
            int(x)
            for x in (
                rng.integers(1, 129),
                rng.integers(1, 9),
                rng.integers(1, 1 << 20),
                rng.choice([64, 96, 128, 576]),
                rng.integers(1, 257),
            )
        )
        c = decode_cost(g, l_qo, l_kv, d, batch=batch)
        assert isinstance(c, DecodeCost) and type(c.flops) is int and type(c.bytes) is int
        assert c.flops == batch * _flops(g, l_qo, l_kv, d)
        assert c.bytes == batch * _bytes(g, l_qo, l_kv, d)
        # intensity = flops / bytes exactly (same rational number, rounded once), any batch
        assert intensity(g, l_qo, l_kv) == c.flops / c.bytes == c.intensity
        assert intensity(g, l_qo, l_kv) == _closed_form(g, l_qo, l_kv)


@pytest.mark.parametrize("dtype_bytes", [1, 2, 4, 0.5])
def test_decode_cost_other_dtypes(dtype_bytes):
    c = decode_cost(8, 1, 8192, 128, dtype_bytes=dtype_bytes)
    assert c.flops == 4 * 8 * 8192 * 128
    assert c.bytes == dtype_bytes * (2 * 8 * 128 + 2 * 8192 * 128)
    assert type(c.bytes) is (int if isinstance(dtype_bytes, int) else float)
    assert intensity(8, 1, 8192, dtype_bytes=dtype_bytes) == c.flops / c.bytes


def test_decode_cost_arrays_broadcast_and_equal_scalars():
    g = np.array([1, 4, 8, 128])[:, None]
    l_kv = np.array([1, 17, 8192, 1 << 20])
    c = decode_cost(g, 2, l_kv, 128, batch=3)
    assert c.flops.shape == c.bytes.shape == (4, 4)
    assert c.flops.dtype == np.int64 and c.bytes.dtype == np.int64
    for i in range(4):
        for j in range(4):
            s = decode_cost(int(g[i, 0]), 2, int(l_kv[j]), 128, batch=3)
            assert (c.flops[i, j], c.bytes[i, j]) == (s.flops, s.bytes)
    assert np.array_equal(c.intensity, intensity(g, 2, l_kv))
    half = decode_cost([8, 8], 1, 7, 64, dtype_bytes=0.5)
    assert half.bytes.dtype == np.float64 and half.bytes.tolist() == [0.5 * (2 * 8 * 64 + 2 * 7 * 64)] * 2


def test_decode_cost_lecture_numbers():
    c = decode_cost(8, 1, 8192, 128)  # Llama-3-70B decode, one KV head, 8K context
    assert (c.flops, c.bytes) == (33_554_432, 4_198_400)
    assert round(c.intensity, 2) == 7.99
    mla = decode_cost(128, 1, 8192, 576)  # DeepSeek-V3's MLA as 128 heads on one KV
    assert round(mla.intensity) == 126


def test_split_bounds_exact_and_large():
    # ties go to the even edge, in integers: 10 * 1/4 = 2.5 -> 2, 10 * 3/4 = 7.5 -> 8
    assert split_bounds(10, 4) == [(0, 2), (2, 5), (5, 8), (8, 10)]
    n = 10**18 + 7  # beyond float64's exact integers
    b = split_bounds(n, 64)
    sizes = [hi - lo for lo, hi in b]
    assert b[0][0] == 0 and b[-1][1] == n and sum(sizes) == n and max(sizes) - min(sizes) <= 1


# --- the read-the-kernel functions are the code that runs -------------------------------------------


def test_split_kv_runs_attention_state_and_merge(monkeypatch):
    import attnlab.core.decode as dec
    import attnlab.core.softmax as sm

    calls = {"state": 0, "merge": 0}
    real_state, real_merge = dec.attention_state, sm.merge

    def state(*a, **k):
        calls["state"] += 1
        return real_state(*a, **k)

    def merge_(*a, **k):
        calls["merge"] += 1
        return real_merge(*a, **k)

    monkeypatch.setattr(dec, "attention_state", state)
    monkeypatch.setattr(sm, "merge", merge_)
    rng = np.random.default_rng(3)
    q, k, v = _rand_qkv(rng, 3, 101, 16, 5)
    o, lse = dec.split_kv_attention(q, k, v, 7)
    assert calls == {"state": 7, "merge": 6}
    want = ref.state_ref(q, k, v)
    assert np.max(np.abs(o - want[0])) <= 1e-14 and np.max(np.abs(lse - want[1])) <= 1e-13


def test_split_kv_and_merge_are_short_enough_to_read():
    import inspect
    from attnlab.core.softmax import merge

    for fn in (split_kv_attention, merge):
        n = len(inspect.getsource(fn).splitlines())
        assert 15 <= n <= 30, (fn.__name__, n)


# --- the split rule: the fewest splits within a margin of the fastest ---------------------------

from attnlab.machine.hardware import SPLIT_MARGIN, recommended_split  # noqa: E402


@pytest.mark.parametrize(
    "batch,context,kv_heads",
    [(1, 32768, 8), (2, 16384, 8), (256, 4096, 8), (256, 32768, 8), (16, 8192, 16), (1, 4096, 1)],
)
def test_recommended_split_is_fewest_within_margin(batch, context, kv_heads):
    splits, fastest, runs = recommended_split(batch, context, kv_heads, "H100")
    times = {s: decode_time(batch, context, kv_heads, s, "H100").time for s in SPLITS if s <= context}
    best = min(times.values())
    assert fastest == min(times, key=times.get) == best_split(batch, context, kv_heads, "H100")[0]
    within = [s for s, t in sorted(times.items()) if t <= best * (1 + SPLIT_MARGIN)]
    assert splits == within[0] and splits <= fastest
    assert [r.splits for r in runs] == sorted(times)


def test_recommended_split_cases_and_margin():
    assert recommended_split(1, 32768)[:2] == (16, 16)  # fill one wave: fastest too
    assert recommended_split(256, 32768)[:2] == (4, 16)  # 16 gains under 1 % over 4
    assert recommended_split(256, 4096)[:2] == (1, 8)  # 8 splits: 0.8 % faster than none
    assert recommended_split(256, 4096, margin=0)[0] == 8  # margin 0: the fastest itself
    with pytest.raises(ValueError, match="margin=1.5"):
        recommended_split(1, 4096, margin=1.5)
    with pytest.raises(TypeError, match="margin"):
        recommended_split(1, 4096, margin="0.01")
    with pytest.raises(TypeError, match="margin"):
        recommended_split(1, 4096, margin=True)
