"""Refusals and bounds of the numpy layer: silent wrong answers, sizes that cannot be met,
growth that is quadratic, unchecked types, and equality of the records that hold arrays.

Every case names the call, the exception and the parameter the message must name; answers that
used to be wrong are compared with an independent reference (Python ints, a direct formula).
"""

from __future__ import annotations

import re
import tracemalloc
import warnings

import ml_dtypes
import numpy as np
import pytest

from attnlab.machine.schedule import pieces as _pieces
from attnlab.core import lowprec as lp
from attnlab.core.paged import BSRLayout, PagedKVCache, to_bsr
from attnlab.machine.schedule import (
    fixed_size_workspace,
    plan_balanced,
    plan_fixed_split,
    plan_per_request,
    query_tile,
    run_plan,
)
from attnlab.machine.workload import lengths, tile_waste
from attnlab.core.variants import (
    Variant,
    alibi,
    causal,
    rope,
    sigmoid,
    sink_window,
    sliding_window,
    soft_cap,
    tile_mask,
    variant_mask,
)

INT32_MAX = 2**31 - 1


def _raises(exc, word, fn, /, *args, **kwargs):
    """fn(*args, **kwargs) raises exc whose message names `word` as a word."""
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    assert re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", str(info.value)), str(info.value)
    return str(info.value)


# --- 1. silent wrong answers -----------------------------------------------------------------------


def _decode(rng, lens, kv_heads, group, d):
    q = rng.standard_normal((len(lens), kv_heads * group, d))
    k = [rng.standard_normal((kv_heads, n, d)) for _, n in lens]
    v = [rng.standard_normal((kv_heads, n, d)) for _, n in lens]
    return q, k, v


def test_run_plan_refuses_arrays_the_plan_was_not_made_for():
    rng = np.random.default_rng(0)
    p = plan_balanced([(1, 100)], kv_heads=1, num_ctas=4)
    q, k, v = _decode(rng, [(1, 200)], 1, 1, 8)
    _raises(ValueError, "k[0]", run_plan, p, q, k, v)  # 200 keys, plan has 100
    q, k, v = _decode(rng, [(1, 100)], 1, 1, 8)
    _raises(ValueError, "v[0]", run_plan, p, q, k, [v[0][:, :99]])
    _raises(ValueError, "k", run_plan, p, q, k + k, v + v)  # two requests for one
    _raises(ValueError, "q", run_plan, p, np.concatenate([q, q]), k, v)  # batch 2 for 1
    _raises(ValueError, "q", run_plan, p, q[:, :, :4], k, v)  # d 4 against k's 8
    p2 = plan_balanced([(1, 100), (1, 50)], kv_heads=2, num_ctas=4, group=2)
    q, k, v = _decode(rng, [(1, 100), (1, 50)], 2, 2, 8)
    _raises(ValueError, "q", run_plan, p2, q[:, :2], k, v)  # 2 heads for 2 x 2
    _raises(ValueError, "k[1]", run_plan, p2, q, [k[0], k[0]], v)  # request 1 has 50 keys
    mixed = plan_balanced([(3, 100), (1, 50)], kv_heads=2, num_ctas=4)  # packed rows 3 and 1
    _raises(ValueError, "run_plan", run_plan, mixed, np.zeros((2, 6, 8)), k, v)


