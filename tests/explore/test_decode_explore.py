"""Notebook 04's pure functions (attnlab.explore.decode), checked against calculations written out
here: the intensity and time model formulas by hand, attention by its definition, the cascade's
token counts by arithmetic. Nothing below calls attnlab.core.decode to get an expected value."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from attnlab.explore import decode as dx

H100 = dict(sms=132, bw=3.35e12, peak=989.4e12)
D = 128  # Llama-3-8B: head_dim 128


def intensity_hand(g, l_qo, l_kv, d=D):
    flops = 4 * g * l_qo * l_kv * d  # QK^T and PV, 2d each per (query head, key)
    nbytes = 2 * (g * l_qo * d + g * l_qo * d + l_kv * d + l_kv * d)  # Q in, O out, K in, V in; bf16
    return flops / nbytes


def decode_time_hand(batch, context, kv_heads, splits, *, sms=H100["sms"], bw=H100["bw"]):
    """(total s, attention s, merge s, utilization, blocks, waves) of the lecture's simplified GPU."""
    blocks = batch * kv_heads * splits
    chunk = math.ceil(context / splits)
    block_time = 2 * chunk * D * 2 / (bw / sms)  # K and V of one chunk at 1/sms of the bandwidth
    waves = math.ceil(blocks / sms)
    attn = waves * block_time
    q_heads = 32  # Llama-3-8B: kv_heads x group = 32 query heads
    merge = 2 * batch * q_heads * splits * (D + 1) * 4 / bw if splits > 1 else 0.0
    return attn + merge, attn, merge, blocks / (waves * sms), blocks, waves


# --- 4.1 intensity ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "g,l_qo,l_kv", [(1, 1, 8192), (8, 1, 8192), (128, 1, 8192), (4, 3, 128), (128, 16, 131072), (2, 16, 1000)]
)
def test_intensity_matches_the_hand_formula(g, l_qo, l_kv):
    r = dx.decode_intensity(g, l_qo, l_kv, 1)
    assert r.intensity == pytest.approx(intensity_hand(g, l_qo, l_kv), rel=1e-12)
    assert r.asymptote == g * l_qo
    assert r.ridge == pytest.approx(989.4e12 / 3.35e12)
    assert r.attainable == pytest.approx(min(H100["peak"], r.intensity * H100["bw"]))
    assert r.bound == ("memory-bound" if r.intensity < r.ridge else "compute-bound")
    assert r.refs["MHA"] == pytest.approx(intensity_hand(1, l_qo, l_kv))
    assert r.refs["MLA, g=128 view"] == pytest.approx(intensity_hand(128, l_qo, l_kv))
    ci = r.curve_i
    assert ci == pytest.approx([intensity_hand(g, l_qo, x) for x in r.curve_l], rel=1e-12)
    assert np.all(np.diff(ci) > 0) and ci[-1] < g * l_qo


def test_lecture_intensities():
    assert dx.decode_intensity(1, 1, 8192).intensity == pytest.approx(1.0, abs=1e-3)
    assert round(dx.decode_intensity(8, 1, 8192).intensity, 1) == 8.0  # 8 * 8192 / 8200
    mla = dx.decode_intensity(128, 1, 8192)
    assert round(mla.intensity) == 126 and mla.bound == "memory-bound"  # below the ridge 295
    text = dx.intensity_table()
    assert "Llama-3-70B" in text and " 8.0 " in text and " 126 " in text and "295" in text


@pytest.mark.parametrize("batch", [1, 2, 16, 256])
def test_batch_multiplies_flops_and_bytes_not_their_ratio(batch):
    one = dx.decode_intensity(8, 1, 8192, 1)
    r = dx.decode_intensity(8, 1, 8192, batch)
    assert r.intensity == one.intensity
    assert r.flops == pytest.approx(batch * 4 * 8 * 8192 * D)
    assert r.bytes == pytest.approx(batch * 2 * (2 * 8 * D + 2 * 8192 * D))
    assert r.flops / r.bytes == pytest.approx(one.intensity)
    n = dx.LINEAR_N
    assert r.linear == pytest.approx(2 * batch * n * n / (2 * (n * n + 2 * batch * n)))


