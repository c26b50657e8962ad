"""The backward pass of one attention head, tiled as FlashAttention-2's and counted tile by tile:
P stored by the forward pass and read back, or recomputed from Q, K and the saved lse
(FlashAttention's recomputation, the lecture's §3.3). `iomodel.backward_io` and
`iomodel.recompute_flops` are its counts in closed form; tests prove them equal to the HBM counter
and the gradients equal to the dense formulas in float64.
"""

from __future__ import annotations

import numpy as np

from attnlab.validate import as_array, as_int, choice
from attnlab.core.attention import MAX_SCORES, _head_args, _load, _safe, _store, block_sizes, fa2_head
from attnlab.core.hbm import HBM
from attnlab.core.softmax import _overflow

__all__ = ["attention_backward", "BACKWARD_MODES"]

BACKWARD_MODES = ("recompute", "stored")


def attention_backward(
    q,
    k,
    v,
    do,
    *,
    causal: bool = False,
    scale: float | None = None,
    sram: int = 100_000,
    block_r: int | None = None,
    block_c: int | None = None,
    mode: str = "recompute",
    hbm: HBM | None = None,
):
    """dQ, dK, dV of one head's O = softmax(scale Q K^T) V for the upstream gradient dO, tiled as
    FlashAttention-2's backward, every tile moved reported to `hbm`. q (N_q, d), k (N_k, d),
    v (N_k, d_v), do (N_q, d_v); returns (dq, dk, dv).

    The forward pass runs first (`fa2_head`, not counted: it is the forward's traffic) and leaves
    O and lse in HBM. Then, counted:

    0. read O, dO; write D = rowsum(dO * O)               (2 N_q d_v reads, N_q writes)
    1. outer loop over K/V blocks j: read K_j, V_j; dK_j, dV_j accumulate on chip and are written
       once at the end of the block (N_k (d + d_v) reads, as many writes);
    2. inner loop over the Q blocks i the mask leaves: read Q_i, dO_i, D_i and
       mode="recompute": read lse_i and recompute S_ij = scale Q_i K_j^T, P_ij = exp(S_ij - lse_i)
                         on chip (FlashAttention's recomputation: 2 B_r B_c d FLOPs more, B_r B_c
                         exponentials);
       mode="stored":    read the tile P_ij that the forward pass stored in HBM (B_r B_c elements);
       then dV_j += P_ij^T dO_i, dP_ij = dO_i V_j^T, dS_ij = P_ij * (dP_ij - D_i),
       dK_j += scale dS_ij^T Q_i, and dQ_i += scale dS_ij K_j as a read-modify-write of dQ_i in
       HBM (FA2 accumulates dQ with atomic adds): B_r (3d + d_v + 2) elements per visit recomputing,
       B_r (3d + d_v + 1) + B_r B_c storing.

    `iomodel.backward_io` is this count in closed form. Block sizes not given come from
    `block_sizes(d, sram)` (the paper's rule, the one its backward, Algorithm 4, uses too).
    Every visited tile is traced as "compute" (its area is what recomputation redoes). Mode
    "stored" needs P dense: N_q N_k <= MAX_SCORES. Computed in the inputs' float dtype.
    """
    mode = choice("mode", mode, BACKWARD_MODES)
    do = as_array("do", do, ndim=2, shape="(N_q, d_v)")
    sram = as_int("sram", sram, 1, None)
    d = as_array("q", q, ndim=2, shape="(N_q, d)").shape[1]
    if block_r is None or block_c is None:
        br, bc = block_sizes(d, sram)
        block_r = br if block_r is None else block_r
        block_c = bc if block_c is None else block_c
    q, k, v, block_r, block_c, tiles, hbm, _ = _head_args(
        q, k, v, scale, block_r, block_c, causal, hbm, False, None
    )
    n_q, n_k, dv = q.shape[0], k.shape[0], v.shape[1]
    if do.shape != (n_q, dv):
        raise ValueError(f"do of shape {do.shape} must match the output's shape (N_q, d_v) = {(n_q, dv)}")
    if mode == "stored" and n_q * n_k > MAX_SCORES:
        raise ValueError(
            f"mode='stored' keeps P dense: N_q x N_k = {n_q * n_k:,} entries; valid: "
            f"at most {MAX_SCORES:,} (mode='recompute' has no such limit)"
        )
    do = do.astype(q.dtype, copy=False)
    if not np.isfinite(do).all():
        raise ValueError("do must hold finite real numbers; valid: no NaN or inf")
    o, lse = fa2_head(
        q, k, v, block_r=block_r, block_c=block_c, tiles=tiles, return_lse=True
    )  # the forward pass: O, lse in HBM
    if mode == "stored":  # the forward also stored P
        with np.errstate(over="ignore", invalid="ignore"):
            p_hbm = np.exp(tiles.scores(q, k, 0, 0) - _safe(lse)[:, None])
    dq, dk, dvv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    if hbm is not None:  # 0. D = rowsum(dO * O)
        hbm.read("O", o)
        hbm.read("dO", do)
        hbm.write("D", n_q)
    D = (do * o).sum(axis=1)
    scale = tiles.scale
    for c0 in range(0, n_k, block_c):  # 1. outer loop: K_j, V_j on chip
        c1 = min(c0 + block_c, n_k)
        kj, vj = _load(hbm, "K", k, c0, c1), _load(hbm, "V", v, c0, c1)
        dkj, dvj = np.zeros_like(kj), np.zeros_like(vj)
        for r0 in range(0, n_q, block_r):  # 2. inner loop: the Q blocks left
            r1 = min(r0 + block_r, n_q)
            if not tiles.active(r0, r1, c0, c1):
                continue
            qi, doi = _load(hbm, "Q", q, r0, r1), _load(hbm, "dO", do, r0, r1)
            di = D[r0:r1]
            if hbm is not None:
                hbm.read("D", r1 - r0, rows=(r0, r1))
            if mode == "recompute":
                li = lse[r0:r1]
                if hbm is not None:
                    hbm.read("lse", r1 - r0, rows=(r0, r1))
                s = tiles.scores(qi, kj, r0, c0, hbm)  # S_ij again, from Q_i and K_j
                p = np.exp(s - _safe(li)[:, None])  # P_ij from the saved lse
            else:
                if hbm is not None:
                    hbm.read("P", (r1 - r0) * (c1 - c0), rows=(r0, r1))
                    hbm.compute((r0, r1), (c0, c1))
                p = p_hbm[r0:r1, c0:c1]
            dvj += p.T @ doi
            ds = p * (doi @ vj.T - di[:, None])
            dkj += scale * (ds.T @ qi)
            _load(hbm, "dQ", dq, r0, r1)  # dQ_i += scale dS_ij K_j in HBM
            dq[r0:r1] += scale * (ds @ kj)
            _store(hbm, "dQ", dq, r0, r1)
        dk[c0:c1], dvv[c0:c1] = dkj, dvj
        _store(hbm, "dK", dk, c0, c1)
        _store(hbm, "dV", dvv, c0, c1)
    for name, g in (("dq", dq), ("dk", dk), ("dv", dvv)):
        if not np.isfinite(g).all():
            raise _overflow("do", f"the gradient {name}", g.dtype)
    return dq, dk, dvv