def test_run_plan_reads_every_key_of_the_matching_arrays():
    rng = np.random.default_rng(1)
    lens = [(1, 100), (1, 37)]
    q, k, v = _decode(rng, lens, 2, 3, 4)
    p = plan_balanced(lens, kv_heads=2, num_ctas=5, group=3)
    got = run_plan(p, q, k, v)
    for i in range(2):  # by definition, float64
        for h in range(6):
            s = k[i][h // 3] @ q[i, h] / 2.0
            w = np.exp(s - s.max())
            np.testing.assert_allclose(got[i, h], w @ v[i][h // 3] / w.sum(), rtol=1e-12, atol=1e-14)


def test_bsr_seq_lens_past_int32_are_refused_and_near_it_exact():
    msg = _raises(ValueError, "page_size", BSRLayout, [0, 4096], np.zeros(4096, int), [1], 2**20, 1)
    assert "int32" in msg
    _raises(ValueError, "page_size", BSRLayout, [0, 32769], np.zeros(32769, int), [1], 2**16, 1)
    lay = BSRLayout([0, 32768, 32769], np.zeros(32769, int), [2**16 - 1, 5], 2**16, 1)
    want = [2**16 * 32767 + 2**16 - 1, 5]  # Python ints
    assert want[0] == INT32_MAX
    assert lay.seq_lens().tolist() == want
    _raises(ValueError, "page_size", BSRLayout, [0, 1], [0], [1], 2**31, 1)


def test_tile_waste_and_lengths_bound_their_sizes():
    _raises(ValueError, "group", tile_waste, [4], group=2**62, tile_q=16)
    _raises(ValueError, "group", tile_waste, [2**16], group=2**16, tile_q=16)  # 2^32 packed rows
    _raises(ValueError, "tile_q", tile_waste, [4], tile_q=2**40)
    w = tile_waste([2**15, 1], group=2**16 - 1, tile_q=2**20)
    packed = [2**15 * (2**16 - 1), 2**16 - 1]
    assert w.packed.tolist() == packed
    assert w.idle.tolist() == [-(-n // 2**20) * 2**20 - n for n in packed]
    for kw in (dict(mean=2**62), dict(max_len=2**62), dict(l_qo=2**40)):
        _raises(ValueError, next(iter(kw)), lengths, "zipf", 200, seed=0, **kw)
    _raises(ValueError, "batch", lengths, "constant", 2**40, seed=0)


def test_zipf_lengths_at_the_int32_limit_are_exact():
    # draws reach ~1e11; times mean / 4 they wrapped int64; Python ints are the reference
    got = lengths("zipf", 4096, seed=0, mean=INT32_MAX, max_len=INT32_MAX)
    z = np.random.default_rng(0).zipf(1.5, 4096)
    scale = INT32_MAX // 4
    assert [n for _, n in got] == [min(int(x) * scale, INT32_MAX) for x in z]


def test_fp8_saturates_to_its_largest_finite_value():
    x = np.array([500.0, -1e4, 460.0, 449.0, 3.0])
    assert lp.quantise(x, "fp8_e4m3", scale=1.0).tolist() == [448.0, -448.0, 448.0, 448.0, 3.0]
    assert lp.quantise(x, "fp4_e2m1", scale=1.0).tolist() == [6.0, -6.0, 6.0, 6.0, 3.0]
    big = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    got = lp.quantise(np.array([1e30]), "bf16", scale=1e-10)  # x / scale beyond float32
    assert np.isfinite(got).all() and got[0] == np.float32(big) * np.float32(1e-10)


def test_quantise_of_tiny_values_and_large_blocks_stays_finite():
    x = np.array([1e-44, -5e-45, 0.0])  # amax / 448 underflows
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = lp.quantise(x, "fp8_e4m3")
    assert np.isfinite(got).all() and got[2] == 0 and got[0] > 0 > got[1]
    y = np.random.default_rng(2).standard_normal((5, 3))
    assert np.array_equal(lp.quantise(y, "fp8_e4m3", block=2**62), lp.quantise(y, "fp8_e4m3"))
    assert lp.quantise(np.zeros((0, 3)), "fp8_e4m3", block=4).shape == (0, 3)
    _raises(ValueError, "x", lp.quantise, np.array([1e300]))
    _raises(ValueError, "scale", lp.quantise, np.array([1.0]), scale=1e-300)
    _raises(ValueError, "scale", lp.quantise, np.array([1.0]), scale=1e300)


def test_paged_cache_refuses_values_its_dtype_cannot_hold():
    c = PagedKVCache(8, 4, 2, dtype=np.float16)
    msg = _raises(ValueError, "k", c.add, np.full((3, 2), 1e6), np.ones((3, 2)))
    assert "float16" in msg and "6.55e+04" in msg
    rid = c.add(np.full((3, 2), 65504.0), np.ones((3, 2)))  # float16's max is kept
    _raises(ValueError, "v", c.append, rid, np.ones((1, 2)), np.full((1, 2), -1e5))
    assert c.seq_len(rid) == 3 and np.isfinite(c.gather(rid)[0]).all()
    assert c.num_free() == 7
    c32 = PagedKVCache(8, 4, 2, dtype=np.float32)
    _raises(ValueError, "k", c32.add, np.full((1, 2), 1e300), np.ones((1, 2)))


# --- 2. growth -------------------------------------------------------------------------------------


def test_a_million_tokens_at_page_size_one():
    n, d = 10**6, 2
    c = PagedKVCache(n + 5, 1, d, seed=3)
    k = np.arange(n * d, dtype=np.float64).reshape(n, d)
    a = c.add(k[:3], -k[:3])
    rid = c.add(k, -k)
    c.append(a, k[3:5], -k[3:5])
    kk, vv = c.gather(rid)
    assert np.array_equal(kk, k) and np.array_equal(vv, -k)
    assert np.array_equal(c.gather(a)[0], k[:5])
    assert c.num_free() == 0
    table = c.block_table(rid)
    assert len(table) == n and len(set(table) | set(c.block_table(a))) == n + 5


def test_writes_page_by_page_match_a_token_loop():
    rng = np.random.default_rng(4)
    for bs in (1, 3, 8):
        c = PagedKVCache(64, bs, 2, seed=1)
        ref = {}
        base = c.add(rng.standard_normal((5, 2)), rng.standard_normal((5, 2)))
        forks = [c.fork(base) for _ in range(2)]
        for r in [base] + forks:
            ref[r] = [c.gather(r)[0][i] for i in range(5)]
        for r, m in [(forks[0], 1), (forks[1], 2 * bs + 1), (base, bs), (forks[0], 7)]:
            x = rng.standard_normal((m, 2))
            c.append(r, x, -x)
            ref[r] += list(x)
        for r, rows in ref.items():
            kk, vv = c.gather(r)
            assert np.array_equal(kk, np.array(rows)) and np.array_equal(vv[5:], -np.array(rows)[5:])


def test_to_bsr_of_twenty_thousand_requests():
    n = 20_000
    c = PagedKVCache(2 * n, 2, 1, seed=5)
    ones = np.ones((1, 1))
    rids = [c.add(np.ones((1 + i % 3, 1)), np.ones((1 + i % 3, 1))) for i in range(n)]
    c.append(rids[0], ones, ones)
    lay = to_bsr(c, rids)
    tables = [c.block_table(r) for r in rids]
    assert lay.kv_indices.tolist() == [b for t in tables for b in t]
    assert lay.seq_lens().tolist() == [c.seq_len(r) for r in rids]


def test_an_unknown_rid_names_few_of_many_requests():
    c = PagedKVCache(2000, 1, 1)
    for _ in range(1000):
        c.add(np.ones((1, 1)), np.ones((1, 1)))
    msg = _raises(ValueError, "rid", c.seq_len, 5000)
    assert "5000" in msg and "1,000 requests" in msg and len(msg) < 200


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: PagedKVCache(1 << 20, 1 << 10, 128), "num_blocks"),
        (lambda: PagedKVCache(1 << 24, 1 << 12, 1, dtype=np.float32), "num_blocks"),
        (
            lambda: fixed_size_workspace(plan_balanced([(1, 10)], kv_heads=1, num_ctas=2), 2**20, 2**20),
            "max_ctas",
        ),
        (
            lambda: fixed_size_workspace(plan_balanced([(1, 10)], kv_heads=1, num_ctas=2), 4, 4, 2**40),
            "max_outputs",
        ),
        (lambda: lp.outlier_inputs(n=65536, d=4096), "n"),
        (lambda: variant_mask(causal(), 10**6, 10**6), "n_q"),
        (lambda: tile_mask(causal(), 10**6, 10**6, 1, 1), "block_r"),
        (
            lambda: BSRLayout(np.arange(1025), np.zeros(1024, int), np.ones(1024, int), 2**30, 1).to_scipy(),
            "page_size",
        ),
        (lambda: plan_fixed_split([(1, INT32_MAX)] * 8, chunk=1, kv_heads=1, num_ctas=4), "chunk"),
        (lambda: plan_balanced([(1, 10)], kv_heads=2**40, num_ctas=4), "kv_heads"),
        (lambda: plan_balanced([(1, 10)], kv_heads=1, num_ctas=2**40), "num_ctas"),
        (lambda: plan_per_request([(INT32_MAX, 10)] * 8, kv_heads=8, num_ctas=4, tile_q=1), "tile_q"),
    ],
)
def test_sizes_that_cannot_be_met_are_refused_before_allocating(call, name):
    msg = _raises(ValueError, name, call)
    assert "valid" in msg


def test_attention64_works_in_row_blocks(monkeypatch):
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((2048, 8)) for _ in range(3))
    s = q @ k.T / np.sqrt(8)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    want = w @ v / w.sum(axis=1, keepdims=True)
    del s, w
    monkeypatch.setattr(lp, "_ROWS_BYTES", 1 << 20)  # 64 rows a block: 1 MiB of scores
    tracemalloc.start()
    try:
        got = lp.attention64(q, k, v)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    assert peak < 8 << 20  # the whole score matrix is 32 MiB


# --- 3. unchecked or mis-typed ---------------------------------------------------------------------


def test_attention64_checks_its_inputs():
    ok = np.ones((3, 4))
    _raises(ValueError, "q", lp.attention64, np.full((3, 4), np.nan), ok, ok)
    _raises(ValueError, "v", lp.attention64, ok, ok, np.full((3, 4), np.inf))
    _raises(ValueError, "k", lp.attention64, ok, np.ones((3, 5)), ok)
    _raises(ValueError, "v", lp.attention64, ok, ok, np.ones((2, 4)))
    _raises(ValueError, "q", lp.attention64, np.ones((2, 3, 4)), ok, ok)
    _raises(TypeError, "k", lp.attention64, ok, "keys", ok)
    _raises(ValueError, "k", lp.lowprec_attention, ok, np.ones((3, 5)), ok)


def test_plan_time_and_query_tile_refuse_bools_and_zeros():
    p = plan_balanced([(1, 100), (1, 300)], kv_heads=2, num_ctas=4)
    _raises(TypeError, "head_dim", p.time, head_dim=True)
    _raises(ValueError, "head_dim", p.time, head_dim=0)
    _raises(ValueError, "head_dim", p.time, head_dim=2**40)
    _raises(TypeError, "dtype_bytes", p.time, dtype_bytes=np.True_)
    _raises(ValueError, "dtype_bytes", p.time, dtype_bytes=0.3)
    _raises(ValueError, "dtype_bytes", p.time, dtype_bytes=2**40)
    assert p.time(head_dim=256) > p.time(head_dim=128) > 0
    _raises(TypeError, "avg_packed_qo_len", query_tile, np.True_)
    _raises(TypeError, "avg_packed_qo_len", query_tile, True)
    _raises(ValueError, "avg_packed_qo_len", query_tile, 0.0)
    assert query_tile(np.float64(17.0)) == 64


def test_fixed_split_refuses_a_chunk_that_is_not_a_count():
    lens = [(1, 100), (1, 30)]
    _raises(TypeError, "chunk", plan_fixed_split, lens, chunk="balanced", kv_heads=1, num_ctas=4)
    _raises(TypeError, "chunk", plan_fixed_split, lens, chunk=np.array([8]), kv_heads=1, num_ctas=4)
    _raises(TypeError, "chunk", plan_fixed_split, lens, chunk=np.array([8, 9]), kv_heads=1, num_ctas=4)
    _raises(TypeError, "chunk", plan_fixed_split, lens, chunk=True, kv_heads=1, num_ctas=4)


def test_zero_cost_plans_report_zero_utilization_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = plan_balanced([(1, 5), (1, 9)], kv_heads=2, num_ctas=3, alpha=0, beta=0)
        assert p.utilization == 0.0 and p.makespan == 0


def test_bsr_pages_index_is_checked():
    lay = BSRLayout([0, 2, 3], [4, 1, 0], [1, 2], 4, 8)
    assert lay.pages(np.int64(1)).tolist() == [0] and lay.pages(0).tolist() == [4, 1]
    for bad in (-1, 2):
        _raises(ValueError, "i", lay.pages, bad)
    _raises(TypeError, "i", lay.pages, True)
    _raises(TypeError, "i", lay.pages, 0.5)


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: lp.random_orthogonal(4, True), "rng"),
        (lambda: lp.random_orthogonal(4, np.True_), "rng"),
        (lambda: lp.random_orthogonal(4, "0"), "rng"),
        (
            lambda: lp.lowprec_attention(
                np.ones((2, 4)), np.ones((2, 4)), np.ones((2, 4)), transform=True, seed=True
            ),
            "seed",
        ),
        (
            lambda: lp.lowprec_attention(np.ones((2, 4)), np.ones((2, 4)), np.ones((2, 4)), seed=np.True_),
            "seed",
        ),
        (lambda: lp.outlier_inputs(seed=True), "seed"),
        (lambda: lp.attention_error(seed=np.True_), "seed"),
        (lambda: lengths("uniform", 4, seed=np.True_), "seed"),
        (lambda: PagedKVCache(4, 4, 4, seed=True), "seed"),
    ],
)
def test_seeds_refuse_bools(call, name):
    _raises(TypeError, name, call)


