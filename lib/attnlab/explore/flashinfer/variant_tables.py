"""The lecture's variants at a long context as one table (notebook 05, §5.4): the tiles each mask
leaves empty, partial and full (`tile_mask`) and the K/V traffic its empty tiles skip (`tile_io`;
only masks skip, transforms touch every tile). The gallery explorer draws the same counts at
picture sizes."""

from __future__ import annotations

import math

import numpy as np

from attnlab.validate import as_int, as_sequence
from attnlab.core.variants import (
    TILE_KINDS,
    alibi,
    causal,
    sigmoid,
    sink_window,
    sliding_window,
    soft_cap,
    tile_io,
    tile_mask,
    variant_of,
)
from attnlab.explore import style

__all__ = ["variant_table", "TABLE_VARIANTS"]


#: the lecture's variants at a long context (Mistral's and Gemma 2's kind of window, cap, slope)
TABLE_VARIANTS = (
    causal(),
    sliding_window(512),
    sink_window(4, 512),
    soft_cap(30),
    soft_cap(30) & sliding_window(512),
    sigmoid(0),
    alibi(0.0625),
)


def variant_table(n: int = 4096, tile: int = 128, variants=TABLE_VARIANTS) -> str:
    """Tiles of each variant at N_q = N_k = n (from `tile_mask`) and the K/V traffic its empty
    tiles skip (from `tile_io`; only masks skip, transforms touch every tile).

    >>> print(variant_table())
    n = 4096 tokens, 128 x 128 tiles (1,024 in all); K/V traffic skipped against plain attention
    variant                             empty  partial  full  K/V skipped
    ----------------------------------  -----  -------  ----  -----------
    causal                                496       32   496        48.4%
    sliding_window(512)                   874       60    90        85.4%
    sink_window(4, 512)                   847       87    90        82.7%
    soft_cap(30)                            0        0  1024         0.0%
    soft_cap(30) & sliding_window(512)    874       60    90        85.4%
    sigmoid(0)                              0        0  1024         0.0%
    alibi(0.0625)                           0        0  1024         0.0%
    """
    n = as_int("n", n, 1, 1 << 20)  # the mask is built a tile row at a time
    tile = as_int("tile", tile, 1, n)
    variants = [variant_of(v) for v in as_sequence("variants", variants, "a list of variants")]
    plain = tile_io([], n, n, tile, tile, 1)
    rows = []
    for v in variants:
        counts = dict(zip(*np.unique(tile_mask(v, n, n, tile, tile), return_counts=True)))
        kv = tile_io(v, n, n, tile, tile, 1)
        rows.append(
            {
                "name": v.name,
                **{kind: int(counts.get(kind, 0)) for kind in TILE_KINDS},
                "kv": 1 - (kv["K"][0] + kv["V"][0]) / (plain["K"][0] + plain["V"][0]),
            }
        )
    tiles = math.ceil(n / tile) ** 2
    return (
        f"n = {n} tokens, {tile} x {tile} tiles ({tiles:,} in all); K/V traffic skipped against "
        f"plain attention\n"
        + style.table(
            rows,
            {"name": "variant", "empty": "empty", "partial": "partial", "full": "full", "kv": "K/V skipped"},
            {"kv": ".1%"},
        )
    )
