"""The three plans of a batch and how a plan runs (lecture §5.6): who computes which piece of
which request on which CTA, and how the pieces are merged back.

    plan_per_request   one work item per (request, KV head, query tile): the whole KV at once
    plan_fixed_split   the KV cut into fixed chunks (1024 tokens), items in arrival order
    plan_balanced      FlashInfer's Algorithm 1: a maximum chunk L_kv from the total work,
                       chunks of at most L_kv, longest first, each to the least-loaded CTA

A Plan is the planner's decision (the CTAs and their loads, from `lpt.list_schedule`, exactly
`lpt.heap_schedule`'s assignment) over the items cut by `pieces`; its per-item columns (cta,
start, cost, request, ...), `work` and `merge` are built when first read. `run_plan` executes a
decode plan in numpy, item by item, then the merge in the plan's order.

This file is long because the Plan, its three planners and `run_plan` share the plan's private items
and schedule (`_items`, `_schedule`): the columns are built from them when first read, and
`run_plan` checks the arrays against them; apart, each would reach into the others' private fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from attnlab.machine.schedule import pieces as _pieces
from attnlab.validate import as_array, as_dtype_bytes, as_int
from attnlab.machine.schedule.lpt import Schedule, list_schedule
from attnlab.machine.hardware import get_gpu, sm_share_time
from attnlab.core.softmax import attention_state, merge_states

__all__ = [
    "KV_TILES",
    "WorkItem",
    "Plan",
    "PLAN_COLUMNS",
    "plan_per_request",
    "plan_fixed_split",
    "plan_balanced",
    "run_plan",
    "decode_group",
]

KV_TILES = (32, 64, 128)  # FlashInfer's KV tile menu
PLAN_COLUMNS = ("request", "kv_head", "q_start", "q_end", "kv_start", "kv_end", "cost", "cta", "start")


@dataclass(frozen=True)
class WorkItem:
    request: int
    kv_head: int
    q_rows: range  # packed query rows of this tile (l_qo x group rows, tiled by T_q)
    kv_start: int
    kv_end: int
    cta: int
    cost: int


def _column(index: int, doc: str):
    """A read-only item column gathered from the pieces of one KV head on first use."""

    def column(self) -> np.ndarray:
        col = self._items.pieces[index][self._items.piece_and_head[0]]
        col.setflags(write=False)
        return col

    column.__doc__ = doc
    return cached_property(column)


@dataclass(frozen=True, eq=False)
class Plan:
    """A schedule. Its items, in the order the CTAs take them, are columns: read-only int64
    arrays with one entry per item (PLAN_COLUMNS). Item j covers packed query rows
    q_start[j]:q_end[j] and KV positions kv_start[j]:kv_end[j] of request[j] under KV head
    kv_head[j], costs cost[j] and runs on CTA cta[j] from start[j], the load of that CTA before
    it, to start[j] + cost[j].

    The planner decides the CTAs and their loads; each column is built when first read, and
    `work` (WorkItems) and `merge` from the columns, so a plan read only for its loads costs no
    more than the decision."""

    name: str
    num_ctas: int
    tile_q: int
    loads: np.ndarray  # summed cost per CTA
    _schedule: Schedule = field(repr=False)
    _items: _pieces.Items = field(repr=False)

    request = _column(0, "The request of each item.")
    q_start = _column(1, "First packed query row (l_qo x group rows, tiled by tile_q).")
    q_end = _column(2, "One past the last packed query row.")
    kv_start = _column(3, "First KV position of the item's chunk.")
    kv_end = _column(4, "One past the last KV position.")

    @property
    def cta(self) -> np.ndarray:
        """The CTA of each item."""
        return self._schedule.cta

    @property
    def start(self) -> np.ndarray:
        """The load of the item's CTA before it: where the item begins on that CTA's timeline."""
        return self._schedule.start

    @property
    def cost(self) -> np.ndarray:
        """alpha x query rows + beta x KV tokens of each item."""
        return self._items.cost

    @property
    def l_qo(self) -> np.ndarray:
        """The query length of each request the plan was made for (1: a decode step)."""
        qo = self._items.split.qo
        qo.setflags(write=False)
        return qo

    @property
    def group(self) -> int:
        """The GQA group the plan was made for: query heads per KV head."""
        return self._items.split.group

    @property
    def kv_head(self) -> np.ndarray:
        """The KV head of each item."""
        return self._items.piece_and_head[1]

    @cached_property
    def work(self) -> tuple:
        """WorkItem per item, in the order the CTAs take them."""
        cols = (
            self.request,
            self.kv_head,
            self.q_start,
            self.q_end,
            self.kv_start,
            self.kv_end,
            self.cta,
            self.cost,
        )
        return tuple(
            WorkItem(r, h, range(q0, q1), a, b, c, x)
            for r, h, q0, q1, a, b, c, x in zip(*(col.tolist() for col in cols))
        )

    @cached_property
    def q_tile(self) -> np.ndarray:
        """The query tile of each item within its request: q_start // (the item's tile rows)."""
        tile = self.q_start // self.tile_q
        tile.setflags(write=False)
        return tile

    @cached_property
    def merge_order(self) -> tuple:
        """(item indices sorted by output, then kv_start; where each output's run begins, and the
        end), int64 arrays: the order `merge` lists and `fixed_size_workspace` packs."""
        tile = self.q_tile
        order = np.lexsort((self.kv_start, tile, self.kv_head, self.request))
        r, h, t = self.request[order], self.kv_head[order], tile[order]
        cut = np.flatnonzero((r[1:] != r[:-1]) | (h[1:] != h[:-1]) | (t[1:] != t[:-1])) + 1
        return order, np.concatenate([[0], cut, [len(order)]])

    @cached_property
    def merge(self) -> tuple:
        """((request, kv_head, q_tile), item indices by kv_start) per output tile, outputs sorted."""
        order, ends = self.merge_order
        tile = self.q_tile
        idx, ends = order.tolist(), ends.tolist()
        r, h, t = self.request[order].tolist(), self.kv_head[order].tolist(), tile[order].tolist()
        return tuple(((r[a], h[a], t[a]), tuple(idx[a:b])) for a, b in zip(ends, ends[1:]))

    @property
    def num_outputs(self) -> int:
        """Output tiles (request, KV head, query tile): the merge groups."""
        return len(self.merge_order[1]) - 1

    @property
    def makespan(self) -> int:
        return int(self.loads.max())

    @property
    def utilization(self) -> float:
        """Mean load over the makespan; 0.0 when no item costs anything (alpha = beta = 0)."""
        top = self.makespan
        return float(self.loads.sum() / (self.num_ctas * top)) if top else 0.0

    def time(self, gpu="H100-SXM", *, head_dim: int = 128, dtype_bytes: int = 2) -> float:
        """Seconds under the SM-sharing model: the busiest CTA streams its K and V chunks (and
        its query tiles in, partial outputs out) at bandwidth / SMs. head_dim in [1, 65536];
        dtype_bytes an integer in [1, 16] or 0.5, 0.25, 0.125 (packed fp4 and below)."""
        g = get_gpu(gpu)
        head_dim = as_int("head_dim", head_dim, 1, 1 << 16)
        dtype_bytes = as_dtype_bytes("dtype_bytes", dtype_bytes)
        if dtype_bytes > 16:
            raise ValueError(
                f"dtype_bytes={dtype_bytes} is out of range; valid: 1 <= dtype_bytes <= 16, "
                f"or 0.5, 0.25, 0.125"
            )
        rows = 2 * (self.kv_end - self.kv_start) + 2 * (self.q_end - self.q_start)  # < 2^34
        moved = rows * float(head_dim * dtype_bytes)
        per = np.bincount(self.cta, weights=moved, minlength=self.num_ctas)
        return sm_share_time(1, float(per.max()), g, sms=max(g.sms, self.num_ctas)).time


