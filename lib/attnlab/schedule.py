"""Work partitioning for batched attention (lecture §5.6): who computes which piece of which
request on which CTA, and how the pieces are merged back.

Three plans over a batch of (l_qo, l_kv) requests, each KV head its own work:

    plan_per_request   one work item per (request, KV head, query tile): the whole KV at once
    plan_fixed_split   the KV cut into fixed chunks (1024 tokens), items in arrival order
    plan_balanced      FlashInfer's Algorithm 1: a maximum chunk L_kv from the total work,
                       chunks of at most L_kv, longest first, each to the least-loaded CTA

A request's query rows are packed with its GQA group (l_qo x group rows, as FlashInfer packs the
query heads that share a KV head) and cut into tiles of T_q rows (`query_tile`). An item costs
alpha x (its packed query rows) + beta x (its KV chunk's length), FlashInfer's Hopper cost
2 qo_len + kv_len. Every plan carries its merge plan: for each output tile, the items whose partial
states (o, lse) fold with ⊕, in a fixed order, so the result is bitwise reproducible.

What this leaves out on purpose: the prefill/decode split into separate kernels, the tile-size
search FlashInfer runs, and kernel launch costs; plan times use `hardware.sm_share_time`'s
"SMs share the bandwidth" model for memory-bound decode.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from ._check import as_array, as_int
from .hardware import get_gpu, sm_share_time
from .softmax import attention_state, merge_states
from .workload import DISTS, RECORDED_BATCHES, lengths, recorded_lengths  # noqa: F401 (re-exported)

__all__ = ["query_tile", "KV_TILES", "WorkItem", "Plan", "plan_per_request", "plan_fixed_split",
           "plan_balanced", "run_plan", "Workspace", "fixed_size_workspace", "lengths", "DISTS",
           "recorded_lengths", "RECORDED_BATCHES"]

KV_TILES = (32, 64, 128)              # FlashInfer's KV tile menu


def query_tile(avg_packed_qo_len: float, head_dim: int = 128) -> int:
    """FlashInfer's query tile for an average packed query length (l_qo x group).

    >>> [query_tile(n) for n in (1, 16, 17, 64, 65)], query_tile(65, head_dim=256)
    ([16, 16, 64, 64, 128], 64)
    """
    head_dim = as_int("head_dim", head_dim, 1, None)
    if isinstance(avg_packed_qo_len, bool) or not np.isfinite(avg_packed_qo_len) or avg_packed_qo_len <= 0:
        raise ValueError(f"avg_packed_qo_len={avg_packed_qo_len!r}; valid: a positive number")
    if avg_packed_qo_len > 64 and head_dim < 256:
        return 128
    return 64 if avg_packed_qo_len > 16 else 16


@dataclass(frozen=True)
class WorkItem:
    request: int
    kv_head: int
    q_rows: range             # packed query rows of this tile (l_qo x group rows, tiled by T_q)
    kv_start: int
    kv_end: int
    cta: int
    cost: int


@dataclass(frozen=True)
class Plan:
    name: str
    work: tuple               # WorkItem, in the order the CTAs take them
    num_ctas: int
    loads: np.ndarray         # summed cost per CTA (read-only)
    merge: tuple              # ((request, kv_head, q_tile), (item indices by kv_start)) per output
    tile_q: int

    @property
    def makespan(self) -> int:
        return int(self.loads.max())

    @property
    def utilization(self) -> float:
        return float(self.loads.sum() / (self.num_ctas * self.makespan))

    def time(self, gpu="H100-SXM", *, head_dim: int = 128, dtype_bytes: int = 2) -> float:
        """Seconds under the SM-sharing model: the busiest CTA streams its K and V chunks (and
        its query tiles in, partial outputs out) at bandwidth / SMs."""
        g = get_gpu(gpu)
        per = np.zeros(self.num_ctas)
        for w in self.work:
            per[w.cta] += (2 * (w.kv_end - w.kv_start) + 2 * len(w.q_rows)) * head_dim * dtype_bytes
        return sm_share_time(1, float(per.max()), g, sms=max(g.sms, self.num_ctas)).time


def _batch(lens, kv_heads, num_ctas, group):
    if isinstance(lens, (str, bytes)) or not hasattr(lens, "__iter__"):
        raise TypeError(f"lengths must be a list of (l_qo, l_kv) pairs, got {lens!r}")
    pairs = []
    for i, p in enumerate(lens):
        if not isinstance(p, (tuple, list)) or len(p) != 2:
            raise TypeError(f"lengths[{i}]={p!r} must be an (l_qo, l_kv) pair")
        pairs.append((as_int(f"lengths[{i}] l_qo", p[0], 1, None), as_int(f"lengths[{i}] l_kv", p[1], 1, None)))
    if not pairs:
        raise ValueError("lengths is empty; valid: at least one request")
    return (pairs, as_int("kv_heads", kv_heads, 1, None), as_int("num_ctas", num_ctas, 1, None),
            as_int("group", group, 1, None))


def _tiles(pairs, group, tile_q):
    packed = [l_qo * group for l_qo, _ in pairs]
    tq = query_tile(float(np.mean(packed))) if tile_q is None else as_int("tile_q", tile_q, 1, None)
    return packed, tq


def _pieces(pairs, kv_heads, packed, tq, chunk_of, alpha, beta):
    """Unassigned items (request, kv_head, q rows, kv_start, kv_end, cost) in arrival order."""
    items = []
    for r, ((_, l_kv), p) in enumerate(zip(pairs, packed)):
        chunk = chunk_of(l_kv)
        for h in range(kv_heads):
            for t0 in range(0, p, tq):
                rows = range(t0, min(t0 + tq, p))
                for a in range(0, l_kv, chunk):
                    b = min(a + chunk, l_kv)
                    items.append((r, h, rows, a, b, alpha * len(rows) + beta * (b - a)))
    return items


def _assign(name, items, num_ctas, tq, order):
    """Hand items, in `order`, each to the least-loaded CTA (ties: the lower index)."""
    heap = [(0, c) for c in range(num_ctas)]
    loads = np.zeros(num_ctas, np.int64)
    work = []
    for i in order:
        load, cta = heapq.heappop(heap)
        r, h, rows, a, b, cost = items[i]
        work.append(WorkItem(r, h, rows, a, b, cta, cost))
        loads[cta] = load + cost
        heapq.heappush(heap, (load + cost, cta))
    outputs: dict = {}
    for j, w in enumerate(work):
        outputs.setdefault((w.request, w.kv_head, w.q_rows.start // tq), []).append(j)
    merge = tuple((key, tuple(sorted(js, key=lambda j: work[j].kv_start)))
                  for key, js in sorted(outputs.items()))
    loads.setflags(write=False)
    return Plan(name, tuple(work), num_ctas, loads, merge, tq)


def plan_per_request(lengths, *, kv_heads: int, num_ctas: int, group: int = 1, alpha: int = 2,
                     beta: int = 1, tile_q=None) -> Plan:
    """One item per (request, KV head, query tile) over its whole KV, in arrival order."""
    pairs, kv_heads, num_ctas, group = _batch(lengths, kv_heads, num_ctas, group)
    packed, tq = _tiles(pairs, group, tile_q)
    items = _pieces(pairs, kv_heads, packed, tq, lambda l_kv: l_kv, alpha, beta)
    return _assign("per-request", items, num_ctas, tq, range(len(items)))


def plan_fixed_split(lengths, *, chunk: int = 1024, kv_heads: int, num_ctas: int, group: int = 1,
                     alpha: int = 2, beta: int = 1, tile_q=None) -> Plan:
    """The KV cut into chunks of `chunk` tokens, items in arrival order."""
    pairs, kv_heads, num_ctas, group = _batch(lengths, kv_heads, num_ctas, group)
    chunk = as_int("chunk", chunk, 1, None)
    packed, tq = _tiles(pairs, group, tile_q)
    items = _pieces(pairs, kv_heads, packed, tq, lambda l_kv: chunk, alpha, beta)
    return _assign(f"fixed {chunk}", items, num_ctas, tq, range(len(items)))


def plan_balanced(lengths, *, kv_heads: int, num_ctas: int, group: int = 1, alpha: int = 2,
                  beta: int = 1, tile_q=None) -> Plan:
    """FlashInfer's Algorithm 1. L_kv = ceil(kv_heads sum_i ceil(packed_i / T_q) l_kv_i / #CTA);
    chunks of at most L_kv; longest item first, each to the least-loaded CTA.

    >>> p = plan_balanced([(1, 1000)] + [(1, 100)] * 7, kv_heads=1, num_ctas=4)
    >>> p.makespan, round(p.utilization, 2)
    (458, 0.94)
    """
    pairs, kv_heads, num_ctas, group = _batch(lengths, kv_heads, num_ctas, group)
    packed, tq = _tiles(pairs, group, tile_q)
    total = kv_heads * sum(-(-p // tq) * l_kv for p, (_, l_kv) in zip(packed, pairs))
    max_chunk = max(1, -(-total // num_ctas))
    items = _pieces(pairs, kv_heads, packed, tq, lambda l_kv: max_chunk, alpha, beta)
    order = sorted(range(len(items)), key=lambda i: -items[i][5])       # stable: ties by arrival
    return _assign("balanced", items, num_ctas, tq, order)


def run_plan(plan: Plan, q, k, v) -> np.ndarray:
    """Execute a decode plan in numpy: q (batch, kv_heads * group, d); k, v one array
    (kv_heads, l_kv, d) per request. Each item's partial state over its KV chunk, then the
    merge in the plan's order. Packed row r of KV head h is query head h * group + r."""
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be a Plan, got {type(plan).__name__}")
    q = as_array("q", q, ndim=3, shape="(batch, kv_heads * group, d)")
    kv_heads = 1 + max(w.kv_head for w in plan.work)
    group = q.shape[1] // kv_heads
    if group * kv_heads != q.shape[1]:
        raise ValueError(f"q has {q.shape[1]} heads, not a multiple of the plan's {kv_heads} KV heads")
    states = []
    for w in plan.work:
        kr = as_array("k", k[w.request], ndim=3)[w.kv_head, w.kv_start:w.kv_end]
        vr = as_array("v", v[w.request], ndim=3)[w.kv_head, w.kv_start:w.kv_end]
        heads = [w.kv_head * group + r for r in w.q_rows]           # decode: l_qo = 1
        states.append(attention_state(q[w.request, heads], kr, vr))
    o = np.zeros(q.shape, np.result_type(q.dtype, np.float32))
    for (r, h, _t), js in plan.merge:
        oi, _ = merge_states([states[j] for j in js])
        rows = plan.work[js[0]].q_rows
        o[r, [h * group + x for x in rows]] = oi
    return o


