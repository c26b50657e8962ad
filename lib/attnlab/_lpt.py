"""List scheduling: items taken in a fixed order, each handed to the least-loaded CTA (ties: the
lower CTA index). With the items sorted longest first this is LPT, FlashInfer's Algorithm 1.

`list_schedule_heapq` is the plain heap loop, one pop and push per item: the reference.
`list_schedule` gives exactly the same assignment with numpy work per *round* of up to one item
per CTA, not per item.

Why the rounds are exact. Give CTA c with load L the key L * 2^k + c (2^k > num_ctas - 1): the
least-loaded-lower-index rule takes the smallest key, all keys differ, and integer costs keep
them exact. Sort the keys, K_1 < K_2 < ... < K_m, and let the next items cost c_1, c_2, ....
Item i goes to the CTA of K_i for every i <= b exactly when K_i < min_{j<i} (K_j + c_j 2^k) for
every i <= b: by induction, once items 1..i-1 went to K_1..K_{i-1}, the heap holds their new
keys K_j + c_j 2^k and the untouched K_i < K_{i+1} < ...; the smallest is K_i exactly when it is
below every new key. K_i rises with i and the prefix minimum falls, so the condition holds for
a prefix: the largest b is the number of keys below min_j (K_j + c_j 2^k), taken over the
round's window (a key j past b is at least K_j + 2^k > K_b and does not move the count; a zero
cost is why the count takes keys equal to the minimum, so that a round hands out >= 1 item).
A round costs a few numpy calls on m numbers; the longest-first batch of the lecture (2,056
items on 132 CTAs) takes 17 rounds.

Copies. When every cost stands for `copies` consecutive items (FlashInfer's KV heads of one
piece) and g = gcd(copies, m) > 1, CTAs g q .. g q + g - 1 stay in step: their keys are adjacent
(equal loads, consecutive indices), so g equal items in a row go one to each of them, in index
order (the first one's new key is above the others' while its cost is positive). The schedule
is then that of m / g CTAs on copies / g copies of each cost, CTA q standing for g q + r.
"""
from __future__ import annotations

import heapq
from math import gcd

import numpy as np

__all__ = ["list_schedule", "list_schedule_heapq"]

_KEY_LIMIT = 1 << 62            # keys, and a key plus one item's cost, stay below 2^63
_HEAP_BELOW = 10                # fewer CTAs than this (after copies): the heap loop is quicker


def list_schedule_heapq(cost, num_ctas: int):
    """(start, cta, loads) by a heap of (load, cta): item i goes to `cta[i]`, whose load before
    it was `start[i]`; `loads` is each CTA's final sum. The reference for `list_schedule`.

    >>> start, cta, loads = list_schedule_heapq([5, 4, 3, 3], 2)
    >>> cta.tolist(), start.tolist(), loads.tolist()
    ([0, 1, 1, 0], [0, 0, 4, 5], [8, 7])
    """
    heap = [(0, c) for c in range(num_ctas)]
    n = len(cost)
    start, cta = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for i, x in enumerate(np.asarray(cost).tolist()):
        load, c = heap[0]
        start[i], cta[i] = load, c
        heapq.heapreplace(heap, (load + x, c))
    loads = np.zeros(num_ctas, np.int64)
    for load, c in heap:
        loads[c] = load
    return start, cta, loads


def list_schedule(cost, num_ctas: int, copies: int = 1, *, descending: bool = False):
    """The same (start, cta, loads) as `list_schedule_heapq(np.repeat(cost, copies), num_ctas)`
    for non-negative int64 `cost`, in rounds (the module docstring proves them). `descending`:
    cost is sorted longest first, so its ends are its bounds.

    >>> start, cta, loads = list_schedule(np.array([5, 4, 3, 3]), 2)
    >>> cta.tolist(), start.tolist(), loads.tolist()
    ([0, 1, 1, 0], [0, 0, 4, 5], [8, 7])
    >>> list_schedule(np.array([9, 2]), 4, copies=2)[1].tolist()      # 9, 9, 2, 2 on 4 CTAs
    [0, 1, 2, 3]
    """
    cost = np.asarray(cost, dtype=np.int64)
    n, m = len(cost), num_ctas
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(m, np.int64)
    lo, hi = (int(cost[-1]), int(cost[0])) if descending else (int(cost.min()), int(cost.max()))
    g = gcd(copies, m) if lo > 0 else 1         # a zero cost breaks the lock-step of copies
    mr, rep = m // g, copies // g
    if rep > 1:
        cost = np.repeat(cost, rep)
    k = (mr - 1).bit_length()
    if lo < 0 or ((hi * len(cost)) << k) >= _KEY_LIMIT:
        raise ValueError(f"costs in [{lo}, {hi}] on {m} CTAs: list_schedule needs costs >= 0 "
                         f"whose total times 2^{k} stays below 2^62")
    w = cost << k
    if mr < _HEAP_BELOW:
        keys, last = _heap_rounds(w, np.arange(mr, dtype=np.int64))
    else:
        keys, last = _rounds(w, mr)
    mask = (1 << k) - 1
    start, cta = keys >> k, keys & mask
    loads = np.empty(mr, np.int64)
    loads[last & mask] = last >> k
    if g > 1:
        cta = (cta[:, None] * g + np.arange(g)).ravel()
        start, loads = np.repeat(start, g), np.repeat(loads, g)
    return start, cta, loads


def _rounds(w, m):
    """Popped keys for shifted costs `w` (cost * 2^k) on m CTAs, and the final keys."""
    n = len(w)
    keys = np.arange(m, dtype=np.int64)         # sorted; CTA c starts with load 0: key c
    popped, pos = [], 0
    while pos < n:
        top = keys[0] + w[pos]                  # the lowest CTA's key after its item
        if n - pos >= m and keys[-1] < top:     # a round for every CTA, perhaps
            b = m
            new = keys + w[pos:pos + m]
        else:                                   # the CTAs below `top`: an upper bound
            b = min(int(keys.searchsorted(top, "right")), n - pos)
            if b < _HEAP_BELOW:                 # short rounds: the heap is cheaper per item,
                done, keys = _heap_rounds(w[pos:pos + m], keys)     # for a while
                popped.append(done)
                pos += len(done)
                continue
            new = keys.copy()
            new[:b] += w[pos:pos + b]
        new.sort()
        if not keys[b - 1] < new[0]:            # a touched CTA is back below an untouched one
            b = int(keys.searchsorted(new[0], "right"))     # new[0] = min(touched): exact b
            new = keys.copy()
            new[:b] += w[pos:pos + b]
            new.sort()
        popped.append(keys[:b])
        keys, pos = new, pos + b
    return np.concatenate(popped), keys


def _heap_rounds(w, keys):
    """The plain heap loop on keys (load * 2^k + cta) from the sorted `keys` (a valid heap):
    the popped keys and the keys after, sorted."""
    heap = keys.tolist()
    out = []
    for x in w.tolist():
        key = heap[0]
        out.append(key)
        heapq.heapreplace(heap, key + x)
    heap.sort()
    return np.array(out, np.int64), np.array(heap, np.int64)
