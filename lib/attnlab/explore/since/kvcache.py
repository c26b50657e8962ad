"""The FP8 KV cache (notebook 06, §6.4): bytes per token, decode time on the roofline and the error
of attention over an e4m3 cache, beside §6.4's model of FP8 attention inputs.

Pure parts: `kv_cache_rows(models, gpu, batch, context)` (bytes from `machine.configs`, FLOPs and
bytes from `core.kvquant.kv_decode_cost`, times from `machine.hardware`) and
`kv_error_rows(strengths)` (errors from `core.kvquant.kv_cache_error` and
`core.lowprec.attention_error`, on the same seeded inputs).
"""

from __future__ import annotations

import textwrap

import numpy as np

from attnlab.core import kvquant as kq
from attnlab.core import lowprec as lp
from attnlab.explore import style
from attnlab.machine import hardware
from attnlab.machine.configs import kv_bytes_per_token
from attnlab.machine.models import get_model
from attnlab.validate import as_int

__all__ = ["kv_cache_rows", "kv_cache_table", "kv_error_rows", "kv_error_table", "block_headroom"]


def kv_cache_rows(
    models=("Llama-3-8B", "Llama-3.1-70B"), gpu="H200", batch: int = 64, context: int = 8192
) -> list[dict]:
    """Per model: KV bytes per token (one layer and all layers) in bf16, in fp8 with a scale per KV
    head and with one per token, and the decode step's attention time on `gpu`'s roofline (all
    layers, `batch` requests of `context` tokens) for the bf16 and the fp8 cache."""
    rows = []
    for name in models:
        m = get_model(name)
        if m.mla:
            raise ValueError(
                f"models: {name} is an MLA model (one latent row per token); valid: GQA "
                f"or MHA models, whose cache holds K and V per KV head"
            )
        g = m.q_heads // m.kv_heads
        row = {
            "model": name,
            "bf16": kv_bytes_per_token(m, "bf16") / m.layers,
            "fp8": kv_bytes_per_token(m, "fp8") / m.layers,
            "fp8_token": kv_bytes_per_token(m, "fp8") / m.layers
            + kq.scale_bytes_per_token(m.kv_heads, "token"),
            "all_bf16": kv_bytes_per_token(m, "bf16"),
            "all_fp8": kv_bytes_per_token(m, "fp8"),
        }
        for fmt in ("bf16", "fp8_e4m3"):
            c = kq.kv_decode_cost(g, context, m.head_dim, batch=batch, fmt=fmt, per="head")
            n = m.kv_heads * m.layers
            row[f"t_{fmt}"] = hardware.roofline_time(c.flops * n, c.bytes * n, gpu, "bf16")
            row[f"i_{fmt}"] = c.intensity
        row["ratio"] = row["t_fp8_e4m3"] / row["t_bf16"]
        rows.append(row)
    return rows


def kv_cache_table(
    models=("Llama-3-8B", "Llama-3.1-70B"), gpu="H200", batch: int = 64, context: int = 8192
) -> str:
    """`kv_cache_rows` as text, at most 100 characters wide."""
    g = hardware.get_gpu(gpu)
    head = (
        f"KV bytes per token, one layer and all layers; decode attention per step on the {g.name} "
        f"roofline (batch {batch}, context {context:,}, all layers; attention computes in bf16, "
        f"so only the bytes change); fp8 = e4m3 with a float32 scale per KV head, '+ scales' "
        f"with one per token and KV head"
    )
    rows = kv_cache_rows(models, gpu, batch, context)
    return (
        textwrap.fill(head, 100)
        + "\n"
        + style.table(
            rows,
            {
                "model": "model",
                "bf16": "bf16 B",
                "fp8": "fp8 B",
                "fp8_token": "+ scales",
                "all_bf16": "all, bf16",
                "all_fp8": "all, fp8",
                "t_bf16": "bf16 step",
                "t_fp8_e4m3": "fp8 step",
                "ratio": "fp8/bf16",
            },
            {
                "bf16": ",.0f",
                "fp8": ",.0f",
                "fp8_token": ",.0f",
                "all_bf16": lambda b: f"{b / 1024:,.0f} KiB",
                "all_fp8": lambda b: f"{b / 1024:,.0f} KiB",
                "t_bf16": lambda t: f"{t * 1e3:.2f} ms",
                "t_fp8_e4m3": lambda t: f"{t * 1e3:.2f} ms",
                "ratio": ".3f",
            },
        )
    )


def kv_error_rows(strengths=(0, 30, 100), n: int = 1024, d: int = 64, seed: int = 0) -> list[dict]:
    """Per outlier strength: the relative error of §6.4's model (Q, K, V in e4m3, one scale per
    tensor) and of attention over an e4m3 KV cache (Q exact) with a scale per KV head and per
    token, all against float64 attention on the exact inputs; and whether the cache's error stayed
    within `kvquant.kv_error_bound` everywhere."""
    rows = []
    for s in strengths:
        qkv = lp.attention_error("fp8_e4m3", None, False, s, n, d, seed=seed)
        head = kq.kv_cache_error("fp8_e4m3", "head", s, n, d, seed=seed)
        token = kq.kv_cache_error("fp8_e4m3", "token", s, n, d, seed=seed)
        rows.append(
            {
                "strength": float(s),
                "qkv": qkv.relative,
                "head": head.relative,
                "token": token.relative,
                "within": head.bound_ratio <= 1 and token.bound_ratio <= 1,
            }
        )
    return rows


def kv_error_table(strengths=(0, 30, 100), n: int = 1024, d: int = 64, seed: int = 0) -> str:
    """`kv_error_rows` as text: relative errors rounded up to 0.1 %, so the digits shown are the
    quantiser's, never float64's roundoff."""
    rows = kv_error_rows(strengths, n, d, seed)
    head = (
        f"relative error ||o' - o|| / ||o|| of FP8 e4m3 attention against float64, N = {n:,} keys, "
        f"d = {d}, 4 outlier key channels of the given strength, seed {seed}; the KV cache: 2 KV "
        f"heads x 4 query heads, 16 decode queries each, Q unrounded"
    )
    pct = lambda x: f"< {-(-x * 1000 // 1) / 10:.1f} %"  # noqa: E731  rounded up to 0.1 %
    return (
        textwrap.fill(head, 100)
        + "\n"
        + style.table(
            rows,
            {
                "strength": "outlier",
                "qkv": "Q, K, V per tensor (6.4)",
                "head": "KV cache, per head",
                "token": "KV cache, per token",
                "within": "within the bound",
            },
            {
                "strength": ".0f",
                "qkv": pct,
                "head": pct,
                "token": pct,
                "within": lambda b: "yes" if b else "NO",
            },
        )
    )


def block_headroom(n: int, block: int, d: int = 64, strength: float = 30.0, seed: int = 0) -> dict:
    """Median over blocks of (the tensor's largest |value|) / (the block's), for q, k and v of
    `lowprec.outlier_inputs(n, d, strength, seed=seed)`: how much finer a per-block scale is
    than the per-tensor one (1: no finer at all)."""
    q, k, v, _ = lp.outlier_inputs(n, d, strength, seed=seed)  # checks n, d, strength, seed
    block = min(as_int("block", block, 1, None), q.shape[0])
    out = {}
    for name, a in (("q", q), ("k", k), ("v", v)):
        rows = np.abs(a)[: n - n % block].reshape(-1, block, d).max(axis=(1, 2))
        out[name] = float(np.median(np.abs(a).max() / rows))
    return out
