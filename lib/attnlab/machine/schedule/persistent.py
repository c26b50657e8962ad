"""A persistent prefill's tile lists (FA3's tile scheduler, on the host): the Gluon kernel's
`persistent` step launches one program per SM, and program p walks its own list of tiles, each
tile one (batch x head, query block) pair. Which tile goes to which program is decided here,
once per shape, in the order a causal launch wants them:

    longest first (LPT)  a causal query block m sees about m + 1 key tiles, so the blocks near the
                         bottom of the matrix are the long ones; they start first and the short
                         ones fill the end, where a launch of one tile per program would leave
                         SMs idle behind the last long tile
    heads in sections    tiles of `section` heads at a time, so that the programs working at the
                         same moment read the same few heads' K and V, which stay in L2 (FA3's
                         head swizzle); without a mask a section is one head's query blocks
    least loaded next    each tile, in that order, to the program with the least work so far
                         (ties: the lower index): `lpt.list_schedule`, Algorithm 1 of §5.6

A tile's cost is the number of key tiles it visits plus one (its Q load and its epilogue).
The result is (tiles, indptr): program p's tiles are tiles[indptr[p]:indptr[p + 1]], in the
order it runs them, each coded bh * num_m + m.

>>> tiles, indptr = persistent_tiles(2, 3, 384, 384, causal=True, programs=2, section=2)
>>> [(int(t) // 3, int(t) % 3) for t in tiles[indptr[0]:indptr[1]]]        # (bh, m): program 0
[(0, 2), (0, 1), (0, 0)]
>>> [(int(t) // 3, int(t) % 3) for t in tiles[indptr[1]:indptr[2]]]        # program 1
[(1, 2), (1, 1), (1, 0)]
"""

from __future__ import annotations

import numpy as np

from attnlab.validate import as_bool, as_int
from attnlab.machine.schedule.lpt import list_schedule

__all__ = ["persistent_tiles", "tile_order", "tile_costs", "l2_section", "L2_BYTES"]

#: the share of L2 a section's K and V may fill: 16 MB of the H200's 60 MB ran fastest of 1-64 MB
#: on seven causal cases at d = 128 (docs/gpu-notes.md); FA3's scheduler assumes 32 MB
L2_BYTES = 16 << 20
_MAX_TILES = 1 << 24


def tile_costs(
    num_m: int, n_q: int, n_k: int, causal: bool, block_m: int = 128, block_n: int = 128
) -> np.ndarray:
    """Each query block's cost, int64 (num_m,): the key tiles it visits (causal, bottom-right
    aligned: block m sees keys < min(n_k, (m + 1) block_m + n_k - n_q)), plus one.

    >>> tile_costs(4, 512, 512, True).tolist(), tile_costs(2, 256, 1000, False).tolist()
    ([2, 3, 4, 5], [9, 9])
    """
    m = np.arange(num_m, dtype=np.int64)
    hi = np.clip((m + 1) * block_m + (n_k - n_q), 0, n_k) if causal else np.full(num_m, n_k, np.int64)
    return -(-hi // block_n) + 1


def l2_section(heads: int, group: int, n_k: int, head_dim: int, elem_bytes: int = 2) -> int:
    """How many query heads' tiles a causal schedule interleaves: the most KV heads whose K and V
    (n_k x head_dim each) fit in L2_BYTES (at least one, even if it does not fit), times the group
    of query heads that share one, rounded down to a power of two that divides `heads`.

    >>> l2_section(32, 1, 8192, 128), l2_section(32, 4, 8192, 128), l2_section(32, 1, 1 << 20, 128)
    (4, 16, 1)
    """
    per_kv_head = 2 * n_k * head_dim * elem_bytes
    fit = max(1, L2_BYTES // per_kv_head) * group
    s = 1
    while s * 2 <= min(fit, heads) and heads % (s * 2) == 0:
        s *= 2
    return s


def tile_order(bh: int, num_m: int, section: int | None) -> np.ndarray:
    """The order the tiles are handed out in, each coded bh * num_m + m (int64): with a `section`
    (which divides bh), sections of that many consecutive bh in turn, inside one the last query
    block first, heads in turn; with None, each bh's blocks in order (no mask: equal tiles).

    >>> tile_order(4, 2, 2).tolist(), tile_order(2, 2, None).tolist()
    ([1, 3, 0, 2, 5, 7, 4, 6], [0, 1, 2, 3])
    """
    if section is None:
        return np.arange(bh * num_m)
    sec, m, h = np.meshgrid(
        np.arange(bh // section), np.arange(num_m)[::-1], np.arange(section), indexing="ij"
    )
    return ((sec * section + h) * num_m + m).ravel()


def persistent_tiles(
    bh: int,
    num_m: int,
    n_q: int,
    n_k: int,
    *,
    causal: bool,
    programs: int,
    section: int = 1,
    lpt: bool = True,
    block_m: int = 128,
    block_n: int = 128,
) -> tuple[np.ndarray, np.ndarray]:
    """The tile lists of a persistent launch of `programs` programs over bh (batch x heads) x
    num_m query blocks: (tiles int32, indptr int32 (programs + 1,)), program p's tiles in order
    at tiles[indptr[p]:indptr[p + 1]], each tile coded bh * num_m + m. Causal with lpt: sections
    of `section` consecutive bh (it must divide bh), within one the longest query blocks first,
    heads in turn; otherwise each bh's blocks in order. Each tile then goes to the least-loaded
    program (module docstring)."""
    bh = as_int("bh", bh, 1, _MAX_TILES)
    num_m = as_int("num_m", num_m, 1, _MAX_TILES)
    if bh * num_m > _MAX_TILES:
        raise ValueError(f"bh x num_m = {bh * num_m:,} tiles; valid: at most {_MAX_TILES:,}")
    causal, lpt = as_bool("causal", causal), as_bool("lpt", lpt)
    programs = as_int("programs", programs, 1, 1 << 20)
    section = as_int("section", section, 1, bh)
    if bh % section:
        raise ValueError(f"section={section} does not divide bh={bh}; valid: a divisor of bh")
    n_q, n_k = as_int("n_q", n_q, 1, None), as_int("n_k", n_k, 1, None)
    cost = tile_costs(num_m, n_q, n_k, causal, block_m, block_n)
    order = tile_order(bh, num_m, section if causal and lpt else None)
    sched = list_schedule(cost[order % num_m], programs)
    by_program = np.argsort(sched.cta, kind="stable")  # each program's tiles in the order taken
    tiles = order[by_program].astype(np.int32)
    indptr = np.zeros(programs + 1, np.int32)
    np.cumsum(np.bincount(sched.cta, minlength=programs), out=indptr[1:])
    return tiles, indptr