def _plan(name: str, split: _pieces.Split, seq, copies, order, blocks, index) -> Plan:
    """The items, costs seq (each entry `copies` items in a row), to the CTAs in that order;
    order None: the pieces longest first, seq sorted so (see `_pieces.Items` for the rest)."""
    schedule = list_schedule(seq, split.num_ctas, copies, descending=order is None)
    return Plan(
        name,
        split.num_ctas,
        split.tile_q,
        schedule.loads,
        schedule,
        _pieces.Items(split, seq, copies, order, blocks, index),
    )


def _in_arrival_order(name: str, split: _pieces.Split) -> Plan:
    order = np.arange(len(split.cost))
    if len(split.cost) == len(split.per):  # one piece per request: its heads in a row
        return _plan(name, split, split.cost, split.kv_heads, order, None, None)
    blocks = (np.cumsum(split.per) - split.per, split.per)
    piece, head = _pieces.expand(order, blocks, split.kv_heads)
    return _plan(name, split, split.cost[piece], 1, order, blocks, (piece, head))


def plan_per_request(
    lengths, *, kv_heads: int, num_ctas: int, group: int = 1, alpha: int = 2, beta: int = 1, tile_q=None
) -> Plan:
    """One item per (request, KV head, query tile) over its whole KV, in arrival order."""
    return _in_arrival_order(
        "per-request", _pieces.split(lengths, kv_heads, num_ctas, group, alpha, beta, tile_q, None)
    )


