"""Work partitioning for batched attention (FlashInfer's load-balanced scheduler, Algorithm 1)
against references written here from the specification, not from the planners:

- the query tile rule, the balanced plan's maximum KV chunk L_kv and the item costs, by hand;
- exact coverage: every (request, kv_head, packed query row, kv position) counted item by item;
- longest-first / least-loaded assignment: every plan item by item against `lpt.heap_schedule`,
  Algorithm 1 as the short heap loop, which is itself checked against the rule written here
  with no heap (a min() over the loads) and a brute-force optimum of tiny cases (LPT is within
  4/3 of it);
- run_plan against full attention computed by definition in float64 (GQA: query head j reads
  KV head j // group);
- the fixed merge order: float32 partial states computed and merged here, in the plan's order
  and in random orders.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections import Counter
from collections.abc import Mapping

import numpy as np
import pytest

from attnlab.machine.schedule import (
    Plan,
    WorkItem,
    fixed_size_workspace,
    heap_schedule,
    list_schedule,
    plan_balanced,
    plan_fixed_split,
    plan_per_request,
    query_tile,
    run_plan,
)
from attnlab.machine.workload import lengths

F64_TOL = 1e-12
DISTS = ("constant", "uniform", "zipf", "longtail")
ALPHA, BETA = 2, 1  # the cost formula of every plan unless plan_balanced is told otherwise


# --- references written from the specification ----------------------------------------------------


def _tile_rule(avg, head_dim=128):
    if avg > 64 and head_dim < 256:
        return 128
    if avg > 16:
        return 64
    return 16


def _tile_of(lens, group):
    return _tile_rule(sum(lq * group for lq, _ in lens) // len(lens))  # integer, as FlashInfer


def _n_tiles(lq, group, tq):
    return -(-(lq * group) // tq)


def _l_kv_max(lens, kv_heads, num_ctas, group, tq):
    work = kv_heads * sum(_n_tiles(lq, group, tq) * lk for lq, lk in lens)
    return max(1, -(-work // num_ctas))


def _balanced_items(lens, kv_heads, num_ctas, group=1, alpha=ALPHA, beta=BETA, tq=None):
    """The balanced plan's items in the natural order (request, kv_head, tile, chunk):
    (request, kv_head, q_start, q_stop, kv_start, kv_end, cost)."""
    tq = _tile_of(lens, group) if tq is None else tq
    cap = _l_kv_max(lens, kv_heads, num_ctas, group, tq)
    out = []
    for r, (lq, lk) in enumerate(lens):
        packed = lq * group
        for h in range(kv_heads):
            for t in range(_n_tiles(lq, group, tq)):
                q0, q1 = t * tq, min((t + 1) * tq, packed)
                for s in range(0, lk, cap):
                    e = min(s + cap, lk)
                    out.append((r, h, q0, q1, s, e, alpha * (q1 - q0) + beta * (e - s)))
    return out


def _lpt(costs, m):
    """Longest first (stable among equal costs), each to the least-loaded CTA, lower index on ties:
    the CTA of each item in the given order, and the loads."""
    order = sorted(range(len(costs)), key=lambda i: (-costs[i], i))
    ctas, _, loads = heap_schedule([costs[i] for i in order], m)
    cta = [None] * len(costs)
    for i, c in zip(order, ctas):
        cta[i] = c
    return cta, loads


def _least_loaded_by_min(costs, m):
    """The rule with no heap: each item to min over the CTAs of (load, index)."""
    loads, cta, start = [0] * m, [], []
    for x in costs:
        c = min(range(m), key=lambda j: (loads[j], j))
        cta.append(c)
        start.append(loads[c])
        loads[c] += x
    return cta, start, loads


def _optimum(costs, m):
    """Brute-force minimum makespan over every assignment (CTA 0 fixed for the first item)."""
    best = math.inf
    for rest in itertools.product(range(m), repeat=len(costs) - 1):
        loads = [0] * m
        for c, x in zip((0, *rest), costs):
            loads[c] += x
        best = min(best, max(loads))
    return best


def _full_attention(q, k, v, group):
    """o (B, Hq, d) in float64 by definition: softmax(q.k / sqrt(d)) v, query head j on KV head j // group."""
    b, hq, d = q.shape
    o = np.zeros((b, hq, v[0].shape[-1]))
    for i in range(b):
        for j in range(hq):
            kk, vv = k[i][j // group].astype(np.float64), v[i][j // group].astype(np.float64)
            s = kk @ q[i, j].astype(np.float64) / math.sqrt(d)
            p = np.exp(s - s.max())
            o[i, j] = (p / p.sum()) @ vv
    return o


def _state32(qr, k, v):
    """float32 partial state (o, lse) of query rows qr (n, d) over k, v (n_k, d)."""
    qr, k, v = (np.asarray(a, dtype=np.float32) for a in (qr, k, v))
    s = (qr @ k.T) * np.float32(1.0 / math.sqrt(qr.shape[-1]))
    m = s.max(axis=1)
    p = np.exp(s - m[:, None])
    l = p.sum(axis=1)
    return (p @ v) / l[:, None], m + np.log(l)


def _merge32(states):
    o, lse = states[0]
    for ob, lb in states[1:]:
        m = np.maximum(lse, lb)
        wa, wb = np.exp(lse - m), np.exp(lb - m)
        tot = wa + wb
        o = o * (wa / tot)[:, None] + ob * (wb / tot)[:, None]
        lse = m + np.log(tot)
    return o, lse


# --- reading a plan ---------------------------------------------------------------------------


def _key(it):
    return (it.request, it.kv_head, it.q_rows.start, it.q_rows.stop, it.kv_start, it.kv_end)


def _merge_entries(plan):
    """The merge plan as a list of (key or None, tuple of work indices): a mapping key -> indices,
    a sequence of (key, indices) pairs, or a sequence of index tuples."""
    m = plan.merge
    if isinstance(m, Mapping):
        pairs = list(m.items())
    else:
        pairs = []
        for e in m:
            if len(e) == 2 and isinstance(e[0], tuple) and not isinstance(e[1], (int, np.integer)):
                pairs.append((e[0], e[1]))
            else:
                pairs.append((None, e))
    return [(k, tuple(int(i) for i in g)) for k, g in pairs]


def _groups(plan):
    return [g for _, g in _merge_entries(plan)]


def _same_plan(a, b):
    assert a.work == b.work
    assert a.num_ctas == b.num_ctas
    assert np.array_equal(np.asarray(a.loads), np.asarray(b.loads))
    assert a.makespan == b.makespan and a.utilization == b.utilization
    assert _merge_entries(a) == _merge_entries(b)


def _check_plan(plan, lens, kv_heads, num_ctas, group, tq, alpha=ALPHA, beta=BETA):
    """Exact coverage, tile boundaries, costs, loads, makespan, utilization, merge groups."""
    assert isinstance(plan, Plan)
    assert isinstance(plan.work, tuple) and len(plan.work) > 0
    assert plan.num_ctas == num_ctas
    counts = [np.zeros((kv_heads, lq * group, lk), dtype=np.int32) for lq, lk in lens]
    loads = np.zeros(num_ctas)
    for it in plan.work:
        lq, lk = lens[it.request]
        packed = lq * group
        assert 0 <= it.request < len(lens) and 0 <= it.kv_head < kv_heads, it
        assert isinstance(it.q_rows, range) and it.q_rows.step == 1, it
        t = it.q_rows.start // tq
        assert it.q_rows == range(t * tq, min((t + 1) * tq, packed)), (it, tq)
        assert 0 <= it.kv_start < it.kv_end <= lk, it
        assert 0 <= it.cta < num_ctas, it
        assert it.cost == alpha * len(it.q_rows) + beta * (it.kv_end - it.kv_start), it
        counts[it.request][it.kv_head, it.q_rows.start : it.q_rows.stop, it.kv_start : it.kv_end] += 1
        loads[it.cta] += it.cost
    for r, c in enumerate(counts):
        assert c.min() == 1 and c.max() == 1, f"request {r}: covered {c.min()}..{c.max()} times"
    got = np.asarray(plan.loads, dtype=np.float64)
    assert got.shape == (num_ctas,)
    assert np.array_equal(got, loads)
    assert plan.makespan == loads.max()
    assert plan.utilization == pytest.approx(loads.sum() / (num_ctas * loads.max()), rel=1e-12)
    # merge: one group per (request, kv_head, query tile), every item once, ascending contiguous chunks
    groups = _groups(plan)
    outputs = {
        (r, h, t)
        for r, (lq, _) in enumerate(lens)
        for h in range(kv_heads)
        for t in range(_n_tiles(lq, group, tq))
    }
    assert len(groups) == len(outputs)
    assert sorted(i for g in groups for i in g) == list(range(len(plan.work)))
    seen = set()
    for g in groups:
        items = [plan.work[i] for i in g]
        out = {(it.request, it.kv_head, it.q_rows) for it in items}
        assert len(out) == 1, f"one merge group mixes outputs {out}"
        r, h, rows = out.pop()
        seen.add((r, h, rows.start // tq))
        assert [it.kv_start for it in items] == sorted(it.kv_start for it in items), "not ascending kv_start"
        assert items[0].kv_start == 0 and items[-1].kv_end == lens[r][1]
        assert all(a.kv_end == b.kv_start for a, b in zip(items, items[1:]))
    assert seen == outputs
    for key, g in _merge_entries(plan):
        if key is not None:
            it = plan.work[g[0]]
            assert tuple(key) == (it.request, it.kv_head, it.q_rows.start // tq), (key, it)


def _random_batch(rng, decode=False):
    b = int(rng.integers(1, 7))
    lq = [1] * b if decode else [int(x) for x in rng.choice([1, 1, 3, 17, 40], size=b)]
    return [(q, int(rng.integers(1, 301))) for q in lq]


# --- query_tile ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "avg, head_dim, want",
    [
        (1, 128, 16),
        (16, 128, 16),
        (16.0, 128, 16),
        (16.5, 128, 16),
        (17, 128, 64),
        (64, 128, 64),
        (64.5, 128, 64),
        (65, 128, 128),
        (4096, 128, 128),
        (65, 255, 128),
        (16, 256, 16),
        (17, 256, 64),
        (64, 256, 64),
        (65, 256, 64),
        (4096, 256, 64),
        (65, 512, 64),
    ],
)
def test_query_tile_rule_boundaries(avg, head_dim, want):
    """An average is read in integer arithmetic, as FlashInfer's avg_packed_qo_len: 16.5 is 16."""
    got = query_tile(avg, head_dim)
    assert got == want and isinstance(got, int) and not isinstance(got, bool)


def _floor_div(total, n):
    """total // n by repeated subtraction."""
    q = 0
    while total >= n:
        total, q = total - n, q + 1
    return q


def _compositions(total, n):
    """Every batch of n requests (each >= 1 query) with `total` query rows in all."""
    if n == 1:
        yield (total,)
        return
    for first in range(1, total - n + 2):
        for rest in _compositions(total - first, n - 1):
            yield (first,) + rest


@pytest.mark.parametrize("seed", range(6))
def test_query_tile_modes_against_brute_force(seed):
    """mode="batch": the rule at the floored average; mode="cuda_graph": the largest tile any batch
    of the same size and at most the captured rows can need, found by listing every such batch."""
    rng = np.random.default_rng(400 + seed)
    for _ in range(12):
        n = int(rng.integers(1, 5))
        l_qo = [int(x) for x in rng.integers(1, 9, n)]
        group = int(rng.choice([1, 2, 4, 8]))
        head_dim = int(rng.choice([64, 128, 256]))
        packed = [q * group for q in l_qo]
        assert query_tile(l_qo, head_dim, group=group) == _tile_rule(_floor_div(sum(packed), n), head_dim)
        cap = sum(l_qo) + int(rng.integers(0, 6))
        worst = max(
            _tile_rule(max(b) * group, head_dim) for rows in range(n, cap + 1) for b in _compositions(rows, n)
        )
        assert query_tile(l_qo, head_dim, group=group, mode="cuda_graph", captured_rows=cap) == worst
        assert query_tile(
            [l_qo[0]] * n, head_dim, group=group, mode="cuda_graph", uniform_q_len=l_qo[0]
        ) == _tile_rule(l_qo[0] * group, head_dim)


def test_query_tile_cuda_graph_costs_a_decode_batch_with_one_prefill():
    """7 decode steps and one 12-query chunk at g = 4: the batch's average (76 // 8 = 9 rows) gives
    16-row tiles; the captured graph must allow one request of 12 queries (48 rows): 64 rows."""
    lens = [1] * 7 + [12]
    assert query_tile(lens, group=4) == 16
    assert query_tile(lens, group=4, mode="cuda_graph") == 64
    assert query_tile([1] * 8, group=4, mode="cuda_graph") == 16  # pure decode: 1 x 4 rows


@pytest.mark.parametrize(
    "args, kw, exc, word",
    [
        ([1, 2], {"mode": "graph"}, ValueError, "mode"),
        ([1, 2], {"mode": "cuda_graph", "captured_rows": 2}, ValueError, "captured_rows"),
        ([1, 2], {"mode": "cuda_graph", "uniform_q_len": 1}, ValueError, "l_qo[1]"),
        ([1, 2], {"captured_rows": 5}, ValueError, "captured_rows"),
        ([], {}, ValueError, "l_qo"),
        ([1, 0], {}, ValueError, "l_qo[1]"),
        ([1, 2.5], {}, TypeError, "l_qo[1]"),
        ("12", {}, TypeError, "l_qo"),
        (True, {}, TypeError, "avg_packed_qo_len"),
        (16.5, {"mode": "cuda_graph"}, ValueError, "l_qo"),
        (16.5, {"group": 4}, ValueError, "group"),
        ([1, 2], {"group": 0}, ValueError, "group"),
    ],
)
def test_query_tile_refuses_bad_input_by_name(args, kw, exc, word):
    with pytest.raises(exc, match=re.escape(word)):
        query_tile(args, **kw)


# --- coverage, costs, loads ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_every_plan_covers_exactly_once(seed):
    rng = np.random.default_rng(1000 + seed)
    lens = _random_batch(rng)
    kv_heads, group = int(rng.integers(1, 4)), int(rng.choice([1, 2, 4]))
    num_ctas = int(rng.integers(1, 21))
    chunk = int(rng.integers(1, 120))
    tq = _tile_of(lens, group)
    _check_plan(
        plan_per_request(lens, kv_heads=kv_heads, num_ctas=num_ctas, group=group),
        lens,
        kv_heads,
        num_ctas,
        group,
        tq,
    )
    _check_plan(
        plan_fixed_split(lens, chunk=chunk, kv_heads=kv_heads, num_ctas=num_ctas, group=group),
        lens,
        kv_heads,
        num_ctas,
        group,
        tq,
    )
    _check_plan(
        plan_balanced(lens, kv_heads=kv_heads, num_ctas=num_ctas, group=group),
        lens,
        kv_heads,
        num_ctas,
        group,
        tq,
    )


def test_per_request_items_span_the_whole_kv():
    rng = np.random.default_rng(7)
    for _ in range(10):
        lens = _random_batch(rng)
        kv_heads, group = int(rng.integers(1, 4)), int(rng.choice([1, 4]))
        tq = _tile_of(lens, group)
        p = plan_per_request(lens, kv_heads=kv_heads, num_ctas=5, group=group)
        assert all(it.kv_start == 0 and it.kv_end == lens[it.request][1] for it in p.work)
        assert len(p.work) == kv_heads * sum(_n_tiles(lq, group, tq) for lq, _ in lens)


def test_fixed_split_chunks():
    rng = np.random.default_rng(8)
    for chunk in (1, 7, 64, 1024):
        lens = [(1, 1), (1, 1024), (1, 1025), (3, 2048), (1, int(rng.integers(1, 5000)))]
        p = plan_fixed_split(lens, chunk=chunk, kv_heads=2, num_ctas=16, group=4)
        tq = _tile_of(lens, 4)
        for it in p.work:
            assert it.kv_start % chunk == 0 and it.kv_end == min(it.kv_start + chunk, lens[it.request][1])
        want = 2 * sum(_n_tiles(lq, 4, tq) * -(-lk // chunk) for lq, lk in lens)
        assert len(p.work) == want
    # the default chunk is 1024
    p = plan_fixed_split([(1, 3000)], kv_heads=1, num_ctas=4)
    assert sorted((it.kv_start, it.kv_end) for it in p.work) == [(0, 1024), (1024, 2048), (2048, 3000)]


def test_balanced_with_other_alpha_beta_and_tile():
    rng = np.random.default_rng(9)
    for _ in range(6):
        lens = _random_batch(rng)
        for alpha, beta, tile_q in ((3, 5, None), (0, 1, 16), (2, 1, 128), (1, 0, 64)):
            p = plan_balanced(lens, kv_heads=2, num_ctas=7, group=2, alpha=alpha, beta=beta, tile_q=tile_q)
            tq = _tile_of(lens, 2) if tile_q is None else tile_q
            _check_plan(p, lens, 2, 7, 2, tq, alpha, beta)
            cap = _l_kv_max(lens, 2, 7, 2, tq)
            assert max(it.kv_end - it.kv_start for it in p.work) <= cap
            assert sorted(map(_key, p.work)) == sorted(x[:6] for x in _balanced_items(lens, 2, 7, 2, tq=tq))


def test_plan_is_frozen():
    p = plan_balanced([(1, 10)], kv_heads=1, num_ctas=2)
    with pytest.raises((AttributeError, TypeError, dataclasses.FrozenInstanceError)):
        p.num_ctas = 3
    with pytest.raises((AttributeError, TypeError)):
        p.work = ()


# --- plan_balanced: L_kv by hand, assignment --------------------------------------------------


def test_balanced_by_hand_decode():
    # packed 1, 1 -> T_q 16; L_kv = ceil(1 * (100 + 50) / 4) = 38
    p = plan_balanced([(1, 100), (1, 50)], kv_heads=1, num_ctas=4)
    chunks = sorted((it.request, it.kv_start, it.kv_end, it.cost) for it in p.work)
    assert chunks == [(0, 0, 38, 40), (0, 38, 76, 40), (0, 76, 100, 26), (1, 0, 38, 40), (1, 38, 50, 14)]
    # 40, 40, 40 to CTAs 0, 1, 2; 26 to CTA 3; 14 to CTA 3 (load 26 is the least)
    cta = {(it.request, it.kv_start): it.cta for it in p.work}
    assert cta[(0, 76)] == 3 and cta[(1, 38)] == 3
    assert sorted(cta[x] for x in ((0, 0), (0, 38), (1, 0))) == [0, 1, 2]
    assert list(np.asarray(p.loads)) == [40, 40, 40, 40] and p.makespan == 40 and p.utilization == 1.0


def test_balanced_by_hand_gqa_two_heads():
    # group 4: packed 4, 4 -> T_q 16; L_kv = ceil(2 * (1000 + 10) / 8) = 253
    p = plan_balanced([(1, 1000), (1, 10)], kv_heads=2, num_ctas=8, group=4)
    for h in (0, 1):
        mine = sorted((it.request, it.kv_start, it.kv_end, it.cost) for it in p.work if it.kv_head == h)
        assert mine == [
            (0, 0, 253, 261),
            (0, 253, 506, 261),
            (0, 506, 759, 261),
            (0, 759, 1000, 249),
            (1, 0, 10, 18),
        ]
    # 6 x 261 on CTAs 0-5, 2 x 249 on CTAs 6, 7, then 18 -> CTA 6, 18 -> CTA 7
    assert list(np.asarray(p.loads)) == [261] * 6 + [267, 267] and p.makespan == 267


def test_balanced_by_hand_prefill():
    # group 2: packed 200, 6, mean 103 -> T_q 128; tiles 2 and 1; L_kv = ceil((2*200 + 1*50) / 3) = 150
    p = plan_balanced([(100, 200), (3, 50)], kv_heads=1, num_ctas=3, group=2)
    got = sorted(
        (it.request, it.q_rows.start, it.q_rows.stop, it.kv_start, it.kv_end, it.cost, it.cta)
        for it in p.work
    )
    # costs 406, 306, 294, 194, 62: 406 -> 0, 306 -> 1, 294 -> 2, 194 -> 2 (294 least), 62 -> 1 (306 least)
    assert got == [
        (0, 0, 128, 0, 150, 406, 0),
        (0, 0, 128, 150, 200, 306, 1),
        (0, 128, 200, 0, 150, 294, 2),
        (0, 128, 200, 150, 200, 194, 2),
        (1, 0, 6, 0, 50, 62, 1),
    ]
    assert list(np.asarray(p.loads)) == [406, 368, 488] and p.makespan == 488
    assert p.utilization == pytest.approx(1262 / (3 * 488), rel=1e-12)


def test_balanced_by_hand_tile_boundary_and_tiny_chunk():
    # mean packed (31 + 1) // 2 = 16 -> T_q 16: tiles of 16 and 15 rows; (32 + 1) // 2 = 16 in
    # integer arithmetic, as FlashInfer computes it (16.5 exactly) -> T_q 16 too; (33 + 1) // 2 = 17
    # -> T_q 64. L_kv = ceil((2 * 10 + 10) / 2) = 15 or ceil((1 * 10 + 10) / 2) = 10: one chunk per tile
    p16 = plan_balanced([(31, 10), (1, 10)], kv_heads=1, num_ctas=2)
    assert sorted((it.request, it.q_rows.start, it.q_rows.stop, it.kv_end) for it in p16.work) == [
        (0, 0, 16, 10),
        (0, 16, 31, 10),
        (1, 0, 1, 10),
    ]
    p16 = plan_balanced([(32, 10), (1, 10)], kv_heads=1, num_ctas=2)
    assert p16.tile_q == 16 and sorted(
        (it.request, it.q_rows.start, it.q_rows.stop, it.kv_end) for it in p16.work
    ) == [(0, 0, 16, 10), (0, 16, 32, 10), (1, 0, 1, 10)]
    p64 = plan_balanced([(33, 10), (1, 10)], kv_heads=1, num_ctas=2)
    assert sorted((it.request, it.q_rows.start, it.q_rows.stop, it.kv_end) for it in p64.work) == [
        (0, 0, 33, 10),
        (1, 0, 1, 10),
    ]
    # L_kv = ceil(1 * 1 * 3 / 1000) = 1: three one-key chunks
    p = plan_balanced([(1, 3)], kv_heads=1, num_ctas=1000)
    assert sorted((it.kv_start, it.kv_end, it.cost) for it in p.work) == [(0, 1, 3), (1, 2, 3), (2, 3, 3)]
    # tile_q overrides the rule: 40 packed rows in tiles of 16 -> 3 tiles; L_kv = ceil(3 * 30 / 2) = 45
    p = plan_balanced([(20, 30)], kv_heads=1, num_ctas=2, group=2, tile_q=16)
    assert sorted((it.q_rows.start, it.q_rows.stop) for it in p.work) == [(0, 16), (16, 32), (32, 40)]
    assert all((it.kv_start, it.kv_end) == (0, 30) for it in p.work)


def test_balanced_min_chunk_is_a_floor_on_l_kv():
    # L_kv = ceil(2 * (1000 + 300) / 64) = 41; a floor of 128 (FlashInfer's decode minimum) wins
    lens = [(1, 1000), (1, 300)]
    p = plan_balanced(lens, kv_heads=2, num_ctas=64, min_chunk=128)
    spans = sorted((it.request, it.kv_head, it.kv_start, it.kv_end) for it in p.work)
    want = sorted(
        (r, h, s, min(s + 128, n))
        for r, n in enumerate((1000, 300))
        for h in range(2)
        for s in range(0, n, 128)
    )
    assert spans == want and len(p.work) == 2 * (8 + 3)
    # below the computed L_kv the floor changes nothing, item by item
    same = plan_balanced(lens, kv_heads=2, num_ctas=64, min_chunk=41)
    assert [(_key(a), a.cta) for a in same.work] == [
        (_key(b), b.cta) for b in plan_balanced(lens, kv_heads=2, num_ctas=64).work
    ]
    assert len(plan_balanced(lens, kv_heads=2, num_ctas=64, min_chunk=42).work) < len(same.work)


def _compare_with_lpt(p, lens, kv_heads, num_ctas, group, alpha=ALPHA, beta=BETA):
    items = _balanced_items(lens, kv_heads, num_ctas, group, alpha, beta)
    costs = [x[6] for x in items]
    cta, loads = _lpt(costs, num_ctas)
    got = {_key(it): it for it in p.work}
    assert sorted(got) == sorted(x[:6] for x in items)
    assert list(np.asarray(p.loads, dtype=np.float64)) == [float(x) for x in loads]
    # independent of how equal-cost items are ordered among themselves: the CTAs given to each cost
    want_by_cost, got_by_cost = Counter(), Counter()
    for x, c in zip(items, cta):
        want_by_cost[(x[6], c)] += 1
        got_by_cost[(got[x[:6]].cost, got[x[:6]].cta)] += 1
    assert got_by_cost == want_by_cost
    return items, cta, got


@pytest.mark.parametrize("seed", range(10))
def test_balanced_assignment_is_lpt(seed):
    rng = np.random.default_rng(2000 + seed)
    lens = _random_batch(rng, decode=seed % 2 == 0)
    kv_heads, group, num_ctas = int(rng.integers(1, 4)), int(rng.choice([1, 4])), int(rng.integers(1, 25))
    p = plan_balanced(lens, kv_heads=kv_heads, num_ctas=num_ctas, group=group)
    items, cta, got = _compare_with_lpt(p, lens, kv_heads, num_ctas, group)
    # equal costs taken in the natural (request, kv_head, tile, chunk) order: the same CTA per item
    assert [got[x[:6]].cta for x in items] == cta


def test_balanced_assignment_distinct_costs_item_by_item():
    # kv_heads 1 and lengths chosen so that every item has its own cost: no tie order to agree on
    rng = np.random.default_rng(21)
    done = 0
    while done < 15:
        lens = [(1, int(x)) for x in rng.integers(1, 400, size=int(rng.integers(1, 6)))]
        num_ctas = int(rng.integers(2, 9))
        items = _balanced_items(lens, 1, num_ctas)
        if len({x[6] for x in items}) != len(items):
            continue
        p = plan_balanced(lens, kv_heads=1, num_ctas=num_ctas)
        _, cta, got = _compare_with_lpt(p, lens, 1, num_ctas, 1)
        assert [got[x[:6]].cta for x in items] == cta, lens
        done += 1


def test_balanced_makespan_within_four_thirds_of_optimum():
    rng = np.random.default_rng(31)
    cases = 0
    while cases < 40:
        lens = [
            (int(rng.choice([1, 1, 5, 30])), int(rng.integers(1, 200)))
            for _ in range(int(rng.integers(1, 5)))
        ]
        kv_heads, num_ctas, group = int(rng.integers(1, 3)), int(rng.integers(2, 4)), int(rng.choice([1, 2]))
        items = _balanced_items(lens, kv_heads, num_ctas, group)
        if not 2 <= len(items) <= 7:
            continue
        p = plan_balanced(lens, kv_heads=kv_heads, num_ctas=num_ctas, group=group)
        costs = [it.cost for it in p.work]
        assert sorted(costs) == sorted(x[6] for x in items)
        opt = _optimum(costs, num_ctas)
        assert opt <= p.makespan <= 4 / 3 * opt, (lens, kv_heads, num_ctas, p.makespan, opt)
        cases += 1


# --- the batched assignment, item by item -------------------------------------------------------
# The planner hands items out a round at a time (attnlab.machine.schedule.lpt); here every item of the plan, in
# the order the CTAs take it, is checked against a heap loop over the items built from the
# specification: same piece, same CTA, same start on that CTA, same loads, same merge plan.


def _items_natural(lens, kv_heads, group, tq, cap_of, alpha, beta):
    """Items in arrival order (request, kv_head, tile, chunk): (request, kv_head, q_start, q_stop,
    kv_start, kv_end, cost); cap_of(l_kv) is the chunk of a request's KV."""
    out = []
    for r, (lq, lk) in enumerate(lens):
        packed, cap = lq * group, cap_of(lk)
        for h in range(kv_heads):
            for t in range(_n_tiles(lq, group, tq)):
                q0, q1 = t * tq, min((t + 1) * tq, packed)
                for s in range(0, lk, cap):
                    e = min(s + cap, lk)
                    out.append((r, h, q0, q1, s, e, alpha * (q1 - q0) + beta * (e - s)))
    return out


def _heap_assign(items, num_ctas, longest_first):
    """The items in the order the CTAs take them, each with (cta, start), and the loads: longest
    first (stable) or in arrival order, each to the least-loaded CTA, lower index on ties."""
    order = sorted(range(len(items)), key=lambda i: -items[i][6]) if longest_first else range(len(items))
    taken = [items[i] for i in order]
    cta, start, loads = heap_schedule([x[6] for x in taken], num_ctas)
    return [(*x, c, s) for x, c, s in zip(taken, cta, start)], loads


def _merge_of(rows, tq):
    outputs = {}
    for j, x in enumerate(rows):
        outputs.setdefault((x[0], x[1], x[2] // tq), []).append(j)
    return [(k, tuple(sorted(js, key=lambda j: rows[j][4]))) for k, js in sorted(outputs.items())]


def _columns(plan):
    names = ("request", "kv_head", "q_start", "q_end", "kv_start", "kv_end", "cost", "cta", "start")
    cols = [getattr(plan, n) for n in names]
    for n, c in zip(names, cols):
        assert isinstance(c, np.ndarray) and c.ndim == 1 and len(c) == len(plan.work), n
        assert np.issubdtype(c.dtype, np.integer) and not c.flags.writeable, n
    return list(zip(*(c.tolist() for c in cols)))


def _check_against_heap(plan, lens, kv_heads, num_ctas, group, alpha, beta, kind, chunk=None, tq=None):
    tq = _tile_of(lens, group) if tq is None else tq
    if kind == "balanced":
        cap = _l_kv_max(lens, kv_heads, num_ctas, group, tq)
        cap_of = lambda lk: cap  # noqa: E731
    elif kind == "fixed":
        cap_of = lambda lk: chunk  # noqa: E731
    else:
        cap_of = lambda lk: lk  # noqa: E731
    items = _items_natural(lens, kv_heads, group, tq, cap_of, alpha, beta)
    want, loads = _heap_assign(items, num_ctas, kind == "balanced")
    got = _columns(plan)
    first_bad = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), None)
    assert len(got) == len(want) and first_bad is None, (
        first_bad,
        got[first_bad : first_bad + 3],
        want[first_bad : first_bad + 3],
    )
    assert np.asarray(plan.loads).tolist() == loads
    assert _merge_entries(plan) == _merge_of(want, tq)
    assert plan.work == tuple(
        WorkItem(r, h, range(q0, q1), s, e, c, x) for r, h, q0, q1, s, e, x, c, _ in want
    )


def _random_lens(rng):
    """Batches with many ties: a few repeated KV lengths (1 among them), decode or prefill."""
    b = int(rng.integers(1, 9))
    menu = [1, 2, 7, 64, 64, 100, 333] if rng.random() < 0.5 else [int(x) for x in rng.integers(1, 900, 4)]
    decode = rng.random() < 0.5
    lq = [1] * b if decode else [int(x) for x in rng.choice([1, 2, 5, 17, 33, 70], size=b)]
    return [(q, int(rng.choice(menu))) for q in lq]


@pytest.mark.parametrize("seed", range(40))
def test_every_plan_is_the_heap_loop_item_by_item(seed):
    rng = np.random.default_rng(7000 + seed)
    for _ in range(6):
        lens = _random_lens(rng)
        kv_heads, group = int(rng.integers(1, 10)), int(rng.choice([1, 2, 4, 8]))
        num_ctas = int(rng.choice([1, 2, 3, 5, 8, 9, 12, 16, 33, 132, 400]))
        alpha, beta = [(2, 1), (2, 1), (0, 1), (1, 0), (3, 5), (1, 1), (7, 2)][int(rng.integers(0, 7))]
        kw = dict(kv_heads=kv_heads, num_ctas=num_ctas, group=group, alpha=alpha, beta=beta)
        _check_against_heap(
            plan_balanced(lens, **kw), lens, kv_heads, num_ctas, group, alpha, beta, "balanced"
        )
        _check_against_heap(
            plan_per_request(lens, **kw), lens, kv_heads, num_ctas, group, alpha, beta, "per-request"
        )
        chunk = int(rng.choice([1, 3, 64, 1024]))
        _check_against_heap(
            plan_fixed_split(lens, chunk=chunk, **kw),
            lens,
            kv_heads,
            num_ctas,
            group,
            alpha,
            beta,
            "fixed",
            chunk=chunk,
        )


def test_zero_costs_all_go_to_cta_zero():
    lens = [(1, 5), (3, 9), (2, 1)]
    for make in (plan_balanced, plan_per_request, plan_fixed_split):
        p = make(lens, kv_heads=3, num_ctas=7, group=2, alpha=0, beta=0)
        assert set(p.cta.tolist()) == {0} and set(p.start.tolist()) == {0}
        assert np.asarray(p.loads).tolist() == [0] * 7


@pytest.mark.parametrize("batch", [16, 256])
def test_balanced_longtail_is_the_heap_loop_item_by_item(batch):
    lens = lengths("longtail", batch, seed=0)
    p = plan_balanced(lens, kv_heads=8, num_ctas=132, group=4)
    _check_against_heap(p, lens, 8, 132, 4, ALPHA, BETA, "balanced")
    if batch == 256:
        assert len(p.work) == 2056


def test_prefill_tiles_and_chunks_item_by_item():
    # several query tiles and KV chunks per request, and equal costs within one request (its
    # tiles of T_q rows, its chunks of L_kv tokens): their KV heads keep the arrival order
    lens = [(100, 4096), (100, 4096), (37, 1000), (1, 8192), (64, 2048)]
    for kw in (
        dict(kv_heads=4, num_ctas=132, group=2),
        dict(kv_heads=2, num_ctas=10, group=1),
        dict(kv_heads=8, num_ctas=132, group=8, tile_q=16),
        dict(kv_heads=1, num_ctas=3),
    ):
        p = plan_balanced(lens, **kw)
        kv_heads, num_ctas, group = kw["kv_heads"], kw["num_ctas"], kw.get("group", 1)
        _check_against_heap(p, lens, kv_heads, num_ctas, group, ALPHA, BETA, "balanced", tq=kw.get("tile_q"))
        for chunk in (256, 1024):
            q = plan_fixed_split(lens, chunk=chunk, **kw)
            _check_against_heap(
                q, lens, kv_heads, num_ctas, group, ALPHA, BETA, "fixed", chunk=chunk, tq=kw.get("tile_q")
            )


def test_start_is_the_load_of_the_cta_before_the_item():
    lens = lengths("zipf", 40, seed=2)
    p = plan_balanced(lens, kv_heads=4, num_ctas=20, group=4)
    load = [0] * 20
    for c, s, x in zip(p.cta.tolist(), p.start.tolist(), p.cost.tolist()):
        assert s == load[c]
        load[c] += x
    assert load == np.asarray(p.loads).tolist()


@pytest.mark.parametrize("seed", range(10))
def test_heap_schedule_is_the_least_loaded_rule(seed):
    """The heap loop the plans are checked against, against the rule with no heap (each item to
    the CTA of least (load, index)) on random tiny batches with ties and zeros; and its makespan
    on longest-first costs within 4/3 of the brute-force optimum."""
    rng = np.random.default_rng(9000 + seed)
    for _ in range(30):
        m, n = int(rng.integers(1, 5)), int(rng.integers(1, 8))
        costs = rng.integers(0, 6, n).tolist()
        assert list(heap_schedule(costs, m)) == list(_least_loaded_by_min(costs, m)), (costs, m)
        if sum(costs):
            longest = sorted(costs, reverse=True)
            opt = _optimum(longest, m)
            assert opt <= max(heap_schedule(longest, m)[2]) <= 4 / 3 * opt, (costs, m)


@pytest.mark.parametrize("seed", range(30))
def test_list_schedule_rounds_equal_the_heap_loop(seed):
    """lpt.list_schedule, the fast path, against lpt.heap_schedule, item by item, on bare cost
    sequences: sorted or not, with copies (KV heads), zeros, ties, one CTA, more CTAs than items,
    rounds short enough to hand over to the heap for a while."""
    rng = np.random.default_rng(8000 + seed)
    for _ in range(20):
        n, m = int(rng.integers(1, 300)), int(rng.choice([1, 2, 4, 9, 10, 11, 32, 33, 64, 132, 1000]))
        copies = int(rng.choice([1, 2, 3, 4, 8]))
        kind = int(rng.integers(0, 4))
        if kind == 0:
            costs = rng.integers(0, 4, n)  # zeros and ties
        elif kind == 1:
            costs = rng.integers(1, 10**6, n)  # arrival order, unsorted
        else:
            costs = np.sort(np.round(rng.lognormal(5, 1.5 if kind == 2 else 0.3, n)).astype(np.int64) + 1)[
                ::-1
            ]
        desc = bool(np.all(np.diff(costs) <= 0))
        got = list_schedule(np.ascontiguousarray(costs), m, copies, descending=desc)
        want = heap_schedule(np.repeat(costs, copies).tolist(), m)
        assert [got.cta.tolist(), got.start.tolist(), got.loads.tolist()] == list(want), (n, m, copies, kind)


# --- determinism and the fixed merge order ----------------------------------------------------


def test_three_calls_give_identical_plans():
    rng = np.random.default_rng(41)
    for _ in range(5):
        lens = _random_batch(rng)
        kw = dict(
            kv_heads=int(rng.integers(1, 4)), num_ctas=int(rng.integers(1, 40)), group=int(rng.choice([1, 4]))
        )
        for make in (
            lambda: plan_balanced(lens, **kw),
            lambda: plan_per_request(lens, **kw),
            lambda: plan_fixed_split(lens, chunk=32, **kw),
            lambda: plan_balanced(tuple(lens), **kw),
        ):
            a, b, c = make(), make(), make()
            _same_plan(a, b)
            _same_plan(a, c)
        _same_plan(plan_balanced(lens, **kw), plan_balanced(tuple(tuple(x) for x in lens), **kw))


def _decode_case(rng, b, kv_heads, group, d, max_kv=200, dtype=np.float64):
    lk = [int(x) for x in rng.integers(1, max_kv + 1, size=b)]
    q = rng.standard_normal((b, kv_heads * group, d)).astype(dtype)
    k = [rng.standard_normal((kv_heads, n, d)).astype(dtype) for n in lk]
    v = [rng.standard_normal((kv_heads, n, d)).astype(dtype) for n in lk]
    return [(1, n) for n in lk], q, k, v


def _merge_by_plan(plan, q, k, v, group, order_rng=None):
    """o (B, Hq, d) float32: states per work item computed here, merged in the plan's order
    (or in a random permutation of each group when order_rng is given)."""
    o = np.zeros(q.shape, dtype=np.float32)
    for g in _groups(plan):
        g = list(g) if order_rng is None else [g[i] for i in order_rng.permutation(len(g))]
        states = []
        for i in g:
            it = plan.work[i]
            heads = [it.kv_head * group + r for r in it.q_rows]
            states.append(
                _state32(
                    q[it.request, heads],
                    k[it.request][it.kv_head, it.kv_start : it.kv_end],
                    v[it.request][it.kv_head, it.kv_start : it.kv_end],
                )
            )
        it = plan.work[g[0]]
        o[it.request, [it.kv_head * group + r for r in it.q_rows]] = _merge32(states)[0]
    return o


def test_fixed_merge_order_is_bitwise_reproducible_and_random_order_is_not():
    rng = np.random.default_rng(51)
    differs, worst = 0, 0.0
    for case in range(6):
        kv_heads, group = (1, 4) if case % 2 else (2, 1)
        lens, q, k, v = _decode_case(
            rng, int(rng.integers(1, 4)), kv_heads, group, 64, max_kv=600, dtype=np.float32
        )
        for make in (
            lambda: plan_balanced(lens, kv_heads=kv_heads, num_ctas=16, group=group),
            lambda: plan_fixed_split(lens, chunk=24, kv_heads=kv_heads, num_ctas=16, group=group),
        ):
            outs = [_merge_by_plan(make(), q, k, v, group) for _ in range(3)]
            assert outs[0].tobytes() == outs[1].tobytes() == outs[2].tobytes()
            want = _full_attention(q, k, v, group)
            assert np.max(np.abs(outs[0] - want)) <= 1e-5
            for _ in range(4):
                perm = _merge_by_plan(make(), q, k, v, group, order_rng=rng)
                differs += perm.tobytes() != outs[0].tobytes()
                worst = max(worst, float(np.max(np.abs(perm.astype(np.float64) - outs[0]))))
    assert differs >= 1, "float32 merge in random orders never changed a bit"
    assert worst <= 1e-5


# --- run_plan against full attention -------------------------------------------------------------


@pytest.mark.parametrize("kv_heads", [1, 2])
@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("seed", range(3))
def test_run_plan_equals_full_attention(kv_heads, group, seed):
    rng = np.random.default_rng(6000 + 10 * seed + kv_heads + 3 * group)
    b = int(rng.integers(1, 10))
    d = int(rng.choice([4, 16, 32]))
    lens, q, k, v = _decode_case(rng, b, kv_heads, group, d)
    want = _full_attention(q, k, v, group)
    num_ctas = int(rng.integers(1, 13))
    plans = [
        plan_per_request(lens, kv_heads=kv_heads, num_ctas=num_ctas, group=group),
        plan_fixed_split(
            lens, chunk=int(rng.integers(1, 50)), kv_heads=kv_heads, num_ctas=num_ctas, group=group
        ),
        plan_balanced(lens, kv_heads=kv_heads, num_ctas=num_ctas, group=group),
    ]
    for p in plans:
        got = run_plan(p, q, k, v)
        assert np.shape(got) == (b, kv_heads * group, d)
        assert np.max(np.abs(np.asarray(got, dtype=np.float64) - want)) <= F64_TOL
    again = [np.asarray(run_plan(plans[2], q, k, v)) for _ in range(3)]
    assert again[0].tobytes() == again[1].tobytes() == again[2].tobytes()


# --- long-tailed batches ----------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 16, 256])
def test_balanced_utilization_on_longtail(batch):
    lens = lengths("longtail", batch, seed=0)
    kw = dict(kv_heads=8, num_ctas=132, group=4)
    bal = plan_balanced(lens, **kw)
    per = plan_per_request(lens, **kw)
    # the implementation's numbers are the specification's: LPT over the items built here
    _, loads = _lpt([x[6] for x in _balanced_items(lens, 8, 132, 4)], 132)
    assert bal.utilization == pytest.approx(sum(loads) / (132 * max(loads)), rel=1e-12)
    assert bal.utilization >= 0.8, (batch, bal.utilization, bal.makespan)
    assert bal.utilization >= per.utilization
    if batch == 1:
        assert per.utilization <= 0.1


# --- lengths ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dist", DISTS)
def test_lengths_are_seeded_pairs(dist):
    for batch in (1, 7, 64):
        a = lengths(dist, batch, seed=3)
        assert a == lengths(dist, batch, seed=3)
        assert len(a) == batch
        for pair in a:
            assert len(pair) == 2
            for x in pair:
                assert isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) and x >= 1
        if dist == "constant":
            assert len(set(map(tuple, a))) == 1
        plan_balanced(a, kv_heads=2, num_ctas=8)  # a plan takes them as they are


# --- the fixed-size workspace ------------------------------------------------------------------


def _workspace_arrays(ws):
    """(int arrays by name, validity mask) from whatever container fixed_size_workspace returns."""
    if dataclasses.is_dataclass(ws):
        fields = {f.name: getattr(ws, f.name) for f in dataclasses.fields(ws)}
    elif isinstance(ws, Mapping):
        fields = dict(ws)
    elif hasattr(ws, "_asdict"):
        fields = ws._asdict()
    else:
        raise AssertionError(f"unexpected workspace type {type(ws).__name__}")
    arrays = {n: a for n, a in fields.items() if isinstance(a, np.ndarray)}
    masks = [n for n, a in arrays.items() if a.dtype == bool]
    assert len(masks) == 1, f"one boolean validity mask expected, got {masks}"
    mask = arrays.pop(masks[0])
    return arrays, mask


def test_fixed_size_workspace_shapes_do_not_depend_on_the_batch():
    shapes = []
    for batch in (4, 200):
        lens = lengths("uniform", batch, seed=1)
        p = plan_balanced(lens, kv_heads=2, num_ctas=16, group=4)
        ws = fixed_size_workspace(p, 16, 4096)
        arrays, mask = _workspace_arrays(ws)
        assert arrays and all(a.dtype == np.int32 for a in arrays.values())
        assert int(mask.sum()) == len(p.work)
        assert mask.shape == (16, 4096)
        shapes.append(({n: a.shape for n, a in arrays.items()}, mask.shape))
        # contents: the valid slots of CTA c hold exactly CTA c's items, as
        # (request, kv_head, q_start, q_end, kv_start, kv_end) (the implementation's `items` layout)
        table = np.asarray(ws.items)
        got = Counter((c, *map(int, table[c, j])) for c, j in zip(*np.nonzero(mask)))
        want = Counter((it.cta, *_key(it)) for it in p.work)
        assert got == want
        if hasattr(ws, "count"):  # the implementation's items-per-CTA field
            assert np.array_equal(np.asarray(ws.count), mask.sum(axis=1))
    assert shapes[0] == shapes[1]


def test_fixed_size_workspace_overflow_is_refused_by_name():
    p = plan_balanced([(1, 500), (1, 30), (1, 7)], kv_heads=2, num_ctas=6)
    with pytest.raises(ValueError, match=r"\bmax_items\b"):
        fixed_size_workspace(p, 6, 1)
    with pytest.raises(ValueError, match=r"\bmax_ctas\b"):
        fixed_size_workspace(p, 5, 4096)
    for args, name in (((True, 4096), "max_ctas"), ((6, True), "max_items")):
        with pytest.raises(TypeError, match=rf"\b{name}\b.*True"):
            fixed_size_workspace(p, *args)


def test_fixed_size_workspace_merge_plan_is_plan_merge_in_fixed_shapes():
    """Output g folds the slots merge_slots[merge_indptr[g]:merge_indptr[g + 1]]: exactly Plan.merge's
    items, by kv_start, each at slot cta * max_items + (its index among its CTA's items)."""
    shapes = set()
    for batch in (3, 40):
        p = plan_fixed_split(
            lengths("longtail", batch, seed=2, mean=300), chunk=64, kv_heads=2, num_ctas=5, group=4, tile_q=2
        )
        ws = fixed_size_workspace(p, 8, 200, 400)
        shapes.add((ws.merge_indptr.shape, ws.merge_slots.shape, ws.merge_out.shape))
        slot_of = {}
        for c in range(8):
            for j in range(int(ws.count[c])):
                slot_of[tuple(int(x) for x in ws.items[c, j])] = c * 200 + j
        for g, ((r, h, t), js) in enumerate(p.merge):
            got = ws.merge_slots[ws.merge_indptr[g] : ws.merge_indptr[g + 1]].tolist()
            assert got == [slot_of[_key(p.work[j])] for j in js]
            q = p.work[js[0]].q_rows
            assert ws.merge_out[g].tolist() == [r, h, q.start, q.stop] and q.start // 2 == t
        g = len(p.merge)
        assert ws.num_outputs == g == p.num_outputs
        assert (ws.merge_indptr[g:] == len(p.work)).all() and not ws.merge_out[g:].any()
        assert (ws.merge_slots[len(p.work) :] == -1).all()
    assert shapes == {((401,), (1600,), (400, 4))}
    with pytest.raises(ValueError, match=r"outputs .* max_outputs=10 holds fewer"):
        fixed_size_workspace(p, 8, 200, 10)
    with pytest.raises(TypeError, match=r"max_outputs .*True"):
        fixed_size_workspace(p, 8, 200, True)


# --- bad input ---------------------------------------------------------------------------------

GOOD = [(1, 10), (2, 20)]
PLANS = {"per_request": plan_per_request, "fixed_split": plan_fixed_split, "balanced": plan_balanced}
BAD = []
for _pname, _fn in PLANS.items():
    for _kw, _exc, _name, _val in [
        (dict(num_ctas=0), ValueError, "num_ctas", "0"),
        (dict(num_ctas=-3), ValueError, "num_ctas", "-3"),
        (dict(kv_heads=0), ValueError, "kv_heads", "0"),
        (dict(kv_heads=-1), ValueError, "kv_heads", "-1"),
        (dict(num_ctas=True), TypeError, "num_ctas", "True"),
        (dict(kv_heads=True), TypeError, "kv_heads", "True"),
        (dict(group=True), TypeError, "group", "True"),
        (dict(group=0), ValueError, "group", "0"),
        (dict(num_ctas=2.5), TypeError, "num_ctas", "2.5"),
        (dict(lengths=[]), ValueError, "lengths", None),
        (dict(lengths=[(1, 10), (0, 5)]), ValueError, "lengths|l_qo", "0"),
        (dict(lengths=[(1, 0)]), ValueError, "lengths|l_kv", "0"),
        (dict(lengths=[(-2, 5)]), ValueError, "lengths|l_qo", "-2"),
        (dict(lengths=[(1, -7)]), ValueError, "lengths|l_kv", "-7"),
        (dict(lengths=[(1.5, 5)]), TypeError, "lengths|l_qo", "1.5"),
        (dict(lengths=[(1, 2.5)]), TypeError, "lengths|l_kv", "2.5"),
        (dict(lengths=[("3", 5)]), TypeError, "lengths|l_qo", "'3'"),
        (dict(lengths=[(True, 5)]), TypeError, "lengths|l_qo", "True"),
        (dict(lengths=[(1, True)]), TypeError, "lengths|l_kv", "True"),
        (dict(lengths=[(1, 10), (1, 2**31)]), ValueError, "lengths|l_kv", "2147483648"),
        (dict(lengths=[(1, 10, 5)]), TypeError, "lengths", "(1, 10, 5)"),
        (dict(lengths=[(1, None)]), TypeError, "lengths|l_kv", "None"),
        (dict(lengths=[{1: 2, 3: 4}]), TypeError, "lengths", "{1: 2, 3: 4}"),
        (dict(lengths=[(1, 10)] * 300 + [(True, 4)]), TypeError, "lengths|l_qo", "True"),
        (dict(lengths=[(2, 10)] * 3 + [(2, True)]), TypeError, "lengths|l_kv", "True"),
        (dict(group=2**30), ValueError, "group", "1073741824"),
        (dict(alpha=True), TypeError, "alpha", "True"),
        (dict(alpha=2.5), TypeError, "alpha", "2.5"),
        (dict(alpha=-1), ValueError, "alpha", "-1"),
        (dict(beta=-2), ValueError, "beta", "-2"),
        (dict(beta="1"), TypeError, "beta", "'1'"),
        (dict(beta=2**21), ValueError, "beta", "2097152"),
    ]:
        BAD.append(pytest.param(_fn, _kw, _exc, _name, _val, id=f"{_pname}-{_name}-{_val}"))
for _kw, _exc, _name, _val in [
    (dict(chunk=0), ValueError, "chunk", "0"),
    (dict(chunk=True), TypeError, "chunk", "True"),
]:
    BAD.append(pytest.param(plan_fixed_split, _kw, _exc, _name, _val, id=f"fixed_split-{_name}-{_val}"))
for _kw, _exc, _name, _val in [
    (dict(tile_q=0), ValueError, "tile_q", "0"),
    (dict(tile_q=True), TypeError, "tile_q", "True"),
    (dict(min_chunk=0), ValueError, "min_chunk", "0"),
    (dict(min_chunk=True), TypeError, "min_chunk", "True"),
    (dict(min_chunk="128"), TypeError, "min_chunk", "'128'"),
]:
    BAD.append(pytest.param(plan_balanced, _kw, _exc, _name, _val, id=f"balanced-{_name}-{_val}"))


@pytest.mark.parametrize("fn, kw, exc, name, value", BAD)
def test_bad_plan_input_is_refused_by_name(fn, kw, exc, name, value):
    kw = dict(kw)
    lens = kw.pop("lengths", GOOD)
    args = dict(kv_heads=2, num_ctas=4) | kw
    with pytest.raises(exc) as info:
        fn(lens, **args)
    msg = str(info.value)
    assert type(info.value) is exc, f"{type(info.value).__name__}: {msg}"
    assert re.search(rf"(?<![A-Za-z0-9_])({name})(?![A-Za-z0-9_])", msg), f"{name!r} not named in: {msg}"
    if value is not None:
        assert value in msg, f"value {value!r} not shown in: {msg}"


def test_lengths_in_other_forms_give_the_same_plan():
    lens = [(1, 10), (3, 200), (2, 77)]
    kw = dict(kv_heads=2, num_ctas=5, group=2)
    for make in (plan_balanced, plan_per_request, plan_fixed_split):
        want = make(lens, **kw)
        for other in (
            [list(p) for p in lens],
            tuple(lens),
            [(1.0, 10.0), (3, 200.0), (2, 77)],
            [(np.int64(1), np.int32(10)), (3, 200), (2, np.uint16(77))],
            iter(lens),
            ((q, k) for q, k in lens),
            np.array(lens),
            np.array(lens, np.int32),
            np.array(lens, np.uint16),
        ):
            _same_plan(make(other, **kw), want)
    big = lengths("longtail", 256, seed=0)
    _same_plan(
        plan_balanced(np.array(big), kv_heads=8, num_ctas=132, group=4),
        plan_balanced(big, kv_heads=8, num_ctas=132, group=4),
    )


@pytest.mark.parametrize(
    "bad, exc, value",
    [
        (np.array([[1, 10], [0, 5]]), ValueError, "0"),
        (np.array([[1, 2**31]]), ValueError, "2147483648"),
        (np.array([[1.0, 10.0]]), TypeError, "float64"),
        (np.array([[True, False]]), TypeError, "bool"),
        (np.array([1, 10]), TypeError, "(2,)"),
        (np.zeros((1, 3), int), TypeError, "(1, 3)"),
        (np.zeros((0, 2), int), ValueError, "empty"),
    ],
)
def test_bad_length_arrays_are_refused_by_name(bad, exc, value):
    for make in (plan_balanced, plan_per_request, plan_fixed_split):
        with pytest.raises(exc) as info:
            make(bad, kv_heads=2, num_ctas=4)
        assert type(info.value) is exc and "lengths" in str(info.value) and value in str(info.value)


@pytest.mark.parametrize(
    "args, exc, name, value",
    [
        (("gauss", 4), ValueError, "dist", "gauss"),
        (("uniform", True), TypeError, "batch", "True"),
        (("uniform", 0), ValueError, "batch", "0"),
        (("uniform", 2.5), TypeError, "batch", "2.5"),
    ],
)
def test_bad_lengths_input_is_refused_by_name(args, exc, name, value):
    with pytest.raises(exc) as info:
        lengths(*args, seed=0)
    msg = str(info.value)
    assert type(info.value) is exc, f"{type(info.value).__name__}: {msg}"
    assert re.search(rf"(?<![A-Za-z0-9_]){name}(?![A-Za-z0-9_])", msg), f"{name!r} not named in: {msg}"
    assert value in msg, f"value {value!r} not shown in: {msg}"


def test_plan_time_is_the_busiest_cta_at_its_share_of_the_bandwidth():
    """Plan.time by hand: the busiest CTA's K, V (and query rows in, partial outputs out) at
    bandwidth / SMs of an H100 SXM (3.35 TB/s, 132 SMs), bf16, head dim 128."""
    from attnlab.machine.schedule import plan_per_request

    batch = [(1, 1000), (1, 300), (1, 4096)]
    plan = plan_per_request(batch, kv_heads=1, num_ctas=132, group=4)
    per_cta = {}
    for w in plan.work:
        per_cta[w.cta] = per_cta.get(w.cta, 0) + (2 * (w.kv_end - w.kv_start) + 2 * len(w.q_rows)) * 128 * 2
    want = max(per_cta.values()) / (3.35e12 / 132)
    assert plan.time("H100-SXM") == pytest.approx(want, rel=1e-12)
    assert max(per_cta.values()) == (2 * 4096 + 2 * 4) * 256  # the 4096-token request
