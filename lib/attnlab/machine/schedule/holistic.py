"""FlashInfer's persistent "holistic" plan (`TwoStageHolisticPlan` in scheduler.cuh, planned by
`flashinfer.BatchAttention`): prefill chunks and decode steps in one plan, each with a query tile
of its own size, where Algorithm 1 (`plan_balanced`) gives the whole batch one tile.

The rules, as the source states them:

1. Two tile classes. A request whose packed query length l_qo x group exceeds 16 rows is
   prefill-like and gets 128-row query tiles; every other request gets 16-row tiles.
2. One chunk length from the whole batch: W = the KV tokens of every query tile of every request
   (each tile counted with its own class's tile size; under a causal mask a tile before the last
   sees keys up to kv - l_qo + ceil((t + 1) x tile / group) only), and
   L = f(max(ceil(W x kv_heads / #CTA), 1)) with f(x) = 128 for x <= 128, else x rounded up to a
   multiple of 256. The 128-row class divides it again: L_128 = L // min(kv_heads, 2) ("chunked
   prefill is much more expensive than decode"); the 16-row class takes L_16 = L.
3. Each query tile's KV is cut into chunks of its class's length (the last one shorter; a tile
   with no keys is one empty item). A chunk is one item per KV head.
4. No sorting: the items go out in order (the 128-row class first, then the 16-row class;
   requests in arrival order; query tiles, then chunks, then KV heads), each to the least-loaded
   CTA. An item costs 2 x (its tile's rows: 128 or 16, however many rows it holds) + its chunk's
   KV tokens: `cost_function(cluster_tile_q, len)`, which counts a tile's rows, not the packed
   rows a decode step fills.

FlashInfer's heap breaks ties between equally loaded CTAs as std::pop_heap leaves them; this one
takes the lower index (`lpt.list_schedule`). Equal loads are interchangeable, so the two give
the same loads in some order, the same makespan and the same utilization. FlashInfer sums the
costs in float32; these are exact integers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np

from attnlab.validate import as_bool, as_int
from attnlab.machine.schedule import pieces as _pieces
from attnlab.machine.schedule.lpt import list_schedule
from attnlab.machine.schedule.plans import Plan

__all__ = ["HOLISTIC_TILES", "DECODE_ROWS", "HolisticPlan", "plan_holistic", "holistic_chunk"]

HOLISTIC_TILES = (128, 16)  # CTA_TILE_Q_SIZES: prefill-like requests, decode requests
DECODE_ROWS = 16  # packed rows up to this: the 16-row class


class _Batch(NamedTuple):
    """What run_plan and the workspace read from a plan's batch."""

    qo: np.ndarray
    kv: np.ndarray
    group: int
    kv_heads: int


class _Items:
    """A plan's items as pieces (one per (query tile, KV chunk)) under every KV head in a row."""

    def __init__(self, cols: tuple, seq: np.ndarray, kv_heads: int, batch: _Batch):
        self.pieces, self.split = cols, batch
        n = len(seq)
        piece = np.repeat(np.arange(n), kv_heads)
        head = np.tile(np.arange(kv_heads), n)
        head.setflags(write=False)
        self.piece_and_head = (piece, head)
        cost = np.repeat(seq, kv_heads)
        cost.setflags(write=False)
        self.cost = cost


@dataclass(frozen=True, eq=False)
class HolisticPlan(Plan):
    """A `Plan` whose items carry one of two query tiles: `tile_rows[j]` is 128 or 16 (tile_q is
    0: no one tile for the batch). `chunks` = (L_128, L_16), the KV chunk length of each class;
    `prefill_like` marks the requests of the 128-row class."""

    chunks: tuple = (0, 0)
    prefill_like: np.ndarray = field(default=None, repr=False)

    @cached_property
    def tile_rows(self) -> np.ndarray:
        """The query tile (rows) of each item: 128 for a prefill-like request, else 16."""
        rows = np.where(self.prefill_like[self.request], HOLISTIC_TILES[0], HOLISTIC_TILES[1])
        rows.setflags(write=False)
        return rows

    @cached_property
    def q_tile(self) -> np.ndarray:
        tile = self.q_start // self.tile_rows
        tile.setflags(write=False)
        return tile

    @property
    def launched_rows(self) -> int:
        """Tensor-core rows the items' query tiles provide, each tile once per KV head."""
        first = self.kv_start == 0
        return int(self.tile_rows[first].sum())


