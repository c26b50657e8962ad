"""FlashInfer's two-tile-class persistent plan (`TwoStageHolisticPlan`) against a simulation of
its rules written here with plain loops, read from scheduler.cuh and not from the planner: the
two classes (packed rows > 16: 128-row tiles), the chunk length from all the tiles' KV tokens
(at least 128, else a multiple of 256; halved for the 128-row class when there are two or more
KV heads), the causal end of each tile, the items in FlashInfer's order each to the least-loaded
CTA with a heap, the cost 2 x tile rows + chunk tokens."""

from __future__ import annotations

import heapq
import re

import numpy as np
import pytest

from attnlab.machine.schedule import fixed_size_workspace, plan_balanced, plan_holistic, run_plan
from attnlab.machine.workload import lengths


def _simulate(lens, kv_heads, num_ctas, group, causal):
    """(items, loads, (L_128, L_16)) by the rules, one loop per level as the source has them;
    an item is (request, kv_head, q_start, q_end, kv_start, kv_end, cost, cta)."""

    def tile_of(lq):
        return 128 if lq * group > 16 else 16

    def end_of(lq, lk, t, n_tiles, tq):
        if not causal or t + 1 == n_tiles:
            return lk
        reach = lk - lq + (((t + 1) * tq) + group - 1) // group
        return max(min(reach, lk), 0)

    work = 0
    for lq, lk in lens:
        tq = tile_of(lq)
        n_tiles = (lq * group + tq - 1) // tq
        for t in range(n_tiles):
            work += end_of(lq, lk, t, n_tiles, tq)
    x = max((work * kv_heads + num_ctas - 1) // num_ctas, 1)
    limit = 128
    if x > 128:
        limit = 256
        while limit < x:
            limit += 256
    limits = {128: limit // min(kv_heads, 2), 16: limit}
    heap = [(0, c) for c in range(num_ctas)]
    loads = [0] * num_ctas
    items = []
    for cls in (128, 16):
        for r, (lq, lk) in enumerate(lens):
            if tile_of(lq) != cls:
                continue
            packed, n_tiles = lq * group, (lq * group + cls - 1) // cls
            for t in range(n_tiles):
                left, start = end_of(lq, lk, t, n_tiles, cls), 0
                while True:
                    take = min(left, limits[cls])
                    for h in range(kv_heads):
                        load, c = heapq.heappop(heap)
                        cost = 2 * cls + take
                        items.append(
                            (r, h, t * cls, min((t + 1) * cls, packed), start, start + take, cost, c)
                        )
                        heapq.heappush(heap, (load + cost, c))
                        loads[c] += cost
                    left, start = left - take, start + take
                    if left == 0:
                        break
    return items, loads, (limits[128], limits[16])


def _columns(p):
    return list(
        zip(
            p.request.tolist(),
            p.kv_head.tolist(),
            p.q_start.tolist(),
            p.q_end.tolist(),
            p.kv_start.tolist(),
            p.kv_end.tolist(),
            p.cost.tolist(),
            p.cta.tolist(),
        )
    )


@pytest.mark.parametrize("seed", range(25))
def test_holistic_plan_is_the_simulated_rules_item_by_item(seed):
    rng = np.random.default_rng(3100 + seed)
    for _ in range(8):
        b = int(rng.integers(1, 7))
        lens = [
            (int(rng.choice([1, 1, 1, 2, 3, 5, 17, 40, 130])), int(rng.integers(1, 1500))) for _ in range(b)
        ]
        kv_heads, group = int(rng.integers(1, 5)), int(rng.choice([1, 2, 4, 8]))
        num_ctas, causal = int(rng.choice([1, 2, 3, 7, 16, 64, 264])), bool(rng.random() < 0.5)
        p = plan_holistic(lens, kv_heads=kv_heads, num_ctas=num_ctas, group=group, causal=causal)
        items, loads, chunks = _simulate(lens, kv_heads, num_ctas, group, causal)
        assert _columns(p) == items, (lens, kv_heads, num_ctas, group, causal)
        assert p.loads.tolist() == loads and p.chunks == chunks
        assert p.makespan == max(loads)
        assert p.tile_rows.tolist() == [128 if lens[r][0] * group > 16 else 16 for r, *_ in items]


def test_chunk_rule_by_hand():
    """One prefill chunk (64 queries, g = 4: 256 rows, two 128-row tiles over 2,048 keys) and three
    decode steps of 1,000 keys, 2 KV heads on 16 CTAs: W = 2 x 2,048 + 3 x 1,000 = 7,096 tokens,
    ceil(7,096 x 2 / 16) = 887 -> 1,024 (a multiple of 256); the 128-row class takes 1,024 // 2."""
    p = plan_holistic([(1, 1000)] * 3 + [(64, 2048)], kv_heads=2, num_ctas=16, group=4)
    assert p.chunks == (512, 1024)
    assert len(p.work) == (2 * 4 + 3) * 2
    small = plan_holistic([(1, 10)], kv_heads=8, num_ctas=132)
    assert small.chunks == (64, 128)  # at least 128, halved for the 128-row class


def test_cost_counts_the_tiles_rows_not_the_packed_rows():
    """A decode step of g = 4 fills 4 rows of its 16-row tile, but its item costs 2 x 16 + l_kv;
    Algorithm 1 charges 2 x 4 + l_kv for the same item."""
    p = plan_holistic([(1, 100)], kv_heads=1, num_ctas=1, group=4)
    q = plan_balanced([(1, 100)], kv_heads=1, num_ctas=1, group=4)
    assert p.cost.tolist() == [2 * 16 + 100] and q.cost.tolist() == [2 * 4 + 100]


def test_every_key_of_every_row_once_and_the_causal_tiles_stop_at_their_diagonal():
    lens = [(40, 300), (1, 77), (3, 5), (200, 200)]
    for causal in (False, True):
        p = plan_holistic(lens, kv_heads=2, num_ctas=5, group=2, causal=causal)
        for r, (lq, lk) in enumerate(lens):
            seen = np.zeros((2, lq * 2, lk), int)
            for w in p.work:
                if w.request == r:
                    seen[w.kv_head, w.q_rows.start : w.q_rows.stop, w.kv_start : w.kv_end] += 1
            assert seen.max() == 1
            rows = np.arange(lq * 2) // 2  # packed row -> query index
            need = (
                np.arange(lk)[None, :] <= rows[:, None] + lk - lq if causal else np.ones((lq * 2, lk), bool)
            )
            assert not (need & (seen[0] == 0)).any(), "a visible key left out"
            if not causal:
                assert seen.min() == 1


def test_a_decode_holistic_plan_runs_and_packs():
    """run_plan and fixed_size_workspace take the holistic plan as any other: its output equals
    float64 attention by definition, and its merge groups are its outputs."""
    rng = np.random.default_rng(5)
    lens = [(1, int(n)) for n in rng.integers(50, 900, 5)]
    kv_heads, group, d = 2, 4, 16
    p = plan_holistic(lens, kv_heads=kv_heads, num_ctas=6, group=group)
    q = rng.standard_normal((len(lens), kv_heads * group, d))
    k = [rng.standard_normal((kv_heads, n, d)) for _, n in lens]
    v = [rng.standard_normal((kv_heads, n, d)) for _, n in lens]
    o = run_plan(p, q, k, v)
    for i in range(len(lens)):
        for j in range(kv_heads * group):
            s = k[i][j // group] @ q[i, j] / np.sqrt(d)
            w = np.exp(s - s.max())
            assert np.abs(o[i, j] - (w / w.sum()) @ v[i][j // group]).max() < 1e-12
    ws = fixed_size_workspace(p, 6, 64)
    assert ws.num_outputs == p.num_outputs == len(lens) * kv_heads


def test_longtail_batch_with_a_prefill_chunk_tiles_by_class():
    lens = [(512, 1024)] + lengths("longtail", 63, seed=0)
    p = plan_holistic(lens, kv_heads=8, num_ctas=132, group=4)
    q = plan_balanced(lens, kv_heads=8, num_ctas=132, group=4)
    assert q.tile_q == 64  # (512 x 4 + 63 x 4) // 64 = 36 rows
    assert set(p.tile_rows[p.request == 0].tolist()) == {128}
    assert set(p.tile_rows[p.request != 0].tolist()) == {16}


@pytest.mark.parametrize(
    "kw, exc, word",
    [
        (dict(kv_heads=0), ValueError, "kv_heads"),
        (dict(num_ctas=0), ValueError, "num_ctas"),
        (dict(group=0), ValueError, "group"),
        (dict(causal="yes"), TypeError, "causal"),
        (dict(kv_heads=2.5), TypeError, "kv_heads"),
    ],
)
def test_bad_input_is_refused_by_name(kw, exc, word):
    args = dict(kv_heads=2, num_ctas=4) | kw
    with pytest.raises(exc, match=re.escape(word)):
        plan_holistic([(1, 10)], **args)
    with pytest.raises(ValueError, match=re.escape("l_kv")):
        plan_holistic([(1, 0)], kv_heads=2, num_ctas=4)