@dataclass(frozen=True)
class Workspace:
    """A plan packed into fixed shapes, as a CUDA-graph-replayed persistent kernel reads it:
    item j of CTA c is (request, kv_head, q_start, q_end, kv_start, kv_end)[c, j] where valid."""
    items: np.ndarray         # int32 (max_ctas, max_items, 6)
    valid: np.ndarray         # bool (max_ctas, max_items)
    count: np.ndarray         # int32 (max_ctas,): items per CTA


def fixed_size_workspace(plan: Plan, max_ctas: int, max_items: int) -> Workspace:
    """Shapes depend on max_ctas and max_items only: a new batch changes contents, not shapes."""
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be a Plan, got {type(plan).__name__}")
    max_ctas = as_int("max_ctas", max_ctas, 1, None)
    max_items = as_int("max_items", max_items, 1, None)
    if plan.num_ctas > max_ctas:
        raise ValueError(f"the plan uses {plan.num_ctas} CTAs; max_ctas={max_ctas} holds fewer")
    items = np.zeros((max_ctas, max_items, 6), np.int32)
    valid = np.zeros((max_ctas, max_items), bool)
    count = np.zeros(max_ctas, np.int32)
    for w in plan.work:
        j = count[w.cta]
        if j >= max_items:
            raise ValueError(f"CTA {w.cta} has more than max_items={max_items} work items")
        items[w.cta, j] = (w.request, w.kv_head, w.q_rows.start, w.q_rows.stop, w.kv_start, w.kv_end)
        valid[w.cta, j] = True
        count[w.cta] += 1
    for a in (items, valid, count):
        a.setflags(write=False)
    return Workspace(items, valid, count)