def test_other_gpus_ridge():
    assert dx.decode_intensity(8, 1, 8192, 1, "A100").ridge == pytest.approx(312e12 / 2.039e12)


# --- 4.2 split-KV ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "batch,context,heads",
    [(1, 32768, 8), (2, 16384, 8), (16, 4096, 8), (256, 1024, 8), (3, 1000, 2), (1, 1024, 1)],
)
def test_split_plan_matches_the_time_model(batch, context, heads):
    p = dx.split_kv_plan(batch, context, heads, 1)
    assert [r.splits for r in p.runs] == [1, 2, 4, 8, 16, 32, 64]
    hand = {s: decode_time_hand(batch, context, heads, s) for s in (1, 2, 4, 8, 16, 32, 64)}
    for r in p.runs:
        t, attn, merge, util, blocks, waves = hand[r.splits]
        assert (r.blocks, r.waves) == (blocks, waves)
        assert r.time == pytest.approx(t, rel=1e-12)
        assert r.attn_time == pytest.approx(attn, rel=1e-12)
        assert r.merge_time == pytest.approx(merge, rel=1e-12, abs=1e-30)
        assert r.utilization == pytest.approx(util)
    assert p.best.splits == min(hand, key=lambda s: hand[s][0])
    assert p.speedup == pytest.approx(1.0)
    assert p.x_max == pytest.approx(max(v[0] for v in hand.values()) * 1e6)


def _area(x, y):
    """Shoelace area of a closed outline."""
    return 0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))


@pytest.mark.parametrize("batch,splits", [(1, 1), (1, 16), (2, 64), (16, 8), (256, 64)])
def test_occupancy_outline_holds_every_block(batch, splits):
    p = dx.split_kv_plan(batch, 32768, 8, splits)
    t, attn, _, _, blocks, waves = decode_time_hand(batch, 32768, 8, splits)
    x, y = p.occupancy
    bt = attn / waves * 1e6
    assert _area(x, y) == pytest.approx(blocks * bt, rel=1e-9)  # busy SM-time = blocks x block time
    assert y.max() == min(blocks, 132) and x.max() == pytest.approx(attn * 1e6)
    full, rem = divmod(blocks, 132)
    if rem:
        assert rem in y  # the last, partial wave


def test_lecture_split_numbers():
    one = dx.split_kv_plan(1, 32768, 8, 1).chosen
    assert one.blocks == 8 and round(100 * one.utilization) == 6
    p = dx.split_kv_plan(1, 32768, 8, 16)
    assert p.chosen.utilization > 0.95 and 15.5 < p.speedup < 16.5
    for context in (1024, 4096):  # batch 256: 64 splits slower than none
        q = dx.split_kv_plan(256, context, 8, 64)
        assert q.chosen.time > q.base.time
    q = dx.split_kv_plan(256, 32768, 8, 64)  # ... except at 32K, by the wave tail
    assert 0.98 < q.chosen.time / q.base.time < 0.99
    assert q.base.waves == 16 and q.base.blocks == 2048
    assert dx.split_kv_plan(2, 16384, 8, 1).best.splits == 8  # exercise 6: 2 x 8 x 8 = 128 <= 132


def test_split_tables():
    t = dx.split_table(context=4096)
    assert "context 4,096" in t and "82.6 µs (6%)" in t
    rows = dx.split_rows_table(2, 16384, 8)
    best = [line for line in rows.splitlines() if "fastest" in line and "<-" in line]
    assert len(best) == 1 and best[0].split()[0] == "8" and "128" in best[0]
    assert "recommended" in best[0]  # 8 splits: fastest and the fewest within 1 %
    tail = dx.split_rows_table(256, 32768, 8).splitlines()
    marked = {ln.split()[0]: ln.split("<- ")[1] for ln in tail if "<-" in ln}
    assert marked == {"4": "recommended", "16": "fastest"}
    assert "recommended: the fewest splits within 1% of the fastest" in tail[1]
    assert max(map(len, tail)) <= 100 and max(map(len, rows.splitlines())) <= 100


