"""Checks notebook 03 prints: FlashAttention against standard attention in fp32 (the order of
computation changes, not the math), and the HBM counter against the closed forms (equal to the
element). Each returns rows for `style.table`."""

from __future__ import annotations

import numpy as np

from attnlab.core.attention import ORDERS, flash_attention, standard_attention
from attnlab.core.hbm import HBM
from attnlab.core.iomodel import flash_io, standard_io

__all__ = ["accuracy_rows", "accuracy_bound", "counter_vs_formula", "U32", "C_BOUND"]


#: fp32's unit roundoff, 2^-24: the largest relative error of one rounding.
U32 = 2.0**-24
#: The constant of the error bound `accuracy_rows` checks against: max |flash - standard| <=
#: C_BOUND * u32 * sqrt(N). Each output is a weighted sum of N values of V; rounding errors of
#: independent sign grow like sqrt(N) u, and the exps, the rescales and the division add a few u
#: more. Measured errors sit at 2-13 u, far below the bound at every N here (N >= 64 gives the
#: bound at least 64 u), so the verdict is the same on every machine while the digits are not.
C_BOUND = 8


def accuracy_bound(N: int) -> float:
    """The bound `accuracy_rows` checks: C_BOUND * u32 * sqrt(N).

    >>> f"{accuracy_bound(64):.2e}", f"{accuracy_bound(1000):.2e}"
    ('3.81e-06', '1.51e-05')
    """
    return C_BOUND * U32 * float(np.sqrt(N))


def accuracy_rows(
    Ns=(64, 257, 1000),
    blocks=((16, 16), (32, 64), (None, None)),
    d: int = 64,
    dtype=np.float32,
    seed: int = 0,
) -> list[dict]:
    """Max |flash - standard| for fp32 inputs over N, block sizes (None = the paper's rule at
    M = 100,000), both loop orders, causal and not; each row also holds the bound
    `accuracy_bound(N)` and whether both orders stay within it (the part that reads the same on
    every CPU: the errors' digits depend on the BLAS kernel and SIMD width)."""
    rng = np.random.default_rng(seed)
    rows = []
    for N in Ns:
        q, k, v = (rng.standard_normal((N, d)).astype(dtype) for _ in range(3))
        for causal in (False, True):
            ref = standard_attention(q, k, v, causal=causal)
            for br, bc in blocks:
                errs = {
                    o: float(
                        np.abs(
                            flash_attention(q, k, v, causal=causal, block_r=br, block_c=bc, order=o) - ref
                        ).max()
                    )
                    for o in ORDERS
                }
                bound = accuracy_bound(N)
                rows.append(
                    {
                        "N": N,
                        "causal": causal,
                        "blocks": "rule" if br is None else f"{br}x{bc}",
                        "fa1": errs["fa1"],
                        "fa2": errs["fa2"],
                        "bound": bound,
                        "within": errs["fa1"] < bound and errs["fa2"] < bound,
                    }
                )
    return rows


def counter_vs_formula(
    cases=((257, 64, 100_000), (1000, 64, 20_000), (333, 96, 50_000)), seed: int = 0
) -> list[dict]:
    """Run the kernels with an HBM counter at small sizes and set the counts beside the closed
    forms: causal and not, both orders, N not divisible by the blocks."""
    rng = np.random.default_rng(seed)
    rows = []
    for N, d, sram in cases:
        q, k, v = (rng.standard_normal((N, d)) for _ in range(3))
        h = HBM()
        standard_attention(q, k, v, hbm=h)
        rows.append(
            {
                "kernel": "standard",
                "N": N,
                "d": d,
                "M": sram,
                "counter": h.total,
                "formula": standard_io(N, d),
            }
        )
        for order in ORDERS:
            for causal in (False, True):
                h = HBM()
                flash_attention(q, k, v, causal=causal, sram=sram, order=order, hbm=h)
                rows.append(
                    {
                        "kernel": order + (" causal" if causal else ""),
                        "N": N,
                        "d": d,
                        "M": sram,
                        "counter": h.total,
                        "formula": flash_io(N, d, sram, order, causal),
                    }
                )
    return rows
