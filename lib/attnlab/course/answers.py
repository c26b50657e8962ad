"""Reading an exercise's answer (`course.exercises`): each helper returns the answer in the form
it names (a number, a count, a list of n, a dict of given keys, a set of option letters) or raises
`NotYet` with a hint about the form, never about the number; `near` and `rounded_off` name a
known mistake's number."""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = ["NotYet", "number", "integer", "sequence", "parts", "letters", "near", "rounded_off", "NEAR"]

NEAR = 0.01  # how close an answer must be to a known mistake's number


class NotYet(Exception):
    """Raised inside a checker with the hint to show."""


def number(x, what: str) -> float:
    if isinstance(x, (str, bytes)):
        raise NotYet(f"{what} should be a number, not the string {x!r}: write it without quotes")
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        raise NotYet(f"{what} should be a number, got {type(x).__name__}")
    try:
        v = float(x)
    except (OverflowError, ValueError, TypeError):
        raise NotYet(f"{what} should be a finite number") from None
    if not math.isfinite(v):
        raise NotYet(f"{what} should be a finite number, got {v}")
    return v


def integer(x, what: str) -> int:
    v = number(x, what)
    if not v.is_integer():
        raise NotYet(f"{what} is a count: a whole number, got {v:g}")
    return int(v)


def sequence(x, length: int, what: str) -> list:
    if (
        isinstance(x, (str, bytes, dict, set, frozenset))
        or not hasattr(x, "__getitem__")
        or (isinstance(x, np.ndarray) and x.ndim == 0)
    ):
        raise NotYet(f"{what} should be a list of {length}, got {type(x).__name__}")
    if len(x) != length:
        raise NotYet(f"{what} should have {length} entries, got {len(x)}")
    return [x[i] for i in range(length)]


def parts(x, keys: tuple[str, ...]) -> dict:
    form = "{" + ", ".join(f"{k!r}: ..." for k in keys) + "}"
    if not isinstance(x, dict):
        raise NotYet(f"write the answer as a dict {form}, got {type(x).__name__}")
    missing = [k for k in keys if k not in x]
    extra = [k for k in x if k not in keys]
    if missing or extra:
        raise NotYet(
            f"the answer needs exactly the keys {', '.join(map(repr, keys))}"
            + (f"; missing {', '.join(map(repr, missing))}" if missing else "")
            + (f"; unknown {', '.join(map(repr, extra))}" if extra else "")
        )
    return x


def letters(x, options) -> frozenset:
    """x as a set of the option letters (`options`: the allowed ones)."""
    if isinstance(x, (str, bytes)) or not isinstance(x, (set, frozenset, list, tuple)):
        raise NotYet("write the chosen letters as a set, e.g. {'a', 'b'}")
    out = set()
    for item in x:
        if not isinstance(item, str) or item.strip().lower() not in options:
            raise NotYet(f"each entry should be one of the letters {', '.join(options)}; got {item!r}")
        out.add(item.strip().lower())
    if not out:
        raise NotYet("choose at least one statement")
    return frozenset(out)


def near(value: float, right: float) -> bool:
    """Within NEAR of `right`, relative: close enough to name the mistake that gives `right`."""
    return abs(value - right) <= NEAR * abs(right)


def rounded_off(value: float, right: float) -> bool:
    """Off by no more than rounding to one decimal: right digits, too few of them."""
    return abs(value - right) <= 0.05