def plan_fixed_split(
    lengths,
    *,
    chunk: int = 1024,
    kv_heads: int,
    num_ctas: int,
    group: int = 1,
    alpha: int = 2,
    beta: int = 1,
    tile_q=None,
) -> Plan:
    """The KV cut into chunks of `chunk` tokens, items in arrival order."""
    chunk = as_int("chunk", chunk, 1, None)  # before split: "balanced" is not a chunk
    chunk = min(chunk, _pieces.INT32_MAX)  # beyond any l_kv, a chunk is the whole KV
    split = _pieces.split(lengths, kv_heads, num_ctas, group, alpha, beta, tile_q, chunk)
    return _in_arrival_order(f"fixed {chunk}", split)


def plan_balanced(
    lengths,
    *,
    kv_heads: int,
    num_ctas: int,
    group: int = 1,
    alpha: int = 2,
    beta: int = 1,
    tile_q=None,
    min_chunk: int = 1,
) -> Plan:
    """FlashInfer's Algorithm 1. L_kv = ceil(kv_heads sum_i ceil(packed_i / T_q) l_kv_i / #CTA);
    chunks of at most L_kv; longest item first (ties: in arrival order), each to the
    least-loaded CTA (ties: the lower index). The lengths: (l_qo, l_kv) pairs, or an integer
    array of shape (n, 2).

    min_chunk (tokens, default 1: the algorithm as the paper states it) raises L_kv to at least
    that: FlashInfer's decode planner never cuts below 128 tokens (max(128 / page_size, 1)
    pages), which keeps a small batch from becoming hundreds of tiny items and wide merges.

    >>> p = plan_balanced([(1, 1000)] + [(1, 100)] * 7, kv_heads=1, num_ctas=4)
    >>> p.makespan, round(p.utilization, 2)
    (458, 0.94)
    >>> len(plan_balanced([(1, 1588)], kv_heads=8, num_ctas=264).work), \\
    ...     len(plan_balanced([(1, 1588)], kv_heads=8, num_ctas=264, min_chunk=128).work)
    (264, 104)
    """
    min_chunk = as_int("min_chunk", min_chunk, 1, _pieces.INT32_MAX)
    split = _pieces.split(lengths, kv_heads, num_ctas, group, alpha, beta, tile_q, "balanced", min_chunk)
    longest_first = np.sort(split.values)[::-1]  # the costs are all the rounds need
    return _plan("balanced", split, longest_first, split.kv_heads, None, None, None)


