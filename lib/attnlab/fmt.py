"""Number formats and text tables shared by every layer (the notebooks' printed numbers, the
report of your model, the GPU harness's tables): one definition of each, so no module keeps a copy."""
from __future__ import annotations

import math
import numbers

__all__ = ["binary_bytes", "si", "seconds", "magnitude", "table"]


def _real(name: str, x) -> float:
    """x as a float; a string or a bool is not a number to format (TypeError naming `name`), and
    an integer beyond float64 is a ValueError."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):          # numpy bools are not Real
        raise TypeError(f"{name} must be a real number, got {x!r:.60} ({type(x).__name__})")
    try:
        return float(x)
    except OverflowError:
        raise ValueError(f"{name} is beyond float64 (an integer of {x.bit_length()} bits); valid: "
                         f"|{name}| < 1.8e308") from None


def binary_bytes(b: float) -> str:
    """Bytes in binary units, 3 significant digits: 68719476736 -> '64 GiB', 262144 -> '256 KiB'.
    b >= 0 (a count of bytes)."""
    b = _real("b", b)
    if not b >= 0:
        raise ValueError(f"b={b!r} is out of range; valid: a byte count >= 0")
    for f, p in ((2 ** 40, "TiB"), (2 ** 30, "GiB"), (2 ** 20, "MiB"), (2 ** 10, "KiB")):
        if abs(b) >= f:
            return f"{b / f:.3g} {p}"
    return f"{b:.3g} B"


def si(x: float, unit: str = "", digits: int = 3) -> str:
    """Engineering format: si(9_355_264) -> '9.36 M', si(3.35e12, 'B/s') -> '3.35 TB/s'."""
    x = _real("x", x)
    for f, p in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= f:
            return f"{x / f:.{digits}g} {p}{unit}"
    return f"{x:.{digits}g} {unit}".rstrip()


def seconds(t: float) -> str:
    """'1.32 s', '83.1 ms', '12.4 µs': a duration t >= 0 in seconds (inf prints 'inf s')."""
    t = _real("t", t)
    if not t >= 0:
        raise ValueError(f"t={t!r} is out of range; valid: a duration in seconds, t >= 0")
    if t >= 1:
        return f"{t:.3g} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3g} ms"
    return f"{t * 1e6:.3g} µs"


def magnitude(x: float) -> str:
    """An error to one significant digit: 1.1e-16 -> '1e-16', 5.2e-08 -> '5e-8', 0 -> '0'.
    One digit is what such an error means (the next digits move with the BLAS and the CPU), and
    it keeps a ratio honest: 5e-8 against 3.7e-7 is 7x, not the 37x that '~1e-8' suggests."""
    x = abs(_real("x", x))
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return str(x)
    mant, exp = f"{x:.0e}".split("e")
    return f"{mant}e{int(exp)}"


def table(rows, columns, formats=None) -> str:
    """Plain-text table for notebook output (reproducible under strict nbval).

    rows: list of dicts; columns: {key: header}; formats: {key: format spec or callable}.
    Text columns are left-aligned, numbers right-aligned.
    """
    formats = formats or {}
    cells, left = [], []
    for k in columns:
        left.append(all(isinstance(r[k], str) for r in rows))
    for r in rows:
        line = []
        for k in columns:
            f = formats.get(k, "")
            v = r[k]
            line.append(f(v) if callable(f) else format(v, f))
        cells.append(line)
    heads = list(columns.values())
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(heads)]

    def fmt(values):
        return "  ".join(v.ljust(w) if lft else v.rjust(w)
                         for v, w, lft in zip(values, widths, left)).rstrip()

    out = [fmt(heads), "  ".join("-" * w for w in widths)]
    out += [fmt(line) for line in cells]
    return "\n".join(out)
