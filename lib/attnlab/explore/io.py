"""IO explorer (notebook 03): HBM accesses of standard attention, FA1 and FA2 against N and M.

Pure part: `io_curves(...)` -> numbers. Draw part: `io_vs_n(...)` builds one two-panel figure and
moves its lines when a slider changes.
"""
from __future__ import annotations

import numpy as np

from .._check import as_int, choice
from ..attention import block_sizes
from ..iomodel import flash_io, lower_bound, standard_io
from . import style
from ._base import Explorer, checkbox, steps, toggle

__all__ = ["io_curves", "io_vs_n", "SRAM_STEPS", "N_MAX_STEPS", "HEAD_DIMS"]

SRAM_STEPS = [12_500, 25_000, 50_000, 100_000, 200_000, 400_000, 800_000]
N_MAX_STEPS = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
HEAD_DIMS = [32, 64, 96, 128, 256]
N_MIN = 128
M_GRID = np.unique(np.round(np.geomspace(SRAM_STEPS[0], SRAM_STEPS[-1], 25)).astype(int))


def io_curves(d: int = 64, sram: int = 100_000, n_max: int = 32768, causal: bool = False) -> dict:
    """HBM accesses (elements, one head) of standard attention, FA1 and FA2.

    Returns N (powers of two and their midpoints from 128 to n_max) with 'standard', 'fa1',
    'fa2', 'bound' (N^2 d^2 / M) per N; M (a geometric grid) with 'fa1_M', 'fa2_M' at N = n_max;
    and the block sizes and the standard/FA1 ratio at n_max.
    """
    d = as_int("d", d, 1, 1024)
    sram = as_int("sram", sram, 4 * d, None)
    n_max = as_int("n_max", n_max, N_MIN, 1 << 20)
    Ns = np.unique(np.round(np.geomspace(N_MIN, n_max, 2 * int(np.log2(n_max / N_MIN)) + 1)).astype(int))
    std = np.array([standard_io(n, d) for n in Ns], dtype=float)
    fa1 = np.array([flash_io(n, d, sram, "fa1", causal) for n in Ns], dtype=float)
    fa2 = np.array([flash_io(n, d, sram, "fa2", causal) for n in Ns], dtype=float)
    Ms = M_GRID[M_GRID >= 4 * d]
    fa1_M = np.array([flash_io(n_max, d, m, "fa1", causal) for m in Ms], dtype=float)
    fa2_M = np.array([flash_io(n_max, d, m, "fa2", causal) for m in Ms], dtype=float)
    br, bc = block_sizes(d, sram)
    return {"N": Ns, "standard": std, "fa1": fa1, "fa2": fa2, "bound": lower_bound(Ns, d, sram),
            "M": Ms, "fa1_M": fa1_M, "fa2_M": fa2_M, "standard_at_nmax": std[-1],
            "block_r": br, "block_c": bc, "ratio": std[-1] / fa1[-1], "ratio_fa2": std[-1] / fa2[-1],
            "d": d, "sram": sram, "n_max": n_max, "causal": bool(causal)}


def _fewer(ratio: float) -> str:
    """'7.9x fewer than standard' or, when FlashAttention's count is larger, '2.0x more'."""
    return f"{ratio:.1f}x fewer" if ratio >= 1 else f"{1 / ratio:.1f}x more than standard"


