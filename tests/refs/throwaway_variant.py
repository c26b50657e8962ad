"""A throwaway variant that the kernels already support, for the tests that a registered entry
reaches every form (the numpy math, the explorer, the kernels' switches, FlexAttention's mods):
logits capped at c, each query seeing itself and the two keys before it (soft_cap=c,
window=3). `registered()` adds it to the registry for the length of a test."""

from __future__ import annotations

import contextlib

import numpy as np

from attnlab.core.variants import REGISTRY, Entry, Variant, register

NAME = "capped_local"


def entry() -> Entry:
    return Entry(
        NAME,
        lambda c: Variant(
            name=f"capped_local({c:g})",
            logits_transform=lambda s, qi, kj: c * np.tanh(s / c),
            logits_mask=lambda qi, kj: (kj <= qi) & (kj > qi - 3),
        ),
        "capped local",
        "cap c",
        (1.0, 2.0),
        2.0,
        kernel=lambda c: {"soft_cap": c, "window": 3},
        flex_logits=lambda c: lambda s, qi, kj: c * (s / c).tanh(),
    )


@contextlib.contextmanager
def registered():
    e = register(entry())
    try:
        yield e
    finally:
        del REGISTRY[e.name]
