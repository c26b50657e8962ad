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

This file is long because the states' checks (shapes, the bytes of the scores before they are
made, overflow named by tensor) sit beside the two-line algebra they guard.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.validate import as_array, as_float, as_int, check_bytes, short

__all__ = ["SoftmaxStep", "online_softmax_trace", "online_softmax", "softmax",
           "attention_state", "merge", "merge_states", "softmax_scale"]


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
    """x as a non-empty 1-D float64 vector of finite numbers or -inf (masked entries)."""
    x = as_array("x", x, ndim=1, shape="a 1-D vector", neginf=True)
    if x.size == 0:
        raise ValueError(f"x must be a non-empty 1-D vector, got shape {x.shape}")
    return x.astype(np.float64)


def online_softmax_trace(x, chunk: int = 2) -> list[SoftmaxStep]:
    """Running (m, l) after each chunk of `chunk` numbers of `x` (float64): the online softmax.

    This is the code `online_softmax` runs. The last chunk may be shorter. A chunk of only -inf
    (fully masked) leaves the state unchanged and never produces NaN: the state starts at
    m = -inf, l = 0, which is the identity. Rejects NaN and +inf in x (-inf means "masked").

    >>> [(s.m, round(s.l, 4)) for s in online_softmax_trace([2, 1, 4], chunk=1)]
    [(2.0, 1.0), (2.0, 1.3679), (4.0, 1.1851)]
    """
    x, chunk = _as_vector(x), as_int("chunk", chunk, 1, None)
    m, l = -np.inf, 0.0                 # the only state kept between chunks: running max and sum
    steps = []
    with np.errstate(over="ignore", under="ignore"):   # exponents are <= 0: e^-huge is just 0
        for start in range(0, x.size, chunk):
            c = x[start:start + chunk]                 # load one chunk; nothing else of x is kept
            m_c = float(c.max())
            l_c = float(np.exp(c - m_c).sum()) if m_c > -np.inf else 0.0    # chunk's own sum
            m_new = max(m, m_c)
            rescale = float(np.exp(m - m_new)) if m > -np.inf else 0.0      # old sum, new max
            l = rescale * l + (float(np.exp(m_c - m_new)) * l_c if m_c > -np.inf else 0.0)
            m = m_new
            steps.append(SoftmaxStep(start, start + c.size, tuple(c.tolist()), m_c, l_c, rescale, m, l))
    return steps


def online_softmax(x, chunk: int = 2) -> np.ndarray:
    """softmax(x) computed from the final (m, l) of the chunked pass (`online_softmax_trace`);
    equals `softmax(x)`. A row of only -inf returns zeros.

    >>> online_softmax([1, 3, 2, 5, 4], chunk=2).round(4)
    array([0.0117, 0.0861, 0.0317, 0.6364, 0.2341])
    """
    x = _as_vector(x)
    last = online_softmax_trace(x, chunk)[-1]
    if last.l == 0.0:
        return np.zeros_like(x)
    with np.errstate(over="ignore", under="ignore"):
        return np.exp(x - last.m) / last.l


