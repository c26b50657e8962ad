"""Decode attention: arithmetic intensity, split-KV (Flash-Decoding), cascade attention, and the
simplified-GPU time model that shows why a small batch with a long context leaves SMs idle.

In decode each request brings one new query per head (or a few, with speculative tokens) and
reads its whole KV cache. One KV head serves g query heads (GQA), so per KV element loaded the
kernel does a handful of FLOPs: intensity ~ g, whatever the batch, since no two requests share KV.

What this leaves out on purpose: paged KV layouts and load-balanced scheduling (FlashInfer's part of
the course). How long decode attention takes on a GPU is a model of the machine, so it lives one
layer up: `attnlab.machine.hardware.decode_time` (the lecture's "132 SMs share the bandwidth" GPU).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from attnlab.validate import (as_array, as_bool, as_counts, as_dtype_bytes, as_float, as_int, as_reals, as_sequence,
                              check_bytes, short)
from attnlab.core.softmax import _order, attention_state, merge, merge_states

__all__ = ["intensity", "decode_cost", "DecodeCost", "split_bounds", "split_kv_attention",
           "cascade_attention", "CascadeResult", "cascade_intensity"]

_INT64_MAX = int(np.iinfo(np.int64).max)
#: The most chunks `split_bounds` lists (and `split_kv_attention` computes a state for).
MAX_SPLITS = 1 << 20


class DecodeCost(NamedTuple):
    """FLOPs and HBM bytes of decode attention (`decode_cost`); `intensity` = flops / bytes."""

    flops: object
    bytes: object

    @property
    def intensity(self):
        """FLOP per byte: flops / bytes (a float, or a float64 array)."""
        if isinstance(self.flops, np.ndarray) or isinstance(self.bytes, np.ndarray):
            return np.asarray(self.flops, dtype=np.float64) / np.asarray(self.bytes, dtype=np.float64)
        return self.flops / self.bytes


def _broadcast(fn: str, arrays: dict, entry_bytes: int, what: str) -> tuple:
    """The shape `arrays` broadcast to, refused by name when they do not broadcast or when
    `entry_bytes` per entry of it would pass the allocation limit."""
    shapes = {name: np.shape(x) for name, x in arrays.items()}
    names = ", ".join(shapes)
    try:
        shape = np.broadcast_shapes(*shapes.values())
    except ValueError:
        raise ValueError(f"{names} do not broadcast together: shapes {shapes}") from None
    check_bytes(f"{fn}: {names} broadcast to shape {shape} ({what})", int(np.prod(shape, dtype=object)) * entry_bytes)
    return shape


def decode_cost(g, l_qo, l_kv, d, *, batch=1, dtype_bytes=2) -> DecodeCost:
    """FLOPs and HBM bytes of decode attention for one KV head and its g query heads, times `batch`
    requests (each with its own KV cache, so nothing is shared between them):

        flops = batch * 4 g l_qo l_kv d                       (QK^T and PV: 2 d FLOPs per pair each)
        bytes = batch * dtype_bytes * (2 g l_qo d + 2 l_kv d)  (Q in and O out; K and V in)

    g, l_qo (queries per request per head: 1, or a few speculative tokens), l_kv (context),
    d (head dim) and batch are integers >= 1 or arrays of them (broadcast together);
    dtype_bytes is 2 for bf16/fp16, 1 for fp8, 0.5 for fp4. flops is an int (int64 array);
    bytes an int (int64 array) for whole-byte dtypes, else a float (float64 array).
    `intensity(g, l_qo, l_kv, dtype_bytes=...)` equals flops / bytes.

    >>> c = decode_cost(8, 1, 8192, 128)                       # Llama-3-70B: g = 8, 8K context
    >>> c.flops, c.bytes, round(c.intensity, 2)
    (33554432, 4198400, 7.99)
    >>> decode_cost(8, 1, 8192, 128, batch=64).bytes == 64 * c.bytes   # batch does not share KV
    True
    """
    parts = {name: as_counts(name, x, 1, None)
             for name, x in (("g", g), ("l_qo", l_qo), ("l_kv", l_kv), ("d", d), ("batch", batch))}
    b = as_dtype_bytes("dtype_bytes", dtype_bytes)
    if all(scalar for _, scalar in parts.values()):
        g, l_qo, l_kv, d, batch = (x for x, _ in parts.values())
        elements = batch * (2 * g * l_qo * d + 2 * l_kv * d)
        return DecodeCost(batch * 4 * g * l_qo * l_kv * d, _times(elements, b, "g, l_qo, l_kv, d, batch"))
    _broadcast("decode_cost", {name: x for name, (x, _) in parts.items()}, 8 * 8,
               "int64 and float64 results and temporaries")
    g, l_qo, l_kv, d, batch = np.broadcast_arrays(*(np.asarray(x, dtype=np.int64) for x, _ in parts.values()))
    big = float(np.max(4.0 * g * l_qo * l_kv * d * batch, initial=0.0))
    if big > 2.0 ** 62:
        raise ValueError(f"g, l_qo, l_kv, d, batch give {big:.3g} FLOPs, beyond int64; valid: "
                         f"4 g l_qo l_kv d batch < 2^62, or pass Python ints for exact counts")
    flops = batch * 4 * g * l_qo * l_kv * d
    elements = batch * (2 * g * l_qo * d + 2 * l_kv * d)
    return DecodeCost(flops, elements * b if isinstance(b, int) else elements.astype(np.float64) * b)


def _times(elements: int, b, names: str):
    """elements x b bytes: an int for whole-byte dtypes, else a float, refused past float64."""
    try:
        return elements * b
    except OverflowError:
        raise ValueError(f"{names} give {short(elements)} elements, whose bytes at dtype_bytes={b} "
                         f"are beyond float64 (1.8e308); valid: smaller sizes, or a whole-byte dtype "
                         f"for exact integer bytes") from None


def intensity(g, l_qo, l_kv, *, dtype_bytes=2):
    """FLOP per byte of decode attention for one KV head and its g query heads (bf16 by default).

    `decode_cost`'s flops / bytes with the head dim d cancelled:
    I = 4 g l_qo l_kv d / (b (2 g l_qo d + 2 l_kv d)) = 2 g l_qo l_kv / (b (g l_qo + l_kv)),
    i.e. g l_qo l_kv / (g l_qo + l_kv) for b = 2 bytes, ~g when l_kv >> g l_qo. It does not depend
    on the batch either: no two requests share KV. Vectorised; g, l_qo, l_kv are positive reals
    (non-integer contexts are fine for drawing a curve), a float out for scalars.

    Example: Llama-3-70B (g = 8) at 8192 context: 8 * 8192 / 8200 = 7.99 FLOP/byte.

    >>> round(intensity(8, 1, 8192), 4), round(intensity(128, 1, 8192), 1)   # GQA vs MLA's 128
    (7.9922, 126.0)
    """
    vals = [as_reals(name, x, 0.0, lo_open=True) for name, x in (("g", g), ("l_qo", l_qo), ("l_kv", l_kv))]
    b = as_float("dtype_bytes", as_dtype_bytes("dtype_bytes", dtype_bytes))    # refused past float64
    _broadcast("intensity", {name: x for name, (x, _) in zip(("g", "l_qo", "l_kv"), vals)}, 8 * 4,
               "float64 result and three temporaries")
    g, l_qo, l_kv = (np.float64(x) if scalar else x for x, scalar in vals)
    with np.errstate(over="ignore"):
        out = (2 * g * l_qo * l_kv) / (np.float64(b) * (g * l_qo + l_kv))
    if not np.all(np.isfinite(out)):
        raise ValueError("intensity overflowed float64: g * l_qo * l_kv is beyond 1.8e308")
    return float(out) if all(scalar for _, scalar in vals) else out


def split_bounds(l_kv: int, splits: int) -> list[tuple[int, int]]:
    """Half-open (start, stop) of each of `splits` chunks of l_kv keys, sizes differing by <= 1.

    Edge i is round(i * l_kv / splits), ties to even, computed in integers (exact at any size);
    splits <= l_kv and at most 2^20 (a list of that many chunks is already ~100 MiB).

    >>> split_bounds(10, 4)
    [(0, 2), (2, 5), (5, 8), (8, 10)]
    """
    l_kv = as_int("l_kv", l_kv, 1, None)
    splits = as_int("splits", splits, 1, min(l_kv, MAX_SPLITS))

    def edge(i):
        q, r = divmod(i * l_kv, splits)
        return q + int(2 * r > splits or (2 * r == splits and q % 2 == 1))
    edges = [edge(i) for i in range(splits + 1)]
    return list(zip(edges[:-1], edges[1:]))


def _kv(k, v):
    """k (l_kv, d) and v (l_kv, d_v), checked by name; l_kv >= 1."""
    k = as_array("k", k, ndim=2, shape="(l_kv, d)")
    v = as_array("v", v, ndim=2, shape="(l_kv, d_v)")
    if v.shape[0] != k.shape[0]:
        raise ValueError(f"v has {v.shape[0]} rows but k has {k.shape[0]}; they must match")
    if k.shape[0] < 1:
        raise ValueError(f"k has shape {k.shape}; split-KV needs l_kv >= 1 keys")
    return k, v


def split_kv_attention(q, k, v, splits: int, *, scale: float | None = None, order=None,
                       return_states: bool = False):
    """Flash-Decoding: cut the KV into `splits` chunks, compute each chunk's attention state
    (what one SM would do), then merge the states with (+) (`softmax.merge`). Equals full attention.

    q is (d,) or (n, d) (queries sharing this KV, e.g. a GQA group); k, v are (l_kv, d), (l_kv, d_v).
    Returns (o, lse), plus the list of per-chunk states with return_states=True.
    `order` is passed to `merge_states` ("forward", "reverse" or a permutation of range(splits)).

    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal(16), rng.standard_normal((1000, 16)), rng.standard_normal((1000, 16))
    >>> o, lse = split_kv_attention(q, k, v, splits=8)
    >>> bool(np.abs(o - attention_state(q, k, v)[0]).max() < 1e-15)
    True
    """
    (k, v), return_states = _kv(k, v), as_bool("return_states", return_states)
    bounds = split_bounds(k.shape[0], splits)                 # one chunk of keys per work block (SM)
    _order(order, len(bounds))                                # a bad order fails before any work
    states = [attention_state(q, k[a:b], v[a:b], scale=scale)  # each block: its chunk's (o, lse),
              for a, b in bounds]                             # written to HBM as a partial result
    o, lse = merge_states(states, order)                      # the merge kernel: fold (+) over chunks
    return (o, lse, states) if return_states else (o, lse)


class CascadeResult(NamedTuple):
    """Output of `cascade_attention`: o (n, d_v), lse (n,), KV tokens read by the cascade and by
    the naive per-request kernel."""

    o: np.ndarray
    lse: np.ndarray
    tokens_read: int
    tokens_naive: int


def cascade_attention(queries, prefix_k, prefix_v, unique_kv, *, scale: float | None = None):
    """Cascade attention for n requests sharing a prefix.

    1. prefix: the n queries as one (n, d) matrix against the shared prefix KV, read once;
    2. unique: each request's query against its own KV (possibly empty);
    3. merge the two states per request with (+).
    `queries` is (n, d), n >= 1; `prefix_k`, `prefix_v` (P, d), (P, d_v) (P may be 0);
    `unique_kv` a sequence of n pairs (k_i, v_i) of shapes (u_i, d), (u_i, d_v). All finite.
    The result equals per-request attention over prefix + unique; `tokens_read` = P + sum u_i
    against `tokens_naive` = sum (P + u_i).

    Example: 64 requests, prefix 4096, 256 unique tokens each: 20,480 tokens read instead of
    278,528 (93 % fewer).
    """
    queries = as_array("queries", queries, ndim=2, shape="(n, d), one query per request")
    n, d = queries.shape
    if n < 1 or d < 1:
        raise ValueError(f"queries has shape {queries.shape}; valid: (n, d) with n >= 1, d >= 1")
    if isinstance(unique_kv, np.ndarray):
        raise TypeError(f"unique_kv must be a sequence of n={n} pairs (k_i, v_i), got {type(unique_kv).__name__}")
    unique_kv = as_sequence("unique_kv", unique_kv, f"a sequence of n={n} pairs (k_i, v_i)")
    if len(unique_kv) != n:
        raise ValueError(f"unique_kv has {len(unique_kv)} entries; it needs one (k, v) per request (n={n})")
    pk = as_array("prefix_k", prefix_k, ndim=2, shape="(P, d)")
    pv = as_array("prefix_v", prefix_v, ndim=2, shape="(P, d_v)")
    if pk.shape[1] != d or pv.shape[0] != pk.shape[0] or pv.shape[1] < 1:
        raise ValueError(f"prefix_k {pk.shape} and prefix_v {pv.shape} must be (P, d) with the queries' "
                         f"head dim d={d}, and (P, d_v) with d_v >= 1")
    pairs = []
    for i, pair in enumerate(unique_kv):
        if isinstance(pair, (str, bytes, np.ndarray)) or not hasattr(pair, "__len__") or len(pair) != 2:
            raise TypeError(f"unique_kv[{i}] must be a pair (k, v), got {type(pair).__name__}")
        ki = as_array(f"unique_kv[{i}] k", pair[0], ndim=2, shape="(u, d)")
        vi = as_array(f"unique_kv[{i}] v", pair[1], ndim=2, shape="(u, d_v)")
        if ki.shape[1] != d or vi.shape != (ki.shape[0], pv.shape[1]):
            raise ValueError(f"unique_kv[{i}] has k {ki.shape}, v {vi.shape}; need k (u, d) with the "
                             f"queries' head dim d={d} and v (u, d_v={pv.shape[1]})")
        pairs.append((ki, vi))
    prefix = attention_state(queries, pk, pv, scale=scale)
    uniq = [attention_state(queries[i], ki, vi, scale=scale) for i, (ki, vi) in enumerate(pairs)]
    o_u = np.stack([u[0] for u in uniq]).astype(prefix[0].dtype)
    l_u = np.array([u[1] for u in uniq], dtype=prefix[1].dtype)
    o, lse = merge(prefix, (o_u, l_u))
    p = int(pk.shape[0])
    u = [int(ki.shape[0]) for ki, _ in pairs]
    return CascadeResult(o, lse, p + sum(u), sum(p + x for x in u))


def cascade_intensity(n: int, prefix: int, unique: int, g: int = 4) -> dict:
    """Intensity (FLOP/byte, bf16) of the cascade's prefix part (n g queries share one KV: l_qo = n)
    against the naive kernel (each request alone over prefix + unique), and the KV tokens read.

    Keys: prefix, unique (0.0 when unique = 0), naive (FLOP/byte); tokens_naive = n (P + u),
    tokens_cascade = P + n u, saving = 1 - tokens_cascade / tokens_naive.

    >>> c = cascade_intensity(64, 4096, 256, g=4)
    >>> c["tokens_cascade"], c["tokens_naive"], round(c["saving"], 3)
    (20480, 278528, 0.926)
    """
    n = as_int("n", n, 1, 1 << 62)
    prefix = as_int("prefix", prefix, 1, 1 << 62)
    unique = as_int("unique", unique, 0, 1 << 62)
    g = as_int("g", g, 1, 1 << 62)
    return {"prefix": intensity(g, n, prefix),
            "unique": intensity(g, 1, unique) if unique else 0.0,
            "naive": intensity(g, 1, prefix + unique),
            "tokens_naive": n * (prefix + unique), "tokens_cascade": prefix + n * unique,
            "saving": 1 - (prefix + n * unique) / (n * (prefix + unique))}
