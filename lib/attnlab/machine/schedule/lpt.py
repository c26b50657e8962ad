"""List scheduling: items taken in a fixed order, each handed to the least-loaded CTA (ties: the
lower CTA index). With the items sorted longest first this is LPT, FlashInfer's Algorithm 1.

The plain way is `heap_schedule`, Algorithm 1 as written: a heap of (load, cta), one pop and one
push per item, a Python loop that costs about a third of a microsecond per item. `list_schedule`,
the fast path the planners use, gives exactly the same assignment with numpy work per *round*,
up to one item per CTA, instead; the tests compare the two item by item on random batches.

Why a round is exact. Give CTA c with load L the key L * 2^k + c, with 2^k > num_ctas - 1: the
least-loaded-lower-index rule takes the smallest key, all keys differ, and integer costs keep
them exact. Sort the keys, K_1 < K_2 < ..., let the next items cost c_1, c_2, ... and let
N_j = K_j + c_j 2^k, CTA j's key once it takes item j. Items 1..b go to the CTAs of K_1..K_b in
turn exactly when no K_i (i <= b) lies above an N_j with j < i: by induction the heap then holds
N_1..N_{i-1} and K_i < K_{i+1} < ..., whose smallest is K_i. Over a window of w items, with
T = min_{j<=w} N_j, the largest such b is #{i <= w: K_i <= T}: a K_i above T = N_j has j < i
(N_j >= K_j), so it waits, and a K_i <= T is below every N_j of another CTA. Since every
N_j >= K_j >= K_1, b >= 1 even for zero costs. A round adds c_i 2^k to K_i for i <= b and sorts
the keys again: the longest-first batch of the lecture (2,056 items, 132 CTAs, 8 KV heads)
takes 17 rounds.

Copies. When each cost stands for `copies` equal items in a row (the KV heads of one piece) and
g = gcd(copies, m) > 1, CTAs g q, ..., g q + g - 1 move in step: equal loads and consecutive
indices make their keys adjacent, so g equal items in a row go one to each, in index order (the
first one's new key is above the others' while its cost is positive). The schedule is that of
m / g CTAs on copies / g copies of each cost, CTA q standing for g q .. g q + g - 1.
"""

from __future__ import annotations

import heapq
from functools import cached_property
from math import gcd

import numpy as np

from attnlab.validate import as_bool, as_counts, as_int, as_reals, as_sequence, short
from attnlab.machine.schedule.pieces import MAX_CTAS, MAX_ITEMS
from attnlab.machine.schedule.tiles import query_tile

__all__ = ["heap_schedule", "balanced_heapq", "Schedule", "list_schedule"]

_KEY_LIMIT = 1 << 62  # keys, and a key plus one item's cost, stay below 2^63
_HEAP_BELOW = 10  # rounds of fewer items than this: the heap loop is quicker
_SEARCH = np.ndarray.searchsorted
_CAT = np.concatenate


def heap_schedule(cost, num_ctas: int) -> tuple[list, list, list]:
    """Algorithm 1's assignment, the plain way: the items taken in the order given, each to the
    least-loaded CTA, the lower index on ties. (cta, start, loads): each item's CTA and that CTA's
    load before it, and the load of every CTA at the end. cost: finite real numbers >= 0 (this
    loop, unlike `list_schedule`, needs no integers); num_ctas: 1 .. 2^20.

    >>> heap_schedule([5, 4, 3, 3], 2)
    ([0, 1, 1, 0], [0, 0, 4, 5], [8, 7])
    """
    cost = as_sequence("cost", cost, "a list of item costs")
    as_reals("cost", cost, 0.0)  # NaN, inf, negatives, bools, strings refused
    num_ctas = as_int("num_ctas", num_ctas, 1, MAX_CTAS)
    heap = [(0, c) for c in range(num_ctas)]  # (load, cta): the smallest pair is the rule's
    cta, start = [], []
    for x in cost:
        load, c = heapq.heappop(heap)
        cta.append(c)
        start.append(load)
        heapq.heappush(heap, (load + x, c))
    loads = [0] * num_ctas
    for load, c in heap:
        loads[c] = load
    return cta, start, loads


