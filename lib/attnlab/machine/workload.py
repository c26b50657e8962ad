"""Request lengths for the scheduling demos: seeded length distributions, the exact batches
notebook 05 uses, committed in data/request_lengths.json (written by `python -m attnlab.course.batches`,
which records the seed and the generator's parameters beside every batch), and what a batch's
query lengths do to FlashInfer's query tiles (`tile_waste`)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import numpy as np

from attnlab.catalog import data_path
from attnlab.validate import as_counts, as_int, as_sequence, choice, fields_equal
from attnlab.machine.schedule.pieces import INT32_MAX, query_tile

__all__ = ["DISTS", "lengths", "RECORDED_BATCHES", "recorded_lengths", "TileWaste", "tile_waste"]

DISTS = ("constant", "uniform", "zipf", "longtail")
#: The largest batch `lengths` makes (a list of that many Python pairs is ~100 MiB).
MAX_BATCH = 1 << 20


def lengths(
    dist: str, batch: int, *, seed: int, l_qo: int = 1, mean: int = 4096, max_len: int = 131072
) -> list[tuple[int, int]]:
    """A seeded batch of (l_qo, l_kv): 'constant' (every request `mean`), 'uniform' (1..2 mean),
    'zipf' (a = 1.5, scaled by mean / 4), 'longtail' (lognormal, sigma 1.2, median mean / 3),
    clipped to [1, max_len]. Lengths are int32 as FlashInfer's indptr arrays are: l_qo, mean and
    max_len in [1, 2^31 - 1]; batch in [1, 2^20]."""
    dist = choice("dist", dist, DISTS)
    batch = as_int("batch", batch, 1, MAX_BATCH)
    rng = np.random.default_rng(as_int("seed", seed, 0, None))
    mean = as_int("mean", mean, 1, INT32_MAX)
    max_len = as_int("max_len", max_len, 1, INT32_MAX)
    l_qo = as_int("l_qo", l_qo, 1, INT32_MAX)
    if dist == "constant":
        kv = np.full(batch, mean)
    elif dist == "uniform":
        kv = rng.integers(1, 2 * mean + 1, batch)
    elif dist == "zipf":  # a draw past max_len / scale is clipped anyway: cut it
        scale = max(1, mean // 4)  # first, so the product stays far inside int64
        kv = np.minimum(rng.zipf(1.5, batch), max_len // scale + 1) * scale
    else:
        kv = np.round(rng.lognormal(np.log(mean / 3), 1.2, batch))
    kv = np.clip(kv, 1, max_len).astype(np.int64)
    return [(l_qo, int(x)) for x in kv]


#: Batch sizes data/request_lengths.json holds for every distribution.
RECORDED_BATCHES = tuple(1 << i for i in range(9))


@functools.lru_cache(maxsize=1)
def _recorded() -> dict:
    with open(data_path("request_lengths.json"), encoding="utf-8") as f:
        return json.load(f)


def recorded_lengths(dist: str, batch: int) -> list[tuple[int, int]]:
    """The committed batch of (l_qo, l_kv) that notebook 05 uses: `lengths(dist, batch, seed=0)`
    as recorded in data/request_lengths.json (the file says the seed and the parameters).

    >>> recorded_lengths("longtail", 4)
    [(1, 1588), (1, 1165), (1, 2944), (1, 1548)]
    """
    dist = choice("dist", dist, DISTS)
    batch = as_int("batch", batch, 1, MAX_BATCH)
    table = _recorded()["batches"][dist]
    if str(batch) not in table:
        raise ValueError(
            f"batch={batch} is not recorded in data/request_lengths.json; valid: "
            f"{', '.join(table)} (workload.lengths makes a batch of any size)"
        )
    return [(int(q), int(k)) for q, k in table[str(batch)]]


@dataclass(frozen=True, eq=False)
class TileWaste:
    """A batch's packed query rows cut into T_q-row tiles, per request (arrays read-only)."""

    tile_q: int
    packed: np.ndarray  # l_qo x group rows
    tiles: np.ndarray  # ceil(packed / tile_q): query tiles, each one pass over the request's KV
    idle: np.ndarray  # tiles x tile_q - packed: tensor-core rows that compute nothing

    __eq__ = fields_equal  # arrays compared as wholes
    __hash__ = None

    @property
    def idle_fraction(self) -> float:
        return float(self.idle.sum() / (self.tiles.sum() * self.tile_q))


def tile_waste(l_qo, group: int = 1, head_dim: int = 128, tile_q=None) -> TileWaste:
    """Tiles and idle rows when each request's l_qo x group rows fill tiles of T_q rows; T_q is
    `query_tile` of the batch's average packed length unless `tile_q` fixes it. Packed rows
    l_qo x group and tile_q fit int32 (FlashInfer's arrays): each at most 2^31 - 1. l_qo is a
    list (tuple, range, 1-D array) of at most 2^20 requests, in order; its length is checked
    before any entry is read.

    >>> w = tile_waste([1, 1, 129])                   # average 43.7 packed rows -> 64-row tiles
    >>> w.tile_q, w.tiles.tolist(), w.idle.tolist(), f"{w.idle_fraction:.0%}"
    (64, [1, 1, 3], [63, 63, 63], '59%')
    """
    if isinstance(l_qo, np.ndarray) and l_qo.ndim != 1:
        raise TypeError(f"l_qo must be a list of query lengths, got an array of shape {l_qo.shape}")
    if hasattr(l_qo, "__len__") and not isinstance(l_qo, (str, bytes)) and len(l_qo) > MAX_BATCH:
        raise ValueError(f"l_qo holds {len(l_qo):,} requests; valid: at most {MAX_BATCH:,}")
    l_qo = as_sequence("l_qo", l_qo, "a list of query lengths")
    group, head_dim = as_int("group", group, 1, INT32_MAX), as_int("head_dim", head_dim, 1, None)
    if not l_qo:
        raise ValueError("l_qo is empty; valid: at least one request")
    if len(l_qo) > MAX_BATCH:
        raise ValueError(f"l_qo holds {len(l_qo):,} requests; valid: at most {MAX_BATCH:,}")
    try:  # all at once; the loop below only names a bad entry
        qo = as_counts("l_qo", l_qo, 1, INT32_MAX)[0]
    except (TypeError, ValueError):
        qo = np.array([as_int(f"l_qo[{i}]", n, 1, INT32_MAX) for i, n in enumerate(l_qo)], np.int64)
    if qo.ndim != 1:
        raise TypeError(f"l_qo must be a list of query lengths (numbers), got shape {qo.shape}")
    top = int(qo.max())
    if top * group > INT32_MAX:
        raise ValueError(
            f"group={group} packs {top} x {group} query rows; valid: l_qo x group "
            f"<= {INT32_MAX} (int32, as FlashInfer's arrays)"
        )
    packed = qo * group
    tq = (
        query_tile(float(packed.mean()), head_dim)
        if tile_q is None
        else as_int("tile_q", tile_q, 1, INT32_MAX)
    )
    tiles = -(-packed // tq)
    idle = tiles * tq - packed
    for a in (packed, tiles, idle):
        a.setflags(write=False)
    return TileWaste(tq, packed, tiles, idle)
