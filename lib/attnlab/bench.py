"""`make bench`: how long each explorer takes to recompute and redraw after a slider change.

For every explorer at its default sizes, every control is moved to each value it can reach (the
stops of a discrete slider; ends and middle of a continuous one) and back; the median wall time of
`set()` (numbers + artists + draw + PNG) is one line, beside the median time of the numbers alone.
Target on the course's 2-core CPU: under 100 ms per change, under 20 ms for the numbers.
"""
from __future__ import annotations

import statistics
import sys
import time

from .explore import EXPLORERS
from .explore._drive import candidate_values

TARGET_MS = 100.0
NUMBERS_TARGET_MS = 20.0


def bench_explorer(cls, repeats: int = 2) -> tuple[float, float, int]:
    """(median ms per slider change, median ms for the numbers alone, changes timed)."""
    ex = cls()
    defaults = ex.values
    times = []
    for _ in range(repeats):
        for name, w in ex.widgets.items():
            for value in candidate_values(w):
                if value == ex.widgets[name].value:
                    continue
                t0 = time.perf_counter()
                ex.set(**{name: value})
                times.append(time.perf_counter() - t0)
            ex.set(**{name: defaults[name]})
    numbers = []
    for _ in range(5):
        t0 = time.perf_counter()
        ex.compute(**ex.values)
        numbers.append(time.perf_counter() - t0)
    med = statistics.median(times) * 1e3 if times else float("nan")
    num = statistics.median(numbers) * 1e3 if numbers else float("nan")
    return med, num, len(times)


def main(argv=None) -> int:
    names = list(argv or []) or list(EXPLORERS)
    worst = 0.0
    print(f"{'explorer':<22} {'change+redraw':>14} {'numbers':>9} {'changes':>8}")
    for name in names:
        med, num, n = bench_explorer(EXPLORERS[name])
        worst = max(worst, med)
        flag = "" if med < TARGET_MS and num < NUMBERS_TARGET_MS else "  (over target)"
        print(f"{name:<22} {med:>11.1f} ms {num:>6.2f} ms {n:>8}{flag}")
    print(f"slowest: {worst:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
