"""Argument checks shared by every layer: each error names the parameter, its value and the valid range.

Wrong type -> TypeError, wrong value -> ValueError. Nothing here converts silently: a string is not a
number, a bool is neither a number nor a count, and "False" is not a flag.

This file is long because every layer's checks live here, with the allocation limit and the
equality of records that hold arrays: one place, so every message reads the same way.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Set
from fractions import Fraction

import numpy as np

__all__ = [
    "short",
    "as_int",
    "as_index",
    "as_float",
    "as_bool",
    "choice",
    "as_dtype",
    "as_array",
    "as_counts",
    "as_reals",
    "as_dtype_bytes",
    "as_sequence",
    "ARRAY_LIMIT",
    "check_bytes",
    "as_rng",
    "fields_equal",
]

#: The most bytes of arrays one call may allocate; a larger request is refused by name before
#: numpy is asked (it would end in MemoryError, or swap).
ARRAY_LIMIT = 2**31

#: dtype kinds of real numbers: signed and unsigned integers, floats.
REAL_KINDS = "iuf"
_KIND_NAMES = {
    "b": "bool",
    "i": "signed integer",
    "u": "unsigned integer",
    "f": "float",
    "c": "complex",
    "O": "object",
    "U": "string",
    "S": "bytes",
    "V": "void",
    "M": "datetime",
    "m": "timedelta",
}
_INT64_MAX = int(np.iinfo(np.int64).max)


def short(value, limit: int = 60) -> str:
    """repr(value), cut to `limit` characters (arrays can be long; an integer too long for repr is
    described by its number of digits).

    >>> short(10**5000)
    'an integer of 5001 digits'
    """
    if isinstance(value, np.ndarray) and value.size > 8:
        return f"array of shape {value.shape}, dtype {value.dtype}"
    if isinstance(value, int) and value.bit_length() > 4 * limit:  # repr may refuse (4300 digits)
        digits = _digits(value)
        return f"{'a negative' if value < 0 else 'an'} integer of {digits} digits"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _digits(n: int) -> int:
    """Decimal digits of |n| without str() (which refuses more than 4300 digits)."""
    n = abs(n)
    d = max(1, int((n.bit_length() - 1) * 0.30102999566398120) + 1)  # digits of 2^(bits - 1)
    return d + 1 if n >= 10**d else d


def as_int(name: str, value, lo: int | None = None, hi: int | None = None) -> int:
    """`value` as an int in [lo, hi]; TypeError for non-integers, ValueError outside the range.

    A float with an integral value (64.0) is accepted as that integer; bools are refused.

    >>> as_int("N", 64.0, 1)
    64
    >>> as_int("N", 0, 1)
    Traceback (most recent call last):
    ...
    ValueError: N=0 is out of range; valid: >= 1
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            value = int(value)
        else:
            raise TypeError(f"{name} must be an integer, got {short(value)} ({type(value).__name__})")
    value = int(value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"{name}={short(value)} is out of range; valid: {_range(lo, hi, name)}")
    return value


def as_index(name: str, value, lo: int | None = None, hi: int | None = None) -> int:
    """`value` as an int in [lo, hi], for an index or an id: only integers (Python or numpy) are
    indices, so a float (even 1.0), a bool or a string is a TypeError; outside the range a
    ValueError.

    >>> as_index("i", np.int32(2), 0, 3)
    2
    >>> as_index("i", 1.0, 0, 3)
    Traceback (most recent call last):
    ...
    TypeError: i must be an integer index, got 1.0 (float)
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer index, got {short(value)} ({type(value).__name__})")
    return as_int(name, value, lo, hi)


def as_float(
    name: str, value, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False
) -> float:
    """`value` as a finite float in [lo, hi] (or (lo, hi] with lo_open); bools and strings are refused.

    >>> as_float("scale", 0.125, 0.0, None, lo_open=True)
    0.125
    >>> as_float("scale", True)
    Traceback (most recent call last):
    ...
    TypeError: scale must be a real number, got True (bool)
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {short(value)} ({type(value).__name__})")
    try:
        value = float(value)
    except OverflowError:  # an int beyond float64
        raise ValueError(f"{name}={short(value)} is out of range; valid: finite, below 1.8e308") from None
    bad = not np.isfinite(value)
    if lo is not None:
        bad |= value <= lo if lo_open else value < lo
    if hi is not None:
        bad |= value > hi
    if bad:
        left = "(" if lo_open else "["
        low = "-inf" if lo is None else lo
        high = f"{hi}]" if hi is not None else "inf)"
        raise ValueError(f"{name}={value!r} is out of range; valid: finite, in {left}{low}, {high}")
    return value


