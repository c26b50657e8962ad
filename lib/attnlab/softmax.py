"""Online softmax: see the data one chunk at a time, keep only the running max m and sum l.

For x split into x1 and x2:  m = max(m1, m2),  l = e^(m1 - m) l1 + e^(m2 - m) l2.
So a kernel never needs the whole row at once: when a new chunk raises the max, the old sum is
rescaled by e^(m_old - m_new) and the chunk's own sum is added. FlashAttention applies the same
rescaling to its un-normalised output accumulator.

Example (the lecture's hand calculation, 2 numbers at a time):
    >>> steps = online_softmax_trace([1, 3, 2, 5, 4], chunk=2)
    >>> [(s.m, round(s.l, 4)) for s in steps]
    [(3.0, 1.1353), (5.0, 1.2034), (5.0, 1.5713)]

The same algebra, written for whole attention outputs, is the attention state (o, lse) of a query
over a set of keys and its merge operator (+) (`merge`): states over disjoint key sets combine
exactly, in any grouping, which is what split-KV, cascade attention and FlashInfer's reductions use.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._check import as_int

__all__ = ["SoftmaxStep", "online_softmax_trace", "online_softmax", "softmax",
           "attention_state", "merge", "merge_states"]


@dataclass(frozen=True)
class SoftmaxStep:
    """State after one chunk. `chunk` holds the values seen in this step, `m_chunk`/`l_chunk`
    the chunk's own max and sum (against its own max), `rescale` = e^(m_before - m) applied to
    the old sum (0 on the first step: there is no old sum), `chunk_scale` = e^(m_chunk - m)
    applied to the chunk's sum, and `m`/`l` the running statistics after the step:
    l = rescale * l_before + chunk_scale * l_chunk."""

    start: int
    stop: int
    chunk: tuple[float, ...]
    m_chunk: float
    l_chunk: float
    rescale: float
    m: float
    l: float

    @property
    def chunk_scale(self) -> float:
        return float(np.exp(self.m_chunk - self.m)) if self.m_chunk > -np.inf else 0.0


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
        rescale = float(np.exp(m - m_new)) if m > -np.inf else 0.0   # 0: no earlier sum to keep
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


# ------------------------------------------------------------------------------------------------
# Attention states and the merge operator


def attention_state(q, k, v, *, scale: float | None = None, mask=None):
    """The attention state of queries `q` over the keys `k` (values `v`): (o, lse).

    o = softmax(scale * q k^T) v and lse = log sum_j exp(scale * q . k_j) (natural log), computed in
    the inputs' float dtype (float16 is computed in float32, as kernels accumulate). `q` is (d,) for one query or (n, d); `k` is (n_k, d), `v` (n_k, d_v).
    `mask` (bool, broadcastable to (n, n_k), True = visible) hides keys. A query that sees no key
    (n_k = 0, or everything masked) has o = 0 and lse = -inf: the identity of `merge`.

    Example: splitting keys [0..9] into [0..4] and [5..9] and merging the two states gives the
    one-pass state to ~1e-16 in float64.
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    for name, a in (("q", q), ("k", k), ("v", v)):
        if a.dtype.kind not in "fiu":
            raise TypeError(f"{name} must hold real numbers, got dtype {a.dtype}")
    single = q.ndim == 1
    if single:
        q = q[None]
    if q.ndim != 2 or k.ndim != 2 or v.ndim != 2:
        raise ValueError(f"q must be (d,) or (n, d) and k, v (n_k, d); got q {q.shape}, k {k.shape}, v {v.shape}")
    if k.shape[1] != q.shape[1]:
        raise ValueError(f"k's head dim {k.shape[1]} must equal q's head dim {q.shape[1]}")
    if v.shape[0] != k.shape[0]:
        raise ValueError(f"v has {v.shape[0]} rows but k has {k.shape[0]}; they must match")
    dtype = np.result_type(q.dtype, k.dtype, v.dtype, np.float32)
    q, k, v = (a.astype(dtype, copy=False) for a in (q, k, v))
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[1])
    s = (q @ k.T) * dtype.type(scale)
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        try:
            s = np.where(np.broadcast_to(mask, s.shape), s, -np.inf)
        except ValueError:
            raise ValueError(f"mask of shape {mask.shape} does not broadcast to (n, n_k) = {s.shape}") from None
    if s.shape[1] == 0:
        o = np.zeros((q.shape[0], v.shape[1]), dtype=dtype)
        lse = np.full(q.shape[0], -np.inf, dtype=dtype)
    else:
        m = s.max(axis=1)
        m_safe = np.where(np.isfinite(m), m, 0.0).astype(dtype)
        p = np.exp(s - m_safe[:, None])
        l = p.sum(axis=1)
        o = np.divide(p @ v, l[:, None], out=np.zeros((q.shape[0], v.shape[1]), dtype=dtype),
                      where=l[:, None] > 0)
        with np.errstate(divide="ignore"):
            lse = np.where(l > 0, m_safe + np.log(l), -np.inf).astype(dtype)
    return (o[0], lse[0]) if single else (o, lse)


