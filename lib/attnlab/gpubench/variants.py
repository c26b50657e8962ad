"""Attention variants on a real GPU: our three prefill kernels with the variant compiled in beside
compiled FlexAttention and SDPA.

    python -m attnlab.gpubench.variants --out results.json       # on a CUDA machine
    python -m attnlab.gpubench.variants --cases 1x16384          # one batch x N per run
    python -m attnlab.gpubench.variants --dry                    # tiny sizes on a CPU: the code path

A Llama-3-8B-shaped prefill (32 query heads, 8 KV heads, d = 128, bf16), B x N = 16K tokens, for
four variants (VARIANTS; --variants picks some): causal, soft_cap(30) (non-causal and causal) and
sliding_window(1024) (causal). Each is a list of entries of the variant registry
(attnlab.core.variants.REGISTRY), and every form measured here comes from those entries: our
kernels' compile-time switches (`kernels.variants.switches`), FlexAttention's score_mod and
mask_mod (`core.variants.flex_mods`), the reference's and the FLOP count's mask.
Ours: "ours" is `variant_prefill` (the FA2 loop, notebook 03's kernel with the switches), "ours-hopper"
is `flash_attention_hopper` with them (the Hopper kernel, its default steps), "ours-gluon" is
`flash_attention_gluon` with them (the FA3-style Gluon kernel, its default steps; sm_90 only and no
interpreter: elsewhere, --dry included, its rows drop with the kernel's refusal as the reason).
Peers in the same run:
- flex: `torch.compile(flex_attention)` with the entries' score_mod and a BlockMask from
  `create_block_mask` of their mask_mod (built once outside the timing), enable_gqa=True; at most
  four compiled variants per batch x N (each compile can take a minute);
- sdpa-flash, sdpa-cudnn (where the variant needs no switch but causal): torch SDPA with
  is_causal, enable_gqa (or K/V repeated outside the timing where a backend refuses GQA, marked
  kv_repeated).
Each output is checked against a float32 reference computed in chunks (gpubench.reference, with the
variant's switches), then timed per call by CUDA-graph replay (gpubench.core.measure, the loop every
section shares). FLOPs count only the visible (query, key) pairs, 4 d per pair (causal ~ N^2 / 2,
window ~ N w), for every implementation; ratio_to_best = the case's best time over this one.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np

from attnlab.core.variants import flex_mods, lookup
from attnlab.gpubench.cli import name_list, section_main
from attnlab.gpubench.declare import Impl, Launch, Section
from attnlab.gpubench.reference import compiled_flex, reference
from attnlab.machine.models import get_model

__all__ = ["SECTION", "VARIANTS", "uses_of", "label", "pairs", "main"]

_SHAPE = get_model("Llama-3-8B")
SHAPE = dict(heads=_SHAPE.q_heads, kv_heads=_SHAPE.kv_heads, head_dim=_SHAPE.head_dim)
CAP, WINDOW, DRY_WINDOW = 30.0, 1024, 16
#: the variants measured, by the names --variants takes: each the registry entries it composes,
#: with their parameters (w: the run's window, WINDOW, or DRY_WINDOW in a dry run)
VARIANTS = {
    "causal": lambda w: (("causal", None),),
    "soft_cap(30)": lambda w: (("soft_cap", CAP),),
    "soft_cap(30) causal": lambda w: (("soft_cap", CAP), ("causal", None)),
    "sliding_window": lambda w: (("sliding_window", w),),
}


def uses_of(name: str, window: int) -> tuple:
    """The (registry name, parameter) pairs of measured variant `name` at window `window`."""
    return VARIANTS[name](window)


def label(uses) -> str:
    """A variant's text in its rows: its entries' Variant names, joined by spaces
    ("soft_cap(30) causal")."""
    return " ".join(lookup(name).variant(p).name for name, p in uses)


def pairs(n_q: int, n_k: int, causal: bool = False, window: int = 0) -> int:
    """Visible (query, key) pairs, bottom-right aligned: the attention work actually needed."""
    q_idx = np.arange(n_q) + n_k - n_q
    hi = np.clip(q_idx + 1, 0, n_k) if causal or window else np.full(n_q, n_k)
    lo = np.clip(q_idx - window + 1, 0, n_k) if window else 0
    return int(np.maximum(hi - lo, 0).sum())


def _inputs(torch, case, ctx):
    """One batch x N's q, k, v, then one Case for each variant chosen, with its switches (kw), its
    registry uses, its reference and its FLOPs. (The kernels are imported only here and in the
    launches: a dry run sets the Triton interpreter first.)"""
    from attnlab.kernels.variants import switches

    batch, n = case
    torch.manual_seed(ctx.seed + batch + n)
    hq, hkv, d = ctx.shape["heads"], ctx.shape["kv_heads"], ctx.shape["head_dim"]
    q = torch.randn(batch, hq, n, d, device=ctx.device, dtype=torch.bfloat16)
    k, v = (torch.randn(batch, hkv, n, d, device=ctx.device, dtype=torch.bfloat16) for _ in "kv")
    window = DRY_WINDOW if ctx.dry else WINDOW
    for name in ctx.options.variants:
        uses = uses_of(name, window)
        kw = switches(uses)
        yield SimpleNamespace(
            q=q,
            k=k,
            v=v,
            n=n,
            uses=uses,
            kw=kw,
            case={"batch": batch, "N": n, "variant": label(uses)},
            ref=reference(torch, q, k, v, **kw),
            flop=4 * d * batch * hq * pairs(n, n, kw.get("causal", False), kw.get("window", 0)),
            bytes=None,
        )


def _ours(torch, c, ctx):
    from attnlab.kernels.variants import blocks, variant_prefill

    t = blocks(c.n, c.n, c.kw.get("causal", False), c.kw.get("window", 0), d=c.q.shape[3])
    heads = c.q.shape[0] * c.q.shape[1]
    yield Launch(
        "ours",
        lambda: variant_prefill(c.q, c.k, c.v, **c.kw),
        extra={"tiles": t["visited"] * heads, "masked_tiles": t["masked"] * heads},
    )


def _ours_hopper(torch, c, ctx):
    from attnlab.kernels.hopper import flash_attention_hopper

    yield Launch("ours-hopper", lambda: flash_attention_hopper(c.q, c.k, c.v, **c.kw))


def _ours_gluon(torch, c, ctx):
    from attnlab.kernels.gluon_fa3 import flash_attention_gluon

    yield Launch("ours-gluon", lambda: flash_attention_gluon(c.q, c.k, c.v, **c.kw)[0])


def _sdpa(torch, c, ctx):
    """SDPA where the variant needs no switch but causal; K/V repeated where a backend refuses GQA."""
    if set(c.kw) - {"causal"}:
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sdpa, causal = torch.nn.functional.scaled_dot_product_attention, c.kw.get("causal", False)
    backends = (
        [("sdpa-flash", SDPBackend.FLASH_ATTENTION), ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)]
        if c.q.is_cuda
        else [("sdpa", None)]
    )
    g = c.q.shape[1] // c.k.shape[1]
    for name, backend in backends:

        def fn(k=c.k, v=c.v, gqa=True, backend=backend):
            if backend is None:
                return sdpa(c.q, k, v, is_causal=causal, enable_gqa=gqa)
            with sdpa_kernel(backend):
                return sdpa(c.q, k, v, is_causal=causal, enable_gqa=gqa)

        try:
            fn()
            gqa = True
        except Exception as e:  # noqa: BLE001 - e.g. no GQA in this backend
            print(f"  {name} with enable_gqa: {type(e).__name__}: {str(e)[:100]}; K/V repeated", flush=True)
            gqa = False
        if gqa:
            yield Launch(name, fn)
        else:
            kr, vr = (t.repeat_interleave(g, dim=1) for t in (c.k, c.v))
            yield Launch(name, lambda kr=kr, vr=vr, fn=fn: fn(kr, vr, False), extra={"kv_repeated": True})


def _flex(torch, c, ctx):
    """FlexAttention with the registry entries' score_mod and mask_mod (none where Flex cannot
    express the variant), compiled once per run."""
    mods = flex_mods(c.uses, c.n, c.n)
    if mods is None:
        return
    from torch.nn.attention.flex_attention import create_block_mask

    if "flex" not in ctx.state:
        ctx.state["flex"] = compiled_flex(torch)
    flex, (score_mod, mask_mod) = ctx.state["flex"], mods
    block_mask = (
        None if mask_mod is None else create_block_mask(mask_mod, None, None, c.n, c.n, device=c.q.device)
    )
    yield Launch(
        "flex", lambda: flex(c.q, c.k, c.v, score_mod=score_mod, block_mask=block_mask, enable_gqa=True)
    )


def _settings(ctx) -> dict:
    return {"soft_cap": CAP, "window": DRY_WINDOW if ctx.dry else WINDOW}


SECTION = Section(
    name="variants",
    doc=__doc__,
    fields=("batch", "N"),
    cases=((4, 4096), (1, 16384)),
    dry_cases=((1, 40),),
    shape=SHAPE,
    dry_shape=dict(heads=4, kv_heads=2, head_dim=32),
    inputs=_inputs,
    impls=(
        Impl("ours", _ours, ours=True),
        Impl("ours-hopper", _ours_hopper, ours=True),
        Impl("ours-gluon", _ours_gluon, ours=True),
        Impl("sdpa", _sdpa),
        Impl("flex", _flex),
    ),
    settings=_settings,
    options=(
        ("--variants", f"subset of {','.join(VARIANTS)}", name_list(VARIANTS, "variant"), tuple(VARIANTS)),
    ),
)


def main(argv=None) -> int:
    return section_main(SECTION, argv)


if __name__ == "__main__":
    sys.exit(main())