def as_bool(name: str, value) -> bool:
    """`value` as a Python bool; only True/False (Python or numpy) are flags. The string "False",
    0 and None are refused with TypeError, so a typo cannot turn a flag on.

    >>> as_bool("causal", np.bool_(True))
    True
    >>> as_bool("causal", "False")
    Traceback (most recent call last):
    ...
    TypeError: causal must be True or False (a bool), got 'False' (str)
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False (a bool), got {short(value)} ({type(value).__name__})")


def choice(name: str, value, allowed) -> object:
    """`value` if it is one of `allowed`, else ValueError listing them (TypeError if `allowed` are
    strings and `value` is not one)."""
    allowed = tuple(allowed)
    if allowed and all(isinstance(a, str) for a in allowed) and not isinstance(value, str):
        raise TypeError(
            f"{name} must be a string, one of {', '.join(map(repr, allowed))}; "
            f"got {short(value)} ({type(value).__name__})"
        )
    try:  # a bool is not the integer it equals (True == 1); arrays have no single truth value
        ok = any(
            isinstance(value, (bool, np.bool_)) == isinstance(a, (bool, np.bool_)) and bool(value == a)
            for a in allowed
        )
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{name}={short(value)} is not allowed; valid: {', '.join(map(repr, allowed))}")
    return value


def as_dtype(name: str, a: np.ndarray, kinds: str = REAL_KINDS) -> np.dtype:
    """The dtype of array `a` if its kind is one of `kinds` ("iuf": real numbers), else TypeError
    naming `name`, the dtype and what is valid (object, string, complex and bool arrays are not
    real numbers)."""
    if a.dtype.kind not in kinds:
        valid = (
            "real numbers (integers or floats)"
            if set(kinds) == set(REAL_KINDS)
            else " or ".join(f"{_KIND_NAMES.get(k, k)} values" for k in kinds)
        )
        raise TypeError(
            f"{name} must hold {valid}, got dtype {a.dtype} ({_KIND_NAMES.get(a.dtype.kind, a.dtype.kind)})"
        )
    return a.dtype


def as_array(
    name: str,
    value,
    *,
    ndim=None,
    shape: str | None = None,
    kinds: str = REAL_KINDS,
    finite: bool = True,
    neginf: bool = False,
) -> np.ndarray:
    """`value` as a numpy array of real numbers, checked by name.

    ndim: None, an int or a tuple of allowed ranks; `shape` describes the valid shapes in the
    message (e.g. "(N, d) or (batch, heads, N, d)"). finite: NaN and +-inf are refused (ValueError
    with the count and the first bad index); neginf=True lets -inf through (masked entries).
    The array is not copied when it already is one.

    >>> as_array("q", [[1, 2]], ndim=2).shape
    (1, 2)
    >>> as_array("q", [1.0, float("nan")])
    Traceback (most recent call last):
    ...
    ValueError: q holds 1 NaN/inf value (first at index (1,): nan); valid: finite numbers
    """
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be an array of real numbers, got {short(value)} (str)")
    if isinstance(value, np.ma.MaskedArray):  # np.asarray would drop the mask without a word
        raise TypeError(
            f"{name} must be a plain array, got a masked array; fill it (or pass a "
            f"mask= where the function takes one)"
        )
    try:
        a = np.asarray(value)
    except (TypeError, ValueError) as e:  # ragged lists, objects numpy cannot convert
        raise TypeError(f"{name} must be an array of real numbers, got {short(value)} ({e})") from None
    if not a.size and isinstance(value, (list, tuple)) and a.dtype.kind not in kinds:
        a = a.astype({"i": np.int64, "u": np.uint64, "b": bool}.get(kinds[0], np.float64))  # [] is any kind
    as_dtype(name, a, kinds)
    if isinstance(value, (list, tuple)) and "b" not in kinds and a.size and _holds_bool(value):
        raise TypeError(
            f"{name} must hold real numbers, got a bool among them in {short(value)}; "
            f"valid: integers or floats (True is not 1)"
        )
    if ndim is not None:
        ranks = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if a.ndim not in ranks:
            want = shape or " or ".join(f"{r}-D" for r in ranks)
            raise ValueError(f"{name} must be {want}, got shape {a.shape}")
    if finite and a.dtype.kind == "f":
        check_bytes(
            f"{name} of shape {a.shape} ({a.size:,} values, each checked for NaN and inf)",
            a.size * (2 if neginf else 1),
        )
        ok = np.isfinite(a)
        if neginf:
            ok |= np.isneginf(a)
        if not ok.all():
            bad = np.argwhere(~ok)
            first = tuple(int(i) for i in bad[0])
            what = "NaN or +inf" if neginf else "NaN/inf"
            valid = "finite numbers or -inf (masked)" if neginf else "finite numbers"
            raise ValueError(
                f"{name} holds {len(bad)} {what} value{'s' if len(bad) > 1 else ''} "
                f"(first at index {first}: {a[first].item()!r}); valid: {valid}"
            )
    return a


def _holds_bool(value) -> bool:
    """Whether a (nested) list or tuple holds a bool: numpy reads True as 1 without a word."""
    try:
        flat = np.asarray(value, dtype=object).reshape(-1)
    except (TypeError, ValueError):
        return False
    return any(isinstance(x, (bool, np.bool_)) for x in flat.tolist())


def as_sequence(name: str, value, what: str = "a list") -> list:
    """`value` as a list of its entries, in order: a list, tuple, range, array or generator. A
    string, a dict and a set are refused with TypeError: their entries have no order the caller
    chose (a set iterates in hash order), or they are not a sequence of entries at all.

    >>> as_sequence("rids", (2, 0))
    [2, 0]
    >>> as_sequence("rids", {2, 0})
    Traceback (most recent call last):
    ...
    TypeError: rids must be a list (entries in order), got {0, 2} (set)
    """
    if isinstance(value, (str, bytes, Mapping, Set)) or not hasattr(value, "__iter__"):
        raise TypeError(
            f"{name} must be {what} (entries in order), got {short(value)} ({type(value).__name__})"
        )
    return list(value)


def as_counts(name: str, value, lo: int | None = None, hi: int | None = None):
    """An integer or an array of integers in [lo, hi]: (Python int, True) for a scalar,
    (int64 array, False) for an array (lists, tuples, ranges, numpy arrays of any rank). Integral floats
    are accepted as in `as_int`; bools, strings and fractions are refused."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]  # 0-d array -> numpy scalar
    if not isinstance(value, (list, tuple, range, np.ndarray)):
        return as_int(name, value, lo, hi), True
    flat = np.asarray(value, dtype=object).reshape(-1) if not isinstance(value, np.ndarray) else None
    if flat is not None and any(isinstance(v, (bool, np.bool_)) for v in flat.tolist()):
        raise TypeError(f"{name} must hold integers, got a bool among them in {short(value)} (True is not 1)")
    if flat is not None and flat.size and all(isinstance(v, int) and not isinstance(v, bool) for v in flat):
        big = [v for v in flat if not -_INT64_MAX <= v <= _INT64_MAX]
        if big:  # numpy would make an object array of these
            raise ValueError(f"{name} holds {short(big[0])}, beyond int64; valid: |value| <= {_INT64_MAX}")
    a = as_array(name, value, kinds=REAL_KINDS, finite=False)
    if a.dtype.kind == "f":
        flat = a.reshape(-1)
        bad = ~(np.isfinite(flat) & (flat == np.floor(flat)))
        if bad.any():
            raise TypeError(f"{name} must hold integers, got {flat[bad][:5].tolist()} in {short(value)}")
    flat = a.reshape(-1)
    if flat.size:
        low, high = (
            (flat.min(), flat.max()) if a.dtype.kind != "f" else (float(flat.min()), float(flat.max()))
        )
        if (lo is not None and low < lo) or (hi is not None and high > hi):
            bad = np.zeros(flat.shape, dtype=bool)
            if lo is not None:
                bad |= flat < lo
            if hi is not None:
                bad |= flat > hi
            out = flat[bad]
            raise ValueError(f"{name} holds {out[:5].tolist()} out of range; valid: {_range(lo, hi, name)}")
        if high > _INT64_MAX or low < -_INT64_MAX:
            raise ValueError(f"{name} holds {high!r}, beyond int64; valid: |value| <= {_INT64_MAX}")
    return a.astype(np.int64), False