# --- 4.3 merge ----------------------------------------------------------------------------------


def _reference(seed):
    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal(64), rng.standard_normal((10_000, 64)), rng.standard_normal((10_000, 64))
    s = k @ q / 8.0
    p = np.exp(s - s.max())
    return q, k, v, (p / p.sum()) @ v


def _forward_by_hand(q, k, v, splits, dtype):
    """Chunk states and a left-to-right merge, written out from the definition."""
    q, k, v = (a.astype(dtype) for a in (q, k, v))
    edges = np.linspace(0, len(k), splits + 1).round().astype(int)
    o, lse = None, None
    for a, b in zip(edges[:-1], edges[1:]):
        s = (k[a:b] @ q) * dtype(1 / 8)
        m = s.max()
        e = np.exp(s - m)
        l = e.sum()
        oc, lc = (e @ v[a:b]) / l, m + np.log(l)
        if o is None:
            o, lse = oc, lc
        else:
            new = np.logaddexp(lse, lc)
            o = np.exp(lse - new) * o + np.exp(lc - new) * oc
            lse = new
    return o.astype(np.float64)


@pytest.mark.parametrize("splits", [1, 2, 8, 64, 255])
def test_merge_float64_equals_one_pass(splits):
    ref = _reference(0)[3]
    r = dx.merge_errors(splits, "float64", "reverse", 0, curve=False)
    assert np.all(r.fwd < 1e-14) and np.all(r.other < 1e-14)
    q, k, v, _ = _reference(0)
    hand = _forward_by_hand(q, k, v, splits, np.float64)
    assert np.abs(hand - ref).max() < 1e-14
    assert r.fwd.shape == (64,) and r.fwd_max == r.fwd.max()


@pytest.mark.parametrize("splits", [2, 8, 64])
def test_merge_float32_rounds_and_order_matters(splits):
    q, k, v, ref = _reference(0)
    r = dx.merge_errors(splits, "float32", "reverse", 0, curve=False)
    assert 1e-10 < r.fwd_max < 1e-6 and 1e-10 < r.other_max < 1e-6
    hand = _forward_by_hand(q, k, v, splits, np.float32)
    assert np.abs(hand - ref).max() < 1e-6  # same size as the explorer's
    assert r.diff.shape == (64,) and np.all(np.isfinite(r.diff))
    assert r.diff_max <= r.fwd_max + r.other_max  # triangle inequality


def test_merge_order_cases():
    assert dx.merge_errors(2, "float32", "reverse", 0, curve=False).diff_max == 0.0  # a (+) b = b (+) a
    assert dx.merge_errors(64, "float32", "forward", 0, curve=False).diff_max == 0.0
    assert dx.merge_errors(1, "float32", "random", 3, curve=False).diff_max == 0.0
    assert dx.merge_errors(64, "float32", "reverse", 0, curve=False).diff_max > 0.0
    a = dx.merge_errors(64, "float32", "random", 5, curve=False).other
    b = dx.merge_errors(64, "float32", "random", 5, curve=False).other
    assert np.array_equal(a, b)  # seeded: reproducible


def test_merge_curve_and_table():
    grid, fwd, oth, diff = dx.merge_errors(8, "float32", "reverse", 0).curve
    assert list(grid) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert diff[0] == 0.0 and np.all(fwd[1:] > 0)
    text = dx.merge_digits()
    lines = text.splitlines()[3:]
    assert [ln.split()[0] for ln in lines] == ["2", "8", "64"]
    assert all(re.fullmatch(r"\de-1[67]", ln.split()[1]) for ln in lines)


