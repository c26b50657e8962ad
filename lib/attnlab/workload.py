"""Request lengths for the scheduling demos: seeded length distributions, and the exact batches
notebook 05 uses, committed in data/request_lengths.json (written by `python -m attnlab.tools.batches`,
which records the seed and the generator's parameters beside every batch)."""
from __future__ import annotations

import functools
import json

import numpy as np

from ._catalog import data_path
from ._check import as_int, choice

__all__ = ["DISTS", "lengths", "RECORDED_BATCHES", "recorded_lengths"]

DISTS = ("constant", "uniform", "zipf", "longtail")


def lengths(dist: str, batch: int, *, seed: int, l_qo: int = 1, mean: int = 4096,
            max_len: int = 131072) -> list[tuple[int, int]]:
    """A seeded batch of (l_qo, l_kv): 'constant' (every request `mean`), 'uniform' (1..2 mean),
    'zipf' (a = 1.5, scaled by mean / 4), 'longtail' (lognormal, sigma 1.2, median mean / 3),
    clipped to [1, max_len]."""
    dist = choice("dist", dist, DISTS)
    batch = as_int("batch", batch, 1, None)
    rng = np.random.default_rng(as_int("seed", seed, 0, None))
    mean = as_int("mean", mean, 1, None)
    if dist == "constant":
        kv = np.full(batch, mean)
    elif dist == "uniform":
        kv = rng.integers(1, 2 * mean + 1, batch)
    elif dist == "zipf":
        kv = rng.zipf(1.5, batch) * max(1, mean // 4)
    else:
        kv = np.round(rng.lognormal(np.log(mean / 3), 1.2, batch))
    kv = np.clip(kv, 1, as_int("max_len", max_len, 1, None)).astype(int)
    return [(as_int("l_qo", l_qo, 1, None), int(x)) for x in kv]


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
    batch = as_int("batch", batch, 1, None)
    table = _recorded()["batches"][dist]
    if str(batch) not in table:
        raise ValueError(f"batch={batch} is not recorded in data/request_lengths.json; valid: "
                         f"{', '.join(table)} (schedule.lengths makes a batch of any size)")
    return [(int(q), int(k)) for q, k in table[str(batch)]]
