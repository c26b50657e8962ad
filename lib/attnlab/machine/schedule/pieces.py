"""A batch of (l_qo, l_kv) requests cut into work pieces with numpy, for `attnlab.machine.schedule`.

`split` does what a plan needs first: `requests` (from `batch`) turns the lengths (a list of
pairs, each bad pair refused by its index as a loop over them would, or an (n, 2) integer
array) into int64 columns, `tiles.query_tile` picks FlashInfer's query tile, and every request is cut into query tiles
and KV chunks for one KV head. When each request is one query tile (decode) only the pieces'
costs are worked out; `pieces` lists them, in arrival order, when asked. `expand` lists the
items: blocks of pieces, each block under every KV head, head-major; `runs` finds the blocks of
a longest-first order (equal costs of one request, which keep their arrival order: head, then
piece).

The checks come first: every size (KV heads, CTAs, the items a cut makes) is bounded before
numpy allocates anything, in the same pass that cuts the batch; the lengths themselves are read
by `batch.requests`.
"""

from __future__ import annotations

from functools import cached_property
from typing import NamedTuple

import numpy as np

from attnlab.validate import as_int
from attnlab.machine.schedule.batch import INT32_MAX, requests
from attnlab.machine.schedule.tiles import TILE_MODES, _tile, query_tile

__all__ = [
    "TILE_MODES",
    "INT32_MAX",
    "MAX_KV_HEADS",
    "MAX_CTAS",
    "MAX_ITEMS",
    "query_tile",
    "Split",
    "Items",
    "split",
    "requests",
    "pieces",
    "expand",
    "runs",
]

_COEF_MAX = 2**20  # alpha, beta: with int32 lengths an item's cost stays below 2^52
MAX_KV_HEADS = 1 << 16  # KV heads of one batch
MAX_CTAS = 1 << 20  # CTAs of one plan (an H100 has 132 SMs)
MAX_ITEMS = 1 << 24  # items (pieces x KV heads) of one plan: ~100 bytes of columns each


def _count(name, value, lo, hi=None) -> int:
    """as_int, without its checks for a plain int in range (the planner runs per batch)."""
    if type(value) is int and lo <= value and (hi is None or value <= hi):
        return value
    return as_int(name, value, lo, hi)


class Split(NamedTuple):
    """A checked batch cut for one KV head: the pieces' costs (values: in no particular order;
    cost: in arrival order, None until `arrival_cost` when a longest-first plan needed only the
    values), pieces per request, what `pieces` needs to list them (cols: already listed), and the
    batch's l_qo and GQA group apart (packed = l_qo x group alone cannot tell a prefill of 3
    queries from a decode step of group 3)."""

    values: np.ndarray
    cost: np.ndarray | None
    per: np.ndarray
    kv_heads: int
    num_ctas: int
    tile_q: int
    kv: np.ndarray
    packed: np.ndarray
    tiles: np.ndarray | None
    chunk: int | None
    cols: tuple | None
    alpha: int
    beta: int
    qo: np.ndarray  # l_qo of every request (packed = qo x group)
    group: int

    def __eq__(self, other):  # arrays compared as wholes, not entry by entry
        if not isinstance(other, Split):
            return NotImplemented
        return all(map(_same, self, other))

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None

    def pieces(self) -> tuple:
        """(request, q_start, q_end, kv_start, kv_end) of every piece, in arrival order."""
        return self.cols or pieces(self.kv, self.packed, self.tiles, self.tile_q, self.chunk)[0]

    def arrival_cost(self, cols=None) -> np.ndarray:
        """Each piece's cost in arrival order (cols: the pieces, when already listed)."""
        if self.cost is not None:
            return self.cost
        _, q_start, q_end, kv_start, kv_end = cols or self.pieces()
        return self.alpha * (q_end - q_start) + self.beta * (kv_end - kv_start)


