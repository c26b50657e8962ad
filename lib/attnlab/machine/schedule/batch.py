"""A batch's lengths read for `attnlab.machine.schedule`: `requests` turns a list of (l_qo, l_kv)
pairs, each bad pair refused by its index as a loop over them would, or an (n, 2) integer array,
into int64 columns. A list of plain int pairs takes the fast path: packed as int32s in one go,
which refuses floats, strings, None and 2^31 at once; only then is the list walked for the
error's name."""

from __future__ import annotations

import struct
from itertools import starmap
from operator import itemgetter

import numpy as np

from attnlab.validate import as_int, short

__all__ = ["INT32_MAX", "requests"]

INT32_MAX = 2**31 - 1  # lengths and packed rows fit int32, as FlashInfer's indptr does
_PAIRS = {tuple, list}
_PACK = struct.Struct("ii").pack  # exactly two int32s: floats, strings, None, 2^31 refused
_FIRST, _SECOND = itemgetter(0), itemgetter(1)


def requests(lens) -> tuple[np.ndarray, np.ndarray]:
    """(l_qo, l_kv) of every request as int64 arrays, each in [1, 2^31 - 1]; lens is a list
    of (l_qo, l_kv) pairs or an integer array of shape (n, 2); a set or a dict is refused (its
    order is not the batch's).

    >>> [a.tolist() for a in requests([(1, 100), (3, 50)])]
    [[1, 3], [100, 50]]
    """
    if type(lens) in _PAIRS and lens and set(map(type, lens)) <= _PAIRS:
        try:
            both = np.frombuffer(b"".join(starmap(_PACK, lens)), np.int32).astype(np.int64)
        except (struct.error, TypeError, OverflowError):
            both = None
        if both is not None:
            qo, kv = both[0::2], both[1::2]
            lo_qo, lo_kv = qo.min(), kv.min()  # True packs as 1: where a 1 is, look closer
            if (lo_qo > 1 or lo_qo == 1 and bool not in set(map(type, map(_FIRST, lens)))) and (
                lo_kv > 1 or lo_kv == 1 and bool not in set(map(type, map(_SECOND, lens)))
            ):
                return qo, kv
    if isinstance(lens, np.ndarray):
        if lens.ndim != 2 or lens.shape[1:] != (2,) or lens.dtype.kind not in "iu":
            raise TypeError(
                f"lengths must be (l_qo, l_kv) pairs: an integer array of shape "
                f"(n, 2), got shape {lens.shape}, dtype {lens.dtype}"
            )
        if not len(lens):
            raise ValueError("lengths is empty; valid: at least one request")
        lo, hi = int(lens.min()), int(lens.max())
        if lo < 1 or hi > INT32_MAX:
            raise ValueError(f"lengths has values in [{lo}, {hi}]; valid: 1 .. {INT32_MAX}")
        both = lens.astype(np.int64).T
        return both[0], both[1]
    if isinstance(lens, (str, bytes, set, frozenset, dict)) or not hasattr(lens, "__iter__"):
        raise TypeError(
            f"lengths must be a list of (l_qo, l_kv) pairs, in order (request i is the "
            f"i-th pair), got {short(lens)} ({type(lens).__name__})"
        )
    pairs = []
    for i, p in enumerate(lens):  # the slow way, for the error's name
        if not isinstance(p, (tuple, list)) or len(p) != 2:
            raise TypeError(f"lengths[{i}]={short(p)} must be an (l_qo, l_kv) pair")
        pairs.append(
            (
                as_int(f"lengths[{i}] l_qo", p[0], 1, INT32_MAX),
                as_int(f"lengths[{i}] l_kv", p[1], 1, INT32_MAX),
            )
        )
    if not pairs:
        raise ValueError("lengths is empty; valid: at least one request")
    both = np.array(pairs, np.int64).T
    return both[0], both[1]
