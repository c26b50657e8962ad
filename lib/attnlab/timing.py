"""Wall-clock timing on this machine, for the lines a notebook prints in an ignored-output cell
and for `make bench`: the median of repeated calls after a warm-up."""

from __future__ import annotations

import statistics
import time

from attnlab.validate import as_int

__all__ = ["median_time"]


def median_time(fn, repeats: int) -> float:
    """Median wall time of `fn()` in seconds over `repeats` calls (1 .. 10^6), after
    min(repeats, 100) calls to warm up caches and lazy imports.

    >>> median_time(lambda: None, 3) >= 0.0
    True
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable taking no arguments; got {fn!r}")
    repeats = as_int("repeats", repeats, 1, 10**6)
    for _ in range(min(repeats, 100)):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