def test_seeds_and_generators_still_work():
    m = lp.random_orthogonal(8, 3)
    assert np.array_equal(m, lp.random_orthogonal(8, np.random.default_rng(3)))
    np.testing.assert_allclose(m @ m.T, np.eye(8), atol=1e-12)


@pytest.mark.parametrize("dtype", ["foo", None, int, bool, "int32", object])
def test_paged_cache_dtype_is_named(dtype):
    msg = _raises(TypeError, "dtype", PagedKVCache, 4, 4, 4, dtype=dtype)
    assert repr(dtype) in msg


def test_variant_names_and_parameter_bounds():
    _raises(ValueError, "name", Variant, name="")
    _raises(ValueError, "name", Variant, name="   ")
    _raises(TypeError, "name", Variant, name=3)
    for call, name in [
        (lambda: sliding_window(2**70), "w"),
        (lambda: sink_window(2**70, 4), "sinks"),
        (lambda: sink_window(1, 2**40), "w"),
        (lambda: soft_cap(1e-300), "c"),
        (lambda: rope(1e-300), "theta"),
        (lambda: alibi(1e300), "slope"),
        (lambda: sigmoid(1e300), "bias"),
    ]:
        _raises(ValueError, name, call)
    assert np.array_equal(variant_mask(sliding_window(INT32_MAX), 3, 5), variant_mask(causal(), 3, 5))
    far = Variant(name="far", logits_mask=lambda qi, kj: kj > qi - 2**70)  # beyond int64
    _raises(ValueError, "logits_mask", variant_mask, far, 3, 5)