def io_vs_n(d: int = 64, sram: int = 100_000, n_max: int = 32768, order: str = "both",
            causal: bool = False) -> Explorer:
    """Sliders: SRAM size M, head dim d, largest N, loop order, causal.

    Left: HBM accesses against N (log-log) for standard, FA1, FA2 and the N^2 d^2 / M order.
    Right: accesses against M at N = n_max (the 1/M relation), the chosen M marked.
    """
    choice("order", order, ("both", "fa1", "fa2"))
    fig = style.new_figure(2)
    ax_n, ax_m = fig.axes
    c = style.COLORS
    lines = {k: ax_n.plot([], [], "-o", ms=3, color=c[k], label=style.LABELS[k])[0]
             for k in ("standard", "fa1", "fa2")}
    lines["bound"] = ax_n.plot([], [], "--", color=c["bound"], label=style.LABELS["bound"])[0]
    m_lines = {k: ax_m.plot([], [], "-o", ms=3, color=c[k], label=style.LABELS[k])[0]
               for k in ("standard", "fa1", "fa2")}
    m_inv = ax_m.plot([], [], ":", color=c["bound"], label="∝ 1/M (through FA1 at smallest M)")[0]
    m_mark = ax_m.axvline(sram, color=c["highlight"], lw=2, alpha=0.8)
    for ax in (ax_n, ax_m):
        ax.set_xscale("log"); ax.set_yscale("log"); ax.grid(True, alpha=0.25)
    ax_n.set_xscale("log", base=2)
    ax_n.set_xlabel("sequence length N (tokens)")
    ax_n.set_ylabel("HBM accesses per head (elements)")
    ax_m.set_xlabel("SRAM size M (elements)")
    ax_m.set_ylabel("HBM accesses per head (elements)")
    # Fixed axes (every slider setting fits) so a slider move redraws only the lines.
    ax_n.set_xlim(N_MIN / 1.3, N_MAX_STEPS[-1] * 1.3)
    ax_n.set_ylim(1e4, 1e12)
    ax_m.set_xlim(M_GRID[0] / 1.3, M_GRID[-1] * 1.3)
    ax_m.set_ylim(1e5, 1e12)
    for ax in (ax_n, ax_m):
        ax.minorticks_off()
    ax_n.legend(loc="upper left", fontsize=8)
    ax_m.legend(loc="upper right", fontsize=8)

    controls = {
        "sram": steps("SRAM M (elem)", SRAM_STEPS, sram),
        "d": steps("head dim d", HEAD_DIMS, d),
        "n_max": steps("largest N", N_MAX_STEPS, n_max),
        "order": toggle("loop order", ["both", "fa1", "fa2"], order),
        "causal": checkbox("causal (skip masked blocks)", causal),
    }

    def update(sram, d, n_max, order, causal):
        r = io_curves(d, sram, n_max, causal)
        for k in ("standard", "fa1", "fa2", "bound"):
            lines[k].set_data(r["N"], r[k])
        lines["fa1"].set_visible(order in ("both", "fa1"))
        lines["fa2"].set_visible(order in ("both", "fa2"))
        m_lines["standard"].set_data(r["M"], np.full(r["M"].shape, r["standard_at_nmax"]))
        m_lines["fa1"].set_data(r["M"], r["fa1_M"])
        m_lines["fa2"].set_data(r["M"], r["fa2_M"])
        m_lines["fa1"].set_visible(order in ("both", "fa1"))
        m_lines["fa2"].set_visible(order in ("both", "fa2"))
        m_inv.set_data(r["M"], r["fa1_M"][0] * r["M"][0] / r["M"])
        m_mark.set_xdata([sram, sram])
        mask = ", causal" if causal else ""
        ax_n.set_title(f"HBM accesses vs N   (d={d}, M={sram:,} elements{mask})", fontsize=10)
        ax_m.set_title(f"HBM accesses vs SRAM size   (N={n_max:,}, d={d}{mask})", fontsize=10)
        return (f"Blocks by the paper's rule: B<sub>r</sub> = {r['block_r']}, B<sub>c</sub> = {r['block_c']}. "
                f"At N = {n_max:,}: standard {style.si(r['standard'][-1])}, FA1 {style.si(r['fa1'][-1])} "
                f"(<b>{_fewer(r['ratio'])}</b>), FA2 order {style.si(r['fa2'][-1])} "
                f"({_fewer(r['ratio_fa2'])}).")

    dynamic = [*lines.values(), *m_lines.values(), m_inv, m_mark, ax_n.title, ax_m.title]
    return Explorer("io_vs_n", controls, fig, update, compute=io_curves, dynamic=dynamic)


def counter_vs_formula(cases=((257, 64, 100_000), (1000, 64, 20_000), (333, 96, 50_000)),
                       seed: int = 0) -> list[dict]:
    """Run the kernels with an HBM counter at small sizes and set the counts beside the closed
    forms: they must be equal, causal and not, both orders, N not divisible by the blocks."""
    from ..attention import flash_attention, standard_attention
    from ..hbm import HBM

    rng = np.random.default_rng(seed)
    rows = []
    for N, d, sram in cases:
        q, k, v = (rng.standard_normal((N, d)) for _ in range(3))
        h = HBM(); standard_attention(q, k, v, hbm=h)
        rows.append({"kernel": "standard", "N": N, "d": d, "M": sram, "counter": h.total,
                     "formula": standard_io(N, d)})
        for order in ("fa1", "fa2"):
            for causal in (False, True):
                h = HBM(); flash_attention(q, k, v, causal=causal, sram=sram, order=order, hbm=h)
                rows.append({"kernel": order + (" causal" if causal else ""), "N": N, "d": d,
                             "M": sram, "counter": h.total,
                             "formula": flash_io(N, d, sram, order, causal)})
    return rows
