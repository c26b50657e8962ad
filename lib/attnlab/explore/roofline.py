"""Why attention needs special kernels (notebook 01): attention's share of inference, the GPU's
two memory levels, the roofline with typical operators on it, and why fusion pays.

Pure parts (numbers only, tested in tests/test_roofline.py):

    attention_share(model, Ns)      linear vs attention FLOPs per token, S matrix and KV bytes
    memory_levels(gpus)             HBM / SRAM / L2 sizes and bandwidths from data/gpus.json
    spec_sources(gpu, fields)       which document backs each of those numbers
    operators(dtype)                FLOPs, bytes and intensity of typical operators, from first principles
    roofline_points(gpu, dtype, I)  the roofline curve, ridge point, operators and "your kernel" on it
    fusion_traffic(k, N, ...)       HBM bytes and time of k unfused elementwise kernels vs one fused

Text tables for the notebook: share_table, memory_table, paper_a100, ridge_table, operator_table,
fusion_table.

Draw part: `roofline(...)`, one log-log panel whose markers move when a control changes.

What this leaves out on purpose: the L2 cache in the roofline (one roof: HBM), kernel launch
overhead, and the fact that real kernels reach 60-80 % of either roof. FLOPs count a multiply-add
as 2; attention FLOPs count the two matmuls (4 N^2 d), as the FlashAttention papers do.

Example: on an H100 SXM in bf16 the ridge point is 989.4e12 / 3.35e12 = 295 FLOP/byte; softmax
(5 FLOPs per element, 2 bytes in and 2 out) sits at 1.25 FLOP/byte and can use at most 0.4 % of
the Tensor Cores' peak.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from .._check import as_float, as_int
from ..hardware import DTYPE_BYTES, attainable, get_gpu, gpus, peak, ridge_point, roofline_time
from ..iomodel import flash_io, standard_io
from ..models import get_model, linear_flops_per_token
from . import style
from ._base import Explorer, dropdown, slider

__all__ = ["attention_share", "memory_levels", "spec_sources", "operators", "roofline_points",
           "fusion_traffic", "fusion_rows", "roofline", "share_table", "memory_table", "paper_a100",
           "ridge_table", "operator_table", "fusion_table", "I_MIN", "I_MAX", "SOFTMAX_FLOPS"]

I_MIN, I_MAX = 0.1, 10_000.0          # FLOP/byte: the x range of every roofline drawn here
GRID = np.geomspace(I_MIN, I_MAX, 201)
SOFTMAX_FLOPS = 5                     # per element: max, subtract, exp, sum, scale by 1/l
Y_MIN, Y_MAX = 0.1, 100_000.0         # TFLOP/s: every chip and dtype in gpus.json fits


def _dtype(dtype) -> str:
    if not isinstance(dtype, str):
        raise TypeError(f"dtype must be a string such as 'bf16', got {dtype!r}")
    key = dtype.strip().lower()
    if key not in DTYPE_BYTES:
        raise ValueError(f"dtype={dtype!r} is not known; valid: {', '.join(DTYPE_BYTES)}")
    return key


# --- 1.1 attention's share of the work ---------------------------------------------------------

def attention_share(model="Llama-3-8B", Ns=(1024, 4096, 16384, 32768, 131072),
                    dtype: str = "bf16") -> list[dict]:
    """Per N: FLOPs per token of the linear layers and of attention in a causal prefill, and the
    bytes attention must hold or read.

        linear_flops = models.linear_flops_per_token(model) = 2 * active_params
                       every weight once per token, the input embedding included (a lookup, ~6.5 %
                       of Llama-3-8B): the usual convention, the one prefill_cost and the lecture use
        attn_flops   = 4 * layers * q_heads * head_dim * (N + 1) / 2
                       QK^T and PV for one query against (N + 1) / 2 keys: the causal average
        score_bytes  = N^2 * bytes per element       S of ONE head, if it were materialised
        kv_bytes     = 2 * layers * kv_heads * head_dim * N * bytes   K and V that ONE decode step reads

    Linear FLOPs grow as N d^2 over the whole prefill, attention's as N^2 d: per token the first
    is constant and the second grows with N; they are equal near
    `models.attention_linear_crossover(model)` (61,266 tokens for Llama-3-8B).

    Example: Llama-3-8B at N = 32,768: linear 16.06 GFLOP/token, attention 8.6 GFLOP/token (35 %);
    one head's S is 32768^2 x 2 = 2,147,483,648 bytes; a decode step reads 4 GiB of KV.
    """
    m = get_model(model)
    b = DTYPE_BYTES[_dtype(dtype)]
    linear = linear_flops_per_token(m)
    rows = []
    for N in Ns:
        N = as_int("N", N, 1, None)
        attn = 4 * m.layers * m.q_heads * m.head_dim * (N + 1) / 2
        rows.append({"N": N, "linear_flops": float(linear), "attn_flops": attn,
                     "attn_share": attn / (attn + linear), "score_bytes": N * N * b,
                     "kv_bytes": 2 * m.layers * m.kv_heads * m.head_dim * N * b})
    return rows


# --- 1.2 the two memory levels ------------------------------------------------------------------

def memory_levels(names=None) -> list[dict]:
    """One row per GPU: HBM capacity and bandwidth, on-chip SRAM (per SM, SMs, total), L2, and
    the SRAM bandwidth where a source gives one (the FlashAttention paper's ~19 TB/s for the A100;
    NaN elsewhere), and hbm_per_l2, how many times larger HBM is than the L2 cache. Sizes in
    bytes, bandwidths in bytes/s.

    Example: A100-80GB-SXM: 80 GiB at 2.04 TB/s; 192 KiB x 108 SMs = 20.25 MiB of SRAM at ~19 TB/s.
    """
    rows = []
    for name in (gpus() if names is None else names):
        g = get_gpu(name)
        sram_bw = g.extra.get("sram_bandwidth")
        rows.append({"gpu": g.name, "hbm_bytes": g.hbm_bytes, "hbm_bandwidth": g.hbm_bandwidth,
                     "sram_per_sm": g.sram_per_sm, "sms": g.sms, "sram_total": g.sram_per_sm * g.sms,
                     "l2_bytes": g.l2_bytes, "hbm_per_l2": g.hbm_bytes / g.l2_bytes,
                     "sram_bandwidth": float(sram_bw) if sram_bw is not None else float("nan")})
    return rows


MEMORY_FIELDS = ("hbm_bytes", "hbm_bandwidth", "sms", "sram_per_sm", "l2_bytes", "sram_bandwidth")


def spec_sources(gpu, fields=MEMORY_FIELDS) -> str:
    """The documents behind `fields` of `gpu`, as text: a numbered list of documents, then each
    field with the numbers of the documents that support it (fields the GPU lacks are skipped).

    Example: spec_sources("A100") lists the datasheet [1] for hbm_bandwidth and the
    FlashAttention paper [4] for sram_bandwidth.
    """
    g = get_gpu(gpu)
    docs = list(g.sources)
    present = [f for f in fields if f in ("hbm_bytes", "hbm_bandwidth", "sms", "sram_per_sm",
                                          "l2_bytes") or f in g.extra]
    lines = [g.name]
    used = sorted({i for f in present for i, s in enumerate(docs) if f in s["supports"]})
    for i in used:
        url = docs[i]["url"] or "(no URL: measured)"
        lines.append(f"  [{i + 1}] {docs[i]['document']}\n      {url}")
    cites = []
    for f in present:
        idx = [str(i + 1) for i, s in enumerate(docs) if f in s["supports"]]
        cites.append(f"{f} [{','.join(idx) if idx else 'none'}]")
    lines.append("  " + "   ".join(cites))
    return "\n".join(lines)


# --- 1.3 operators on the roofline --------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _operators(dtype: str, N: int, d: int, sram: int, matmul_n: int, context: int) -> tuple:
    b = DTYPE_BYTES[dtype]
    mm = 2 * matmul_n ** 3
    attn = 4 * N * N * d
    nn = N * N                                    # elementwise ops run over the N x N scores
    ops = (
        ("elementwise", "elementwise", f"elementwise op over {N}x{N}", float(nn), 2 * nn * b,
         "1 FLOP per element; each element read and written once"),
        ("softmax", "softmax", f"softmax over {N}x{N}", float(SOFTMAX_FLOPS * nn), 2 * nn * b,
         f"{SOFTMAX_FLOPS} FLOPs per element (max, subtract, exp, sum, scale); read + write once"),
        ("decode", "decode", f"decode attention, MHA, {context:,} keys", 4.0 * context * d,
         (2 * context * d + 2 * d) * b, "4Ld FLOPs; K, V read once, q read, o written"),
        ("standard", "std attn", f"standard attention, N={N:,}", float(attn),
         standard_io(N, d) * b, "4N²d FLOPs; Q, K, V, O once + S, P written and read back"),
        ("flash", "FA", f"FlashAttention, N={N:,} (HBM model)", float(attn),
         flash_io(N, d, sram, "fa2") * b,
         f"4N²d FLOPs; flash_io, FA2 order, M={sram:,}: K, V re-read per Q block"),
        ("matmul", "matmul", f"matmul {matmul_n}x{matmul_n}x{matmul_n}", float(mm),
         3 * matmul_n ** 2 * b, "2n³ FLOPs; A, B read and C written once"),
        ("flash_l2", "FA, L2", f"FlashAttention, N={N:,} (re-reads hit L2)", float(attn),
         4 * N * d * b, "4N²d FLOPs; Q, K, V read and O written once"),
    )
    return tuple({"key": k, "short": sh, "label": lab, "flops": f, "bytes": float(by),
                  "intensity": f / by, "counted": how} for k, sh, lab, f, by, how in ops)


def operators(dtype: str = "bf16", *, N: int = 4096, d: int = 128, sram: int = 100_000,
              matmul_n: int = 4096, context: int = 4096) -> list[dict]:
    """Typical operators with FLOPs, HBM bytes and arithmetic intensity counted from first
    principles, for elements of `dtype` (DTYPE_BYTES bytes each). Keys of each dict: key, short
    (plot label), label, flops, bytes, intensity (FLOP/byte), counted (how, in words).

    elementwise   N^2 x 1 FLOP / (N^2 x (read b + write b))      bf16: 1/4   = 0.25
    softmax       N^2 x SOFTMAX_FLOPS / (N^2 x 2 b)              bf16: 5/4   = 1.25
    decode (MHA)  4 L d / ((2 L d + 2 d) b): every K, V element used once    ~= 2/b = 1
    standard      4 N^2 d / (standard_io(N, d) b)  (S, P written and read)   bf16: 62.1
    flash         4 N^2 d / (flash_io(N, d, M, "fa2") b)  (K, V re-read per Q block, no L2)   124.1
    matmul n^3    2 n^3 / (3 n^2 b) = 2n / (3b)                   bf16, n=4096: 1365.3
    flash_l2      4 N^2 d / (4 N d b) = N / b  (every re-read served by L2)  bf16: 2048

    Defaults: prefill N = 4096, d = 128, M = 100,000 elements (the lecture's SRAM), decode context
    L = 4096.
    """
    dtype = _dtype(dtype)
    N = as_int("N", N, 1, None)
    d = as_int("d", d, 1, None)
    sram = as_int("sram", sram, 4 * d, None)
    matmul_n = as_int("matmul_n", matmul_n, 1, None)
    context = as_int("context", context, 1, None)
    return [dict(o) for o in _operators(dtype, N, d, sram, matmul_n, context)]


def _verdict(intensity: float, ridge: float) -> str:
    return "memory-bound" if intensity < ridge else "compute-bound"


def roofline_points(gpu="H100-SXM", dtype: str = "bf16", intensity: float = 10.0) -> dict:
    """Everything the roofline figure shows, as numbers.

    Returns gpu (name), dtype, peak (FLOP/s), bandwidth (bytes/s), ridge (peak / bandwidth,
    FLOP/byte), grid (intensities I_MIN..I_MAX, log-spaced) and roof (attainable FLOP/s on the
    grid: min(peak, I x bandwidth)); operators (as `operators(dtype)`, plus attainable, fraction
    of peak, bound ('memory-bound' below the ridge, else 'compute-bound') and time_s, the
    roofline's lower bound on the operator's time); and user, the same for a kernel of arithmetic
    intensity `intensity`.

    ValueError names the value for an unknown GPU, a dtype the GPU has no peak for, or an
    intensity <= 0.

    Example: roofline_points("H100", "bf16", 10)["user"]["attainable"] == 33.5e12 (3.4 % of peak).
    """
    g = get_gpu(gpu)
    dtype = _dtype(dtype)
    p = peak(g, dtype)
    intensity = as_float("intensity", intensity, 0.0, None, lo_open=True)
    bw = g.hbm_bandwidth
    ridge = ridge_point(g, dtype)                        # the roofline itself lives in hardware.py
    ops = operators(dtype)
    for o in ops:
        o["attainable"] = attainable(o["intensity"], g, dtype)
        o["fraction"] = o["attainable"] / p
        o["bound"] = _verdict(o["intensity"], ridge)
        o["time_s"] = roofline_time(o["flops"], o["bytes"], g, dtype)
    user_att = attainable(intensity, g, dtype)
    return {"gpu": g.name, "dtype": dtype, "peak": p, "bandwidth": bw, "ridge": ridge,
            "grid": GRID, "roof": attainable(GRID, g, dtype), "operators": ops,
            "user": {"intensity": intensity, "attainable": user_att, "fraction": user_att / p,
                     "bound": _verdict(intensity, ridge)}}


# --- why fusion ---------------------------------------------------------------------------------

def fusion_traffic(k: int, N: int = 32768, gpu="H100-SXM", dtype: str = "bf16",
                   flops_per_element: float = 1.0) -> dict:
    """A chain of k elementwise operations over an N x N matrix, unfused vs fused.

    unfused: k kernels, each reads its N x N input from HBM and writes its N x N output back:
             2 k N^2 elements.
    fused:   one kernel reads the input once, applies all k steps in registers, writes once:
             2 N^2 elements.
    Times are the roofline's lower bounds on `gpu` (max of FLOPs / peak and bytes / bandwidth,
    summed over the kernels); with a few FLOPs per element both are memory-bound, so the saving
    is k-fold.

    Example: k = 4 (scale, mask, softmax, dropout) at N = 32,768 in bf16 moves 17.2 GB unfused and
    4.3 GB fused: 5.13 ms against 1.28 ms on an H100 SXM, per head.
    """
    k = as_int("k", k, 1, None)
    N = as_int("N", N, 1, None)
    dtype = _dtype(dtype)
    g = get_gpu(gpu)
    fpe = as_float("flops_per_element", flops_per_element, 0.0, None)
    b = DTYPE_BYTES[dtype]
    per_kernel_bytes = 2 * N * N * b
    per_kernel_flops = fpe * N * N
    unfused_s = k * roofline_time(per_kernel_flops, per_kernel_bytes, g, dtype)
    fused_s = roofline_time(k * per_kernel_flops, per_kernel_bytes, g, dtype)
    return {"k": k, "N": N, "gpu": g.name, "dtype": dtype,
            "unfused_bytes": k * per_kernel_bytes, "fused_bytes": per_kernel_bytes,
            "unfused_s": unfused_s, "fused_s": fused_s, "speedup": unfused_s / fused_s}


def fusion_rows(ks=(1, 2, 3, 4, 6, 8), N: int = 32768, gpu="H100-SXM", dtype: str = "bf16") -> list[dict]:
    """`fusion_traffic` for each k in `ks` (one row each)."""
    return [fusion_traffic(k, N, gpu, dtype) for k in ks]


# --- text tables for the notebook (reproducible under strict nbval) -----------------------------

def _binary(x: float) -> str:
    """Bytes in binary units: 2147483648 -> '2.00 GiB', 2097152 -> '2.00 MiB'."""
    for f, u in ((2 ** 40, "TiB"), (2 ** 30, "GiB"), (2 ** 20, "MiB"), (2 ** 10, "KiB")):
        if x >= f:
            return f"{x / f:.2f} {u}"
    return f"{x:.0f} B"


def share_table(model="Llama-3-8B", Ns=(1024, 4096, 16384, 32768, 131072),
                dtype: str = "bf16") -> str:
    """`attention_share` as a text table: FLOPs per token, attention's share, S and KV sizes."""
    return style.table(
        attention_share(model, Ns, dtype),
        {"N": "N (tokens)", "linear_flops": "linear GFLOP/token", "attn_flops": "attention GFLOP/token",
         "attn_share": "attention share", "score_bytes": "S, one head", "kv_bytes": "KV read per decode step"},
        {"N": ",", "linear_flops": lambda x: f"{x / 1e9:.2f}", "attn_flops": lambda x: f"{x / 1e9:.2f}",
         "attn_share": ".1%", "score_bytes": _binary, "kv_bytes": _binary})


