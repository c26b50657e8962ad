"""Decode attention: arithmetic intensity, split-KV (Flash-Decoding), cascade attention, and the
simplified-GPU time model that shows why a small batch with a long context leaves SMs idle.

In decode each request brings one new query per head (or a few, with speculative tokens) and
reads its whole KV cache. One KV head serves g query heads (GQA), so per KV element loaded the
kernel does a handful of FLOPs: intensity ~ g, whatever the batch, since no two requests share KV.

What this leaves out on purpose: paged KV layouts and load-balanced scheduling (FlashInfer's part of
the course). How long decode attention takes on a GPU is a model of the machine, so it lives one
layer up: `attnlab.hardware.decode_time` (the lecture's "132 SMs share the bandwidth" GPU).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._check import as_int
from .softmax import attention_state, merge, merge_states

__all__ = ["intensity", "split_bounds", "split_kv_attention", "cascade_attention", "CascadeResult",
           "cascade_intensity"]


def intensity(g, l_qo, l_kv):
    """FLOP per byte of decode attention for one KV head and its g query heads, bf16.

    FLOPs 4 g l_qo l_kv d (QK^T and PV, 2d each); bytes 2 (2 g l_qo d + 2 l_kv d) (read Q, write O,
    read K and V): I = g l_qo l_kv / (g l_qo + l_kv), i.e. ~g when l_kv >> g l_qo. Vectorised.

    Example: Llama-3-70B (g = 8) at 8192 context: 8 * 8192 / 8200 = 7.99 FLOP/byte.
    """
    arrs = [np.asarray(x, dtype=np.float64) for x in (g, l_qo, l_kv)]
    for name, a in zip(("g", "l_qo", "l_kv"), arrs):
        if not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise ValueError(f"{name}={a if a.ndim == 0 else a.tolist()!r} must be > 0")
    g, l_qo, l_kv = arrs
    out = g * l_qo * l_kv / (g * l_qo + l_kv)
    return float(out) if out.ndim == 0 else out


def split_bounds(l_kv: int, splits: int) -> list[tuple[int, int]]:
    """Half-open (start, stop) of each of `splits` chunks of l_kv keys, sizes differing by <= 1."""
    l_kv = as_int("l_kv", l_kv, 1, None)
    splits = as_int("splits", splits, 1, l_kv)
    edges = np.linspace(0, l_kv, splits + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def split_kv_attention(q, k, v, splits: int, *, scale: float | None = None, order=None,
                       return_states: bool = False):
    """Flash-Decoding: cut the KV into `splits` chunks, compute each chunk's attention state
    (what one SM would do), then merge the states with (+). Equals full attention.

    q is (d,) or (n, d) (queries sharing this KV, e.g. a GQA group); k, v are (l_kv, d).
    Returns (o, lse), plus the list of per-chunk states with return_states=True.
    `order` is passed to `merge_states` ("forward", "reverse" or a permutation).
    """
    k = np.asarray(k)
    if k.ndim != 2:
        raise ValueError(f"k must be (l_kv, d), got shape {k.shape}")
    bounds = split_bounds(k.shape[0], splits)
    states = [attention_state(q, k[a:b], np.asarray(v)[a:b], scale=scale) for a, b in bounds]
    o, lse = merge_states(states, order)
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
    `unique_kv` is a list of n pairs (k_i, v_i). The result equals per-request attention over
    prefix + unique; `tokens_read` = P + sum u_i against `tokens_naive` = sum (P + u_i).

    Example: 64 requests, prefix 4096, 256 unique tokens each: 20,480 tokens read instead of
    278,528 (93 % fewer).
    """
    queries = np.asarray(queries)
    if queries.ndim != 2:
        raise ValueError(f"queries must be (n, d), one query per request; got shape {queries.shape}")
    unique_kv = list(unique_kv)
    n = queries.shape[0]
    if len(unique_kv) != n:
        raise ValueError(f"unique_kv has {len(unique_kv)} entries; it needs one (k, v) per request (n={n})")
    d = queries.shape[1]
    pk, pv = np.asarray(prefix_k), np.asarray(prefix_v)
    if pk.ndim != 2 or pk.shape[1] != d or pv.ndim != 2 or pv.shape[0] != pk.shape[0]:
        raise ValueError(f"prefix_k {pk.shape} and prefix_v {pv.shape} must be (P, d) with the queries' "
                         f"head dim d={d}, and (P, d_v)")
    for i, (ki, vi) in enumerate(unique_kv):
        ki, vi = np.asarray(ki), np.asarray(vi)
        if ki.ndim != 2 or ki.shape[1] != d or vi.ndim != 2 or vi.shape != (ki.shape[0], pv.shape[1]):
            raise ValueError(f"unique_kv[{i}] has k {ki.shape}, v {vi.shape}; need k (u, d) with the "
                             f"queries' head dim d={d} and v (u, d_v={pv.shape[1]})")
    prefix = attention_state(queries, pk, pv, scale=scale)
    uniq = [attention_state(queries[i], ki, vi, scale=scale) for i, (ki, vi) in enumerate(unique_kv)]
    o_u = np.stack([u[0] for u in uniq]).astype(prefix[0].dtype)
    l_u = np.array([u[1] for u in uniq], dtype=prefix[1].dtype)
    o, lse = merge(prefix, (o_u, l_u))
    p = int(np.asarray(prefix_k).shape[0])
    u = [int(np.asarray(ki).shape[0]) for ki, _ in unique_kv]
    return CascadeResult(o, lse, p + sum(u), sum(p + x for x in u))


def cascade_intensity(n: int, prefix: int, unique: int, g: int = 4) -> dict:
    """Intensity (FLOP/byte, bf16) of the cascade's prefix part (n g queries share one KV: l_qo = n)
    against the naive kernel (each request alone over prefix + unique), and the KV tokens read."""
    n = as_int("n", n, 1, None)
    prefix = as_int("prefix", prefix, 1, None)
    unique = as_int("unique", unique, 0, None)
    g = as_int("g", g, 1, None)
    return {"prefix": intensity(g, n, prefix),
            "unique": intensity(g, 1, unique) if unique else 0.0,
            "naive": intensity(g, 1, prefix + unique),
            "tokens_naive": n * (prefix + unique), "tokens_cascade": prefix + n * unique,
            "saving": 1 - (prefix + n * unique) / (n * (prefix + unique))}