def balanced_heapq(lens, kv_heads: int, num_ctas: int, group: int) -> tuple[tuple, list, tuple]:
    """The balanced plan (`plans.plan_balanced`) the straightforward way: Python loops over the
    requests' (l_qo, l_kv) pairs and their pieces, `sorted()` longest first, then `heap_schedule`'s
    pop and push per item. (work, loads, merge) in the layout of a Plan's, each work item the tuple
    (request, kv_head, q_rows, kv_start, kv_end, cta, cost) that `dataclasses.astuple` makes of a
    WorkItem: `make bench` and notebook 05 time it beside the fast planner, which must agree.

    >>> from dataclasses import astuple
    >>> from attnlab.machine.schedule import plan_balanced
    >>> kw = dict(kv_heads=2, num_ctas=4, group=4)
    >>> work, loads, merge = balanced_heapq([(1, 300), (4, 50), (1, 7)], **kw)
    >>> plan = plan_balanced([(1, 300), (4, 50), (1, 7)], **kw)
    >>> [astuple(w) for w in plan.work] == list(work), plan.loads.tolist() == loads, plan.merge == merge
    (True, True, True)
    """
    lens = as_sequence("lens", lens, "a list of (l_qo, l_kv) pairs")
    if not lens:
        raise ValueError("lens must hold at least one (l_qo, l_kv) pair; got none")
    kv_heads, num_ctas = as_int("kv_heads", kv_heads, 1, None), as_int("num_ctas", num_ctas, 1, MAX_CTAS)
    group = as_int("group", group, 1, None)
    pairs = [
        (as_int(f"lengths[{i}] l_qo", q, 1, None), as_int(f"lengths[{i}] l_kv", k, 1, None))
        for i, (q, k) in enumerate(lens)
    ]
    packed = [q * group for q, _ in pairs]
    tq = query_tile(sum(packed) / len(packed))
    total = kv_heads * sum(-(-p // tq) * k for p, (_, k) in zip(packed, pairs))
    chunk = max(1, -(-total // num_ctas))
    items = [
        (r, h, range(t0, min(t0 + tq, p)), a, min(a + chunk, k))
        for r, ((_, k), p) in enumerate(zip(pairs, packed))
        for h in range(kv_heads)
        for t0 in range(0, p, tq)
        for a in range(0, k, chunk)
    ]
    costs = [2 * len(rows) + (b - a) for _, _, rows, a, b in items]
    order = sorted(range(len(items)), key=lambda i: -costs[i])
    ctas, _, loads = heap_schedule([costs[i] for i in order], num_ctas)
    work = [(*items[i], cta, costs[i]) for i, cta in zip(order, ctas)]
    outputs: dict = {}
    for j, (request, kv_head, q_rows, *_) in enumerate(work):
        outputs.setdefault((request, kv_head, q_rows.start // tq), []).append(j)
    merge = tuple((key, tuple(sorted(js, key=lambda j: work[j][3]))) for key, js in sorted(outputs.items()))
    return tuple(work), loads, merge


class Schedule:
    """Where each item runs: cta[i] and start[i] (its CTA's load before it), read-only int64,
    worked out from the popped keys of the m / g CTAs when first read; loads per CTA."""

    def __init__(self, loads: np.ndarray, keys: np.ndarray, bits: int, g: int):
        self.loads, self._keys, self._bits, self._g = loads, keys, bits, g

    @cached_property
    def cta(self) -> np.ndarray:
        cta = self._keys & ((1 << self._bits) - 1)
        if self._g > 1:  # CTA q stands for g q, g q + 1, ..., in turn
            cta = np.repeat(cta * self._g, self._g)
            cta += np.arange(len(cta)) % self._g
        cta.setflags(write=False)
        return cta

    @cached_property
    def start(self) -> np.ndarray:
        start = self._keys >> self._bits
        if self._g > 1:
            start = np.repeat(start, self._g)
        start.setflags(write=False)
        return start


def list_schedule(cost, num_ctas: int, copies: int = 1, *, descending: bool = False) -> Schedule:
    """The Schedule of the items np.repeat(cost, copies), taken in that order, each to the
    least-loaded CTA (ties: the lower index): `heap_schedule`'s assignment, a round at a time.
    cost: integers >= 0 (an int64 array, or anything `as_counts` reads; a float that is not an
    integer is refused, not truncated: the keys below are exact only for integers); num_ctas in
    1 .. 2^20; copies >= 1; descending (a bool): cost is sorted longest first, so its ends are its
    bounds (checked).

    >>> s = list_schedule(np.array([5, 4, 3, 3]), 2)
    >>> s.cta.tolist(), s.start.tolist(), s.loads.tolist()
    ([0, 1, 1, 0], [0, 0, 4, 5], [8, 7])
    >>> list_schedule(np.array([9, 2]), 4, copies=2).cta.tolist()      # 9, 9, 2, 2 on 4 CTAs
    [0, 1, 2, 3]
    """
    if not (type(cost) is np.ndarray and cost.dtype == np.int64 and cost.ndim == 1):  # planners' fast path
        cost = _costs(cost)
    num_ctas = (
        num_ctas
        if type(num_ctas) is int and 1 <= num_ctas <= MAX_CTAS
        else as_int("num_ctas", num_ctas, 1, MAX_CTAS)
    )
    copies = copies if type(copies) is int and copies >= 1 else as_int("copies", copies, 1, None)
    descending = as_bool("descending", descending)
    if len(cost) * copies > MAX_ITEMS:
        raise ValueError(
            f"cost holds {len(cost):,} items x copies={short(copies)}; valid: at most "
            f"{MAX_ITEMS:,} items in all"
        )
    if len(cost) == 0:
        return Schedule(np.zeros(num_ctas, np.int64), np.zeros(0, np.int64), 0, 1)
    lo, hi = (int(cost[-1]), int(cost[0])) if descending else (int(cost.min()), int(cost.max()))
    if descending and len(cost) > 1 and bool((cost[1:] > cost[:-1]).any()):
        raise ValueError(
            "cost is not sorted longest first, but descending=True says it is; valid: "
            "descending=False, or cost sorted in non-increasing order"
        )
    g = gcd(copies, num_ctas) if lo > 0 else 1  # a zero cost breaks the lock-step of copies
    m, rep = num_ctas // g, copies // g
    k = (m - 1).bit_length()
    if lo < 0 or ((hi * len(cost) * rep) << k) >= _KEY_LIMIT:
        raise ValueError(
            f"cost holds values in [{lo}, {hi}] on num_ctas={num_ctas} CTAs; valid: "
            f"costs >= 0 whose total times 2^{k} stays below 2^62"
        )
    w = cost << k
    if rep > 1:
        w = np.repeat(w, rep)
    first = np.arange(m, dtype=np.int64)  # sorted keys: every load 0
    keys, last = _heap(w, first) if m < _HEAP_BELOW else _rounds(w, first)
    loads = np.empty(num_ctas, np.int64)  # CTA q's load is that of g q .. g q + g - 1
    loads.reshape(m, g)[last & ((1 << k) - 1)] = (last >> k)[:, None]
    loads.setflags(write=False)
    return Schedule(loads, keys, k, g)


def _costs(cost) -> np.ndarray:
    """cost as a 1-D int64 array of integers >= 0, checked by name."""
    if isinstance(cost, (set, frozenset, dict)) or np.ndim(cost) != 1:
        raise TypeError(
            f"cost must be a 1-D sequence of item costs in order, got "
            f"{type(cost).__name__} of {np.ndim(cost)} dimensions"
        )
    a, _ = as_counts("cost", cost, 0, None)
    return a


def _rounds(w, keys):
    """Popped keys for shifted costs w (cost * 2^k) from the sorted keys, and the keys after
    (in any order).

    A round hands an item to each *active* key. The keys are kept sorted in two parts, active
    and frozen, every frozen key above every active one, so a frozen key is never the smallest
    while an active one waits and the batch condition (module docstring) decides alone. After a
    round the keys it left untouched are frozen, and frozen keys below the largest new key join
    the active ones again, which restores the split: a round then covers about the batch that
    can go, with no search for it first."""
    n, popped, pos = len(w), [], 0
    act, frozen = keys, None
    while pos < n:
        b = len(act)
        if b > n - pos:
            b = n - pos
        if b < _HEAP_BELOW and pos:  # short rounds: the heap for a while
            every = act if frozen is None else _CAT((act, frozen))
            done, act = _heap(w[pos : pos + len(every)], every)
            frozen = None
            popped.append(done)
            pos += len(done)
            continue
        new = (act if b == len(act) else act[:b]) + w[pos : pos + b]
        new.sort()
        if act.item(b - 1) >= new.item(0):  # some N_j <= K_b: new[0] = T, b = #{K_i <= T}
            b = int(_SEARCH(act, new.item(0) + 1))
            new = act[:b] + w[pos : pos + b]
            new.sort()
        pos += b
        if b == len(act):
            popped.append(act)
        else:  # the untouched wait, frozen
            popped.append(act[:b])
            frozen = act[b:] if frozen is None else _CAT((act[b:], frozen))
        if pos == n:  # done: the keys after, in any order
            act, frozen = (new if frozen is None else _CAT((new, frozen))), None
            break
        if frozen is not None and frozen.item(0) < new.item(-1):
            j = int(_SEARCH(frozen, new.item(-1)))
            act = _CAT((new, frozen[:j]))
            act.sort()
            frozen = frozen[j:] if j < len(frozen) else None
        else:
            act = new
    return np.concatenate(popped), act


def _heap(w, keys):
    """`heap_schedule`'s loop on the packed keys (load * 2^k + cta), from sorted keys (a valid heap): popped keys, keys after
    (sorted)."""
    heap = keys.tolist()
    out = []
    for x in w.tolist():
        key = heap[0]
        out.append(key)
        heapq.heapreplace(heap, key + x)
    heap.sort()
    return np.array(out, np.int64), np.array(heap, np.int64)