def memory_table(names=None) -> str:
    """`memory_levels` as a text table (binary units for sizes, decimal TB/s for bandwidth; HBM is
    the capacity nvidia-smi reports where gpus.json has it, so '80 GB' parts show about 80 GiB)."""
    return style.table(
        memory_levels(names),
        {"gpu": "GPU", "hbm_bytes": "HBM", "hbm_bandwidth": "HBM bandwidth", "sram_per_sm": "SRAM per SM",
         "sms": "SMs", "sram_total": "SRAM, all SMs", "l2_bytes": "L2", "hbm_per_l2": "HBM / L2",
         "sram_bandwidth": "SRAM bandwidth"},
        {"hbm_bytes": lambda x: f"{x / 2 ** 30:.1f} GiB", "hbm_bandwidth": lambda x: f"{x / 1e12:.2f} TB/s",
         "sram_per_sm": lambda x: f"{x / 2 ** 10:.0f} KiB", "sram_total": lambda x: f"{x / 2 ** 20:.2f} MiB",
         "l2_bytes": lambda x: f"{x / 2 ** 20:.0f} MiB", "hbm_per_l2": lambda x: f"{x:,.0f}x",
         "sram_bandwidth": lambda x: "no source" if math.isnan(x) else f"~{x / 1e12:.0f} TB/s"})


