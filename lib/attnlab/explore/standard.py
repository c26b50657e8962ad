"""Standard attention's IO (notebook 02): where Algorithm 0's HBM traffic goes, and what it costs
a real prefill in time and memory.

Pure parts (parameters -> numbers, unit-tested):
    algorithm0_traffic   the HBM counter of `standard_attention` on a small case, tensor by tensor
    traffic_curves       accesses per head by tensor against N: the 4Nd part and the 4N^2 part
    prefill_curves       compute time, standard attention's extra HBM time, FlashAttention's own
                         traffic time and the S+P memory of one layer, against N, for a model/GPU
    max_fitting_n        the longest prompt whose S+P of one layer fits in the GPU's HBM
    crossover_rows       per GPU: where the extra time, and FlashAttention's own traffic time,
                         reach the compute time
    ratio_conventions    the 32K slowdown under other choices of what counts as compute/traffic
Draw parts (one persistent figure each, moving artists only):
    standard_traffic         sliders: head dim d, N marker
    prefill_cost_explorer    sliders: N, GPU, head dim, model

What this leaves out on purpose: sliding windows (Mistral-7B v0.1, Gemma-2) and soft-capping,
L2 hits, kernel launches, the KV cache and the weights' own memory. The time model is
`models.prefill_cost`'s (see its docstring); the explorer only evaluates it over many N at once.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .._check import as_int, choice
from ..attention import block_sizes, standard_attention
from ..hardware import DTYPE_BYTES, get_gpu, gpus
from ..hbm import HBM
from ..hardware import peak, ridge_point
from ..iomodel import flash_io, standard_io
from ..models import Model, get_model, models, prefill_cost, prefill_cost_curve
from . import style
from ._base import Explorer, dropdown, steps, toggle

__all__ = ["algorithm0_traffic", "traffic_table", "traffic_curves", "standard_traffic",
           "dense_models", "with_head_dim", "prefill_curves", "prefill_table", "max_fitting_n",
           "crossover_rows", "crossover_table", "ratio_conventions", "conventions_table",
           "prefill_cost_explorer", "binary_bytes", "HEAD_DIMS", "N_STEPS", "SRAM", "DTYPE"]

# --- Algorithm 0, tensor by tensor --------------------------------------------------------------

#: What each tensor does in the three kernels (1: S = QK^T/sqrt(d); 2: P = softmax(S); 3: O = PV).
ROLES = {"Q": "read by kernel 1", "K": "read by kernel 1", "S": "written by 1, read by 2",
         "P": "written by 2, read by 3", "V": "read by kernel 3", "O": "written by kernel 3"}
N_SQUARED = ("S", "P")


def algorithm0_traffic(N: int = 1000, d: int = 64, seed: int = 0) -> dict:
    """Run `standard_attention` on one head of seeded random inputs with an HBM counter.

    Returns rows {tensor, role, reads, writes, total} in the order the kernels touch them, the
    counter's total, the closed form `standard_io(N, d)` and the share of S and P (the 4 N^2 term).

    Example: N = 1000, d = 64: Q, K, V are read once (64,000 each), O written once; S and P are
    each written once and read once (1,000,000 each way); total 4,256,000 = 4Nd + 4N^2, of which
    S and P are 4,000,000 (94.0 %).
    """
    N = as_int("N", N, 1, 4096)
    d = as_int("d", d, 1, 1024)
    rng = np.random.default_rng(as_int("seed", seed, 0, None))
    q, k, v = (rng.standard_normal((N, d)) for _ in range(3))
    hbm = HBM()
    standard_attention(q, k, v, hbm=hbm)
    rows = [{"tensor": t, "role": ROLES[t], "reads": r, "writes": w, "total": r + w}
            for t, (r, w) in hbm.by_tensor().items()]
    sp = sum(r["total"] for r in rows if r["tensor"] in N_SQUARED)
    return {"N": N, "d": d, "rows": rows, "total": hbm.total, "formula": standard_io(N, d),
            "sp": sp, "share": sp / hbm.total}


def traffic_table(result: dict) -> str:
    """`algorithm0_traffic`'s rows as a text table (elements), with a total line."""
    rows = [*result["rows"], {"tensor": "all", "role": "", "reads": sum(r["reads"] for r in result["rows"]),
                              "writes": sum(r["writes"] for r in result["rows"]),
                              "total": result["total"]}]
    return style.table(rows, {"tensor": "tensor", "role": "in Algorithm 0", "reads": "reads",
                              "writes": "writes", "total": "reads + writes"},
                       {"reads": ",", "writes": ",", "total": ","})


