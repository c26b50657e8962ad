"""The merge table of notebook 04 (§4.3) as statements that read the same on every CPU: for each
split count, the largest difference of the float64 and float32 merges from the one-pass output
against MERGE_BOUNDS (16 units of roundoff), and whether the two float32 orders agree bit for bit.
`merge_digits` prints the differences themselves, for a cell whose output is not compared.
The numbers come from `merge.merge_errors`.
"""

from __future__ import annotations

import textwrap

from dataclasses import dataclass

from attnlab.explore import style
from attnlab.explore.decode.merge import MERGE_BOUNDS, MERGE_D, MERGE_KEYS, merge_errors

__all__ = ["MergeRow", "merge_rows", "merge_table", "merge_digits"]


@dataclass(frozen=True)
class MergeRow:
    """One split count of the merge table: the largest |difference| over the output of the float64
    merge against the one-pass output (both orders), of the float32 merge against it (forward),
    and of float32 forward against reverse order."""

    splits: int
    f64: float
    f32: float
    f32_orders: float

    @property
    def within_bounds(self) -> bool:
        """Every difference below MERGE_BOUNDS of its dtype."""
        return (
            self.f64 < MERGE_BOUNDS["float64"]
            and self.f32 < MERGE_BOUNDS["float32"]
            and self.f32_orders < MERGE_BOUNDS["float32"]
        )

    @property
    def orders_equal(self) -> bool:
        """Forward and reverse float32 merges give the same bits."""
        return self.f32_orders == 0


def merge_rows(splits=(2, 8, 64), seed: int = 0) -> list[MergeRow]:
    """`MergeRow` for each split count (the data of `merge_data(seed)`).

    >>> [(r.splits, r.within_bounds, r.orders_equal) for r in merge_rows((2, 8))]
    [(2, True, True), (8, True, False)]
    """
    rows = []
    for s in splits:
        f64 = merge_errors(s, "float64", "reverse", seed, curve=False)
        f32 = merge_errors(s, "float32", "reverse", seed, curve=False)
        rows.append(MergeRow(s, max(f64.fwd_max, f64.other_max), f32.fwd_max, f32.diff_max))
    return rows


def _bounded(x: float, dtype: str) -> str:
    """'< bound' where x is below it (the portable statement), else x itself, so a broken bound
    shows."""
    b = MERGE_BOUNDS[dtype]
    return f"< {b:.1e} (16 u)".replace("e-0", "e-") if x < b else f"{style.magnitude(x)}, above 16 u"


def merge_table(splits=(2, 8, 64), seed: int = 0) -> str:
    """The merge table as statements that read the same on every CPU: each difference against its
    bound (MERGE_BOUNDS, 16 units of roundoff), and whether the two float32 orders agree bit for
    bit. `merge_digits` prints the differences themselves."""
    rows = merge_rows(splits, seed)
    head = (
        f"one query, {MERGE_KEYS:,} keys, d = {MERGE_D}, seed {seed}: max |difference| over the output, "
        f"against 16 units of roundoff u of the dtype"
    )
    head = textwrap.fill(head, 100) + "\n"
    return head + style.table(
        [
            {
                "splits": r.splits,
                "f64": _bounded(r.f64, "float64"),
                "f32": _bounded(r.f32, "float32"),
                "f32r": "bitwise equal" if r.orders_equal else "differ, " + _bounded(r.f32_orders, "float32"),
            }
            for r in rows
        ],
        {
            "splits": "splits",
            "f64": "fp64 merged vs one pass",
            "f32": "fp32 merged vs fp64 one pass",
            "f32r": "fp32 forward vs reverse",
        },
        {"f64": str, "f32": str, "f32r": str},
    )


def merge_digits(splits=(2, 8, 64), seed: int = 0) -> str:
    """The differences of `merge_table` to one significant digit (style.magnitude). These digits
    depend on the CPU's BLAS kernel and SIMD width: print them in a cell whose output is not
    compared."""
    rows = merge_rows(splits, seed)
    head = (
        f"one query, {MERGE_KEYS:,} keys, d = {MERGE_D}, seed {seed}: max |difference| over the output "
        f"(this machine's digits)"
    )
    head = textwrap.fill(head, 100) + "\n"
    return head + style.table(
        [vars(r) for r in rows],
        {
            "splits": "splits",
            "f64": "fp64 merged vs one pass",
            "f32": "fp32 merged vs fp64 one pass",
            "f32_orders": "fp32 forward vs reverse",
        },
        {"f64": style.magnitude, "f32": style.magnitude, "f32_orders": style.magnitude},
    )
