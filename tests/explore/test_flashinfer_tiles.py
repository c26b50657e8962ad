"""Query tile sizes (lecture §5.5): `attnlab.machine.workload.tile_waste` and notebook 05's tile-size
explorer against counts made here: the rule written out from the lecture, tiles and idle rows
by filling each request's packed rows tile by tile, and the hand cases of the lecture. Nothing
below asks attnlab for an expected value."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.explore import EXPLORERS
from attnlab.explore.flashinfer import SIZES, tile_size_numbers, tile_size_table
from attnlab.machine.workload import tile_waste


def rule(avg, head_dim=128):
    """§5.5: average packed rows > 64 (and head dim < 256) -> 128; > 16 -> 64; else 16."""
    if avg > 64 and head_dim < 256:
        return 128
    return 64 if avg > 16 else 16


def fill(packed, tq):
    """(tiles, idle rows) of one request by handing out its rows one tile at a time."""
    tiles = idle = 0
    left = packed
    while left > 0:
        tiles += 1
        idle += max(tq - left, 0)
        left -= tq
    return tiles, idle


# --- the rule -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "avg,head_dim,want",
    [
        (1, 128, 16),
        (16, 128, 16),
        (17, 128, 64),
        (64, 128, 64),
        (65, 128, 128),
        (65, 256, 64),
        (4096, 256, 64),
        (65, 64, 128),
        (8, 256, 16),
    ],
)
def test_rule_table(avg, head_dim, want):
    assert rule(avg, head_dim) == want
    assert tile_waste([avg], 1, head_dim).tile_q == want


# --- hand cases from the lecture ------------------------------------------------------------------


def test_one_decode_request_in_a_16_row_tile_leaves_15_idle():
    w = tile_waste([1], group=1)
    assert (w.tile_q, w.tiles.tolist(), w.idle.tolist()) == (16, [1], [15])
    assert w.idle_fraction == 15 / 16


def test_decode_in_a_128_row_tile_leaves_127_idle():
    w = tile_waste([1], group=1, tile_q=128)
    assert (w.tiles.tolist(), w.idle.tolist()) == ([1], [127])


def test_gqa_group_of_8_fills_half_a_16_row_tile():
    w = tile_waste([1] * 5, group=8)
    assert w.tile_q == 16 and w.packed.tolist() == [8] * 5 and w.idle.tolist() == [8] * 5
    assert w.idle_fraction == 0.5


def test_prefill_of_129_rows_takes_two_128_row_tiles():
    w = tile_waste([129], group=1)
    assert (w.tile_q, w.tiles.tolist(), w.idle.tolist()) == (128, [2], [127])
    assert tile_waste([129], 1, tile_q=128).idle.tolist() == [127]


# --- every batch: rows counted tile by tile ---------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_tiles_and_idle_rows_by_filling(seed):
    rng = np.random.default_rng(seed)
    l_qo = rng.integers(1, 600, rng.integers(1, 30)).tolist()
    group = int(rng.choice([1, 2, 4, 8]))
    head_dim = int(rng.choice([64, 128, 256]))
    packed = [n * group for n in l_qo]
    for tile_q in (None, 16, 64, 128, 7):
        w = tile_waste(l_qo, group, head_dim, tile_q)
        tq = rule(sum(packed) / len(packed), head_dim) if tile_q is None else tile_q
        counts = [fill(p, tq) for p in packed]
        assert w.tile_q == tq and w.packed.tolist() == packed
        assert w.tiles.tolist() == [t for t, _ in counts]
        assert w.idle.tolist() == [i for _, i in counts]
        launched = sum(t for t, _ in counts) * tq
        assert w.idle_fraction == pytest.approx(sum(i for _, i in counts) / launched, rel=1e-15)
        for a in (w.packed, w.tiles, w.idle):
            assert not a.flags.writeable


def test_a_smaller_tile_never_idles_more_rows_but_launches_more_tiles():
    for dec, pre, length, g in [(32, 2, 512, 4), (64, 0, 1, 1), (3, 1, 129, 1), (0, 5, 100, 8)]:
        r = tile_size_numbers(dec, pre, length, g)
        assert np.all(np.diff(r.size_idle) >= 0) and np.all(np.diff(r.size_tiles) <= 0)
        packed = [g] * dec + [length * g] * pre
        for k, t in enumerate(SIZES):
            assert r.size_tiles[k] == sum(fill(p, t)[0] for p in packed)


# --- the explorer's numbers -------------------------------------------------------------------------


def test_numbers_of_the_default_mix():
    """32 decode (4 rows each at g = 4) + 2 prefill of 512 x 4 = 2048 rows: average 124.2 > 64."""
    r = tile_size_numbers(32, 2, 512, g=4, head_dim=128)
    assert r.avg_packed == pytest.approx((32 * 4 + 2 * 2048) / 34)
    assert r.rule == r.tile_q == 128 and not r.fixed
    assert int(r.tiles.sum()) == 32 + 2 * 16
    assert int(r.idle.sum()) == 32 * 124
    assert r.idle_fraction == pytest.approx(32 * 124 / (64 * 128))
    fixed = tile_size_numbers(32, 2, 512, g=4, tile=16)
    assert fixed.rule == 128 and fixed.tile_q == 16 and fixed.fixed
    assert fixed.idle_fraction == pytest.approx(32 * 12 / ((32 + 2 * 128) * 16))
    assert tile_size_numbers(32, 2, 512, g=4, head_dim=256).rule == 64


@pytest.mark.parametrize("g", [1, 2, 4, 8])
def test_one_decode_request_at_each_tile(g):
    assert tile_size_numbers(1, 0, 16, g).decode_idle == (16 - g, 64 - g, 128 - g)


@pytest.mark.parametrize(
    "dec,pre,want",
    [
        (64, 16, (8, 8)),
        (3, 16, (3, 13)),
        (0, 16, (0, 16)),
        (64, 0, (16, 0)),
        (5, 2, (5, 2)),
        (20, 3, (13, 3)),
    ],
)
def test_requests_shown_decode_first(dec, pre, want):
    r = tile_size_numbers(dec, pre, 100, 1)
    shown = r.shown.tolist()
    assert (sum(j < dec for j in shown), sum(j >= dec for j in shown)) == want
    assert shown == sorted(shown) and len(shown) <= 16


def test_table_lists_the_rule_for_typical_batches():
    text = tile_size_table()
    lines = text.splitlines()
    assert len(lines) == 2 + 5
    decode_g1 = lines[2].split()
    assert decode_g1[:3] == ["64", "decode", "1"] and decode_g1[4] == "16" and decode_g1[6] == "93.8%"
    assert "99.2%" in lines[2]  # 127 of 128 rows idle for every decode request
    assert lines[3].split()[6] == "50.0%"  # g = 8 fills half of each 16-row tile


# --- refused input, by name -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw,err,name",
    [
        (dict(g=0), ValueError, "g"),
        (dict(decode=-1), ValueError, "decode"),
        (dict(prefill=-2), ValueError, "prefill"),
        (dict(prefill_len=0), ValueError, "prefill_len"),
        (dict(head_dim=0), ValueError, "head_dim"),
        (dict(tile=0), ValueError, "tile"),
        (dict(tile="16"), TypeError, "tile"),
        (dict(g=True), TypeError, "g"),
        (dict(decode=2.5), TypeError, "decode"),
        (dict(decode=0, prefill=0), ValueError, "no requests"),
    ],
)
def test_numbers_refuse_bad_input(kw, err, name):
    with pytest.raises(err, match=name):
        tile_size_numbers(**kw)


@pytest.mark.parametrize(
    "args,err,name",
    [
        (([],), ValueError, "l_qo"),
        (([0],), ValueError, r"l_qo\[0\]"),
        (("12",), TypeError, "l_qo"),
        ((5,), TypeError, "l_qo"),
        (([1, 1.5],), TypeError, r"l_qo\[1\]"),
        (([1], 0), ValueError, "group"),
        (([1], 1, 0), ValueError, "head_dim"),
        (([1], 1, 128, 0), ValueError, "tile_q"),
    ],
)
def test_tile_waste_refuses_bad_input(args, err, name):
    with pytest.raises(err, match=name):
        tile_waste(*args)


# --- the explorer ---------------------------------------------------------------------------------


def test_explorer_draws_the_numbers():
    ex = EXPLORERS["tile_size"](decode=0, prefill=1, prefill_len=129, g=1, tile=16)
    assert ex.error is None and "T_q = 128" in ex.summary.value  # the rule, for 129 rows
    # 129 rows in 16-row tiles: 9 tiles over 144 rows, 15 idle; view 256 rows; 8 inner boundaries
    assert ex.ax.get_xlim() == (0, 256)
    assert len(ex.cuts.get_segments()) == 8
    (idle,) = ex.idle.get_paths()
    assert idle.vertices[:, 0].min() == 129 and idle.vertices[:, 0].max() == 144
    assert "15 of 144" in ex.summary.value
    ex.set(decode=64, prefill=0, tile="rule")
    assert ex.ax.get_title() == "64 decode, g = 1 (16 of 64 shown)"
    assert ex.ax_s.get_title() == "head dim 128, mean 1.0 rows → T_q = 16"
    assert "64 tiles" in ex.summary.value and "127 of 128" in ex.summary.value


def test_explorer_shows_an_empty_batch_as_an_error():
    ex = EXPLORERS["tile_size"]()
    ex.set(decode=0, prefill=0)
    assert ex.error and "no requests" in ex.error and ex._error_text.get_visible()
    ex.set(decode=1)
    assert ex.error is None and not ex._error_text.get_visible()


def test_explorer_refuses_values_its_controls_cannot_take():
    ex = EXPLORERS["tile_size"]()
    for kw, name in [
        (dict(g=0), "g"),
        (dict(g=3), "g"),
        (dict(decode=-1), "decode"),
        (dict(tile=32), "tile"),
        (dict(head_dim=96), "head_dim"),
    ]:
        with pytest.raises(ValueError, match=name):
            ex.set(**kw)
    assert ex.error is None


# --- the CUDA-graph mode ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "dec,pre,length,g", [(63, 1, 64, 4), (32, 2, 512, 4), (8, 0, 1, 8), (0, 3, 40, 1), (5, 1, 16, 2)]
)
def test_graph_mode_tiles_for_the_captured_worst_case(dec, pre, length, g):
    """Under a CUDA graph captured with this batch the tile is the rule's for one request holding
    every row but one per other request; every batch the graph can replay (same count, no more
    rows) fits the tiles the plan reserves, ceil(rows g / T_q) + n - 1."""
    r = tile_size_numbers(dec, pre, length, g, mode="cuda_graph")
    n, rows = dec + pre, dec + pre * length
    assert r.worst_packed == (rows - n + 1) * g and r.rule == rule((rows - n + 1) * g)
    assert r.batch_rule == rule(rows * g // n)
    want = [fill(q * g, r.rule) for q in [1] * dec + [length] * pre]
    assert int(r.tiles.sum()) == sum(t for t, _ in want) and int(r.idle.sum()) == sum(i for _, i in want)
    assert r.reserved == -(-rows * g // r.rule) + n - 1
    rng = np.random.default_rng(n)
    for _ in range(50):  # random batches the graph allows: n requests, <= rows
        cut = np.sort(rng.choice(np.arange(1, rows), n - 1, replace=False)) if n > 1 else np.array([], int)
        lens = np.diff(np.r_[0, cut, rows])
        assert sum(fill(int(q) * g, r.rule)[0] for q in lens) <= r.reserved


def test_graph_table_counts_by_filling():
    text = tile_size_table.__globals__["graph_mode_table"]()
    lines = text.splitlines()[2:]
    cases = [[1] * 64, [1] * 63 + [64], [1] * 32 + [512] * 2, [3] * 8]
    for line, l_qo in zip(lines, cases):
        cells = line.split()
        n, rows = len(l_qo), sum(l_qo)
        per, graph = rule(rows * 4 // n), rule((rows - n + 1) * 4)
        for t, idle in ((per, cells[-4]), (graph, cells[-2])):
            tiles, waste = zip(*(fill(q * 4, t) for q in l_qo))
            assert idle == f"{sum(waste) / (sum(tiles) * t):.0%}"
        assert (int(cells[-5]), int(cells[-3])) == (per, graph)
        assert cells[-1] == (str(rule(l_qo[0] * 4)) if len(set(l_qo)) == 1 else "-")


def test_explorer_left_ticks_are_quarters_of_the_view():
    ex = EXPLORERS["tile_size"](head_dim=256, g=8)
    lo, hi = ex.ax.get_xlim()
    assert list(ex.ax.get_xticks()) == list(np.linspace(0, hi, 5))
    ex.set(mode="cuda_graph", decode=63, prefill=1, prefill_len=64, head_dim=128, g=4)
    assert "graph" in ex.ax_s.get_title() and "T_q = 128" in ex.summary.value