def paper_a100() -> str:
    """The FlashAttention paper's A100 figures (its Section 2.1, stored in gpus.json) and the two
    ratios they imply: SRAM is about 10x faster than HBM and about 4,000x smaller."""
    g = get_gpu("A100-80GB-SXM")
    fp = g.extra["flashattention_paper"]
    (c0, c1), (b0, b1) = fp["hbm_bytes_range"], fp["hbm_bandwidth_range"]
    sram_total = fp["sram_per_sm"] * fp["sms"]
    sram_bw = fp["sram_bandwidth"]
    return "\n".join([
        f"FlashAttention paper, A100: HBM {c0 / 1e9:.0f}-{c1 / 1e9:.0f} GB at "
        f"{b0 / 1e12:.1f}-{b1 / 1e12:.1f} TB/s; SRAM {fp['sram_per_sm'] // 1024} KB on each of "
        f"{fp['sms']} SMs at ~{sram_bw / 1e12:.0f} TB/s",
        f"SRAM bandwidth / HBM bandwidth: {sram_bw / b1:.1f}x to {sram_bw / b0:.1f}x "
        f"({sram_bw / g.hbm_bandwidth:.1f}x against the 80GB SXM's {g.hbm_bandwidth / 1e12:.3f} TB/s)",
        f"HBM capacity / SRAM capacity: {g.hbm_bytes:,} / {sram_total:,} bytes "
        f"= {g.hbm_bytes / sram_total:,.0f}x",
    ])


