"""Checks notebook 03 prints: FlashAttention against standard attention in fp32 (the order of
computation changes, not the math), and the HBM counter against the closed forms (equal to the
element). Each returns rows for `style.table`."""
from __future__ import annotations

import numpy as np

from ...attention import ORDERS, flash_attention, standard_attention
from ...hbm import HBM
from ...iomodel import flash_io, standard_io

__all__ = ["accuracy_rows", "counter_vs_formula"]


def accuracy_rows(Ns=(64, 257, 1000), blocks=((16, 16), (32, 64), (None, None)), d: int = 64,
                  dtype=np.float32, seed: int = 0) -> list[dict]:
    """Max |flash - standard| for fp32 inputs over N, block sizes (None = the paper's rule at
    M = 100,000), both loop orders, causal and not."""
    rng = np.random.default_rng(seed)
    rows = []
    for N in Ns:
        q, k, v = (rng.standard_normal((N, d)).astype(dtype) for _ in range(3))
        for causal in (False, True):
            ref = standard_attention(q, k, v, causal=causal)
            for br, bc in blocks:
                errs = {o: float(np.abs(flash_attention(q, k, v, causal=causal, block_r=br,
                                                        block_c=bc, order=o) - ref).max())
                        for o in ORDERS}
                rows.append({"N": N, "causal": causal, "blocks": "rule" if br is None else f"{br}x{bc}",
                             "fa1": errs["fa1"], "fa2": errs["fa2"]})
    return rows


def counter_vs_formula(cases=((257, 64, 100_000), (1000, 64, 20_000), (333, 96, 50_000)),
                       seed: int = 0) -> list[dict]:
    """Run the kernels with an HBM counter at small sizes and set the counts beside the closed
    forms: causal and not, both orders, N not divisible by the blocks."""
    rng = np.random.default_rng(seed)
    rows = []
    for N, d, sram in cases:
        q, k, v = (rng.standard_normal((N, d)) for _ in range(3))
        h = HBM(); standard_attention(q, k, v, hbm=h)
        rows.append({"kernel": "standard", "N": N, "d": d, "M": sram, "counter": h.total,
                     "formula": standard_io(N, d)})
        for order in ORDERS:
            for causal in (False, True):
                h = HBM(); flash_attention(q, k, v, causal=causal, sram=sram, order=order, hbm=h)
                rows.append({"kernel": order + (" causal" if causal else ""), "N": N, "d": d,
                             "M": sram, "counter": h.total,
                             "formula": flash_io(N, d, sram, order, causal)})
    return rows