@pytest.mark.parametrize(
    "dtype,order,seed", [("float32", "reverse", 0), ("float32", "random", 3), ("float64", "random", 1)]
)
def test_merge_curve_equals_each_point_alone(dtype, order, seed):
    """The curve folds every split count in lockstep (one merge call a step for all of them); each
    of its points must be, bit for bit, the merge of that split count computed alone."""
    grid, fwd, oth, diff = dx.merge_errors(8, dtype, order, seed).curve
    for i, s in enumerate(grid):
        r = dx.merge_errors(int(s), dtype, order, seed, curve=False)
        assert (fwd[i], oth[i], diff[i]) == (r.fwd_max, r.other_max, r.diff_max), s
    ring = dx.merge_errors(100, dtype, order, seed)  # off the grid: inserted
    assert 100 in ring.curve[0] and ring.curve[2][list(ring.curve[0]).index(100)] == ring.other_max


def test_merge_table_states_bounds_not_digits():
    q, k, v, ref = _reference(0)
    rows = dx.merge_rows((2, 8, 64), 0)
    for r in rows:  # the rows against an independent merge
        hand = _forward_by_hand(q, k, v, r.splits, np.float32)
        assert np.abs(hand - ref).max() < 16 * 2.0**-24  # a merge written by hand keeps it too
        assert r.within_bounds and r.f64 < 16 * 2.0**-53 and r.f32 < 16 * 2.0**-24
    assert [r.orders_equal for r in rows] == [True, False, False]
    lines = dx.merge_table().splitlines()[4:]  # a caption of two lines, header, rule
    assert lines[0].split()[-2:] == ["bitwise", "equal"]
    assert all("< 1.8e-15 (16 u)" in ln and "< 9.5e-7 (16 u)" in ln for ln in lines)
    assert all("differ, < 9.5e-7 (16 u)" in ln for ln in lines[1:])
    assert not re.search(r"\de-(8|9|16)\b", dx.merge_table())  # no roundoff digit printed
    broken = dx.MergeRow(8, 1e-14, 1e-8, 0.0)  # a broken bound shows
    assert not broken.within_bounds and dx.merge_bounds.__dict__["_bounded"](1e-14, "float64").startswith(
        "1e-14"
    )


# --- 4.4 cascade --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n,prefix,unique,g", [(64, 4096, 256, 4), (8, 1000, 50, 4), (1, 256, 0, 1), (256, 32768, 4096, 16)]
)
def test_cascade_numbers_by_hand(n, prefix, unique, g):
    r = dx.cascade_numbers(n, prefix, unique, g)
    assert r.tokens_naive == n * (prefix + unique) == r.naive_prefix + r.naive_unique
    assert r.tokens_cascade == prefix + n * unique == r.cascade_prefix + r.cascade_unique
    assert r.saving == pytest.approx(1 - (prefix + n * unique) / (n * (prefix + unique)))
    assert r.i_prefix == pytest.approx(intensity_hand(g * n, 1, prefix))  # n g queries per KV
    assert r.i_naive == pytest.approx(intensity_hand(g, 1, prefix + unique))
    assert r.curve_i == pytest.approx([intensity_hand(g * m, 1, prefix) for m in r.curve_n])