def run_plan(plan: Plan, q, k, v) -> np.ndarray:
    """Execute a decode plan in numpy: q (batch, kv_heads * group, d); k, v one array
    (kv_heads, l_kv, d) per request. Each item's partial state over its KV chunk, then the
    merge in the plan's order. Packed row r of KV head h is query head h * group + r.

    The arrays must be those the plan was made for: a decode plan (every request l_qo = 1; a
    prefill plan is refused, whatever its packed rows look like), batch, kv_heads, group and each
    request's l_kv are checked against it by name, so a plan never reads part of a request."""
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be a Plan, got {type(plan).__name__}")
    split = plan._items.split
    n, kv_heads = len(split.kv), split.kv_heads
    q = as_array("q", q, ndim=3, shape="(batch, kv_heads * group, d)")
    group = decode_group(plan, "run_plan")
    if q.shape[:2] != (n, kv_heads * group):
        raise ValueError(
            f"q has shape {q.shape}; the plan wants (batch={n}, kv_heads x group={kv_heads} x {group}, d)"
        )
    d = q.shape[2]
    ks, vs = _per_request("k", k, n), _per_request("v", v, n)
    for i, (l_kv, ki, vi) in enumerate(zip(split.kv.tolist(), ks, vs)):
        ki = ks[i] = as_array(f"k[{i}]", ki, ndim=3, shape="(kv_heads, l_kv, d)")
        vi = vs[i] = as_array(f"v[{i}]", vi, ndim=3, shape="(kv_heads, l_kv, d_v)")
        if ki.shape != (kv_heads, l_kv, d):
            raise ValueError(
                f"k[{i}] has shape {ki.shape}; the plan wants (kv_heads={kv_heads}, "
                f"l_kv={l_kv}) for request {i}, and q's head dim d={d}"
            )
        if vi.shape[:2] != (kv_heads, l_kv) or (i and vi.shape[2] != vs[0].shape[2]):
            raise ValueError(
                f"v[{i}] has shape {vi.shape}; the plan wants (kv_heads={kv_heads}, "
                f"l_kv={l_kv}, d_v) for request {i}, one d_v for all"
            )
    d_v = vs[0].shape[2]
    states = []
    for w in plan.work:
        kr = ks[w.request][w.kv_head, w.kv_start : w.kv_end]
        vr = vs[w.request][w.kv_head, w.kv_start : w.kv_end]
        heads = [w.kv_head * group + r for r in w.q_rows]  # decode: l_qo = 1
        states.append(attention_state(q[w.request, heads], kr, vr))
    o = np.zeros((n, kv_heads * group, d_v), np.result_type(q.dtype, vs[0].dtype, np.float32))
    for (r, h, _t), js in plan.merge:
        oi, _ = merge_states([states[j] for j in js])
        rows = plan.work[js[0]].q_rows
        o[r, [h * group + x for x in rows]] = oi
    return o


def decode_group(plan: Plan, who: str = "a decode kernel") -> int:
    """The GQA group of a decode plan; ValueError naming l_qo when the plan was made for a request
    with more than one query (its packed rows l_qo x group would read as a larger group)."""
    qo = plan._items.split.qo
    if (qo != 1).any():
        i = int(np.argmax(qo != 1))
        raise ValueError(
            f"{who} runs decode plans only (every request l_qo = 1); this plan was made "
            f"for request {i} with l_qo={int(qo[i])} queries and group={plan.group}"
        )
    return plan.group


def _per_request(name: str, xs, n: int) -> list:
    """One array per request: a list/tuple of n, or an array whose first axis has n entries."""
    if isinstance(xs, (str, bytes, dict, set, frozenset)) or not hasattr(xs, "__len__"):
        raise TypeError(f"{name} must be one (kv_heads, l_kv, d) array per request, got {type(xs).__name__}")
    if len(xs) != n:
        raise ValueError(f"{name} has {len(xs)} entries; the plan has {n} requests")
    return list(xs)