def as_reals(name: str, value, lo: float | None = None, *, lo_open: bool = False):
    """A real number or an array of them, finite and >= lo (> lo with lo_open), as float64:
    (float, True) for a scalar, (array, False) otherwise. Bools, strings, complex and object
    values are refused with TypeError."""
    if isinstance(value, (bool, np.bool_)) or isinstance(value, (str, bytes)):
        raise TypeError(
            f"{name} must be a real number or an array of them, got {short(value)} ({type(value).__name__})"
        )
    scalar = not isinstance(value, (list, tuple, np.ndarray)) or np.ndim(value) == 0
    if scalar and not isinstance(value, (numbers.Real, np.ndarray)):
        raise TypeError(
            f"{name} must be a real number or an array of them, got {short(value)} ({type(value).__name__})"
        )
    a = as_array(name, value, kinds=REAL_KINDS, finite=True).astype(np.float64)
    if lo is not None:
        bad = (a <= lo) if lo_open else (a < lo)
        if np.any(bad):
            valid = f"finite, {'>' if lo_open else '>='} {lo:g}"
            if scalar:
                raise ValueError(f"{name}={float(a)!r} is out of range; valid: {valid}")
            raise ValueError(f"{name} holds {a[bad].ravel()[:5].tolist()} out of range; valid: {valid}")
    return (float(a), True) if scalar else (a, False)


