"""Speculative decoding's tree verification in one launch: every request appends a draft tree of
tokens to its cache, each token seeing the cache and its own ancestors (a custom mask built from
parent chains), `kernels.paged_prefill(mask=...)` against FlashInfer's
`BatchPrefillWithPagedKVCacheWrapper` given the same `custom_mask` (issue 28; lecture §5.4).

    python -m attnlab.gpubench.tree --out tree.json      # on a CUDA machine
    python -m attnlab.gpubench.tree --dry                # tiny sizes on a CPU: the code path

A case is (batch, tree, prefix): `batch` requests, each a tree of `tree` tokens (parents drawn at
random, seed --draw, a token's parent always before it) on a cached prefix of `prefix` tokens.
The layer, pages, reference and timing are `gpubench.mixed`'s.
"""

from __future__ import annotations

import sys

import numpy as np

from attnlab.gpubench import mixed
from attnlab.gpubench.cli import section_main, seed_arg
from attnlab.gpubench.declare import Impl, Section

__all__ = ["SECTION", "CASES", "tree_mask", "main"]

#: (batch, tree tokens, cached prefix)
CASES = tuple((b, t, p) for b in (1, 8, 32) for t in (32, 128) for p in (1024, 16384))


def tree_mask(prefix: int, parents) -> np.ndarray:
    """A draft tree's (tree, prefix + tree) mask: token j sees the prefix, itself and its
    ancestors (parents[j] < j; -1 for a root).

    >>> tree_mask(1, [-1, 0, 0]).astype(int)
    array([[1, 1, 0, 0],
           [1, 1, 1, 0],
           [1, 1, 0, 1]])
    """
    t = len(parents)
    m = np.zeros((t, prefix + t), bool)
    m[:, :prefix] = True
    for j in range(t):
        a = j
        while a >= 0:
            m[j, prefix + a] = True
            a = parents[a]
    return m


def _inputs(torch, case, ctx):
    batch, t, prefix = case
    rng = np.random.default_rng(ctx.seed + 31 * ctx.options.draw + batch + t + prefix)
    masks = [tree_mask(prefix, [-1] + [int(rng.integers(0, j)) for j in range(1, t)]) for _ in range(batch)]
    page = mixed.DRY["page"] if ctx.dry else mixed.PAGE
    b = mixed.paged_batch(
        torch, [t] * batch, [prefix + t] * batch, ctx.shape, page, ctx.device, ctx.seed + batch + t, masks
    )
    named = {"batch": batch, "tree": t, "prefix": prefix}
    yield mixed.case_of(torch, b, ctx, {**named, **({"draw": ctx.options.draw} if ctx.options.draw else {})})


SECTION = Section(
    name="tree",
    doc=__doc__,
    fields=("batch", "tree", "prefix"),
    cases=CASES,
    dry_cases=((2, 5, 9), (1, 3, 0)),
    shape=mixed.SHAPE,
    dry_shape=mixed.DRY["shape"],
    inputs=_inputs,
    impls=(Impl("ours", mixed.ours, ours=True), Impl("flashinfer", mixed.flashinfer, library="flashinfer")),
    tolerance=0.05,
    settings=lambda ctx: {
        "page_size": mixed.DRY["page"] if ctx.dry else mixed.PAGE,
        "draw": ctx.options.draw,
    },
    options=(("--draw", "the trees' seed offset", seed_arg, 0), mixed.LAUNCHES),
)


def main(argv=None) -> int:
    return section_main(SECTION, argv)


if __name__ == "__main__":
    sys.exit(main())
