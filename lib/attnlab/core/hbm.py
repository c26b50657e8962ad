"""Count every element a kernel moves between HBM and on-chip SRAM.

numpy has no SRAM, so "how much does this kernel read and write" is counted the way the
FlashAttention paper does its analysis: each kernel calls the counter for every tile it loads
from HBM or stores back. The counter is the ground truth the closed forms in `iomodel` must match.

What this leaves out on purpose: caches (a real GPU hits L2 for part of the re-read K/V tiles),
alignment and transaction sizes. Counts are in elements; bytes = elements x dtype size.

Example:
    >>> hbm = HBM()
    >>> hbm.read("Q", 64 * 128); hbm.write("O", 64 * 128)
    >>> hbm.total, hbm.by_tensor()["Q"]
    (16384, (8192, 0))
"""

from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from attnlab.validate import as_bool, as_dtype_bytes, as_int, choice

__all__ = ["HBM", "Event"]


@dataclass(frozen=True)
class Event:
    """One traced step: a tile load ("read"), a tile store ("write") or a block computed in SRAM
    ("compute"). `rows` is the half-open row range of the tile in its tensor; for "compute" it is
    the query rows and `cols` the key columns of the block."""

    kind: str
    tensor: str
    elements: int
    rows: tuple[int, int] | None = None
    cols: tuple[int, int] | None = None

    def __post_init__(self):
        choice("kind", self.kind, ("read", "write", "compute"))
        if not isinstance(self.tensor, str):
            raise TypeError(f"tensor must be a tensor name (str), got {self.tensor!r}")
        as_int("elements", self.elements, 0, None)
        _span("rows", self.rows)
        _span("cols", self.cols)


def _span(name: str, span):
    """None, or a half-open range (start, stop) of ints with 0 <= start <= stop."""
    if span is None:
        return None
    if not isinstance(span, tuple) or len(span) != 2:
        raise TypeError(f"{name} must be None or a pair (start, stop), got {span!r}")
    start = as_int(f"{name}[0]", span[0], 0, None)
    stop = as_int(f"{name}[1]", span[1], start, None)
    return start, stop


def _tensor(name) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty tensor name such as 'Q', got {name!r}")
    return name


class HBM:
    """Element counter for HBM traffic, with an optional trace of every tile moved.

    Kernels call `read(name, n)` / `write(name, n)` per tile. With `trace=True` the counter also
    keeps the ordered list of events, which the tile-grid explorer replays step by step.
    """

    def __init__(self, trace: bool = False):
        self._reads: Counter[str] = Counter()
        self._writes: Counter[str] = Counter()
        self._order: dict[str, None] = {}  # tensors in first-touched order
        self.trace = as_bool("trace", trace)
        self.events: list[Event] = []

    @staticmethod
    def _n(n) -> int:
        if isinstance(n, np.ndarray):  # the hot path: a tile, counted by size
            return n.size

        def bad():  # built only when needed: repr is slow
            return TypeError(f"n must be an element count (int) or an array, got {n!r} ({type(n).__name__})")

        if isinstance(n, (bool, np.bool_)):  # a numpy scalar is a count, not an array
            raise bad()
        try:
            size = operator.index(n)
        except TypeError:
            raise bad() from None
        if size < 0:
            raise ValueError(f"n={size} is out of range; valid: >= 0 elements")
        return size

    def read(self, name: str, n, *, rows: tuple[int, int] | None = None) -> None:
        """Count a load of `n` elements (or of an array's elements) of tensor `name` into SRAM."""
        name, k, rows = _tensor(name), self._n(n), _span("rows", rows)
        self._order.setdefault(name)
        self._reads[name] += k
        if self.trace:
            self.events.append(Event("read", name, k, rows))

    def write(self, name: str, n, *, rows: tuple[int, int] | None = None) -> None:
        """Count a store of `n` elements of tensor `name` from SRAM back to HBM."""
        name, k, rows = _tensor(name), self._n(n), _span("rows", rows)
        self._order.setdefault(name)
        self._writes[name] += k
        if self.trace:
            self.events.append(Event("write", name, k, rows))

    def compute(self, rows: tuple[int, int], cols: tuple[int, int]) -> None:
        """Mark a block (query rows x key columns) computed on chip; traced only, never counted."""
        rows, cols = _span("rows", rows), _span("cols", cols)
        if rows is None or cols is None:
            raise TypeError(f"rows and cols must be pairs (start, stop), got rows={rows!r}, cols={cols!r}")
        if self.trace:
            self.events.append(Event("compute", "S", 0, rows, cols))

    @property
    def reads(self) -> int:
        return sum(self._reads.values())

    @property
    def writes(self) -> int:
        return sum(self._writes.values())

    @property
    def total(self) -> int:
        return self.reads + self.writes

    def by_tensor(self) -> dict[str, tuple[int, int]]:
        """{tensor: (reads, writes)} in elements, tensors in first-touched order."""
        return {n: (self._reads[n], self._writes[n]) for n in self._order}

    def bytes(self, dtype_bytes: int | float = 2) -> int | float:
        """Total traffic in bytes for elements of `dtype_bytes` each (2 for fp16/bf16, 0.5 for fp4).

        Exact: an int for whole bytes; a float only where packed elements leave half a byte
        (3 fp4 elements are 1.5 bytes). Sizes other than whole bytes and 1/2, 1/4, 1/8 are refused.

        >>> hbm = HBM(); hbm.read("K", 3)
        >>> hbm.bytes(2), hbm.bytes(0.5), hbm.bytes(1)
        (6, 1.5, 3)
        """
        b = as_dtype_bytes("dtype_bytes", dtype_bytes)
        exact = self.total * Fraction(b)
        return int(exact) if exact.denominator == 1 else float(exact)

    def reset(self) -> None:
        self._reads.clear()
        self._writes.clear()
        self._order.clear()
        self.events.clear()

    def __repr__(self) -> str:
        return f"HBM(reads={self.reads:,}, writes={self.writes:,}, total={self.total:,})"
