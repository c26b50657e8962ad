"""Attention variants as FlashInfer builds them (lecture §5.4): one tiled kernel, functors filled in.

core.py      Variant, variant_attention (through attention.fa2_head's loop), tile_mask, tile_io
library.py   causal, soft_cap, sliding_window, sigmoid, alibi, rope, sink_window, each registered
registry.py  Entry: a variant defined once (its math, the explorer's entry, the kernels' switches,
             FlexAttention's mods); REGISTRY, register, compose, kernel_switches, flex_mods

>>> from attnlab.core.variants import soft_cap, sliding_window
>>> (soft_cap(30) & sliding_window(512)).name
'soft_cap(30) & sliding_window(512)'
"""

from attnlab.core.variants.core import (
    TILE_KINDS,
    Variant,
    tile_io,
    tile_mask,
    variant_attention,
    variant_mask,
    variant_of,
)
from attnlab.core.variants.library import alibi, causal, rope, sigmoid, sink_window, sliding_window, soft_cap
from attnlab.core.variants.registry import (
    REGISTRY,
    Entry,
    compose,
    flex_mods,
    kernel_switches,
    lookup,
    register,
)

__all__ = [
    "Variant",
    "variant_attention",
    "variant_of",
    "tile_mask",
    "tile_io",
    "variant_mask",
    "TILE_KINDS",
    "causal",
    "soft_cap",
    "sliding_window",
    "sigmoid",
    "alibi",
    "rope",
    "sink_window",
    "Entry",
    "REGISTRY",
    "register",
    "lookup",
    "compose",
    "kernel_switches",
    "flex_mods",
]
