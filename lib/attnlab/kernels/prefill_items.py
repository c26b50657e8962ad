"""The work items of `kernels.paged_prefill`, listed on the host: query tiles (BLOCK_R rows of
one request's q_len x g rows) and the pieces of each tile's keys that its programs walk.

    prefill_tiles(q_lens, group, block_r)        (request, first row) of every tile
    tile_ends(...)                                where each tile's keys end
    prefill_items(q_lens, kv_lens, group, ...)    (request, first row, first key, end key, slot)
                                                  of every piece, and the slots a row has
"""

from __future__ import annotations

import numpy as np

__all__ = ["prefill_tiles", "tile_ends", "prefill_items"]


def prefill_tiles(q_lens, group: int, block_r: int) -> tuple[np.ndarray, np.ndarray]:
    """The launch's tiles, (request, first row) int32 arrays: request i's q_len x group rows in
    ceil(q_len x group / block_r) tiles of block_r rows (none for q_len = 0).

    >>> prefill_tiles([1, 5, 0], 4, 16)
    (array([0, 1, 1], dtype=int32), array([ 0,  0, 16], dtype=int32))
    """
    n = -(-np.asarray(q_lens, dtype=np.int64) * group // block_r)
    req = np.repeat(np.arange(len(n)), n)
    start = np.concatenate([[0], np.cumsum(n)[:-1]])
    row = (np.arange(int(n.sum())) - np.repeat(start, n)) * block_r
    return req.astype(np.int32), row.astype(np.int32)


def tile_ends(q_lens, kv_lens, group: int, block_r: int, req, row, *, causal_end: bool) -> np.ndarray:
    """Each tile's keys end (int64): with `causal_end` one past its last row's last visible key
    (kv_len - q_len + that row's token + 1, clipped to 0..kv_len), else its request's kv_len."""
    ql, kl = np.asarray(q_lens, np.int64)[req], np.asarray(kv_lens, np.int64)[req]
    if not causal_end:
        return kl
    last = np.minimum((np.asarray(row, np.int64) + block_r - 1) // group, ql - 1)
    return np.clip(kl - ql + last + 1, 0, kl)


def prefill_items(q_lens, kv_lens, group: int, block_r: int, block_n: int, *, causal_end: bool, chunk: int):
    """The launch's work items, int32 arrays (request, first row, first key, end key, slot) and the
    slots a row has: each tile (`prefill_tiles`) over its keys 0:end (end: the tile's last row's
    last visible key + 1 when `causal_end`, else the request's kv_len), cut into
    ceil(end / chunk) pieces of whole block_n-key tiles, piece j in slot j. Every tile keeps its
    first item, even with no key to see (its rows get o = 0, lse = -inf).

    >>> [a.tolist() for a in prefill_items([2, 1], [40, 9], 1, 16, 16, causal_end=False, chunk=32)[:5]]
    [[0, 0, 1], [0, 0, 0], [0, 32, 0], [32, 40, 9], [0, 1, 0]]
    """
    req, row = prefill_tiles(q_lens, group, block_r)
    end = tile_ends(q_lens, kv_lens, group, block_r, req, row, causal_end=causal_end)
    pieces = np.maximum(1, -(-end // chunk))
    size = -(-(-(-end // pieces)) // block_n) * block_n  # each tile's pieces: whole key tiles
    t = np.repeat(np.arange(req.size), pieces)
    j = np.arange(t.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    kv0 = j * size[t]
    kv1 = np.minimum(kv0 + size[t], end[t])
    keep = (kv0 < kv1) | (j == 0)
    t, j, kv0, kv1 = t[keep], j[keep], kv0[keep], kv1[keep]
    i32 = lambda a: a.astype(np.int32)  # noqa: E731
    return i32(req[t]), i32(row[t]), i32(kv0), i32(kv1), i32(j), int(pieces.max(initial=1))