def ridge_table(names=None) -> str:
    """Ridge points (FLOP/byte) of every chip and dtype; '-' where the chip lacks the dtype."""
    dts = list(DTYPE_BYTES)
    rows = []
    for name in (gpus() if names is None else names):
        g = get_gpu(name)
        rows.append({"gpu": g.name, **{dt: (peak(g, dt) / g.hbm_bandwidth if dt in g.dtypes else None)
                                       for dt in dts}})
    used = [dt for dt in dts if any(r[dt] is not None for r in rows)]
    return style.table(rows, {"gpu": "GPU", **{dt: dt for dt in used}},
                       {dt: (lambda x: "-" if x is None else f"{x:.1f}") for dt in used})


def operator_table(gpu="H100-SXM", dtype: str = "bf16") -> str:
    """The operators of `roofline_points` as a text table: FLOPs, bytes, intensity, the roofline's
    attainable throughput and lower bound on time, and the verdict."""
    r = roofline_points(gpu, dtype)
    return style.table(
        r["operators"],
        {"label": "operator", "flops": "FLOPs", "bytes": "HBM bytes", "intensity": "FLOP/byte",
         "attainable": "attainable", "fraction": "of peak", "time_s": "time >=", "bound": "bound by"},
        {"label": str, "flops": lambda x: style.si(x), "bytes": lambda x: style.si(x, "B"),
         "intensity": _num, "attainable": lambda x: f"{x / 1e12:,.1f} TFLOP/s",
         "fraction": lambda x: f"{100 * x:.1f} %", "time_s": style.seconds,
         "bound": lambda v: v.replace("-bound", "")})