def as_dtype_bytes(name: str, value):
    """Bytes per element: a positive integer (int), or 1/2, 1/4, 1/8 for packed sub-byte types
    such as fp4 (returned as a float). Other fractions are refused: byte counts stay exact.

    >>> as_dtype_bytes("dtype_bytes", 2), as_dtype_bytes("dtype_bytes", 0.5)
    (2, 0.5)
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a number of bytes per element, got {short(value)} ({type(value).__name__})"
        )
    if isinstance(value, numbers.Integral) or (np.isfinite(float(value)) and float(value).is_integer()):
        return as_int(name, value, 1, None)
    x = float(value)
    if not np.isfinite(x) or Fraction(x) not in (Fraction(1, 2), Fraction(1, 4), Fraction(1, 8)):
        raise ValueError(f"{name}={value!r} is out of range; valid: an integer >= 1, or 0.5, 0.25, 0.125")
    return x


def check_bytes(what: str, nbytes, limit: int = ARRAY_LIMIT) -> int:
    """`nbytes` (an integer, computed before allocating) as an int if it is in [0, limit], else
    ValueError saying what asked for it and the limit. A byte count that is not an integer (a
    float, even 2^31 + 0.9; a bool; a string) is a TypeError: rounding it would undercount.

    >>> check_bytes("num_blocks x block_size", 2**40)
    Traceback (most recent call last):
    ...
    ValueError: num_blocks x block_size needs 1 TiB of arrays; valid: at most 2 GiB
    """
    if isinstance(nbytes, (bool, np.bool_)) or not isinstance(nbytes, numbers.Integral):
        raise TypeError(
            f"{what}: the byte count must be an integer, got {short(nbytes)} ({type(nbytes).__name__})"
        )
    nbytes = int(nbytes)
    if nbytes < 0:
        raise ValueError(f"{what}: the byte count {short(nbytes)} is negative; valid: 0 .. {_bytes(limit)}")
    if nbytes > limit:
        raise ValueError(f"{what} needs {_bytes(nbytes)} of arrays; valid: at most {_bytes(limit)}")
    return nbytes


def _bytes(n: int) -> str:
    if n >= 2**1000:  # n / size would not fit a float
        return f"more than 2^{n.bit_length() - 1} B"
    for unit, size in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def as_rng(name: str, value) -> np.random.Generator:
    """A numpy Generator: `value` itself if it is one, else a seed (an integer >= 0; bools refused)."""
    if isinstance(value, np.random.Generator):
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} must be a numpy Generator or an integer seed >= 0, got "
            f"{short(value)} ({type(value).__name__})"
        )
    return np.random.default_rng(as_int(name, value, 0, None))


def fields_equal(a, b) -> bool:
    """Equality of two dataclass instances field by field, arrays by shape, dtype and values (the
    generated __eq__ would ask an array for one truth value). NotImplemented for other types."""
    from dataclasses import fields, is_dataclass

    if type(a) is not type(b) or not is_dataclass(a):
        return NotImplemented
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (
                isinstance(x, np.ndarray)
                and isinstance(y, np.ndarray)
                and x.dtype == y.dtype
                and np.array_equal(x, y)
            ):
                return False
        elif x != y:
            return False
    return True


def _range(lo, hi, name: str = "value") -> str:
    if lo is not None and hi is not None:
        return f"{lo} <= {name} <= {hi}"
    if lo is not None:
        return f">= {lo}"
    if hi is not None:
        return f"<= {hi}"
    return "any integer"