@dataclass(frozen=True)
class TileWaste:
    """A batch's packed query rows cut into T_q-row tiles, per request (arrays read-only)."""
    tile_q: int
    packed: np.ndarray        # l_qo x group rows
    tiles: np.ndarray         # ceil(packed / tile_q): query tiles, each one pass over the request's KV
    idle: np.ndarray          # tiles x tile_q - packed: tensor-core rows that compute nothing

    @property
    def idle_fraction(self) -> float:
        return float(self.idle.sum() / (self.tiles.sum() * self.tile_q))


def tile_waste(l_qo, group: int = 1, head_dim: int = 128, tile_q=None) -> TileWaste:
    """Tiles and idle rows when each request's l_qo x group rows fill tiles of T_q rows; T_q is
    `query_tile` of the batch's average packed length unless `tile_q` fixes it.

    >>> w = tile_waste([1, 1, 129])                   # average 43.7 packed rows -> 64-row tiles
    >>> w.tile_q, w.tiles.tolist(), w.idle.tolist(), f"{w.idle_fraction:.0%}"
    (64, [1, 1, 3], [63, 63, 63], '59%')
    """
    if isinstance(l_qo, (str, bytes)) or not hasattr(l_qo, "__iter__"):
        raise TypeError(f"l_qo must be a list of query lengths, got {l_qo!r}")
    group, head_dim = as_int("group", group, 1, None), as_int("head_dim", head_dim, 1, None)
    packed = np.array([as_int(f"l_qo[{i}]", n, 1, None) for i, n in enumerate(l_qo)], np.int64) * group
    if not packed.size:
        raise ValueError("l_qo is empty; valid: at least one request")
    tq = query_tile(float(packed.mean()), head_dim) if tile_q is None else as_int("tile_q", tile_q, 1, None)
    tiles = -(-packed // tq)
    idle = tiles * tq - packed
    for a in (packed, tiles, idle):
        a.setflags(write=False)
    return TileWaste(tq, packed, tiles, idle)


__all__ += ["TileWaste", "tile_waste"]
