"""Low-precision attention, simulated: round Q, K and V to FP8 (e4m3) or FP4 (e2m1) with scales,
attend in float64, and measure the error against float64 attention on the exact inputs.

Rounding is ml_dtypes' (float32 -> ml_dtypes.float8_e4m3fn / float4_e2m1fn -> float32): round to
nearest even, saturating: a value beyond the format's largest finite one becomes that value
(e4m3 itself has no infinity and would give NaN; bf16 would give inf). A scale maps each group's largest |value| to
the format's largest finite value (448 for e4m3, 6 for e2m1) before rounding and back after:

- per tensor: one scale for the whole (N, d) matrix (the baseline FP8 attention of FA3's paper);
- per block: one scale per `block` consecutive rows (tokens), as FA3 quantises per tile;
- incoherent processing (FA3): multiply Q and K by the same random orthogonal matrix M (a
  Hadamard matrix with random signs, scaled by 1/sqrt(d)) before quantising. (QM)(KM)^T = QK^T
  in exact arithmetic, but M spreads a few large channels over all of them, so the largest
  |value|, which sets the scale, shrinks and a channel's rounding errors no longer line up.

Inputs (`outlier_inputs`): standard normal Q, K, V whose rows have log-normal norms, and keys
with a few outlier channels: a channel-wide offset of +-`strength` with 10 % spread, the shape of
the large key channels measured in LLMs. A per-channel offset adds the same amount to every
score of a query, which softmax ignores, so the exact output stays well-conditioned while the
quantiser has to cover the range. Everything is seeded.

What this leaves out on purpose: P is not quantised before PV (FA3's FP8 kernel rounds it to
FP8 too), accumulation is exact (float64), and nothing is fused or tiled.

This file is long because it is one experiment from end to end: the quantiser, the seeded outlier
inputs, the float64 reference and the error between them share their caches and size limits
(`_inputs`, `_reference`, `_CACHE_BYTES`), so that a repeated setting costs nothing; apart, the
error would reach into the inputs' private caches.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from attnlab.validate import as_array, as_bool, as_float, as_int, as_rng, check_bytes, choice

__all__ = [
    "FORMATS",
    "format_max",
    "quantise",
    "random_orthogonal",
    "outlier_inputs",
    "attention64",
    "lowprec_attention",
    "attention_error",
    "AttentionError",
    "METHODS",
    "compare_methods",
]

#: name -> ml_dtypes scalar type
FORMATS = {
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp4_e2m1": ml_dtypes.float4_e2m1fn,
    "bf16": ml_dtypes.bfloat16,
}
#: (label, block, transform) of the three methods compared; block None = per tensor
METHODS = (
    ("per-tensor", None, False),
    ("per-block", "block", False),
    ("per-block + transform", "block", True),
)


def format_max(fmt: str) -> float:
    """The largest finite value of format `fmt`.

    >>> format_max("fp8_e4m3"), format_max("fp4_e2m1")
    (448.0, 6.0)
    """
    return float(ml_dtypes.finfo(FORMATS[choice("fmt", fmt, tuple(FORMATS))]).max)


_F32_MAX = float(np.finfo(np.float32).max)
_X_MAX = _F32_MAX / 2  # |x| quantise takes: float32's range, with room for a scale's rounding
_TINY = np.float32(np.finfo(np.float32).smallest_subnormal)
_CACHE_BYTES = 1 << 26  # inputs and references cached only up to this size each
_ROWS_BYTES = 1 << 26  # attention64 works in row blocks of at most 64 MiB of scores
#: The largest n `attention_error` takes: its two n x n float64 attentions take a few seconds there.
MAX_ERROR_N = 8192


def _round(x32: np.ndarray, fmt: str) -> np.ndarray:
    top = np.float32(format_max(fmt))
    return np.clip(x32, -top, top).astype(FORMATS[fmt]).astype(np.float32)  # saturate


def _divide(x32, s):
    with np.errstate(over="ignore"):  # beyond float32 is beyond the format: it saturates
        return x32 / s


def quantise(x, fmt: str = "fp8_e4m3", block: int | None = None, *, scale: float | None = None) -> np.ndarray:
    """`x` (float array, rows first) rounded to `fmt` and back, as float32.

    scale: one given scale (x / scale is rounded, then multiplied back); else block None: one
    scale per tensor, amax / format_max; block b: one scale per b consecutive rows (axis 0).
    A group of zeros keeps scale 1. Values that land beyond the format's range saturate to its
    largest finite value. |x| at most 1.7e38 (float32's range, halved); a given scale in
    [1.2e-38, 3.4e38 / (2 format_max)], so that neither x / scale nor the result leaves float32.
    x and its temporaries at most 2 GiB (x.size x (x's bytes + 21)), checked before any is made.

    >>> quantise(np.array([0.3, 1.0, 7.0]), "fp4_e2m1", scale=1.0).tolist()
    [0.5, 1.0, 6.0]
    >>> quantise(np.array([500.0, -1e4]), "fp8_e4m3", scale=1.0).tolist()
    [448.0, -448.0]
    """
    choice("fmt", fmt, tuple(FORMATS))
    x = as_array("x", x, kinds="f", finite=False)
    check_bytes(
        f"quantise: x of shape {x.shape} ({x.size:,} values: |x|, a float32 copy, the scaled, "
        f"clipped and rounded values)",
        x.size * (x.dtype.itemsize + 21),
    )
    x = as_array("x", x, kinds="f")  # NaN and inf refused, now that the size is known
    if x.size and float(np.abs(x).max()) > _X_MAX:
        raise ValueError(
            f"x holds {float(np.abs(x).max()):.4g}; valid: |x| <= {_X_MAX:.3g} (quantise works in float32)"
        )
    x = x.astype(np.float32)
    top = np.float32(format_max(fmt))
    if scale is not None:
        s = np.float32(as_float("scale", scale, float(np.finfo(np.float32).tiny), _X_MAX / float(top)))
        return _round(_divide(x, s), fmt) * s
    if block is None:
        amax = np.float32(np.abs(x).max(initial=0.0))
        s = max(amax / top, _TINY) if amax > 0 else np.float32(1.0)
        return _round(x / s, fmt) * s
    block = as_int("block", block, 1, None)
    if x.ndim == 0:
        raise ValueError("x must have at least one axis for block scaling; valid: an (N, ...) array")
    n = x.shape[0]
    if n == 0:
        return x.copy()
    block = min(block, n)  # one block past the rows is the same single group
    pad = -n % block
    xp = np.concatenate([x, np.zeros((pad, *x.shape[1:]), np.float32)]) if pad else x
    groups = xp.reshape(-1, block, *x.shape[1:])
    amax = np.abs(groups).reshape(groups.shape[0], -1).max(axis=1)
    s = np.where(amax > 0, np.maximum(amax / top, _TINY), np.float32(1.0)).astype(np.float32)
    s = s.reshape(-1, *([1] * (groups.ndim - 1)))
    return (_round(groups / s, fmt) * s).reshape(xp.shape)[:n]


def random_orthogonal(d: int, rng) -> np.ndarray:
    """A d x d random orthogonal matrix H diag(signs) / sqrt(d), H the Sylvester Hadamard matrix
    (d a power of two), signs +-1 from `rng` (a numpy Generator or a seed): M M^T = I."""
    d = as_int("d", d, 1, 4096)
    if d & (d - 1):
        raise ValueError(f"d={d} is not a power of two; valid: 1, 2, 4, ..., 4096 (Sylvester Hadamard)")
    signs = as_rng("rng", rng).choice([-1.0, 1.0], size=d)
    return _hadamard(d) * signs[None, :] / np.sqrt(d)


@functools.lru_cache(maxsize=16)
def _hadamard(d):
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.vstack([np.hstack([h, h]), np.hstack([h, -h])])
    h.setflags(write=False)
    return h


@functools.lru_cache(maxsize=32)
def _inputs(n, d, strength, n_outliers, seed):
    rng = np.random.default_rng(seed)
    norms = lambda: np.exp(0.5 * rng.standard_normal((n, 1)))  # noqa: E731  log-normal rows
    q = rng.standard_normal((n, d)) * norms()
    k = rng.standard_normal((n, d)) * norms()
    v = rng.standard_normal((n, d)) * norms()
    chans = rng.choice(d, size=n_outliers, replace=False)
    signs = rng.choice([-1.0, 1.0], size=n_outliers)
    k[:, chans] = strength * signs * (1.0 + 0.1 * rng.standard_normal((n, n_outliers)))
    out = (q, k, v, chans)
    for a in out:
        a.setflags(write=False)
    return out


def outlier_inputs(n: int = 512, d: int = 64, strength: float = 30.0, n_outliers: int = 4, seed: int = 0):
    """(q, k, v, outlier channels): float64 (n, d) inputs as the module docstring describes; read
    only (cached up to 64 MiB each: the same arguments return the same arrays; larger ones are
    made afresh, so the cache stays under 32 x 64 MiB). n <= 65536, d <= 4096 and the three
    arrays at most 2 GiB together (n x d <= 2^31 / 24)."""
    n = as_int("n", n, 1, 1 << 16)
    d = as_int("d", d, 1, 4096)
    check_bytes(f"outlier_inputs: n={n} x d={d} x 3 arrays of float64", 3 * n * d * 8)
    strength = as_float("strength", strength, 0.0, 1e4)
    n_outliers = as_int("n_outliers", n_outliers, 0, d)
    seed = as_int("seed", seed, 0, None)
    small = 3 * n * d * 8 <= _CACHE_BYTES
    return (_inputs if small else _inputs.__wrapped__)(n, d, strength, n_outliers, seed)


def attention64(q, k, v) -> np.ndarray:
    """softmax(q k^T / sqrt(d)) v in float64 (the reference): q (N_q, d), k (N_k, d), v (N_k, d_v),
    finite. Computed in blocks of query rows (at most 64 MiB of scores each), so memory is
    O(N_k) per row, not N_q x N_k. Scores beyond float64 (|q k^T / sqrt(d)| > 1.8e308) are
    refused by name: softmax of them would be inf - inf = NaN."""
    q = as_array("q", q, ndim=2, shape="(N_q, d)").astype(np.float64, copy=False)
    k = as_array("k", k, ndim=2, shape="(N_k, d)").astype(np.float64, copy=False)
    v = as_array("v", v, ndim=2, shape="(N_k, d_v)").astype(np.float64, copy=False)
    if q.shape[1] < 1 or k.shape[1] != q.shape[1] or k.shape[0] < 1 or v.shape[0] != k.shape[0]:
        raise ValueError(
            f"q (N_q, d), k (N_k, d), v (N_k, d_v) with d, N_k >= 1; got q {q.shape}, "
            f"k {k.shape}, v {v.shape}"
        )
    check_bytes(
        f"attention64: output N_q={q.shape[0]} x d_v={v.shape[1]} (float64)", q.shape[0] * v.shape[1] * 8
    )
    rows = max(1, _ROWS_BYTES // (8 * k.shape[0]))
    c = np.sqrt(q.shape[-1])
    if rows >= q.shape[0]:
        return _softmax_v(_scores(q, k, c), v)
    out = np.empty((q.shape[0], v.shape[1]))
    for a in range(0, q.shape[0], rows):
        out[a : a + rows] = _softmax_v(_scores(q[a : a + rows], k, c), v)
    return out


def _scores(q, k, c):
    with np.errstate(over="ignore", invalid="ignore"):
        s = q @ k.T / c
    if not np.isfinite(s).all():
        raise ValueError(
            f"q k^T / sqrt(d) overflows float64 (beyond 1.8e308) although q and k are "
            f"finite; q and k hold values too large for a float64 reference "
            f"(max |q| {np.abs(q).max():.3g}, max |k| {np.abs(k).max():.3g}): scale them down"
        )
    return s


def _softmax_v(s, v):
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def lowprec_attention(
    q, k, v, fmt: str = "fp8_e4m3", block: int | None = None, transform: bool = False, seed: int = 0
) -> np.ndarray:
    """Attention of q, k, v each rounded by `quantise(., fmt, block)`; with `transform`, q and k
    are first multiplied by `random_orthogonal(d, seed)`. Attends in float64."""
    transform = as_bool("transform", transform)
    seed = as_int("seed", seed, 0, None)
    q = as_array("q", q, ndim=2, shape="(N_q, d)")
    k = as_array("k", k, ndim=2, shape="(N_k, d)")
    v = as_array("v", v, ndim=2, shape="(N_k, d_v)")
    if k.shape[1] != q.shape[1]:
        raise ValueError(f"q {q.shape} and k {k.shape} must have the same head dim d")
    if transform:
        m = random_orthogonal(q.shape[-1], seed)
        q, k = q @ m, k @ m
    return attention64(*(quantise(a, fmt, block) for a in (q, k, v)))


@dataclass(frozen=True)
class AttentionError:
    """Error of low-precision attention against the float64 reference."""

    fmt: str
    block: int | None
    transform: bool
    strength: float
    rmse: float  # sqrt(mean((o - o_ref)^2)), FA3's metric
    relative: float  # ||o - o_ref||_F / ||o_ref||_F
    amax_qk: float  # largest |value| the quantiser sees in q and k (after the transform)


def attention_error(
    fmt: str = "fp8_e4m3",
    block: int | None = None,
    transform: bool = False,
    strength: float = 30.0,
    n: int = 512,
    d: int = 64,
    n_outliers: int = 4,
    seed: int = 0,
) -> AttentionError:
    """Error of `lowprec_attention` on `outlier_inputs(n, d, strength, n_outliers, seed)`
    (cached: a repeated call costs nothing). n in [1, 8192]: the two float64 attentions cost
    n^2 exps each, a few seconds at n = 8192 (use `lowprec_attention` on your own arrays for
    more)."""
    choice("fmt", fmt, tuple(FORMATS))
    block = None if block is None else as_int("block", block, 1, None)
    transform = as_bool("transform", transform)
    as_int("n", n, 1, MAX_ERROR_N)
    outlier_inputs(n, d, strength, n_outliers, seed)  # checks the rest by name
    return _error(fmt, block, transform, float(strength), int(n), int(d), int(n_outliers), int(seed))


@functools.lru_cache(maxsize=256)
def _error(fmt, block, transform, strength, n, d, n_outliers, seed):
    q, k, v, _ = outlier_inputs(n, d, strength, n_outliers, seed)
    small = 3 * n * d * 8 <= _CACHE_BYTES
    ref = (_reference if small else _reference.__wrapped__)(n, d, float(strength), n_outliers, seed)
    o = lowprec_attention(q, k, v, fmt, block, transform, seed)
    err = o - ref
    amax = float(np.abs(k).max()) if not transform else float(np.abs(k @ random_orthogonal(d, seed)).max())
    amax = max(amax, float(np.abs(q).max()))
    return AttentionError(
        fmt,
        block,
        bool(transform),
        float(strength),
        float(np.sqrt(np.mean(err**2))),
        float(np.sqrt(np.sum(err * err) / np.sum(ref * ref))),
        amax,
    )


@functools.lru_cache(maxsize=32)
def _reference(n, d, strength, n_outliers, seed):
    ref = attention64(*outlier_inputs(n, d, strength, n_outliers, seed)[:3])
    ref.setflags(write=False)
    return ref


def compare_methods(fmt: str = "fp8_e4m3", strength: float = 30.0, block: int = 64, **kw) -> list[dict]:
    """One row per METHODS entry: its `attention_error` and the per-tensor RMSE over its own.
    block: the rows per scale of the per-block methods, an integer >= 1 (None would make them
    per-tensor under a per-block label, so it is refused)."""
    block = as_int("block", block, 1, None)
    rows = []
    for label, b, t in METHODS:
        e = attention_error(fmt, block if b == "block" else None, t, strength, **kw)
        rows.append({"method": label, "rmse": e.rmse, "relative": e.relative, "amax": e.amax_qk})
    for r in rows:
        r["gain"] = rows[0]["rmse"] / r["rmse"]
    return rows