TRAFFIC_DIMS = [32, 64, 128, 256]
TRAFFIC_N = [1 << k for k in range(6, 18)]            # 64 .. 128K, the marker's stops
TRAFFIC_GRID = np.unique(np.round(16 * 2 ** (np.arange(0, 53) / 4)).astype(np.int64))   # 16 .. 128K
TENSORS = ("Q", "K", "V", "O", "S", "P")
STACK = ("S", "P", "Q", "K", "V", "O")        # bottom to top: the N x N part first


def traffic_curves(d: int = 64, n: int = 4096) -> dict:
    """HBM accesses per head of Algorithm 0, by tensor, against N (16 .. 131,072).

    Q, K, V, O move N d elements each (read once or written once); S and P move 2 N^2 each
    (written once, read once). The N^2 part's share is 4N^2 / (4Nd + 4N^2) = N / (N + d): one half
    at N = d, 1 - d/N for N >> d. Returns the grid 'N', one array per tensor, 'nd' (4Nd),
    'n2' (4N^2), 'total', 'share' (of S and P) and the same numbers at the marker 'n' under 'point'.
    """
    d = as_int("d", d, 1, 1024)
    n = as_int("n", n, 1, int(TRAFFIC_GRID[-1]))

    def at(N):
        N = np.asarray(N, dtype=np.float64)
        parts = {t: N * d for t in ("Q", "K", "V", "O")}
        parts.update({t: 2 * N * N for t in N_SQUARED})
        nd, n2 = 4 * N * d, 4 * N * N
        return {**parts, "nd": nd, "n2": n2, "total": nd + n2, "share": n2 / (nd + n2)}

    out = {"N": TRAFFIC_GRID, **at(TRAFFIC_GRID), "d": d, "n": n}
    out["point"] = {k: float(v) for k, v in at(n).items()}
    return out