def softmax(x, axis: int = -1) -> np.ndarray:
    """One-pass, max-subtracted softmax along `axis`; rows of only -inf give zeros, not NaN.

    x: real numbers, finite or -inf (masked); NaN and +inf are refused. The result is float64
    for integer input, else x's float dtype. The result and its temporaries (four arrays of x's
    size) are at most 2 GiB, checked before any is made (a broadcast x costs no memory itself).

    >>> softmax([[0.0, -np.inf], [-np.inf, -np.inf]])
    array([[1., 0.],
           [0., 0.]])
    """
    x = as_array("x", x, finite=False)
    if x.ndim == 0:
        raise ValueError(f"x must have at least one dimension, got a 0-d value {x!r}")
    if isinstance(axis, (bool, np.bool_)):
        raise TypeError(f"axis must be an integer, got {axis!r}")
    axis = as_int("axis", axis, -x.ndim, x.ndim - 1)
    if x.shape[axis] == 0:
        raise ValueError(f"x has no entries along axis={axis} (shape {x.shape}); valid: at least one")
    item = x.dtype.itemsize if x.dtype.kind == "f" else 8
    check_bytes(f"softmax: x of shape {x.shape} ({x.size:,} values, four temporaries of {item} bytes each)",
                4 * x.size * item)
    x = as_array("x", x, neginf=True)                # NaN and +inf refused, now that the size is known
    if x.dtype.kind != "f":
        x = x.astype(np.float64)
    with np.errstate(over="ignore", under="ignore"):
        m = np.max(x, axis=axis, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        e = np.exp(x - m)
        s = e.sum(axis=axis, keepdims=True)
        return np.divide(e, s, out=np.zeros_like(e), where=s > 0)


# ------------------------------------------------------------------------------------------------
# Attention states and the merge operator


def softmax_scale(scale, d: int) -> float:
    """The softmax scale: 1 / sqrt(d) by default (d, the head dim, an integer >= 1), else a
    positive finite real (not a bool).

    >>> softmax_scale(None, 64), softmax_scale(0.5, 64)
    (0.125, 0.5)
    """
    d = as_int("d", d, 1, None)
    if scale is None:
        return 1.0 / float(np.sqrt(d))
    return as_float("scale", scale, 0.0, None, lo_open=True)


def _overflow(name: str, what: str, dtype) -> ValueError:
    return ValueError(f"{what} overflowed {np.dtype(dtype).name} (beyond +-{np.finfo(dtype).max:.3g}) "
                      f"although every input is finite; {name} holds values too large for this "
                      f"dtype: scale them down or compute in float64")


def attention_state(q, k, v, *, scale: float | None = None, mask=None):
    """The attention state of queries `q` over the keys `k` (values `v`): (o, lse).

    o = softmax(scale * q k^T) v and lse = log sum_j exp(scale * q . k_j) (natural log), computed in
    the inputs' float dtype (float16 and small integers in float32, as kernels accumulate; other
    integers in float64). `q` is (d,) for one query or (n, d); `k` is (n_k, d), `v` (n_k, d_v),
    finite real numbers; `scale` a positive finite real (default 1 / sqrt(d)).
    `mask` (bool, broadcastable to (n, n_k), True = visible) hides keys. A query that sees no key
    (n_k = 0, or everything masked) has o = 0 and lse = -inf: the identity of `merge`.

    Example: splitting keys [0..9] into [0..4] and [5..9] and merging the two states gives the
    one-pass state to ~1e-16 in float64:

    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal(4), rng.standard_normal((10, 4)), rng.standard_normal((10, 3))
    >>> o, lse = merge(attention_state(q, k[:5], v[:5]), attention_state(q, k[5:], v[5:]))
    >>> bool(np.abs(o - attention_state(q, k, v)[0]).max() < 1e-15)
    True
    """
    q = as_array("q", q, ndim=(1, 2), shape="(d,) or (n, d)")
    k = as_array("k", k, ndim=2, shape="(n_k, d)")
    v = as_array("v", v, ndim=2, shape="(n_k, d_v)")
    single = q.ndim == 1
    if single:
        q = q[None]
    if q.shape[0] < 1 or q.shape[1] < 1:
        raise ValueError(f"q has shape {q.shape[1:] if single else q.shape}; valid: at least one "
                         f"query and head dim d >= 1")
    if k.shape[1] != q.shape[1]:
        raise ValueError(f"k's head dim {k.shape[1]} must equal q's head dim {q.shape[1]}")
    if v.shape[0] != k.shape[0]:
        raise ValueError(f"v has {v.shape[0]} rows but k has {k.shape[0]}; they must match")
    if v.shape[1] < 1:
        raise ValueError(f"v has shape {v.shape}; valid: value dim d_v >= 1")
    dtype = np.result_type(q.dtype, k.dtype, v.dtype, np.float32)
    n, n_k = q.shape[0], k.shape[0]                  # scores, their scaled copy and exp, two masks
    check_bytes(f"attention_state: {n} queries x {n_k} keys of scores ({dtype.name})",
                n * n_k * (3 * dtype.itemsize + 2) + n * v.shape[1] * dtype.itemsize)
    q, k, v = (a.astype(dtype, copy=False) for a in (q, k, v))
    scale = softmax_scale(scale, q.shape[1])
    with np.errstate(over="ignore", invalid="ignore"):
        s = (q @ k.T) * dtype.type(scale)
    if not np.isfinite(s).all():
        raise _overflow("q or k", "scale * q k^T", dtype)
    if mask is not None:
        mask = as_array("mask", mask, kinds="b")
        try:
            s = np.where(np.broadcast_to(mask, s.shape), s, -np.inf)
        except ValueError:
            raise ValueError(f"mask of shape {mask.shape} does not broadcast to (n, n_k) = {s.shape}") from None
    if s.shape[1] == 0:                              # no keys: the identity state
        o = np.zeros((q.shape[0], v.shape[1]), dtype=dtype)
        lse = np.full(q.shape[0], -np.inf, dtype=dtype)
    else:
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            m = s.max(axis=1)
            m_safe = np.where(m > -np.inf, m, 0.0).astype(dtype)   # fully masked row: shift by 0
            p = np.exp(s - m_safe[:, None])          # <= 1; 0 where masked
            l = p.sum(axis=1)                        # >= 1 unless the row sees no key
            o = np.divide(p @ v, l[:, None], out=np.zeros((q.shape[0], v.shape[1]), dtype=dtype),
                          where=l[:, None] > 0)
            lse = np.where(l > 0, m_safe + np.log(np.where(l > 0, l, 1)), -np.inf).astype(dtype)
        if not np.isfinite(o).all():
            raise _overflow("v", "the weighted sum of v", dtype)
    return (o[0], lse[0]) if single else (o, lse)


def merge(a, b):
    """(o_a, lse_a) (+) (o_b, lse_b): the state over the union of two disjoint key sets,
    lse = log(e^lse_a + e^lse_b), o = e^(lse_a - lse) o_a + e^(lse_b - lse) o_b. Associative and
    commutative with identity (0, -inf); two empty states give (0, -inf), never NaN. Elementwise
    over leading query dims; o finite, lse finite or -inf. The reduction of split-KV and cascade.

    >>> merge((np.array([1.0]), 0.0), (np.array([3.0]), 0.0))   # equal weights: mean, lse + log 2
    (array([2.]), array(0.69314718))
    """
    (oa, la), (ob, lb) = _state(a, "a"), _state(b, "b")
    if oa.shape != ob.shape or la.shape != lb.shape:
        raise ValueError(f"states must have the same shapes; got o {oa.shape} vs {ob.shape}, "
                         f"lse {la.shape} vs {lb.shape}")
    dtype = np.result_type(oa.dtype, ob.dtype)      # a plain-float lse does not promote fp32 states
    dtype = dtype if dtype.kind == "f" else np.dtype(np.float64)
    with np.errstate(over="ignore", under="ignore"):
        m = np.maximum(la, lb)                       # shift by the larger lse: exponents <= 0
        m_safe = np.where(m > -np.inf, m, 0.0)       # both empty: m = -inf, shift by 0 instead
        wa = np.exp(la - m_safe).astype(dtype)       # e^(lse_a - m); 0 for an empty state
        wb = np.exp(lb - m_safe).astype(dtype)
        total = wa + wb                              # e^(lse - m), in [1, 2] unless both empty
        seen = total > 0
        safe_total = np.where(seen, total, 1)
        lse = np.where(seen, m_safe + np.log(safe_total), -np.inf).astype(dtype)
        o = (oa * (wa / safe_total)[..., None] + ob * (wb / safe_total)[..., None]).astype(dtype)
    if not np.isfinite(o).all():
        raise _overflow("o", "the merged o", dtype)
    return o, lse


def _state(s, name):
    """Check one state (o, lse): o real and finite with >= 1 dimension, lse finite or -inf,
    lse.shape == o.shape[:-1]."""
    if isinstance(s, (str, bytes, np.ndarray)) or not hasattr(s, "__len__") or len(s) != 2:
        raise TypeError(f"state {name} must be a pair (o, lse), got {type(s).__name__}"
                        + (f" of length {len(s)}" if hasattr(s, "__len__") else ""))
    o, lse = s
    o = as_array(f"state {name}'s o", o)
    lse = as_array(f"state {name}'s lse", lse, neginf=True)
    if o.ndim == 0:
        raise ValueError(f"state {name}: o must have a value dimension (shape (..., d_v)), got a 0-d value")
    if o.shape[:-1] != lse.shape:
        raise ValueError(f"state {name}: o of shape {o.shape} needs lse of shape {o.shape[:-1]}, got {lse.shape}")
    return o, lse


def _order(order, n: int) -> list[int]:
    """The fold order of `merge_states` for n states as a list of indices (checked by name)."""
    if order is None or (isinstance(order, str) and order == "forward"):
        return list(range(n))
    if isinstance(order, str) and order == "reverse":
        return list(range(n - 1, -1, -1))
    if isinstance(order, str):
        raise ValueError(f"order={order!r} is not allowed; valid: 'forward', 'reverse' or a permutation of range({n})")
    if isinstance(order, (set, frozenset, dict)):      # iterates in hash order, not one chosen
        raise TypeError(f"order must be None, 'forward', 'reverse' or a permutation of range({n}) in "
                        f"order (a list or an array), got a {type(order).__name__}")
    try:
        idx = list(order)
    except TypeError:
        raise TypeError(f"order must be None, 'forward', 'reverse' or a permutation of range({n}), "
                        f"got {short(order)}") from None
    if any(isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)) for i in idx) \
            or sorted(idx) != list(range(n)):
        raise ValueError(f"order={short(idx)} must be a permutation of range({n})")
    return [int(i) for i in idx]


def merge_states(states, order=None):
    """Fold `merge` over `states` left to right in the given `order`.

    order: None or "forward" (0, 1, ..., n-1), "reverse", or an explicit permutation of
    range(n) (e.g. `rng.permutation(n)` to mimic atomics that finish in any order). In float64
    every order agrees to ~1e-16; in float32 different orders differ in the last bits, because
    floating-point addition is not associative.
    """
    if isinstance(states, (str, bytes, np.ndarray)) or (
            isinstance(states, (tuple, list)) and len(states) == 2 and isinstance(states[0], np.ndarray)):
        raise TypeError(f"states must be a list of (o, lse) pairs, got {type(states).__name__}; "
                        f"pass [state] for a single state")
    try:
        states = list(states)
    except TypeError:
        raise TypeError(f"states must be a list of (o, lse) pairs, got {short(states)}") from None
    if not states:
        raise ValueError("states must hold at least one (o, lse) state, got none")
    idx = _order(order, len(states))
    states = [_state(st, f"states[{i}]") for i, st in enumerate(states)]   # all checked before any work
    acc = states[idx[0]]
    for i in idx[1:]:
        acc = merge(acc, states[i])
    return acc