def merge(a, b):
    """(o_a, lse_a) (+) (o_b, lse_b): the state over the union of two disjoint key sets.

    lse = log(e^lse_a + e^lse_b);  o = e^(lse_a - lse) o_a + e^(lse_b - lse) o_b.
    Exact in real arithmetic, associative and commutative; (0, -inf) is its identity, and two
    empty states give (0, -inf), never NaN. Works elementwise over leading query dimensions.
    """
    (oa, la), (ob, lb) = _state(a, "a"), _state(b, "b")
    if oa.shape != ob.shape or la.shape != lb.shape:
        raise ValueError(f"states must have the same shapes; got o {oa.shape} vs {ob.shape}, "
                         f"lse {la.shape} vs {lb.shape}")
    dtype = np.result_type(oa.dtype, ob.dtype)      # a plain-float lse does not promote fp32 states
    m = np.maximum(la, lb)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    wa = np.exp(la - m_safe).astype(dtype)                 # 0 where lse_a = -inf
    wb = np.exp(lb - m_safe).astype(dtype)
    total = wa + wb
    with np.errstate(divide="ignore"):
        lse = np.where(total > 0, m_safe + np.log(np.where(total > 0, total, 1)), -np.inf).astype(dtype)
    safe_total = np.where(total > 0, total, 1)
    o = (oa * (wa / safe_total)[..., None] + ob * (wb / safe_total)[..., None]).astype(dtype)
    return o, lse


def _state(s, name):
    try:
        o, lse = s
    except (TypeError, ValueError):
        raise TypeError(f"state {name} must be a pair (o, lse)") from None
    o, lse = np.asarray(o), np.asarray(lse)
    if o.shape[:-1] != lse.shape:
        raise ValueError(f"state {name}: o of shape {o.shape} needs lse of shape {o.shape[:-1]}, got {lse.shape}")
    return o, lse


def merge_states(states, order=None):
    """Fold `merge` over `states` left to right in the given `order`.

    order: None or "forward" (0, 1, ..., n-1), "reverse", or an explicit permutation of
    range(n) (e.g. `rng.permutation(n)` to mimic atomics that finish in any order). In float64
    every order agrees to ~1e-16; in float32 different orders differ in the last bits, because
    floating-point addition is not associative.
    """
    states = list(states)
    if not states:
        raise ValueError("states must hold at least one (o, lse) state")
    n = len(states)
    if order is None or (isinstance(order, str) and order == "forward"):
        idx = list(range(n))
    elif isinstance(order, str) and order == "reverse":
        idx = list(range(n - 1, -1, -1))
    elif isinstance(order, str):
        raise ValueError(f"order={order!r} is not allowed; valid: 'forward', 'reverse' or a permutation of range({n})")
    else:
        idx = list(order)
        if any(isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)) for i in idx) \
                or sorted(idx) != list(range(n)):
            raise ValueError(f"order={list(order)!r} must be a permutation of range({n})")
    acc = _state(states[idx[0]], f"states[{idx[0]}]")
    for i in idx[1:]:
        acc = merge(acc, states[i])
    return acc