def standard_traffic(d: int = 64, n: int = 4096) -> Explorer:
    """Sliders: head dim d, the N to read off.

    Left: each tensor's share of Algorithm 0's HBM traffic against N (stacked to 100 %), the
    N^2 tensors S and P in warm colours at the bottom, so the marked point's height is their
    share, the number the summary states. Right: the two parts on log-log axes, 4Nd and 4N^2,
    crossing at N = d.
    """
    fig = style.new_figure(2, height=3.7)
    ax_s, ax_a = fig.axes
    shades = {"Q": "#c6dbef", "K": "#9ecae1", "V": "#6baed6", "O": "#3182bd",
              "S": style.COLORS["standard"], "P": style.COLORS["memory"]}
    x = TRAFFIC_GRID
    fills = {t: ax_s.fill_between(x, 0, 0, color=shades[t], lw=0,
                                  label=f"{t}" + ("  (N×N)" if t in N_SQUARED else "  (N×d)"))
             for t in STACK}
    s_mark = ax_s.axvline(n, color="black", lw=1.2, ls="--")
    s_dot, = ax_s.plot([], [], "o", color="black", ms=5, zorder=3)
    s_txt = ax_s.annotate("", (n, 50), xytext=(-6, -8), textcoords="offset points", fontsize=8,
                          ha="right", va="top", zorder=4,
                          bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": "none", "alpha": 0.85})
    ax_s.set_xscale("log", base=2)
    ax_s.set_xlim(x[0], x[-1])
    ax_s.set_ylim(0, 100)
    ax_s.set_xlabel("sequence length N (tokens)")
    ax_s.set_ylabel("share of HBM traffic (%)")
    handles = [fills[t] for t in reversed(STACK)]
    ax_s.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8,
                frameon=False)

    c = style.COLORS
    a_tot, = ax_a.plot([], [], color="black", lw=2, label="all: 4Nd + 4N²")
    a_n2, = ax_a.plot([], [], color=c["standard"], lw=1.5, ls="--", label="S, P: 4N²")
    a_nd, = ax_a.plot([], [], color=c["fa1"], lw=1.5, ls="--", label="Q, K, V, O: 4Nd")
    a_eq = ax_a.axvline(d, color=c["bound"], lw=1, ls=":")
    a_eq_txt = ax_a.text(d * 1.15, 2e11, "", fontsize=8, color=c["bound"], va="top")
    a_mark = ax_a.axvline(n, color="black", lw=1.2, ls="--")
    a_dot, = ax_a.plot([], [], "o", color="black", ms=5)
    ax_a.set_xscale("log", base=2)
    ax_a.set_yscale("log")
    ax_a.set_xlim(x[0], x[-1])
    ax_a.set_ylim(1e2, 1e12)
    ax_a.set_xlabel("sequence length N (tokens)")
    ax_a.set_ylabel("HBM accesses per head (elements)")
    ax_a.legend(loc="lower right", fontsize=8)
    for ax in (ax_s, ax_a):
        ax.grid(True, alpha=0.25)
        ax.minorticks_off()
        _k_ticks(ax, x[0], x[-1], every=2)

    controls = {"d": steps("head dim d", TRAFFIC_DIMS, d),
                "n": steps("read off at N", [(_k(v), v) for v in TRAFFIC_N], n)}

    def update(d, n):
        r = traffic_curves(d, n)
        bottom = np.zeros(x.shape)
        for t in STACK:
            top = bottom + 100 * r[t] / r["total"]
            fills[t].set_data(x, bottom, top)
            bottom = top
        p = r["point"]
        for m in (s_mark, a_mark):
            m.set_xdata([n, n])
        s_dot.set_data([n], [100 * p["share"]])
        s_txt.xy = (n, 100 * p["share"])
        right = n <= 256                            # near the left edge: label to the right
        s_txt.xyann = (6, -8) if right else (-6, -8)
        s_txt.set_horizontalalignment("left" if right else "right")
        s_txt.set_text(f"S, P: {100 * p['share']:.1f} %")
        a_tot.set_data(x, r["total"]); a_n2.set_data(x, r["n2"]); a_nd.set_data(x, r["nd"])
        a_eq.set_xdata([d, d])
        a_eq_txt.set_position((d * 1.15, 2e11))
        a_eq_txt.set_text(f"N = d = {d}:\nequal parts")
        a_dot.set_data([n], [p["total"]])
        ax_s.set_title(f"Where Algorithm 0's traffic goes (d = {d})", fontsize=10)
        ax_a.set_title(f"HBM accesses per head, by part (d = {d})", fontsize=10)
        return (f"At N = {n:,}, d = {d}: Q, K, V, O move {p['nd']:,.0f} elements, S and P "
                f"{p['n2']:,.0f}: <b>{100 * p['share']:.1f} %</b> of the {p['total']:,.0f} "
                f"accesses per head are the N×N matrices (N/(N+d) = {n}/{n + d}; the black dot "
                f"on the left, the total on the right).")

    dynamic = [*fills.values(), s_mark, s_dot, s_txt, a_tot, a_n2, a_nd, a_eq, a_eq_txt, a_mark, a_dot,
               ax_s.title, ax_a.title]
    return Explorer("standard_traffic", controls, fig, update, compute=traffic_curves,
                    dynamic=dynamic)


# --- a real model: time and memory of a prefill -------------------------------------------------

HEAD_DIMS = (64, 128, 256)
N_STEPS = tuple(1024 << k for k in range(8))          # 1K .. 128K, the slider's stops
N_GRID = np.unique(np.round(1024 * 2 ** (np.arange(0, 29) / 4)).astype(np.int64))
SRAM = 100_000                                        # elements, the lecture's M
DTYPE = "bf16"
_CROSS_GRID = np.unique(np.round(2 ** (8 + np.arange(0, 14 * 32 + 1) / 32)).astype(np.int64))
TIME_LIM = (1e-4, 2e3)                                # seconds; every setting fits (tests check)
MEM_LIM = (2.0 ** 16, 2.0 ** 44)                      # bytes: 64 KiB .. 16 TiB


def dense_models() -> list[str]:
    """Models with a dense per-head attention shape: all of models() except MLA entries
    (DeepSeek-V3 is stored as its decode-time equivalent, head_dim 576, not its prefill shape)."""
    return [m for m in models() if "kv_lora_rank" not in get_model(m).extra]