# --- records that hold arrays: equality --------------------------------------------------------------


def test_records_holding_arrays_compare_as_wholes():
    a = BSRLayout([0, 2, 3], [4, 1, 0], [1, 2], 4, 8)
    assert a == BSRLayout(np.array([0, 2, 3]), [4, 1, 0], [1, 2], 4, 8)
    assert a != BSRLayout([0, 2, 3], [4, 1, 0], [1, 3], 4, 8)
    assert a != BSRLayout([0, 2, 3], [4, 1, 0], [1, 2], 4, 9)
    assert a != "layout"
    w = tile_waste([1, 1, 129])
    assert w == tile_waste([1, 1, 129]) and w != tile_waste([1, 2, 129])
    p = plan_balanced([(1, 100), (1, 30)], kv_heads=2, num_ctas=4)
    ws = fixed_size_workspace(p, 4, 8)
    assert ws == fixed_size_workspace(p, 4, 8)
    assert ws != fixed_size_workspace(p, 4, 9)
    assert ws != fixed_size_workspace(plan_balanced([(1, 100), (1, 31)], kv_heads=2, num_ctas=4), 4, 8)
    s = _pieces.split([(20, 5), (2, 7)], 2, 4, 1, 2, 1, 1, "balanced")
    assert s == _pieces.split([(20, 5), (2, 7)], 2, 4, 1, 2, 1, 1, "balanced")
    assert s != _pieces.split([(20, 5), (2, 8)], 2, 4, 1, 2, 1, 1, "balanced")
    for rec in (a, w, ws, s):
        with pytest.raises(TypeError):
            hash(rec)


