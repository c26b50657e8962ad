"""Attention variants on a real GPU: our three prefill kernels with the variant compiled in beside
compiled FlexAttention and SDPA.

    python -m attnlab.gpubench.variants --out results.json       # on a CUDA machine
    python -m attnlab.gpubench.variants --cases 1x16384          # one batch x N per run
    TRITON_INTERPRET=1 python -m attnlab.gpubench.variants --dry  # tiny sizes on a CPU: the code path

A Llama-3-8B-shaped prefill (32 query heads, 8 KV heads, d = 128, bf16), B x N = 16K tokens, for
four variants: causal, soft_cap(30) (non-causal and causal) and sliding_window(1024) (causal).
Ours: "ours" is `variant_prefill` (the FA2 loop, notebook 03's kernel with the switches), "ours-hopper"
is `flash_attention_hopper` with soft_cap / window (the Hopper kernel, its default steps), "ours-gluon"
is `flash_attention_gluon` with them (the FA3-style Gluon kernel, its default steps; sm_90 only and
no interpreter: elsewhere, --dry included, its rows drop with the kernel's refusal as the reason).
Peers in the same run:
- flex: `torch.compile(flex_attention)` with score_mod 30 tanh(score / 30) and a BlockMask from
  `create_block_mask` (causal / window mask_mod, built once outside the timing), enable_gqa=True;
  at most four compiled variants per batch x N (each compile can take a minute);
- sdpa-flash, sdpa-cudnn (causal alone): torch SDPA with is_causal, enable_gqa (or K/V repeated
  outside the timing where a backend refuses GQA, marked kv_repeated).
Each output is checked against a float32 reference computed in chunks (max_err), then timed per
call by CUDA-graph replay (`time_per_call`; events if the capture fails). FLOPs count only the
visible (query, key) pairs, 4 d per pair (causal ~ N^2 / 2, window ~ N w), for every implementation;
speedup (ours rows) = the best peer's time / ours, > 1 = ours faster. Every row is tried on its own
(a failure drops it, with a short traceback); the JSON is rewritten after each row.
"""

from __future__ import annotations

import sys
import traceback

import numpy as np

from attnlab.machine.models import get_model
from attnlab.gpubench.core import checked_time, header, try_peer
from attnlab.gpubench.reference import compiled_flex, reference
from attnlab.gpubench.cli import section_main, write_json

__all__ = ["run", "main", "pairs"]

_SHAPE = get_model("Llama-3-8B")
SHAPE = dict(heads=_SHAPE.q_heads, kv_heads=_SHAPE.kv_heads, head_dim=_SHAPE.head_dim)
CASES = [(4, 4096), (1, 16384)]
CAP, WINDOW = 30.0, 1024
OURS = ("ours", "ours-hopper", "ours-gluon")
VARIANTS = ("causal", "soft_cap(30)", "soft_cap(30) causal", "sliding_window")
DRY = dict(cases=[(1, 40)], shape=dict(heads=4, kv_heads=2, head_dim=32), window=16)


def _kwargs(variant: str, window: int) -> dict:
    """The keywords of a variant name for our kernels (variant_prefill, flash_attention_hopper and
    flash_attention_gluon take the same)."""
    return {
        "causal": dict(causal=True),
        "soft_cap(30)": dict(soft_cap=CAP),
        "soft_cap(30) causal": dict(causal=True, soft_cap=CAP),
        "sliding_window": dict(window=window),
    }[variant]


def pairs(n_q: int, n_k: int, causal: bool = False, window: int = 0) -> int:
    """Visible (query, key) pairs, bottom-right aligned: the attention work actually needed."""
    q_idx = np.arange(n_q) + n_k - n_q
    hi = np.clip(q_idx + 1, 0, n_k) if causal or window else np.full(n_q, n_k)
    lo = np.clip(q_idx - window + 1, 0, n_k) if window else 0
    return int(np.maximum(hi - lo, 0).sum())


def _ours(torch, c, add):
    from attnlab.kernels.variants import blocks, variant_prefill

    kw = _kwargs(c.variant, c.window)
    t = blocks(c.n, c.n, kw.get("causal", False), kw.get("window", 0), d=c.q.shape[3])
    add(
        "ours",
        lambda: variant_prefill(c.q, c.k, c.v, **kw),
        tiles=t["visited"] * c.q.shape[0] * c.q.shape[1],
        masked_tiles=t["masked"] * c.q.shape[0] * c.q.shape[1],
    )


def _ours_hopper(torch, c, add):
    from attnlab.kernels.hopper import flash_attention_hopper

    kw = _kwargs(c.variant, c.window)
    add("ours-hopper", lambda: flash_attention_hopper(c.q, c.k, c.v, **kw))


def _ours_gluon(torch, c, add):
    from attnlab.kernels.gluon_fa3 import flash_attention_gluon

    kw = _kwargs(c.variant, c.window)
    add("ours-gluon", lambda: flash_attention_gluon(c.q, c.k, c.v, **kw)[0])