def _same(a, b) -> bool:
    """Equality of Split fields: arrays whole, tuples of them entry by entry."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


class Items:
    """Which piece each item of a plan is, worked out when first asked: the batch cut for one
    KV head, the costs handed to the scheduler (each standing for `copies` items), and the
    pieces in the order taken (None: longest first, sorted now) with, in arrival order, their
    blocks (see `expand`) or the (piece, kv_head) of every item when the costs needed them."""

    def __init__(self, split: Split, seq, copies: int, order=None, blocks=None, index=None):
        self.split, self.seq, self.copies = split, seq, copies
        self.order, self.blocks, self.index = order, blocks, index

    @cached_property
    def pieces(self) -> tuple:
        return self.split.pieces()

    @cached_property
    def piece_and_head(self) -> tuple:
        piece_head = self.index
        if piece_head is None and self.order is None:  # longest first: equal costs of one
            cost = self.split.arrival_cost(self.pieces)  # request are one block, heads then
            order = np.argsort(-cost, kind="stable")  # pieces, as they arrived
            piece_head = expand(order, runs(cost[order], self.pieces[0][order]), self.split.kv_heads)
        elif piece_head is None:
            piece_head = expand(self.order, self.blocks, self.split.kv_heads)
        piece_head[1].setflags(write=False)
        return piece_head

    @cached_property
    def cost(self) -> np.ndarray:
        cost = np.repeat(self.seq, self.copies) if self.copies > 1 else self.seq
        cost.setflags(write=False)
        return cost


def split(lens, kv_heads, num_ctas, group, alpha, beta, tile_q, chunk, min_chunk=1) -> Split:
    """The checked batch cut into one KV head's pieces (chunk "balanced": L_kv of FlashInfer's
    Algorithm 1, at least min_chunk tokens); a piece costs alpha x its query rows + beta x its KV
    tokens."""
    qo, kv = requests(lens)
    kv_heads = _count("kv_heads", kv_heads, 1, MAX_KV_HEADS)
    num_ctas = _count("num_ctas", num_ctas, 1, MAX_CTAS)
    group = _count("group", group, 1, INT32_MAX)
    if chunk not in (None, "balanced"):  # beyond any l_kv, a chunk is the whole KV
        chunk = min(_count("chunk", chunk, 1), INT32_MAX)
    alpha, beta = _count("alpha", alpha, 0, _COEF_MAX), _count("beta", beta, 0, _COEF_MAX)
    longest = int(qo.max()) * group
    if longest > INT32_MAX:
        raise ValueError(
            f"group={group} packs {longest // group} x {group} query rows; valid: l_qo x group <= {INT32_MAX}"
        )
    packed = qo * group
    tq = _tile(int(packed.sum()) // len(packed)) if tile_q is None else _count("tile_q", tile_q, 1, INT32_MAX)
    most = -(-longest // tq)  # the most tiles of one request
    tiles = None if most == 1 else (packed + (tq - 1)) // tq
    longest_first = chunk == "balanced"
    if longest_first:  # L_kv = ceil(kv_heads sum_i tiles_i l_kv_i / #CTA)
        kv_sum = int(kv.sum())
        if most * kv_sum * kv_heads >= 2**62:
            raise ValueError(
                f"lengths: up to {most * kv_sum * kv_heads:.3g} query tiles x KV "
                "tokens of work; valid: below 2^62"
            )
        work = kv_sum if tiles is None else int((tiles * kv).sum())
        chunk = max(min_chunk, -(-kv_heads * work // num_ctas))
    if tiles is None:  # one query tile each: costs without pieces
        per = np.ones(len(kv), np.int64) if chunk is None else (kv + (chunk - 1)) // chunk
        _bound_items(int(per.sum()), kv_heads, chunk)
        rows = alpha * packed
        cost = values = rows + (kv if beta == 1 else beta * kv)
        if len(cost) < int(per.sum()):  # chunks of `chunk` tokens, then the rest
            more = per - 1
            last = cost - (beta * chunk) * more
            full = rows + beta * chunk
            values = np.concatenate((last, np.repeat(full, more)))
            if longest_first:  # only the values are needed now
                cost = None
            else:
                cost = np.repeat(full, per)
                cost[np.cumsum(per) - 1] = last
        return Split(
            values, cost, per, kv_heads, num_ctas, tq, kv, packed, None, chunk, None, alpha, beta, qo, group
        )
    chunks = 1 if chunk is None else (kv + (chunk - 1)) // chunk
    _bound_items(int((tiles * chunks).sum()), kv_heads, chunk, tq)
    cols, per, rows, kv_len = pieces(kv, packed, tiles, tq, chunk)
    cost = alpha * rows + beta * kv_len
    return Split(
        cost, cost, per, kv_heads, num_ctas, tq, kv, packed, tiles, chunk, cols, alpha, beta, qo, group
    )


def _bound_items(n_pieces: int, kv_heads: int, chunk, tile_q=None) -> None:
    """Refuse a plan of more than MAX_ITEMS items before its columns are allocated."""
    if n_pieces * kv_heads > MAX_ITEMS:
        cut = f"KV chunks of chunk={chunk} tokens" if chunk is not None else "whole KV"
        tiles = f", query tiles of tile_q={tile_q} rows" if tile_q is not None else ""
        raise ValueError(
            f"lengths cut into {n_pieces:,} pieces ({cut}{tiles}) x kv_heads={kv_heads} "
            f"is {n_pieces * kv_heads:,} work items; valid: at most {MAX_ITEMS:,} "
            f"(use larger chunks or tiles)"
        )


def pieces(kv, packed, tiles, tile_q: int, chunk):
    """One KV head's pieces in arrival order (request, then query tile, then KV chunk): the
    (request, q_start, q_end, kv_start, kv_end) arrays, pieces per request, and each piece's
    query rows and KV tokens. packed: query rows per request; tiles: its tiles of tile_q rows
    (None: one each); chunk: KV tokens per chunk (None: all of them).

    >>> cols, per, rows, kv_len = pieces(np.array([5, 2]), np.array([20, 4]), np.array([2, 1]), 16, 3)
    >>> [c.tolist() for c in cols], per.tolist(), rows.tolist(), kv_len.tolist()
    ([[0, 0, 0, 0, 1], [0, 0, 16, 16, 0], [16, 16, 20, 20, 4], [0, 3, 0, 3, 0], [3, 5, 3, 5, 2]], [4, 1], [16, 16, 4, 4, 4], [3, 2, 3, 2, 2])
    """
    n = len(kv)
    chunks = np.ones(n, np.int64) if chunk is None else (kv + (chunk - 1)) // chunk
    per = chunks if tiles is None else tiles * chunks
    total = int(per.sum())
    if total == n:  # one piece per request
        zeros = np.zeros(n, np.int64)
        return (np.arange(n), zeros, packed, zeros, kv), per, packed, kv
    request = np.repeat(np.arange(n), per)
    u = np.arange(total) - np.repeat(np.cumsum(per) - per, per)  # index within the request
    if tiles is None:
        q_start, a = np.zeros(total, np.int64), u
        q_end = rows = packed[request]
    else:
        nc = chunks[request]
        t = u // nc
        a = u - t * nc
        q_start = t * tile_q
        q_end = np.minimum(q_start + tile_q, packed[request])
        rows = q_end - q_start
    if chunk is None:
        kv_start, kv_end = np.zeros(total, np.int64), kv[request]
        kv_len = kv_end
    else:
        kv_start = a * chunk
        kv_len = np.minimum(kv[request] - kv_start, chunk)
        kv_end = kv_start + kv_len
    return (request, q_start, q_end, kv_start, kv_end), per, rows, kv_len


def expand(order, blocks, kv_heads: int):
    """(piece, kv_head) of every item: the blocks of `order` one after the other, each block's
    pieces under KV head 0, then head 1, ...; blocks (starts, lengths) into order, None: one
    piece each.

    >>> [a.tolist() for a in expand(np.array([2, 0, 1]), (np.array([0, 1]), np.array([1, 2])), 2)]
    [[2, 2, 0, 1, 0, 1], [0, 1, 0, 0, 1, 1]]
    """
    if blocks is None:  # each piece's heads in a row
        return np.repeat(order, kv_heads), np.arange(len(order) * kv_heads) % kv_heads
    starts, lens = blocks
    j = np.repeat(np.arange(len(starts)), lens * kv_heads)
    s, ln = starts[j], lens[j]
    o = np.arange(len(j)) - kv_heads * s
    head = o // ln
    return order[s + o - head * ln], head


def runs(cost, request):
    """Blocks of equal (cost, request) in an order sorted by cost, stable (so one request's are
    next to each other): (starts, lengths), or None when every block is one piece.

    >>> runs(np.array([9, 5, 5, 5]), np.array([0, 1, 1, 2]))
    (array([0, 1, 3]), array([1, 2, 1]))
    """
    first = np.ones(len(cost), bool)
    first[1:] = (cost[1:] != cost[:-1]) | (request[1:] != request[:-1])
    if first.all():
        return None
    starts = np.flatnonzero(first)
    return starts, np.diff(starts, append=len(cost))
