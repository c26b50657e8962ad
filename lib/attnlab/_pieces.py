"""A batch of (l_qo, l_kv) requests cut into work pieces with numpy, for `attnlab.schedule`.

`split` does what a plan needs first: `requests` turns the pairs into int64 columns (each bad
pair refused by its index, as a loop over them would), `query_tile` picks FlashInfer's query
tile, and `pieces` cuts every request into query tiles and KV chunks for one KV head, in
arrival order. `expand` lists the items: blocks of pieces, each block under every KV head,
head-major; `runs` finds the blocks of a longest-first order (equal costs of one request, which
keep their arrival order: head, then piece).
"""
from __future__ import annotations

import struct
from itertools import starmap
from operator import itemgetter

import numpy as np

from ._check import as_int

__all__ = ["INT32_MAX", "query_tile", "split", "requests", "pieces", "expand", "runs"]

INT32_MAX = 2**31 - 1           # lengths and packed rows fit int32, as FlashInfer's indptr does
_COEF_MAX = 2**20               # alpha, beta: with int32 lengths an item's cost stays below 2^52
_PAIRS = {tuple, list}
_PACK = struct.Struct("qq").pack  # exactly two integers: floats, strings, None refused
_FIRST, _SECOND = itemgetter(0), itemgetter(1)


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


def split(lens, kv_heads, num_ctas, group, alpha, beta, tile_q, chunk):
    """The checked batch cut into one KV head's pieces, chunk "balanced" meaning L_kv of
    FlashInfer's Algorithm 1: (pieces, pieces per request, their costs alpha x rows + beta x KV
    tokens, kv_heads, num_ctas, the query tile)."""
    qo, kv = requests(lens)
    kv_heads = as_int("kv_heads", kv_heads, 1, None)
    num_ctas = as_int("num_ctas", num_ctas, 1, None)
    group = as_int("group", group, 1, None)
    if chunk not in (None, "balanced"):
        chunk = as_int("chunk", chunk, 1, None)
    alpha, beta = as_int("alpha", alpha, 0, _COEF_MAX), as_int("beta", beta, 0, _COEF_MAX)
    if int(qo.max()) * group > INT32_MAX:
        raise ValueError(f"group={group} packs {int(qo.max())} x {group} query rows; valid: "
                         f"l_qo x group <= {INT32_MAX}")
    packed = qo * group
    tq = query_tile(int(packed.sum()) / len(packed)) if tile_q is None else as_int("tile_q", tile_q, 1, None)
    tiles = (packed + (tq - 1)) // tq
    if chunk == "balanced":                         # L_kv = ceil(kv_heads sum_i tiles_i l_kv_i / #CTA)
        kv_sum, most = int(kv.sum()), int(tiles.max())
        if most * kv_sum * kv_heads >= 2**62:
            raise ValueError(f"lengths: up to {most * kv_sum * kv_heads:.3g} query tiles x KV "
                             "tokens of work; valid: below 2^62")
        work = kv_sum if most == 1 else int((tiles * kv).sum())
        chunk = max(1, -(-kv_heads * work // num_ctas))
    cols, per = pieces(kv, packed, tiles, tq, chunk)
    cost = alpha * (cols[2] - cols[1]) + beta * (cols[4] - cols[3])
    return cols, per, cost, kv_heads, num_ctas, tq


def requests(lens) -> tuple[np.ndarray, np.ndarray]:
    """(l_qo, l_kv) of every request as int64 arrays, each in [1, 2^31 - 1].

    >>> [a.tolist() for a in requests([(1, 100), (3, 50)])]
    [[1, 3], [100, 50]]
    """
    if type(lens) in _PAIRS and lens and set(map(type, lens)) <= _PAIRS:
        try:
            both = np.frombuffer(b"".join(starmap(_PACK, lens)), np.int64).reshape(-1, 2)
        except (struct.error, TypeError, OverflowError):
            both = None
        if both is not None and 1 <= both.min() and both.max() <= INT32_MAX:
            qo, kv = both[:, 0], both[:, 1]         # True packs as 1: where a 1 is, look closer
            if not any(col.min() == 1 and bool in set(map(type, map(get, lens)))
                       for col, get in ((qo, _FIRST), (kv, _SECOND))):
                return qo, kv
    if isinstance(lens, (str, bytes)) or not hasattr(lens, "__iter__"):
        raise TypeError(f"lengths must be a list of (l_qo, l_kv) pairs, got {lens!r}")
    pairs = []
    for i, p in enumerate(lens):                    # the slow way, for the error's name
        if not isinstance(p, (tuple, list)) or len(p) != 2:
            raise TypeError(f"lengths[{i}]={p!r} must be an (l_qo, l_kv) pair")
        pairs.append((as_int(f"lengths[{i}] l_qo", p[0], 1, INT32_MAX),
                      as_int(f"lengths[{i}] l_kv", p[1], 1, INT32_MAX)))
    if not pairs:
        raise ValueError("lengths is empty; valid: at least one request")
    both = np.array(pairs, np.int64)
    return both[:, 0], both[:, 1]


def pieces(kv, packed, tiles, tile_q: int, chunk):
    """One KV head's pieces in arrival order (request, then query tile, then KV chunk) as
    (request, q_start, q_end, kv_start, kv_end) arrays, and the pieces of each request. packed:
    query rows per request, tiles: its tiles of tile_q rows, chunk: KV tokens (None: all).

    >>> cols, per = pieces(np.array([5, 2]), np.array([20, 4]), np.array([2, 1]), 16, 3)
    >>> [c.tolist() for c in cols], per.tolist()
    ([[0, 0, 0, 0, 1], [0, 0, 16, 16, 0], [16, 16, 20, 20, 4], [0, 3, 0, 3, 0], [3, 5, 3, 5, 2]], [4, 1])
    """
    n = len(kv)
    chunks = np.ones(n, np.int64) if chunk is None else (kv + (chunk - 1)) // chunk
    one_tile = int(tiles.max()) == 1
    per = chunks if one_tile else tiles * chunks
    total = int(per.sum())
    if total == n:                                  # one piece per request
        zeros = np.zeros(n, np.int64)
        return (np.arange(n), zeros, packed, zeros, kv), per
    request = np.repeat(np.arange(n), per)
    u = np.arange(total) - np.repeat(np.cumsum(per) - per, per)     # index within the request
    if one_tile:
        q_start, q_end, a = np.zeros(total, np.int64), packed[request], u
    else:
        nc = chunks[request]
        t = u // nc
        a = u - t * nc
        q_start = t * tile_q
        q_end = np.minimum(q_start + tile_q, packed[request])
    if chunk is None:
        kv_start, kv_end = np.zeros(total, np.int64), kv[request]
    else:
        kv_start = a * chunk
        kv_end = np.minimum(kv_start + chunk, kv[request])
    return (request, q_start, q_end, kv_start, kv_end), per


def expand(order, blocks, kv_heads: int):
    """(piece, kv_head) of every item: the blocks of `order` one after the other, each block's
    pieces under KV head 0, then head 1, ...; blocks (starts, lengths) into order, None: one
    piece each.

    >>> [a.tolist() for a in expand(np.array([2, 0, 1]), (np.array([0, 1]), np.array([1, 2])), 2)]
    [[2, 2, 0, 1, 0, 1], [0, 1, 0, 0, 1, 1]]
    """
    if blocks is None:                              # each piece's heads in a row
        return np.repeat(order, kv_heads), np.tile(np.arange(kv_heads), len(order))
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