def _sdpa(torch, c, add):
    if c.variant != "causal":
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sdpa = torch.nn.functional.scaled_dot_product_attention
    backends = (
        [("sdpa-flash", SDPBackend.FLASH_ATTENTION), ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)]
        if c.q.is_cuda
        else [("sdpa", None)]
    )
    g = c.q.shape[1] // c.k.shape[1]
    for name, backend in backends:

        def fn(k=c.k, v=c.v, gqa=True, backend=backend):
            if backend is None:
                return sdpa(c.q, k, v, is_causal=True, enable_gqa=gqa)
            with sdpa_kernel(backend):
                return sdpa(c.q, k, v, is_causal=True, enable_gqa=gqa)

        try:
            fn()
            add(name, fn)
        except Exception as e:  # noqa: BLE001 - e.g. no GQA in this backend
            print(f"  {name} with enable_gqa: {type(e).__name__}: {str(e)[:100]}; K/V repeated", flush=True)
            kr, vr = (t.repeat_interleave(g, dim=1) for t in (c.k, c.v))
            add(name, lambda kr=kr, vr=vr, fn=fn: fn(kr, vr, False), kv_repeated=True)


def _flex(torch, c, add):
    from torch.nn.attention.flex_attention import create_block_mask

    if c.flex is None:  # one compiled function for the whole run
        c.flex = compiled_flex(torch)
    kw = _kwargs(c.variant, c.window)
    w = kw.get("window", 0)

    def capped(score, b, h, q_idx, kv_idx):
        return CAP * torch.tanh(score / CAP)

    def causal_mask(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def window_mask(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < w)

    mask_mod = window_mask if w else causal_mask if kw.get("causal") else None
    block_mask = (
        None if mask_mod is None else create_block_mask(mask_mod, None, None, c.n, c.n, device=c.q.device)
    )
    score_mod = capped if kw.get("soft_cap") else None
    add("flex", lambda: c.flex(c.q, c.k, c.v, score_mod=score_mod, block_mask=block_mask, enable_gqa=True))


def run(cases=CASES, variants=VARIANTS, *, dry: bool = False, out: str | None = None, seed: int = 0) -> dict:
    import torch
    from types import SimpleNamespace

    shape = DRY["shape"] if dry else SHAPE
    window = DRY["window"] if dry else WINDOW
    res = header(torch, shape)
    res.pop("flashinfer", None)
    res.update(soft_cap=CAP, window=window)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"{res['device']}: torch {res['torch']}, triton {res['triton']}", flush=True)

    def save():
        write_json(out, res)

    c = SimpleNamespace(flex=None, window=window)
    for batch, n in cases:
        torch.manual_seed(seed + batch + n)
        hq, hkv, d = shape["heads"], shape["kv_heads"], shape["head_dim"]
        c.q = torch.randn(batch, hq, n, d, device=dev, dtype=torch.bfloat16)
        c.k, c.v = (torch.randn(batch, hkv, n, d, device=dev, dtype=torch.bfloat16) for _ in "kv")
        c.n = n
        for variant in variants:
            c.variant = variant
            kw = _kwargs(variant, window)
            flops = 4 * d * batch * hq * pairs(n, n, kw.get("causal", False), kw.get("window", 0))
            try:
                ref = reference(torch, c.q, c.k, c.v, **kw)
            except Exception:  # noqa: BLE001
                print(f"  reference {variant}: failed\n" + traceback.format_exc(limit=3), flush=True)
                continue
            print(f"batch {batch} x N {n}, {variant}: {flops / 1e12:.2f} TFLOP needed", flush=True)
            group = []

            def add(impl, fn, **extra):
                got = checked_time(fn, ref, impl)
                if got is None:
                    return
                err, us, how = got
                label = f"sliding_window({window})" if variant == "sliding_window" else variant
                row = {
                    "batch": batch,
                    "N": n,
                    "variant": label,
                    "impl": impl,
                    **extra,
                    "us": us,
                    "timing": how,
                    "flops": flops,
                    "tflops": flops / us * 1e-6,
                    "max_err": err,
                }
                res["rows"].append(row)
                group.append(row)
                print(
                    f"  {impl:12s} {us:10.1f} us {row['tflops']:7.1f} TFLOP/s  err {err:.1e}  {how}",
                    flush=True,
                )
                save()

            for name, peer in (
                ("ours", _ours),
                ("ours-hopper", _ours_hopper),
                ("ours-gluon", _ours_gluon),
                ("sdpa", _sdpa),
                ("flex", _flex),
            ):
                try_peer(name, peer, torch, c, add)
            peers = [r["us"] for r in group if r["impl"] not in OURS]
            for r in group:
                if r["impl"] in OURS and peers:
                    r["speedup"] = min(peers) / r["us"]
            save()
            del ref
        del c.q, c.k, c.v
        if dev == "cuda":
            torch.cuda.empty_cache()
    return res


def main(argv=None) -> int:
    return section_main(
        "variants",
        argv,
        __doc__,
        ("batch", "N"),
        CASES,
        DRY["cases"],
        lambda a, cases, variants: run(cases, variants, dry=a.dry, out=a.out),
        ("--variants", VARIANTS),
    )


if __name__ == "__main__":
    sys.exit(main())