def fusion_table(ks=(1, 2, 3, 4, 6, 8), N: int = 32768, gpu="H100-SXM", dtype: str = "bf16") -> str:
    """`fusion_rows` as a text table."""
    return style.table(
        fusion_rows(ks, N, gpu, dtype),
        {"k": "k kernels", "unfused_bytes": "HBM bytes unfused", "fused_bytes": "fused",
         "unfused_s": "time unfused", "fused_s": "fused", "speedup": "saving"},
        {"unfused_bytes": _binary, "fused_bytes": _binary, "unfused_s": style.seconds,
         "fused_s": style.seconds, "speedup": lambda x: f"{x:.1f}x"})


# --- the explorer -------------------------------------------------------------------------------

# Label offsets (points) and alignment per operator: neighbouring points get labels on opposite
# sides of the roof line, and no label leaves the axes for any chip or dtype in gpus.json.
_LABEL_POS = {
    "elementwise": ((7, -5), "left", "top"),
    "softmax": ((7, -5), "left", "top"),
    "decode": ((-7, 5), "right", "bottom"),
    "standard": ((-7, 5), "right", "bottom"),
    "flash": ((7, -5), "left", "top"),
    # the two compute-bound points sit close together on the flat roof: matmul's label goes
    # below and to the left, FA-with-L2's above (to the right where there is room, see
    # _L2_LABEL), each joined to its marker by a thin leader line
    "matmul": ((-14, -16), "right", "top"),
    "flash_l2": ((14, 18), "left", "bottom"),
}
_LEADER = {"matmul", "flash_l2"}
# FA-with-L2's label turns to the left of its marker when less than this many decades of x axis
# remain to its right (fp8 and fp4 put it at 4,096 and 8,192 FLOP/byte)
_L2_LABEL_ROOM = 0.6
_L2_LABEL_LEFT = ((-3, 26), "right", "bottom")