def test_lecture_cascade_numbers():
    r = dx.cascade_numbers(64, 4096, 256, 4)
    assert round(100 * r.saving) == 93 and round(r.i_prefix) == 241 and round(r.i_naive) == 4
    e = dx.cascade_numbers(8, 1000, 50, 4)  # exercise 7
    assert (e.tokens_naive, e.tokens_cascade) == (8400, 1400) and round(100 * e.saving) == 83
    text = dx.cascade_check(8, 300, 20, d=16)
    assert "naive 2,560, cascade 460" in text
    assert "max |cascade - per-request attention| < 1.8e-15 (16 units of float64 roundoff)" in text
    c = dx.cascade_run(8, 300, 20, d=16)
    assert c.within_bound and c.max_diff < 16 * 2.0**-53
    assert (c.tokens_naive, c.tokens_read) == (8 * 320, 300 + 8 * 20)
    off = dx.CascadeCheck(8, 300, 20, 16, 1e-13, 2560, 460)  # a broken bound shows its value
    assert not off.within_bound and "= 1e-13, above the bound" in str(off)
    with pytest.raises(ValueError, match="prefix=0 and unique=0"):
        dx.cascade_run(2, 0, 0, d=4)
    with pytest.raises(TypeError, match="prefix"):
        dx.cascade_run(2, True, 3, d=4)


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: dx.decode_intensity(g=0), "g=0"),
        (lambda: dx.decode_intensity(l_kv=-5), "l_kv=-5"),
        (lambda: dx.decode_intensity(gpu="X100"), "gpu='X100'"),
        (lambda: dx.split_kv_plan(splits=3), "splits=3"),
        (lambda: dx.split_kv_plan(context=32, splits=64), "splits=64"),
        (lambda: dx.split_kv_plan(batch=0), "batch=0"),
        (lambda: dx.merge_errors(0), "splits=0"),
        (lambda: dx.merge_errors(20_000), "splits=20000"),
        (lambda: dx.merge_errors(8, "float16"), "dtype='float16'"),
        (lambda: dx.merge_errors(8, "float32", "sideways"), "order='sideways'"),
        (lambda: dx.merge_errors(8, seed=-1), "seed=-1"),
        (lambda: dx.cascade_numbers(n=0), "n=0"),
        (lambda: dx.cascade_numbers(unique=-1), "unique=-1"),
        (lambda: dx.cascade_numbers(prefix=0), "prefix=0"),
    ],
)
def test_bad_input_names_the_value(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- explorer behaviour the generic tests do not cover -------------------------------------------


def _marker(ax, marker):
    return next(ln for ln in ax.lines if ln.get_marker() == marker and len(ln.get_xdata()))


def test_batch_does_not_move_the_attention_point():
    ex = dx.IntensityExplorer()
    ax = ex.figure.axes[0]
    star = [np.array(a, dtype=float) for a in _marker(ax, "*").get_data()]
    lin = [np.array(a, dtype=float) for a in _marker(ax, "s").get_data()]
    ex.set(batch=256)
    assert all(np.array_equal(a, np.array(b, dtype=float)) for a, b in zip(star, _marker(ax, "*").get_data()))
    assert not np.array_equal(lin[0], np.array(_marker(ax, "s").get_xdata(), dtype=float))


def test_split_slider_only_blits():
    ex = dx.SplitKVExplorer(batch=1, context=32768).set(splits=8)  # first draw after layout
    full = ex.full_draws
    for s in (2, 4, 16, 64, 1):
        ex.set(splits=s)
    assert ex.full_draws == full
    assert "Best split count here: <b>16</b>" in ex.summary.value


def test_measured_tables_fit_and_agree_with_the_run_rows():
    """Notebook 04's two tables of the recorded run: at most 100 characters a line, no commit, and
    each split row's speedup and ratio worked out here from the run file's own times."""
    from attnlab.explore import measured

    run = measured.newest_run()
    sec = measured.section(run, "decode")
    text = dx.split_measured_table(sec)
    band = dx.bandwidth_table(run)
    for t in (text, band):
        assert max(map(len, t.splitlines())) <= 100 and "commit" not in t
    lines = [ln.split() for ln in text.splitlines() if re.match(r"\s*\d+\s+\d+\s+\d+\s+\d+\s", ln)]
    assert len(lines) == len(sec["rows"])
    for r, cells in zip(sec["rows"], lines):
        b, n, s = (r["shape"][k] for k in ("batch", "context", "splits"))
        base = next(
            x["time_us"] for x in sec["rows"] if x["shape"] == {"batch": b, "context": n, "splits": 1}
        )
        assert [int(c) for c in cells[:4]] == [b, n, s, r["extra"]["blocks"]]
        assert float(cells[7]) == pytest.approx(r["time_us"] / r["extra"]["model_us_measured_bw"], abs=0.005)
        assert float(cells[8]) == pytest.approx(base / r["time_us"], abs=0.005)
        assert float(cells[9]) == pytest.approx(r["bytes"] / r["time_us"] * 1e-6, abs=0.005)  # TB/s
    assert "1 x 32K" in band and "best / copy ceiling" in band
