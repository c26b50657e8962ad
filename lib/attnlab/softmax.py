"""Online softmax: see the data one chunk at a time, keep only the running max m and sum l.

For x split into x1 and x2:  m = max(m1, m2),  l = e^(m1 - m) l1 + e^(m2 - m) l2.
So a kernel never needs the whole row at once: when a new chunk raises the max, the old sum is
rescaled by e^(m_old - m_new) and the chunk's own sum is added. FlashAttention applies the same
rescaling to its un-normalised output accumulator.

Example (the lecture's hand calculation, 2 numbers at a time):
    >>> steps = online_softmax_trace([1, 3, 2, 5, 4], chunk=2)
    >>> [(s.m, round(s.l, 4)) for s in steps]
    [(3.0, 1.1353), (5.0, 1.2034), (5.0, 1.5713)]

What this leaves out: the attention state (o, lse) and its merge operator belong to the decode
part of the course.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._check import as_int

__all__ = ["SoftmaxStep", "online_softmax_trace", "online_softmax", "softmax"]


@dataclass(frozen=True)
class SoftmaxStep:
    """State after one chunk. `chunk` holds the values seen in this step, `m_chunk`/`l_chunk`
    the chunk's own max and sum, `rescale` = e^(m_before - m) applied to the old sum, and
    `m`/`l` the running statistics after the step."""

    start: int
    stop: int
    chunk: tuple[float, ...]
    m_chunk: float
    l_chunk: float
    rescale: float
    m: float
    l: float


def _as_vector(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"x must be a non-empty 1-D vector, got shape {x.shape}")
    if not np.all(np.isfinite(x) | (x == -np.inf)):
        raise ValueError("x must hold finite numbers (or -inf for masked entries); got NaN or +inf")
    return x


def online_softmax_trace(x, chunk: int = 2) -> list[SoftmaxStep]:
    """Running (m, l) after each chunk of `chunk` numbers of `x` (float64).

    The last chunk may be shorter. A chunk of only -inf (fully masked) leaves the state unchanged
    and never produces NaN: the state starts at m = -inf, l = 0, which is the identity.
    """
    x = _as_vector(x)
    chunk = as_int("chunk", chunk, 1, None)
    m, l = -np.inf, 0.0
    steps = []
    for start in range(0, x.size, chunk):
        c = x[start:start + chunk]
        m_c = float(c.max())
        l_c = float(np.exp(c - m_c).sum()) if m_c > -np.inf else 0.0
        m_new = max(m, m_c)
        rescale = float(np.exp(m - m_new)) if m_new > -np.inf else 1.0
        l = l * rescale + (l_c * float(np.exp(m_c - m_new)) if m_new > -np.inf else 0.0)
        m = m_new
        steps.append(SoftmaxStep(start, start + c.size, tuple(c.tolist()), m_c, l_c, rescale, m, l))
    return steps


def online_softmax(x, chunk: int = 2) -> np.ndarray:
    """softmax(x) computed from the final (m, l) of the chunked pass; equals `softmax(x)`.
    A row of only -inf returns zeros."""
    x = _as_vector(x)
    last = online_softmax_trace(x, chunk)[-1]
    if last.l == 0.0:
        return np.zeros_like(x)
    return np.exp(x - last.m) / last.l


def softmax(x, axis: int = -1) -> np.ndarray:
    """One-pass, max-subtracted softmax along `axis`; rows of only -inf give zeros, not NaN."""
    x = np.asarray(x)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(x - m)
    s = e.sum(axis=axis, keepdims=True)
    return np.divide(e, s, out=np.zeros_like(e), where=s > 0)