_KEY = ("markers: operator, its FLOP/byte; orange = memory-bound, purple = compute-bound\n"
        "elementwise, softmax: over a 4096 x 4096 matrix\n"
        "std attn, FA: prefill attention, N = 4096, d = 128 (standard; FlashAttention)\n"
        "FA, L2 (hollow marker): FlashAttention if the L2 cache serves its K, V re-reads,\n"
        "      so HBM sees Q, K, V, O once (a best case, not an HBM-model count)\n"
        "decode: one query against 4096 keys, MHA;  matmul: 4096 x 4096 x 4096\n"
        "\u2605 your kernel (slider)")


def _tick(x, _pos=None) -> str:
    return f"{x:g}" if x < 1 else f"{x:,.0f}"


def _num(x: float) -> str:
    """Intensity for a label: '0.25', '1.25', '62.1', '1,365'."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def roofline(gpu: str = "H100-SXM", dtype: str = "bf16", intensity: float = 10.0) -> Explorer:
    """Dropdowns: GPU, dtype (only those the chip has); log slider: your kernel's intensity.

    One log-log panel: attainable TFLOP/s against arithmetic intensity, the ridge point, the
    typical operators of `operators()` (orange: memory-bound, purple: compute-bound) and your
    kernel (star); the summary says what it can reach and which roof limits it.
    """
    start = roofline_points(gpu, dtype, intensity)      # validates the arguments
    fig = style.new_figure(1, height=4.6, width=9.0)
    ax = fig.axes[0]
    c = style.COLORS
    ax.set_xscale("log"); ax.set_yscale("log")
    ax.set_xlim(I_MIN, I_MAX); ax.set_ylim(Y_MIN, Y_MAX)
    decades = [10.0 ** e for e in range(-1, 6)]
    ax.xaxis.set_major_locator(FixedLocator(decades))
    ax.yaxis.set_major_locator(FixedLocator(decades))
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(FuncFormatter(_tick))
        axis.set_minor_locator(NullLocator())
    ax.grid(True, alpha=0.25)
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved to/from HBM)")
    ax.set_ylabel("attainable throughput (TFLOP/s)")
    ax.text(0.012, 0.985, _KEY, transform=ax.transAxes, fontsize=7.5, va="top", ha="left",
            linespacing=1.4, bbox={"boxstyle": "round,pad=0.4", "fc": "white", "ec": c["muted"]})

    shade = ax.axvspan(I_MIN, start["ridge"], color=c["memory"], alpha=0.07, lw=0)
    roof, = ax.plot([], [], color="k", lw=2)
    ridge_line = ax.axvline(start["ridge"], color=c["bound"], ls="--", lw=1)
    ridge_text = ax.text(0, 0, "", fontsize=8, color="#404040", ha="right", va="bottom")
    mem_text = ax.text(0, 0.025, "memory-bound", fontsize=9, color=c["memory"], ha="right",
                       va="bottom", transform=ax.get_xaxis_transform())
    cmp_text = ax.text(0, 0.025, "compute-bound", fontsize=9, color=c["compute"], ha="left",
                       va="bottom", transform=ax.get_xaxis_transform())
    keys = [o["key"] for o in start["operators"]]
    dots = {k: ax.plot([], [], "o", ms=7, mec="k", mew=0.6, zorder=3)[0] for k in keys}
    dots["flash_l2"].set_markerfacecolor("white")
    labels = {}
    for k in keys:
        off, ha, va = _LABEL_POS[k]
        leader = ({"arrowstyle": "-", "lw": 0.7, "color": "#555555", "shrinkA": 1, "shrinkB": 4.5}
                  if k in _LEADER else None)
        labels[k] = ax.annotate("", (1, 1), xytext=off, textcoords="offset points", fontsize=8,
                                ha=ha, va=va, zorder=4, arrowprops=leader)
    user_line, = ax.plot([], [], ":", color=c["highlight"], lw=1.5, zorder=2)
    user_dot, = ax.plot([], [], "*", ms=16, color=c["highlight"], mec="k", mew=0.8, zorder=5,
                         clip_on=False)           # whole star even at the ends of the slider

    controls = {
        "gpu": dropdown("GPU", gpus(), start["gpu"]),
        "dtype": dropdown("dtype", list(get_gpu(gpu).dtypes), start["dtype"]),
        "intensity": slider("your kernel (FLOP/B)", float(intensity), I_MIN, I_MAX, 0.05, log=True,
                            readout_format=".3g"),
    }

    state = {}

    def offer_dtypes(change):
        """A new chip: the dtype dropdown offers only its dtypes (bf16 if the old one is gone).
        Runs before the explorer's own observer, so one refresh sees both new values."""
        options = list(get_gpu(change["new"]).dtypes)
        w = controls["dtype"]
        if list(w.options) == options:
            return
        ex = state.get("explorer")
        held = ex._hold if ex is not None else False
        if ex is not None:
            ex._hold = True                  # the dtype change is part of this one refresh
        try:
            keep = w.value if w.value in options else "bf16"
            w.options = options
            w.value = keep
        finally:
            if ex is not None:
                ex._hold = held

    controls["gpu"].observe(offer_dtypes, names="value")

    def update(gpu, dtype, intensity):
        r = roofline_points(gpu, dtype, intensity)
        tf = 1e12
        roof.set_data(r["grid"], r["roof"] / tf)
        ridge, pk = r["ridge"], r["peak"] / tf
        shade.set_x(I_MIN); shade.set_width(ridge - I_MIN)
        ridge_line.set_xdata([ridge, ridge])
        ridge_text.set_position((ridge / 1.12, pk * 2.0))
        ridge_text.set_text(f"ridge point\n{_num(ridge)} FLOP/byte")
        mem_text.set_x(ridge / 1.15)
        cmp_text.set_x(ridge * 1.15)
        for o in r["operators"]:
            k = o["key"]
            y = o["attainable"] / tf
            colour = c["memory"] if o["bound"] == "memory-bound" else c["compute"]
            dots[k].set_data([o["intensity"]], [y])
            if k == "flash_l2":
                dots[k].set_markeredgecolor(colour); dots[k].set_markeredgewidth(2)
            else:
                dots[k].set_markerfacecolor(colour)
            labels[k].xy = (o["intensity"], y)
            labels[k].set_text(f"{o['short']} {_num(o['intensity'])}")
            if k == "flash_l2":
                room = math.log10(I_MAX / o["intensity"]) >= _L2_LABEL_ROOM
                off, ha, va = _LABEL_POS[k] if room else _L2_LABEL_LEFT
                labels[k].xyann = off
                labels[k].set_horizontalalignment(ha)
        u = r["user"]
        uy = u["attainable"] / tf
        user_line.set_data([u["intensity"], u["intensity"]], [Y_MIN, uy])
        user_dot.set_data([u["intensity"]], [uy])
        ax.set_title(f"Roofline of the {r['gpu']}, {r['dtype']}: HBM {r['bandwidth'] / 1e12:.2f} TB/s, "
                     f"peak {pk:,.4g} TFLOP/s", fontsize=10)
        verdict_colour = c["memory"] if u["bound"] == "memory-bound" else c["compute"]
        need = (f"it would need {ridge / u['intensity']:.3g}x more FLOPs per byte to reach the peak"
                if u["bound"] == "memory-bound" else "more FLOPs per byte would not make it faster")
        return (f"Your kernel at <b>{_num(u['intensity'])} FLOP/byte</b> can reach at most "
                f"<b>{style.si(u['attainable'], 'FLOP/s')}</b> ({100 * u['fraction']:.3g} % of the "
                f"{style.si(r['peak'], 'FLOP/s')} {r['dtype']} peak): "
                f"<b style='color:{verdict_colour}'>{u['bound']}</b>; {need}. "
                f"Ridge point {_num(ridge)} FLOP/byte.")

    dynamic = [shade, roof, ridge_line, ridge_text, mem_text, cmp_text, *dots.values(),
               *labels.values(), user_line, user_dot, ax.title]
    ex = Explorer("roofline", controls, fig, update, compute=roofline_points, dynamic=dynamic)
    state["explorer"] = ex
    return ex
