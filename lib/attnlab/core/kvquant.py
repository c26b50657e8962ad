"""The FP8 KV cache, simulated: what `kv_cache_dtype="fp8_e4m3"` means in vLLM and FlashInfer.

Serving engines store K and V in e4m3 (one byte per element) with scales, and attention
dequantises each tile as it loads it (K and V times their scale) and computes in bf16 / fp32, the
query and the output staying in bf16. Here, as in `attnlab.core.lowprec`, the rounding is
ml_dtypes' (round to nearest even, saturating), the attention is float64 and the error is
measured against float64 attention on the exact inputs. Scales (float32), `per`:

- "head": one scale per KV head, over all its tokens and channels (vLLM's per-head scales; one
  per layer, `k_scale` / `v_scale`, is the same with a single KV head);
- "token": one scale per (token, KV head), stored beside the cache: 2 x kv_heads x 4 bytes more
  per token and layer.

Shapes follow FlashInfer's NHD layout for one layer: K, V (N_kv, H_kv, d); queries (N_q, H_q, d)
with GQA (query head h reads KV head h // (H_q // H_kv)); decode: every query sees every key.

Error bound (`kv_error_bound`), in exact arithmetic: rounding to e4m3 moves an element x with
scale s by at most u |x| + s t (u = 2^-4, half e4m3's relative spacing; t = 2^-10, half its
subnormal spacing 2^-9), plus float32's own rounding. A score q.k_j / sqrt(d) then moves by at
most delta = max_j sum_c |q_c| e_jc / sqrt(d) (e the elementwise bound on K), every softmax
weight by a factor within e^(+-2 delta), so sum_j |p'_j - p_j| <= e^(2 delta) - 1, and each
output channel by at most (e^(2 delta) - 1) max_j |v'_jc| + max_j |v'_jc - v_jc|.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.core.decode import DecodeCost, decode_cost
from attnlab.core.lowprec import FORMATS, attention64, format_max, outlier_inputs, quantise
from attnlab.validate import as_array, as_float, as_int, check_bytes, choice

__all__ = [
    "PER",
    "KV_FORMATS",
    "SCALE_BYTES",
    "quantise_kv",
    "kv_attention",
    "kv_error_bound",
    "element_bound",
    "scale_bytes_per_token",
    "kv_decode_cost",
    "kv_inputs",
    "KVError",
    "kv_cache_error",
]

#: Where the scales sit: one per KV head, or one per (token, KV head).
PER = ("head", "token")
#: The cache formats simulated here (bf16 is the unquantised cache: rounding only).
KV_FORMATS = ("fp8_e4m3", "bf16")
#: Bytes of one scale (float32).
SCALE_BYTES = 4
#: Half the relative spacing of e4m3's normal numbers (3 mantissa bits), half its subnormal
#: spacing, and float32's unit roundoff (the division and multiplication by the scale).
U_E4M3, T_E4M3, U_F32 = 2.0**-4, 2.0**-10, 2.0**-24
#: The largest cache `kv_cache_error` builds: N_kv x H_kv x d elements.
MAX_ELEMENTS = 1 << 22


def _kv_array(name, x):
    x = as_array(name, x, ndim=3, shape="(N, H_kv, d)", kinds="f")
    if x.shape[1] < 1 or x.shape[2] < 1:
        raise ValueError(
            f"{name} of shape {x.shape} has no heads or channels; valid: (N, H_kv, d) with H_kv, d >= 1"
        )
    return x


def quantise_kv(x, fmt: str = "fp8_e4m3", per: str = "head"):
    """(x rounded to `fmt` and back, float32 (N, H_kv, d); the float32 scales, (H_kv,) for per
    "head", (N, H_kv) for per "token"). x: one layer's K or V, (N, H_kv, d), finite; a group of
    zeros keeps scale 1 (`lowprec.quantise`'s rule, one group per scale)."""
    choice("fmt", fmt, KV_FORMATS)
    choice("per", per, PER)
    x = _kv_array("x", x)
    n, h, d = x.shape
    top = np.float32(format_max(fmt))
    if per == "head":
        rows = np.ascontiguousarray(x.transpose(1, 0, 2)).reshape(h, n * d)
    else:
        rows = x.reshape(n * h, d)
    out = quantise(rows, fmt, block=1) if rows.size else rows.astype(np.float32)
    amax = np.abs(rows.astype(np.float32)).max(axis=1, initial=0.0)
    tiny = np.float32(np.finfo(np.float32).smallest_subnormal)
    scales = np.where(amax > 0, np.maximum(amax / top, tiny), np.float32(1.0)).astype(np.float32)
    if per == "head":
        return out.reshape(h, n, d).transpose(1, 0, 2), scales
    return out.reshape(n, h, d), scales.reshape(n, h)


def _qkv(q, k, v):
    q = as_array("q", q, ndim=3, shape="(N_q, H_q, d)", kinds="f")
    k, v = _kv_array("k", k), _kv_array("v", v)
    if k.shape != v.shape:
        raise ValueError(f"k {k.shape} and v {v.shape} must have the same shape (N, H_kv, d)")
    if k.shape[0] < 1:
        raise ValueError(f"k of shape {k.shape} holds no token; valid: N >= 1")
    hq, hk = q.shape[1], k.shape[1]
    if q.shape[2] != k.shape[2] or hq < 1 or hq % hk:
        raise ValueError(
            f"q {q.shape} and k {k.shape}: the head dims must agree and H_q a multiple "
            f"of H_kv (GQA); valid: q (N_q, g x H_kv, d)"
        )
    return q, k, v


def kv_attention(q, k, v, fmt: str | None = "fp8_e4m3", per: str = "head") -> np.ndarray:
    """Decode attention over a cache of K and V rounded by `quantise_kv(., fmt, per)` (fmt None:
    the exact cache), q unrounded; float64 (N_q, H_q, d), every query seeing every key."""
    q, k, v = _qkv(q, k, v)
    if fmt is not None:
        k, v = quantise_kv(k, fmt, per)[0], quantise_kv(v, fmt, per)[0]
    group = q.shape[1] // k.shape[1]
    out = np.empty(q.shape, dtype=np.float64)
    for h in range(q.shape[1]):
        out[:, h] = attention64(q[:, h], k[:, h // group], v[:, h // group])
    return out


def element_bound(x, fmt: str = "fp8_e4m3", per: str = "head") -> np.ndarray:
    """The largest |x' - x| rounding by `quantise_kv(x, fmt, per)` can give, elementwise:
    u |x| + s t (+ float32's rounding of x / s and back), u and t of `fmt` (bf16: u = 2^-9,
    t = 0, its range being float32's), s the element's scale."""
    choice("fmt", fmt, KV_FORMATS)
    x = _kv_array("x", x).astype(np.float64)
    s = quantise_kv(x, fmt, per)[1].astype(np.float64)
    s = s[None, :, None] if per == "head" else s[:, :, None]
    u, t = (U_E4M3, T_E4M3) if fmt == "fp8_e4m3" else (2.0**-9, 0.0)
    return (u + 4 * U_F32) * np.abs(x) + t * s


def kv_error_bound(q, k, v, fmt: str = "fp8_e4m3", per: str = "head") -> np.ndarray:
    """The module docstring's bound on |kv_attention(q, k, v, fmt, per) - kv_attention(q, k, v,
    None)|, per query, head and channel: float64 (N_q, H_q, d)."""
    q, k, v = _qkv(q, k, v)
    ek, ev = element_bound(k, fmt, per), element_bound(v, fmt, per)
    vq = np.abs(quantise_kv(v, fmt, per)[0].astype(np.float64))
    group, d = q.shape[1] // k.shape[1], q.shape[2]
    out = np.empty(q.shape, dtype=np.float64)
    for h in range(q.shape[1]):
        kh = h // group
        delta = (np.abs(q[:, h]).astype(np.float64) @ ek[:, kh].T).max(axis=1) / np.sqrt(d)  # (N_q,)
        spread = np.expm1(2 * delta)[:, None]
        out[:, h] = spread * vq[:, kh].max(axis=0)[None, :] + ev[:, kh].max(axis=0)[None, :]
    return out


def scale_bytes_per_token(kv_heads: int, per: str) -> int:
    """Scale bytes one token adds to one layer's cache: 2 x kv_heads x 4 with a scale per token
    (K and V each), 0 with a scale per head (2 x kv_heads x 4 per layer, whatever the context)."""
    kv_heads = as_int("kv_heads", kv_heads, 1, None)
    return 2 * kv_heads * SCALE_BYTES if choice("per", per, PER) == "token" else 0


def kv_decode_cost(
    g, l_kv: int, d: int, *, batch: int = 1, fmt: str = "bf16", per: str = "head"
) -> DecodeCost:
    """`decode.decode_cost(g, 1, l_kv, d, batch=batch)` (one KV head, bf16) with K and V read at
    the cache's bytes instead: 1 byte per element for fp8_e4m3 plus its scales (per "token": 2 x 4
    bytes per token; per "head": 2 x 4 bytes per request). Q and O stay bf16; FLOPs unchanged
    (attention computes in bf16 after dequantising)."""
    choice("fmt", fmt, KV_FORMATS)
    choice("per", per, PER)
    g, l_kv, d, batch = (
        as_int(n, x, 1, None) for n, x in (("g", g), ("l_kv", l_kv), ("d", d), ("batch", batch))
    )
    full = decode_cost(g, 1, l_kv, d, batch=batch, dtype_bytes=2)
    if fmt == "bf16":
        return full
    kv_bf16 = batch * 2 * l_kv * d * 2
    scales = batch * 2 * SCALE_BYTES * (l_kv if per == "token" else 1)
    return DecodeCost(full.flops, full.bytes - kv_bf16 + batch * 2 * l_kv * d + scales)


def kv_inputs(
    n: int = 1024,
    d: int = 64,
    kv_heads: int = 2,
    group: int = 4,
    n_q: int = 16,
    strength: float = 30.0,
    seed: int = 0,
):
    """(q (n_q, kv_heads x group, d), k, v (n, kv_heads, d)), float64: KV head h holds
    `lowprec.outlier_inputs(n, d, strength, seed=seed + h)`'s keys and values (key channels with
    outliers of the given strength), its query heads that draw's first n_q x group query rows."""
    n, d = as_int("n", n, 1, 1 << 16), as_int("d", d, 1, 4096)
    kv_heads, group = as_int("kv_heads", kv_heads, 1, 256), as_int("group", group, 1, 256)
    n_q = as_int("n_q", n_q, 1, None)
    if n_q * group > n:
        raise ValueError(f"n_q={n_q} x group={group} query rows exceed n={n}; valid: n_q x group <= n")
    check_bytes(
        f"kv_inputs: n={n} x kv_heads={kv_heads} x d={d}, K and V (float64)", 2 * n * kv_heads * d * 8
    )
    seed = as_int("seed", seed, 0, None)
    draws = [outlier_inputs(n, d, strength, seed=seed + h) for h in range(kv_heads)]
    q = np.stack([dr[0][: n_q * group].reshape(n_q, group, d) for dr in draws], axis=1)
    k = np.stack([dr[1] for dr in draws], axis=1)
    v = np.stack([dr[2] for dr in draws], axis=1)
    return q.reshape(n_q, kv_heads * group, d), k, v


@dataclass(frozen=True)
class KVError:
    """Attention over a quantised KV cache against float64 attention over the exact one."""

    fmt: str
    per: str
    strength: float
    relative: float  # ||o' - o||_F / ||o||_F
    max_abs: float  # max |o' - o|
    bound_ratio: float  # max over entries of |o' - o| / kv_error_bound: <= 1 always
    bound_max: float  # the bound's largest entry


def kv_cache_error(
    fmt: str = "fp8_e4m3",
    per: str = "head",
    strength: float = 30.0,
    n: int = 1024,
    d: int = 64,
    kv_heads: int = 2,
    group: int = 4,
    n_q: int = 16,
    seed: int = 0,
) -> KVError:
    """`kv_attention` on `kv_inputs(...)` against the exact cache, with the bound's verdict."""
    choice("fmt", fmt, KV_FORMATS)
    choice("per", per, PER)
    strength = as_float("strength", strength, 0.0, 1e4)
    if (
        as_int("n", n, 1, 1 << 16) * as_int("kv_heads", kv_heads, 1, 256) * as_int("d", d, 1, 4096)
        > MAX_ELEMENTS
    ):
        raise ValueError(f"n={n} x kv_heads={kv_heads} x d={d} elements; valid: at most {MAX_ELEMENTS:,}")
    q, k, v = kv_inputs(n, d, kv_heads, group, n_q, strength, seed)
    ref = kv_attention(q, k, v, None)
    err = np.abs(kv_attention(q, k, v, fmt, per) - ref)
    bound = kv_error_bound(q, k, v, fmt, per)
    return KVError(
        fmt,
        per,
        strength,
        float(np.sqrt(np.sum(err**2) / np.sum(ref**2))),
        float(err.max()),
        float((err / bound).max()),
        float(bound.max()),
    )


assert set(KV_FORMATS) <= set(FORMATS)