def holistic_chunk(work_tokens: int, kv_heads: int, num_ctas: int) -> tuple:
    """(L_128, L_16) for W = work_tokens KV tokens over all query tiles: L = f(max(ceil(W x
    kv_heads / num_ctas), 1)), f(x) = 128 for x <= 128, else x rounded up to a multiple of 256;
    L_128 = L // min(kv_heads, 2), L_16 = L.

    >>> holistic_chunk(1000, 8, 132), holistic_chunk(40000, 8, 132), holistic_chunk(40000, 1, 132)
    ((64, 128), (1280, 2560), (512, 512))
    """
    work_tokens = as_int("work_tokens", work_tokens, 0, None)
    kv_heads = as_int("kv_heads", kv_heads, 1, _pieces.MAX_KV_HEADS)
    num_ctas = as_int("num_ctas", num_ctas, 1, _pieces.MAX_CTAS)
    x = max(-(-work_tokens * kv_heads // num_ctas), 1)
    limit = 128 if x <= 128 else -(-x // 256) * 256
    return limit // min(kv_heads, 2), limit


def _tile_ends(qo, kv, packed, tile, ntiles, group, causal):
    """Per query tile (request-major): its request and index, and where its keys end."""
    req = np.repeat(np.arange(len(qo)), ntiles)
    t = np.arange(int(ntiles.sum())) - np.repeat(np.cumsum(ntiles) - ntiles, ntiles)
    end = kv[req]
    if causal:
        tq = tile[req]
        early = t + 1 < ntiles[req]
        reach = kv[req] - qo[req] + -(-((t + 1) * tq) // group)
        end = np.where(early, np.maximum(np.minimum(reach, kv[req]), 0), end)
    return req, t, end


def plan_holistic(
    lengths, *, kv_heads: int, num_ctas: int, group: int = 1, causal: bool = False
) -> HolisticPlan:
    """FlashInfer's two-tile-class persistent plan (module docstring) of (l_qo, l_kv) pairs:
    prefill-like requests (l_qo x group > 16) in 128-row query tiles, the rest in 16-row tiles,
    KV chunks of the class's length, the items in FlashInfer's order, each to the least-loaded
    CTA. kv_heads in 1 .. 2^16, num_ctas in 1 .. 2^20 (FlashInfer: two per SM below head dim
    256), group >= 1, causal a bool (bottom-right aligned).

    >>> p = plan_holistic([(1, 1000)] * 3 + [(64, 2048)], kv_heads=2, num_ctas=16, group=4)
    >>> p.chunks, len(p.work), sorted(set(p.tile_rows.tolist()))
    ((512, 1024), 22, [16, 128])
    """
    qo, kv = _pieces.requests(lengths)
    kv_heads = as_int("kv_heads", kv_heads, 1, _pieces.MAX_KV_HEADS)
    num_ctas = as_int("num_ctas", num_ctas, 1, _pieces.MAX_CTAS)
    group = as_int("group", group, 1, _pieces.INT32_MAX)
    causal = as_bool("causal", causal)
    if int(qo.max()) * group > _pieces.INT32_MAX:
        raise ValueError(
            f"group={group} packs {int(qo.max())} x {group} query rows; valid: "
            f"l_qo x group <= {_pieces.INT32_MAX}"
        )
    packed = qo * group
    prefill_like = packed > DECODE_ROWS
    prefill_like.setflags(write=False)
    tile = np.where(prefill_like, HOLISTIC_TILES[0], HOLISTIC_TILES[1])
    ntiles = -(-packed // tile)
    _, _, end = _tile_ends(qo, kv, packed, tile, ntiles, group, causal)
    l128, l16 = holistic_chunk(int(end.sum()), kv_heads, num_ctas)
    order = np.concatenate([np.flatnonzero(prefill_like), np.flatnonzero(~prefill_like)])
    o_qo, o_kv, o_packed, o_tile, o_ntiles = qo[order], kv[order], packed[order], tile[order], ntiles[order]
    req, t, end = _tile_ends(o_qo, o_kv, o_packed, o_tile, o_ntiles, group, causal)
    limit = np.where(prefill_like[order][req], l128, l16)
    nchunks = np.maximum(-(-end // limit), 1)  # a tile with no keys: one empty item
    if int(nchunks.sum()) * kv_heads > _pieces.MAX_ITEMS:
        raise ValueError(
            f"lengths cut into {int(nchunks.sum()):,} pieces x kv_heads={kv_heads} is "
            f"{int(nchunks.sum()) * kv_heads:,} work items; valid: at most "
            f"{_pieces.MAX_ITEMS:,}"
        )
    tix = np.repeat(np.arange(len(req)), nchunks)
    c = np.arange(len(tix)) - np.repeat(np.cumsum(nchunks) - nchunks, nchunks)
    r, tt, lim = req[tix], t[tix], limit[tix]
    rows = o_tile[r]
    q_start = tt * rows
    q_end = np.minimum(q_start + rows, o_packed[r])
    kv_start = np.minimum(c * lim, end[tix])
    kv_end = np.minimum(kv_start + lim, end[tix])
    seq = 2 * rows + (kv_end - kv_start)
    cols = (order[r], q_start, q_end, kv_start, kv_end)
    schedule = list_schedule(seq, num_ctas, kv_heads)
    items = _Items(cols, seq, kv_heads, _Batch(qo, kv, group, kv_heads))
    return HolisticPlan("holistic", num_ctas, 0, schedule.loads, schedule, items, (l128, l16), prefill_like)