def test_paged_cache_refuses_int64_extremes_its_dtype_cannot_hold():
    c = PagedKVCache(8, 4, 2, dtype=np.float16)
    low = np.full((1, 2), np.iinfo(np.int64).min)  # abs() of it wraps
    _raises(ValueError, "k", c.add, low, np.ones((1, 2)))
    rid = c.add(np.full((1, 2), -65504), np.ones((1, 2), np.int64))
    assert c.gather(rid)[0].tolist() == [[-65504.0, -65504.0]]


def test_functors_that_return_the_wrong_thing_are_named():
    from attnlab.core.variants import variant_attention

    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((6, 4)) for _ in range(3))
    short = Variant(name="short", logits_mask=lambda qi, kj: np.ones(3, bool))
    _raises(ValueError, "logits_mask", variant_mask, short, 4, 5)
    _raises(ValueError, "logits_mask", variant_attention, q, k, v, short)
    words = Variant(name="words", query_transform=lambda x, pos: "rotated")
    _raises(TypeError, "query_transform", variant_attention, q, k, v, words)
    shout = Variant(name="shout", logits_transform=lambda s, qi, kj: [["a"]])
    _raises(TypeError, "logits_transform", variant_attention, q, k, v, shout)
    wide = Variant(name="wide", key_transform=lambda x, pos: np.ones((len(x), 5)))
    _raises(ValueError, "key_transform", variant_attention, q, k, v, wide)


