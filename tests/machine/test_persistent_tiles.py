"""`machine.schedule.persistent`: the persistent Gluon prefill's tile lists, checked against a
mask counted tile by tile, a greedy loop written here with heapq, and the list-scheduling bound."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from attnlab.machine.schedule.persistent import L2_BYTES, l2_section, persistent_tiles, tile_costs


def _visible_tiles(num_m, n_q, n_k, causal, bm, bn):
    """Per query block, the key tiles holding at least one key a row of the block sees (bottom-right
    causal alignment: row i sees keys j <= i + n_k - n_q), counted on the boolean mask itself."""
    rows, cols = np.arange(n_q)[:, None], np.arange(n_k)[None, :]
    seen = cols <= rows + n_k - n_q if causal else np.ones((n_q, n_k), bool)
    out = []
    for m in range(num_m):
        block = seen[m * bm : (m + 1) * bm]
        last = np.nonzero(block.any(0))[0]
        out.append(0 if last.size == 0 else last.max() // bn + 1)  # tiles 0 .. the last one reached
    return np.array(out)


@pytest.mark.parametrize(
    "n_q, n_k, causal", [(300, 300, True), (257, 1000, True), (1000, 300, True), (130, 77, False)]
)
def test_costs_are_the_key_tiles_the_mask_reaches_plus_one(n_q, n_k, causal):
    for bm, bn in ((128, 128), (128, 64), (64, 128)):
        num_m = -(-n_q // bm)
        want = _visible_tiles(num_m, n_q, n_k, causal, bm, bn) + 1
        assert tile_costs(num_m, n_q, n_k, causal, bm, bn).tolist() == want.tolist()


def _greedy(order, cost, programs):
    """Each tile in `order` to the least-loaded program, the lower index on ties (a plain heap)."""
    heap = [(0, p) for p in range(programs)]
    lists = [[] for _ in range(programs)]
    for t in order:
        load, p = heapq.heappop(heap)
        lists[p].append(int(t))
        heapq.heappush(heap, (load + int(cost[t % len(cost)]), p))
    return lists


@pytest.mark.parametrize("seed", range(6))
def test_every_tile_once_in_the_greedy_order_longest_first_by_section(seed):
    rng = np.random.default_rng(seed)
    heads = int(rng.choice([2, 4, 8]))
    bh = heads * int(rng.integers(1, 4))
    n_q = int(rng.integers(1, 900))
    n_k = n_q + int(rng.integers(-min(n_q - 1, 200), 300))
    causal = bool(rng.integers(0, 2))
    programs = int(rng.integers(1, 40))
    section = int(rng.choice([s for s in (1, 2, 4, 8) if heads % s == 0]))
    num_m = -(-n_q // 128)
    tiles, indptr = persistent_tiles(bh, num_m, n_q, n_k, causal=causal, programs=programs, section=section)
    assert tiles.dtype == np.int32 and indptr.dtype == np.int32 and len(indptr) == programs + 1
    assert indptr[0] == 0 and (np.diff(indptr) >= 0).all() and indptr[-1] == bh * num_m
    assert sorted(tiles.tolist()) == list(range(bh * num_m))  # every (bh, m) exactly once
    cost = _visible_tiles(num_m, n_q, n_k, causal, 128, 128) + 1
    if causal:  # sections of heads in turn; in one, the last query block first, heads in turn
        order = [(s * section + h) * num_m + m for s in range(bh // section) for m in reversed(range(num_m))
                 for h in range(section)]  # fmt: skip
    else:
        order = list(range(bh * num_m))
    lists = [tiles[a:b].tolist() for a, b in zip(indptr, indptr[1:])]
    assert lists == _greedy(order, cost, programs)
    loads = [sum(cost[t % num_m] for t in p) for p in lists]
    assert max(loads) <= cost.sum() * bh / programs + cost.max()  # list scheduling's bound


def test_l2_sections_fit_and_divide_the_heads():
    for heads in (1, 6, 32, 40):
        for group in (1, 4, 8):
            for n_k in (1, 2048, 8192, 65536, 1 << 20):
                s = l2_section(heads, group, n_k, 128)
                assert heads % s == 0 and s & (s - 1) == 0
                kv_heads = -(-s // group)  # at least one KV head's group, whether it fits or not
                assert s <= group or kv_heads * 2 * n_k * 128 * 2 <= L2_BYTES


@pytest.mark.parametrize(
    "kw, err, match",
    [
        ({"section": 3}, ValueError, "section=3 does not divide bh=8"),
        ({"causal": "True"}, TypeError, "causal"),
        ({"programs": 0}, ValueError, "programs"),
        ({"bh": "8"}, TypeError, "bh"),
        ({"n_q": 0}, ValueError, "n_q"),
    ],
)
def test_bad_input_is_refused_by_name(kw, err, match):
    args = {"bh": 8, "num_m": 2, "n_q": 200, "n_k": 200, "causal": True, "programs": 4, **kw}
    with pytest.raises(err, match=match):
        persistent_tiles(args.pop("bh"), args.pop("num_m"), args.pop("n_q"), args.pop("n_k"), **args)