def _dense(model) -> Model:
    m = get_model(model)
    if "kv_lora_rank" in m.extra:
        raise ValueError(f"model={m.name!r} has no dense attention shape for prefill (MLA, stored as "
                         f"its decode-time equivalent); valid: {', '.join(dense_models())}")
    return m


def with_head_dim(model, head_dim: int) -> Model:
    """The model with head dim `head_dim`, keeping the attention width q_heads x head_dim (and
    kv_heads x head_dim) fixed, so parameters and attention FLOPs stay the same and only the
    split into heads changes. Llama-3-8B (32 x 128) at d = 64 has 64 query heads, at d = 256 16."""
    m = _dense(model)
    d = choice("head_dim", head_dim, HEAD_DIMS)
    width, kv_width = m.q_heads * m.head_dim, m.kv_heads * m.head_dim
    if width % d or kv_width % d:
        raise ValueError(f"head_dim={d} does not divide {m.name}'s attention width {width} "
                         f"(KV width {kv_width}); valid: {', '.join(map(str, HEAD_DIMS))}")
    if d == m.head_dim:
        return m
    return dataclasses.replace(m, q_heads=width // d, kv_heads=kv_width // d, head_dim=d)


def _crossover(m: Model, g, key: str = "extra_io_s") -> float | None:
    """N (tokens) where `prefill_cost_curve`'s `key` (standard attention's extra HBM time, or
    FlashAttention's own traffic time with key='flash_io_s') first equals the compute time,
    interpolated on a 32-points-per-octave grid from 256 to 4M; None if it never does there."""
    r = prefill_cost_curve(m, g, _CROSS_GRID, sram=SRAM, dtype=DTYPE)
    diff = np.log(np.maximum(r[key], 1e-300)) - np.log(r["compute_s"])
    above = np.nonzero(diff >= 0)[0]
    if above.size == 0:
        return None
    i = int(above[0])
    if i == 0:
        return float(_CROSS_GRID[0])
    x0, x1 = np.log(_CROSS_GRID[i - 1]), np.log(_CROSS_GRID[i])
    t = diff[i - 1] / (diff[i - 1] - diff[i])
    return float(np.exp(x0 + t * (x1 - x0)))


def prefill_curves(model: str = "Llama-3-8B", gpu: str = "H100-SXM", head_dim: int = 128,
                   n: int = 32768) -> dict:
    """One prefill of N tokens with standard attention, against N = 1K .. 128K, and at N = n.

    The time model is `models.prefill_cost` (bf16, SRAM M = 100,000 elements, causal compute):
        compute_s  = (2 params N + 2 layers heads N^2 d) / peak
        extra_s    = max(0, layers heads (standard_io - flash_io FA1) 2 bytes / HBM bandwidth)
        flash_s    = layers heads flash_io FA1 2 bytes / HBM bandwidth   (assumed hidden)
    `extra_s` is clamped at 0: where FA1's accounting moves MORE than standard attention (d = 256,
    where d^2 is close to M), standard attention's traffic is no larger than the traffic the model
    already assumes hidden, so it adds nothing; `extra_raw_s` keeps prefill_cost's signed value.
    Memory (one layer, all heads at once): sp_bytes = 2 heads N^2 2 bytes (S and P);
    ml_bytes = heads N 2 x 4 bytes (FlashAttention's m and l in fp32).

    `head_dim` changes the model's head dim keeping q_heads x head_dim fixed (`with_head_dim`).
    Returns the grid 'N' with one array per quantity, 'point' (the numbers at n), 'crossover_n'
    (where extra time equals compute, or None), 'flash_crossover_n' (where FlashAttention's own
    traffic time, by the same accounting, equals compute) and the parameters.
    """
    m = with_head_dim(model, head_dim)
    g = get_gpu(gpu)
    n = as_int("n", n, N_STEPS[0], N_STEPS[-1])
    Ns = np.append(N_GRID, n)
    r = prefill_cost_curve(m, g, Ns, sram=SRAM, dtype=DTYPE)
    extra = np.maximum(r["extra_io_s"], 0.0)
    ml = m.q_heads * Ns.astype(np.float64) * 2 * 4
    curves = {"compute_s": r["compute_s"], "extra_s": extra, "extra_raw_s": r["extra_io_s"],
              "flash_s": r["flash_io_s"], "sp_bytes": r["sp_bytes_per_layer"], "ml_bytes": ml}
    out = {k: v[:-1] for k, v in curves.items()}
    point = {k: float(v[-1]) for k, v in curves.items()}
    point.update(N=n, total_ratio=(point["compute_s"] + point["extra_s"]) / point["compute_s"],
                 fits=bool(point["sp_bytes"] <= g.hbm_bytes))
    _, bc = block_sizes(m.head_dim, SRAM)
    out.update(N=N_GRID, point=point, crossover_n=_crossover(m, g),
               flash_crossover_n=_crossover(m, g, "flash_io_s"), model=m.name, gpu=g.name,
               head_dim=m.head_dim, heads=m.q_heads, layers=m.layers, own_head_dim=get_model(model).head_dim,
               hbm_bytes=float(g.hbm_bytes), block_c=bc)
    return out


def max_fitting_n(model, gpu, dtype: str = DTYPE) -> int:
    """The largest N whose S and P for all heads of one layer fit in the GPU's HBM:
    2 q_heads N^2 bytes_per_element <= hbm_bytes (nothing else counted: no weights, no KV cache).

    Example: Llama-3-8B on an 80 GiB H100: floor(sqrt(80 GiB / (2 x 32 x 2))) = 25,905 tokens.
    """
    m = _dense(model)
    g = get_gpu(gpu)
    bpe = DTYPE_BYTES[choice("dtype", dtype, tuple(DTYPE_BYTES))]
    n = math.isqrt(int(g.hbm_bytes // (2 * m.q_heads * bpe)))
    while 2 * m.q_heads * (n + 1) ** 2 * bpe <= g.hbm_bytes:      # guard the integer rounding
        n += 1
    return n


def crossover_rows(model: str = "Llama-3-8B", head_dim: int | None = None, names=None) -> list[dict]:
    """Per GPU, for one prefill of `model` (`with_head_dim` if `head_dim` is given): the bf16
    ridge point and the prompt lengths where standard attention's extra HBM time ('extra_n') and
    FlashAttention's own traffic time by the same FA1 accounting ('flash_n') reach the compute
    time (`prefill_curves`' time model; None where it never does below 4M tokens).

    Example: Llama-3-8B on the H100 SXM: extra_n about 16,700 tokens, flash_n about 16,900.
    """
    m = _dense(model) if head_dim is None else with_head_dim(model, head_dim)
    rows = []
    for name in (gpus() if names is None else names):
        g = get_gpu(name)
        rows.append({"gpu": g.name, "ridge": ridge_point(g, DTYPE), "extra_n": _crossover(m, g),
                     "flash_n": _crossover(m, g, "flash_io_s")})
    return rows


def crossover_table(model: str = "Llama-3-8B", head_dim: int | None = None) -> str:
    """`crossover_rows` as a text table."""
    k = lambda v: "never" if v is None else f"{round(v, -2):,.0f}"      # noqa: E731
    return style.table(crossover_rows(model, head_dim),
                       {"gpu": "GPU", "ridge": "ridge (bf16, FLOP/B)",
                        "extra_n": "extra HBM = compute at N",
                        "flash_n": "FlashAttn's traffic = compute at N"},
                       {"ridge": ".0f", "extra_n": k, "flash_n": k})


def ratio_conventions(model: str = "Llama-3-8B", gpu: str = "H100-SXM", N: int = 32768) -> list[dict]:
    """The standard / FlashAttention prefill ratio of `prefill_cost` (bf16, M = 100,000) under
    other reasonable choices of what counts, to show how much a single number like the
    lecture's "about 2.5x" depends on them. One row per convention, changing one thing each:

        ours              prefill_cost: 2 x params per token (embedding included), causal
                          attention FLOPs (2 L H N^2 d), extra = standard_io - flash_io FA1 (no
                          causal skipping)
        no embedding      linear FLOPs without the input embedding (2 x vocab x hidden per token)
        full attention    attention FLOPs without the causal half: 4 L H N^2 d
        causal FA1        FlashAttention skips the blocks above the diagonal (flash_io causal=True),
                          so standard attention's extra traffic is larger

    Each row: convention, compute_s, extra_s, ratio = (compute_s + extra_s) / compute_s.

    Example: Llama-3-8B, H100 SXM, 32K: 2.62 (ours), 2.70, 2.20, 3.42.
    """
    m = _dense(model)
    g = get_gpu(gpu)
    N = as_int("N", N, 1, N_STEPS[-1])
    base = prefill_cost(m, g, N, sram=SRAM, dtype=DTYPE)
    p, bpe, d = peak(g, DTYPE), DTYPE_BYTES[DTYPE], m.head_dim
    heads = m.layers * m.q_heads
    embed = 2 * m.vocab * m.hidden * N / p
    causal_fa1 = flash_io(N, d, SRAM, "fa1", causal=True)
    causal_extra = heads * (standard_io(N, d) - causal_fa1) * bpe / g.hbm_bandwidth
    variants = [
        ("ours: 2 x params per token + causal attention; FA1 without causal skipping",
         base.compute_s, base.extra_io_s),
        ("linear FLOPs without the input embedding (a lookup)", base.compute_s - embed, base.extra_io_s),
        ("attention FLOPs without the causal half (4 L H N^2 d)",
         base.compute_s + 2 * heads * N * N * d / p, base.extra_io_s),
        ("FlashAttention skips masked blocks (causal FA1 traffic)", base.compute_s, causal_extra),
    ]
    return [{"convention": c, "compute_s": t, "extra_s": e, "ratio": (t + e) / t} for c, t, e in variants]


def conventions_table(model: str = "Llama-3-8B", gpu: str = "H100-SXM", N: int = 32768) -> str:
    """`ratio_conventions` as a text table."""
    return style.table(ratio_conventions(model, gpu, N),
                       {"convention": "what changes", "compute_s": "compute", "extra_s": "extra HBM",
                        "ratio": "standard / FlashAttn"},
                       {"compute_s": style.seconds, "extra_s": style.seconds, "ratio": ".2f"})


def binary_bytes(b: float) -> str:
    """Bytes in binary units, 3 significant digits: 68719476736 -> '64 GiB', 262144 -> '256 KiB'."""
    b = float(b)
    for f, p in ((2 ** 40, "TiB"), (2 ** 30, "GiB"), (2 ** 20, "MiB"), (2 ** 10, "KiB")):
        if abs(b) >= f:
            return f"{b / f:.3g} {p}"
    return f"{b:.3g} B"


def prefill_table(model: str = "Llama-3-8B", gpu: str = "H100-SXM", Ns=N_STEPS) -> str:
    """`models.prefill_cost` at each N as a text table: compute, extra HBM time, their ratio,
    S+P of one layer and whether it fits in the GPU's HBM."""
    g = get_gpu(gpu)
    rows = []
    for N in Ns:
        c = prefill_cost(model, g, int(N), sram=SRAM, dtype=DTYPE)
        rows.append({"N": c.N, "compute": c.compute_s, "extra": c.extra_io_s,
                     "extra/compute": c.extra_io_s / c.compute_s, "ratio": c.total_ratio,
                     "sp": c.sp_bytes_per_layer, "fits": c.fits})
    return style.table(rows, {"N": "N", "compute": "compute", "extra": "extra HBM (std)",
                              "extra/compute": "extra/compute", "ratio": "total / FlashAttn",
                              "sp": "S+P per layer", "fits": f"fits {binary_bytes(g.hbm_bytes)}"},
                       {"N": ",", "compute": style.seconds, "extra": style.seconds,
                        "extra/compute": ".2f", "ratio": ".2f", "sp": binary_bytes,
                        "fits": lambda f: "yes" if f else "no"})


def _k(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def _k_ticks(ax, lo, hi, every: int = 1) -> None:
    """Powers-of-two ticks labelled 64, 1K, 32K ... on a log2 x axis."""
    ticks = [1 << k for k in range(int(np.ceil(np.log2(lo))), int(np.floor(np.log2(hi))) + 1)]
    ticks = ticks[::every] if every > 1 else ticks
    ax.set_xticks(ticks, [_k(t) for t in ticks])


def prefill_cost_explorer(model: str = "Llama-3-8B", gpu: str = "H100-SXM", head_dim: int = 128,
                          n: int = 32768) -> Explorer:
    """Sliders: context length N, GPU, head dim (keeping heads x d fixed), model.

    Left: time of one prefill against N (log-log): compute at peak, the extra HBM time of standard
    attention, and FlashAttention's own traffic time by the same accounting; N marked.
    Right: S + P of one layer against N, FlashAttention's m and l beside it, the GPU's HBM as a
    horizontal line.
    """
    fig = style.new_figure(2, height=3.9)
    ax_t, ax_m = fig.axes
    c = style.COLORS
    x = N_GRID
    t_comp, = ax_t.plot([], [], color=c["compute"], lw=2, label="compute (matmuls at peak)")
    # at d = 128 the two HBM curves nearly coincide (FA1 moves about half of standard attention's
    # traffic, the extra is the other half): a wide pale red band under a thin dashed blue line
    # with markers keeps both visible
    t_extra, = ax_t.plot([], [], color=c["standard"], lw=5, alpha=0.55, solid_capstyle="butt",
                         label="extra HBM time, standard attn.", zorder=2)
    t_flash, = ax_t.plot([], [], color=c["fa1"], lw=1.4, ls=(0, (4, 2)), marker="o", ms=3,
                         markevery=4, label="FlashAttention's own traffic\n(FA1 accounting, no L2; "
                         "assumed hidden)", zorder=3)
    t_dots, = ax_t.plot([], [], "o", color="black", ms=5, zorder=3)
    t_mark = ax_t.axvline(n, color="black", lw=1.2, ls=":")
    t_note = ax_t.text(0.97, 0.04, "", transform=ax_t.transAxes, ha="right", va="bottom",
                       fontsize=8, color=c["standard"])
    m_sp, = ax_m.plot([], [], color=c["standard"], lw=2, label="S + P, standard (one layer)")
    m_ml, = ax_m.plot([], [], color=c["fa1"], lw=1.5, ls="--", label="m, ℓ in fp32, FlashAttention")
    m_hbm = ax_m.axhline(MEM_LIM[0], color=c["bound"], lw=2, label="GPU's HBM capacity")
    m_hbm_txt = ax_m.text(x[0] * 1.1, MEM_LIM[0], "", fontsize=8, color="#444444", va="bottom")
    m_dots, = ax_m.plot([], [], "o", color="black", ms=5, zorder=3)
    m_mark = ax_m.axvline(n, color="black", lw=1.2, ls=":")

    for ax in (ax_t, ax_m):
        ax.set_xscale("log", base=2); ax.set_yscale("log")
        ax.set_xlim(x[0] / 1.15, x[-1] * 1.15)
        ax.grid(True, alpha=0.25)
        ax.minorticks_off()
        _k_ticks(ax, x[0], x[-1])
        ax.set_xlabel("prompt length N (tokens)")
    ax_t.set_ylim(*TIME_LIM)
    tt = [1e-4, 1e-3, 1e-2, 1e-1, 1, 10, 100, 1000]
    ax_t.set_yticks(tt, ["100 µs", "1 ms", "10 ms", "100 ms", "1 s", "10 s", "100 s", "1000 s"])
    ax_t.set_ylabel("time of one prefill (s)")
    ax_m.set_ylim(*MEM_LIM)
    mt = [2.0 ** k for k in range(20, 44, 5)]
    ax_m.set_yticks(mt, [binary_bytes(v) for v in mt])
    ax_m.set_ylabel("memory for one layer (bytes)")
    # two legends, one shown at a time: without the red entry when there is no extra time to draw
    leg_all = ax_t.legend(handles=[t_comp, t_extra, t_flash], loc="upper left", fontsize=7.5)
    leg_no_extra = ax_t.legend(handles=[t_comp, t_flash], loc="upper left", fontsize=7.5)
    ax_t.add_artist(leg_all)
    ax_m.legend(loc="lower right", fontsize=7.5)

    controls = {
        "n": steps("prompt N", [(_k(v), v) for v in N_STEPS], n),
        "gpu": dropdown("GPU", gpus(), get_gpu(gpu).name),
        "head_dim": toggle("head dim d", list(HEAD_DIMS), head_dim),
        "model": dropdown("model", dense_models(), _dense(model).name),
    }

    def update(n, gpu, head_dim, model):
        r = prefill_curves(model, gpu, head_dim, n)
        p = r["point"]
        pos = lambda a: np.where(a > 0, a, np.nan)      # noqa: E731 - log axes: hide zeros
        t_comp.set_data(x, r["compute_s"])
        t_extra.set_data(x, pos(r["extra_s"]))
        t_flash.set_data(x, r["flash_s"])
        has_extra = bool(np.any(r["extra_s"] > 0))
        leg_all.set_visible(has_extra)
        leg_no_extra.set_visible(not has_extra)
        t_note.set_text("" if has_extra else
                        f"no red line: at d = {r['head_dim']} with M = 100,000, FA1's accounting\n"
                        f"moves MORE than standard attention, so this model\n"
                        f"cannot show FlashAttention's benefit here")
        t_dots.set_data([n] * 3, [p["compute_s"], p["extra_s"] if p["extra_s"] > 0 else np.nan,
                                  p["flash_s"]])
        m_sp.set_data(x, r["sp_bytes"]); m_ml.set_data(x, r["ml_bytes"])
        m_hbm.set_ydata([r["hbm_bytes"]] * 2)
        m_hbm_txt.set_position((x[0] * 1.1, r["hbm_bytes"] * 1.15))
        m_hbm_txt.set_text(f"{r['gpu']}: {binary_bytes(r['hbm_bytes'])}")
        m_dots.set_data([n, n], [p["sp_bytes"], p["ml_bytes"]])
        t_mark.set_xdata([n, n]); m_mark.set_xdata([n, n])
        if r["head_dim"] == r["own_head_dim"]:
            shape = f"{r['model']} ({r['layers']} layers × {r['heads']} heads × d={r['head_dim']})"
        else:
            shape = f"{r['model']} reshaped: {r['heads']} heads × d={r['head_dim']} (hypothetical)"
        ax_t.set_title(f"Prefill time · {shape}, {r['gpu']}, bf16", fontsize=9)
        ax_m.set_title(f"S+P memory of one layer · {r['heads']} heads, bf16", fontsize=9)
        return _summary(r)

    dynamic = [t_comp, t_extra, t_flash, t_dots, t_mark, t_note, leg_all, leg_no_extra, m_sp, m_ml,
               m_hbm, m_hbm_txt, m_dots, m_mark, ax_t.title, ax_m.title]
    return Explorer("prefill_cost", controls, fig, update, compute=prefill_curves, dynamic=dynamic)


def _summary(r: dict) -> str:
    p = r["point"]
    own = "its own shape" if r["head_dim"] == r["own_head_dim"] else \
        f"hypothetical reshape, width kept, own d = {r['own_head_dim']}"
    head = (f"{r['model']} ({r['heads']} heads × d = {r['head_dim']}, {own}) on {r['gpu']}, "
            f"N = {p['N']:,}: compute {style.seconds(p['compute_s'])}")
    fit = "fits" if p["fits"] else "<b>does not fit</b>"
    memory = (f"S+P of one layer {binary_bytes(p['sp_bytes'])} vs HBM {binary_bytes(r['hbm_bytes'])}: "
              f"{fit}; FlashAttention keeps {binary_bytes(p['ml_bytes'])} of m, ℓ.")
    if p["extra_raw_s"] > 0:
        cross = r["crossover_n"]
        where = (f"extra passes compute near N ≈ {round(cross, -2):,.0f}" if cross is not None
                 else "extra stays below compute up to 4M tokens")
        return (f"{head}, standard attention's extra HBM time {style.seconds(p['extra_s'])} "
                f"→ <b>{p['total_ratio']:.2f}x</b> the FlashAttention time ({where}); "
                f"FlashAttention's own traffic {style.seconds(p['flash_s'])}. {memory}")
    return (f"{head}. At d = {r['head_dim']} with M = {SRAM:,} elements, FA1's accounting "
            f"(B<sub>c</sub> = {r['block_c']}) moves {p['flash_s'] / (p['flash_s'] + p['extra_raw_s']):.2f}x "
            f"MORE HBM traffic than standard attention ({style.seconds(p['flash_s'])} against "
            f"{style.seconds(p['flash_s'] + p['extra_raw_s'])}), so <b>this traffic model cannot show "
            f"FlashAttention's benefit here</b>: its ratio 1.00 does not mean FlashAttention gains "
            f"nothing. {memory} That memory benefit stands, and on real GPUs most K/V re-reads hit "
            f"L2, which this model does not count.")
