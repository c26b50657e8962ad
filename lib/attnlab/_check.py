"""Argument checks shared by every layer: each error names the parameter, its value and the valid range."""
from __future__ import annotations

import numbers

import numpy as np


def as_int(name: str, value, lo: int | None = None, hi: int | None = None) -> int:
    """`value` as an int in [lo, hi]; TypeError for non-integers, ValueError outside the range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            value = int(value)
        else:
            raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    value = int(value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"{name}={value} is out of range; valid: {_range(lo, hi)}")
    return value


def as_float(name: str, value, lo: float | None = None, hi: float | None = None, *,
             lo_open: bool = False) -> float:
    """`value` as a finite float in [lo, hi] (or (lo, hi] with lo_open)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    value = float(value)
    bad = not np.isfinite(value)
    if lo is not None:
        bad |= value <= lo if lo_open else value < lo
    if hi is not None:
        bad |= value > hi
    if bad:
        left = "(" if lo_open else "["
        raise ValueError(f"{name}={value!r} is out of range; valid: {left}{lo}, {hi if hi is not None else 'inf'}]")
    return value


def choice(name: str, value, allowed) -> object:
    """`value` if it is one of `allowed`, else ValueError listing them."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; valid: {', '.join(map(repr, allowed))}")
    return value


def _range(lo, hi) -> str:
    if lo is not None and hi is not None:
        return f"{lo} <= {{}} <= {hi}".format("value")
    if lo is not None:
        return f">= {lo}"
    return f"<= {hi}"