def test_paged_attention_refuses_score_matrices_past_the_limit():
    from attnlab.core.paged import bsr_attention, composable_attention

    c = PagedKVCache(2**14, 2**10, 1, dtype=np.float16)
    rid = c.add(np.zeros((2**23, 1)), np.zeros((2**23, 1)))  # 8 Mi keys
    lay = to_bsr(c, [rid])
    q = np.zeros((2**10, 1))
    assert "request 0" in _raises(ValueError, "bsr_attention", bsr_attention, q, c, lay, qo_indptr=[0, 2**10])
    _raises(ValueError, "composable_attention", composable_attention, q, c, [rid], qo_indptr=[0, 2**10])
    one = bsr_attention(np.ones((1, 1)), c, lay)  # one row: 8 Mi scores
    assert one.tolist() == [[0.0]]


def test_a_layout_older_than_a_free_is_refused():
    from attnlab.core.paged import bsr_attention

    c = PagedKVCache(16, 4, 2, seed=2)
    rng = np.random.default_rng(8)
    a, b = (c.add(rng.standard_normal((6, 2)), rng.standard_normal((6, 2))) for _ in range(2))
    lay = to_bsr(c, [a, b])
    q = rng.standard_normal((2, 2))
    before = bsr_attention(q, c, lay)
    c.free(b)
    _raises(ValueError, "layout", bsr_attention, q, c, lay)
    again = bsr_attention(q[:1], c, to_bsr(c, [a]))
    assert np.array_equal(again[0], before[0])


def test_the_free_list_of_the_largest_pool_is_an_array():
    tracemalloc.start()
    try:
        c = PagedKVCache(1 << 24, 1, 1, dtype=np.float16)  # the most blocks allowed
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert c.num_free() == 1 << 24
    assert peak < 600 << 20  # pools 64 MiB, int64 refs, order and stack 128 MiB each
    a = c.add(np.ones((3, 1)), np.ones((3, 1)))
    b = c.fork(a)
    c.free(a)
    assert c.num_free() == (1 << 24) - 3  # b still holds them
    c.free(b)
    assert c.num_free() == 1 << 24
