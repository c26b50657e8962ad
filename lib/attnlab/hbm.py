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

import numpy as np

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


class HBM:
    """Element counter for HBM traffic, with an optional trace of every tile moved.

    Kernels call `read(name, n)` / `write(name, n)` per tile. With `trace=True` the counter also
    keeps the ordered list of events, which the tile-grid explorer replays step by step.
    """

    def __init__(self, trace: bool = False):
        self._reads: Counter[str] = Counter()
        self._writes: Counter[str] = Counter()
        self._order: dict[str, None] = {}    # tensors in first-touched order
        self.trace = bool(trace)
        self.events: list[Event] = []

    @staticmethod
    def _n(n) -> int:
        size = n.size if isinstance(n, np.ndarray) else n   # a numpy scalar is a count, not an array
        if isinstance(size, bool):
            raise TypeError("n must be an element count or an array, got bool")
        try:
            size = operator.index(size)
        except TypeError:
            raise TypeError(f"n must be an element count or an array, got {type(n).__name__}") from None
        if size < 0:
            raise ValueError(f"n={size} must be >= 0 elements")
        return size

    def read(self, name: str, n, *, rows: tuple[int, int] | None = None) -> None:
        """Count a load of `n` elements (or of an array's elements) of tensor `name` into SRAM."""
        k = self._n(n)
        self._order.setdefault(name)
        self._reads[name] += k
        if self.trace:
            self.events.append(Event("read", name, k, rows))

    def write(self, name: str, n, *, rows: tuple[int, int] | None = None) -> None:
        """Count a store of `n` elements of tensor `name` from SRAM back to HBM."""
        k = self._n(n)
        self._order.setdefault(name)
        self._writes[name] += k
        if self.trace:
            self.events.append(Event("write", name, k, rows))

    def compute(self, rows: tuple[int, int], cols: tuple[int, int]) -> None:
        """Mark a block (query rows x key columns) computed on chip; traced only, never counted."""
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

    def bytes(self, dtype_bytes: int = 2) -> int:
        """Total traffic in bytes for elements of `dtype_bytes` each (2 for fp16/bf16)."""
        return self.total * int(dtype_bytes)

    def reset(self) -> None:
        self._reads.clear()
        self._writes.clear()
        self._order.clear()
        self.events.clear()

    def __repr__(self) -> str:
        return f"HBM(reads={self.reads:,}, writes={self.writes:,}, total={self.total:,})"
