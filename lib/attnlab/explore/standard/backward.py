"""The backward pass, S and P stored against recomputed (notebook 07, exercise 5; the lecture's
§3.3): HBM accesses of one head's backward in both modes, what recomputation costs in FLOPs,
and both as time on a GPU at its roofline.

Pure parts: `backward_rows` and `backward_table` (text), `backward_figure` (a static figure).
Every count is `attnlab.core.iomodel`'s (`backward_io`, `recompute_flops`), equal to
the HBM counter of `attnlab.core.backward.attention_backward`; no causal mask (the N x N tiles
of P are then exactly N^2 elements in both passes).
"""

from __future__ import annotations

import numpy as np

from attnlab.validate import as_counts, as_int
from attnlab.core.iomodel import backward_io, recompute_flops
from attnlab.machine.hardware import DTYPE_BYTES, get_gpu, peak
from attnlab.explore import style

__all__ = ["backward_rows", "backward_table", "backward_figure", "BACKWARD_N"]

BACKWARD_N = (1024, 4096, 16384, 65536)
_DTYPE = "bf16"


def backward_rows(Ns=BACKWARD_N, d: int = 64, sram: int = 100_000, gpu: str = "H100-SXM") -> list[dict]:
    """One row per N (one head, no mask, d_v = d, the paper's tile rule at M = `sram`):

        stored      backward_io(..., "stored"): the backward reads the P the forward stored
        recompute   backward_io(..., "recompute"): P rebuilt tile by tile from Q, K and lse
        forward_p   N^2: the forward's writes of P, paid only when it is stored
        saved       stored + forward_p - recompute - N: what recomputing saves over forward and
                    backward (the forward then writes the N values of lse instead of P)
        extra_flops recompute_flops' qk_flops (S = Q K^T once more), against
        grad_flops  the four gradient products both modes do
        saved_s, extra_s   `saved` elements at the GPU's HBM bandwidth (bf16) and `extra_flops`
                    at its dense bf16 peak: the time recomputation saves and the time it adds

    >>> r = backward_rows([4096])[0]
    >>> r["stored"], r["recompute"], r["extra_flops"] * 4 == r["grad_flops"]
    (29933568, 13201408, True)
    """
    Ns, scalar = as_counts("Ns", Ns, 1, 1 << 20)
    if scalar or Ns.ndim != 1 or Ns.size == 0:
        raise TypeError(f"Ns must be a non-empty 1-D sequence of token counts, got {Ns!r}")
    d = as_int("d", d, 1, 1024)
    g = get_gpu(gpu)
    bpe, p = DTYPE_BYTES[_DTYPE], peak(g, _DTYPE)
    rows = []
    for N in Ns.tolist():
        stored = backward_io(N, d, sram, "stored")
        recompute = backward_io(N, d, sram, "recompute")
        f = recompute_flops(N, d, sram)
        saved = stored + N * N - recompute - N
        rows.append(
            {
                "N": N,
                "stored": stored,
                "recompute": recompute,
                "forward_p": N * N,
                "saved": saved,
                "extra_flops": f["qk_flops"],
                "grad_flops": f["gradient_flops"],
                "saved_s": saved * bpe / g.hbm_bandwidth,
                "extra_s": f["qk_flops"] / p,
            }
        )
    return rows


def backward_table(Ns=BACKWARD_N, d: int = 64, sram: int = 100_000, gpu: str = "H100-SXM") -> str:
    """`backward_rows` as a text table (elements per head; times on `gpu` at bf16)."""
    return style.table(
        backward_rows(Ns, d, sram, gpu),
        {
            "N": "N",
            "stored": "backward, P stored",
            "recompute": "recomputed",
            "forward_p": "+ forward writes P",
            "saved_s": "HBM time saved",
            "extra_s": "FLOP time added",
        },
        {
            "N": ",",
            "stored": ",",
            "recompute": ",",
            "forward_p": ",",
            "saved_s": style.seconds,
            "extra_s": style.seconds,
        },
    )


def backward_figure(d: int = 64, sram: int = 100_000, gpu: str = "H100-SXM"):
    """Left: HBM accesses of one head's training step against N, the backward with P stored (and
    with the forward's P writes added) against the backward that recomputes P. Right: what
    recomputing costs and saves on `gpu` at bf16, each at its roofline: the time of the extra
    Q K^T products against the HBM time of the P traffic it avoids."""
    Ns = np.unique(np.round(np.geomspace(256, 65536, 17)).astype(np.int64))
    rows = backward_rows(Ns, d, sram, gpu)
    col = {k: np.array([r[k] for r in rows], dtype=np.float64) for k in rows[0]}
    fig = style.new_figure(2, height=4.0)
    ax_io, ax_t = fig.axes
    c = style.COLORS
    with style.context():
        ax_io.plot(
            Ns,
            col["stored"] + col["forward_p"],
            color=c["standard"],
            lw=2,
            label="P stored: backward + the forward's P writes",
        )
        ax_io.plot(Ns, col["stored"], color=c["standard"], lw=1.5, ls="--", label="P stored: backward only")
        ax_io.plot(Ns, col["recompute"], color=c["fa2"], lw=2, label="P recomputed from Q, K, lse")
        ax_t.plot(Ns, col["saved_s"], color=c["standard"], lw=2, label="HBM time of the P traffic avoided")
        ax_t.plot(Ns, col["extra_s"], color=c["fa2"], lw=2, label="tensor-core time of the extra QKᵀ")
        for ax in (ax_io, ax_t):
            ax.set_xscale("log")
            ax.set_yscale("log")
            style.pow2_axis(ax, int(Ns[0]), int(Ns[-1]), every=2)
            ax.grid(True, alpha=0.25)
            ax.set_xlabel("sequence length N (tokens)")
            style.legend_below(ax, ncol=1)
        ax_io.yaxis.set_major_formatter(style.count)
        ax_io.set_ylabel("HBM accesses per head (elements)")
        ax_io.set_title(f"Backward pass of one head, d = {d}, M = {sram:,}")
        ax_t.set_ylabel("time per head (s)")
        ax_t.set_title(f"What recomputation trades, {get_gpu(gpu).name}, bf16")
    return fig
