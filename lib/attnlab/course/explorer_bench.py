"""`make bench`: how long each explorer takes to recompute and redraw after a slider change.

For every explorer at its default sizes, every control is moved to each value it can reach (the
stops of a discrete slider; ends and middle of a continuous one) and back; the median wall time of
`set()` (numbers + artists + draw + PNG) is one line, beside the same median on a last pass with
no background cached (every change a first visit: panels whose axes move are redrawn) and the
median time of the numbers alone. The last pass clears the cached backgrounds, not the numbers an
explorer caches itself: a setting whose numbers were never computed (the browser test's "first
ms") can take longer than any line here.
Target on the course's 2-core CPU: under 100 ms per change, under 20 ms for the numbers. The
last lines time `schedule.plan_balanced` (target under 100 us) from a list of pairs, from an
(n, 2) array and with every column built, against the straightforward heapq planner
(`schedule.lpt.balanced_heapq`), and check that both make the same plan.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import astuple

from attnlab.timing import median_time

from attnlab.explore import EXPLORERS
from attnlab.explore._drive import candidate_values

TARGET_MS = 100.0
NUMBERS_TARGET_MS = 20.0
PLANNER_TARGET_US = 100.0


def bench_explorer(cls, repeats: int = 2) -> tuple[float, float, float, int]:
    """(median ms per slider change, the same with no background cached (every change a first
    visit), median ms for the numbers alone, changes timed)."""
    ex = cls()
    defaults = ex.values
    times, cold = [], []
    for rep in range(repeats + 1):
        for name, w in ex.widgets.items():
            for value in candidate_values(w):
                if value == ex.widgets[name].value:
                    continue
                if rep == repeats:  # the last pass: forget every background
                    ex._backgrounds.clear()
                t0 = time.perf_counter()
                ex.set(**{name: value})
                (cold if rep == repeats else times).append(time.perf_counter() - t0)
            ex.set(**{name: defaults[name]})
    numbers = []
    for _ in range(5):
        t0 = time.perf_counter()
        ex.compute(**ex.values)
        numbers.append(time.perf_counter() - t0)
    med = statistics.median(times) * 1e3 if times else float("nan")
    first = statistics.median(cold) * 1e3 if cold else float("nan")
    num = statistics.median(numbers) * 1e3 if numbers else float("nan")
    return med, first, num, len(times)


def planner_line(batch: int = 256, repeats: int = 300) -> str:
    """The balanced plan's cost for a long-tailed batch (8 KV heads, 132 CTAs, group 4): from a
    list of pairs, from an (n, 2) array, and with every column built; beside the
    straightforward heapq planner's on the same batch, and whether their plans agree."""
    import numpy as np

    from attnlab.machine.schedule import PLAN_COLUMNS, plan_balanced
    from attnlab.machine.schedule.lpt import balanced_heapq
    from attnlab.machine.workload import lengths

    lens = lengths("longtail", batch, seed=0)
    array = np.array(lens)
    kw = dict(kv_heads=8, num_ctas=132, group=4)
    fast = median_time(lambda: plan_balanced(lens, **kw), repeats)
    from_array = median_time(lambda: plan_balanced(array, **kw), repeats)

    def with_columns():
        plan = plan_balanced(lens, **kw)
        return [getattr(plan, c) for c in PLAN_COLUMNS]

    columns = median_time(with_columns, repeats)
    slow = median_time(lambda: balanced_heapq(lens, **kw), 5)
    plan = plan_balanced(lens, **kw)
    work, loads, merge = balanced_heapq(lens, **kw)
    same = (
        [astuple(w) for w in plan.work] == list(work) and plan.loads.tolist() == loads and plan.merge == merge
    )
    return (
        f"plan_balanced, batch {batch}, 8 KV heads, 132 CTAs, {len(plan.work):,} items: "
        f"{fast * 1e6:.0f} us from a list of pairs (target {PLANNER_TARGET_US:.0f} us), "
        f"{from_array * 1e6:.0f} us from an (n, 2) array, {columns * 1e6:.0f} us with every "
        f"column built;\n  the plain heapq planner: {slow * 1e3:.1f} ms; plans "
        + ("identical" if same else "DIFFER")
        + f" (utilization {plan.utilization:.1%})"
    )


def main(argv=None) -> int:
    names = list(argv or []) or list(EXPLORERS)
    worst = worst_first = 0.0
    print(f"{'explorer':<22} {'change+redraw':>14} {'first visit':>12} {'numbers':>9} {'changes':>8}")
    for name in names:
        med, first, num, n = bench_explorer(EXPLORERS[name])
        worst, worst_first = max(worst, med), max(worst_first, first)
        flag = "" if med < TARGET_MS and num < NUMBERS_TARGET_MS else "  (over target)"
        print(f"{name:<22} {med:>11.1f} ms {first:>9.1f} ms {num:>6.2f} ms {n:>8}{flag}")
    print(f"slowest: {worst:.1f} ms (first visits, no background cached: {worst_first:.1f} ms)")
    if not argv:
        print(planner_line())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
