"""Why attention needs special kernels (notebook 01), the numbers: attention's share of inference,
the GPU's two memory levels, the roofline with typical operators on it, and why fusion pays.

Pure functions (tested in tests/explore/test_roofline.py):

    attention_share(model, Ns)      linear vs attention FLOPs per token, S matrix and KV bytes
    memory_levels(gpus)             HBM / SRAM / L2 sizes and bandwidths from data/gpus.json
    spec_sources(gpu, fields)       which document backs each of those numbers
    operators(dtype)                FLOPs, bytes and intensity of typical operators, from first principles
    roofline_points(gpu, dtype, I)  the roofline curve, ridge point, operators and "your kernel" on it
    fusion_traffic(k, N, ...)       HBM bytes and time of k unfused elementwise kernels vs one fused

Text tables of them: `roofline.tables`; the explorer: `roofline.explorer.RooflineExplorer`.

What this leaves out on purpose: the L2 cache in the roofline (one roof: HBM), kernel launch
overhead, and the fact that real kernels reach 60-80 % of either roof. FLOPs count a multiply-add
as 2; attention FLOPs count the two matmuls (4 N^2 d), as the FlashAttention papers do.

Example: on an H100 SXM in bf16 the ridge point is 989.4e12 / 3.35e12 = 295 FLOP/byte; softmax
(5 FLOPs per element, 2 bytes in and 2 out) sits at 1.25 FLOP/byte and can use at most 0.4 % of
the Tensor Cores' peak.

This file is long because it is the whole pure part of notebook 01, what `roofline.tables` prints
and the roofline explorer draws, one short section per part of the lecture; split by section, the
tables would import one notebook's numbers from four modules.
"""

from __future__ import annotations

import dataclasses
import functools
import textwrap
from dataclasses import dataclass

import numpy as np

from attnlab.validate import as_float, as_int
from attnlab.machine.hardware import (
    DTYPE_BYTES,
    attainable,
    dtype_name,
    get_gpu,
    gpus,
    peak,
    ridge_point,
    roofline_time,
)
from attnlab.core.iomodel import flash_io, standard_io
from attnlab.machine.models import get_model, linear_flops_per_token
from attnlab.explore._base import readonly

#: the widest line of a printed list (a URL, which cannot break, may be longer)
WIDTH = 100

__all__ = [
    "attention_share",
    "memory_levels",
    "spec_sources",
    "Operator",
    "operators",
    "RooflinePoints",
    "roofline_points",
    "fusion_traffic",
    "fusion_rows",
    "MEMORY_FIELDS",
    "I_MIN",
    "I_MAX",
    "GRID",
    "SOFTMAX_FLOPS",
    "as_dtype",
]

I_MIN, I_MAX = 0.1, 10_000.0  # FLOP/byte: the x range of every roofline drawn here
GRID = np.geomspace(I_MIN, I_MAX, 201)
GRID.setflags(write=False)
SOFTMAX_FLOPS = 5  # per element: max, subtract, exp, sum, scale by 1/l


#: A compute dtype name ('bf16', 'FP8', ...) as its key in hardware.DTYPE_BYTES.
as_dtype = dtype_name


# --- 1.1 attention's share of the work ---------------------------------------------------------


def attention_share(
    model="Llama-3-8B", Ns=(1024, 4096, 16384, 32768, 131072), dtype: str = "bf16"
) -> list[dict]:
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
    b = DTYPE_BYTES[as_dtype(dtype)]
    linear = linear_flops_per_token(m)
    rows = []
    for N in Ns:
        N = as_int("N", N, 1, None)
        attn = 4 * m.layers * m.q_heads * m.head_dim * (N + 1) / 2
        rows.append(
            {
                "N": N,
                "linear_flops": float(linear),
                "attn_flops": attn,
                "attn_share": attn / (attn + linear),
                "score_bytes": N * N * b,
                "kv_bytes": 2 * m.layers * m.kv_heads * m.head_dim * N * b,
            }
        )
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
    for name in gpus() if names is None else names:
        g = get_gpu(name)
        sram_bw = g.extra.get("sram_bandwidth")
        rows.append(
            {
                "gpu": g.name,
                "hbm_bytes": g.hbm_bytes,
                "hbm_bandwidth": g.hbm_bandwidth,
                "sram_per_sm": g.sram_per_sm,
                "sms": g.sms,
                "sram_total": g.sram_per_sm * g.sms,
                "l2_bytes": g.l2_bytes,
                "hbm_per_l2": g.hbm_bytes / g.l2_bytes,
                "sram_bandwidth": float(sram_bw) if sram_bw is not None else float("nan"),
            }
        )
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
    present = [
        f
        for f in fields
        if f in ("hbm_bytes", "hbm_bandwidth", "sms", "sram_per_sm", "l2_bytes") or f in g.extra
    ]
    lines = [g.name]
    used = sorted({i for f in present for i, s in enumerate(docs) if f in s["supports"]})
    for i in used:
        url = docs[i]["url"] or "(no URL: measured)"
        lines.append(
            textwrap.fill(
                f"[{i + 1}] {docs[i]['document']}", WIDTH, initial_indent="  ", subsequent_indent="      "
            )
            + f"\n      {url}"
        )
    cites = []
    for f in present:
        idx = [str(i + 1) for i, s in enumerate(docs) if f in s["supports"]]
        cites.append(f"{f} [{','.join(idx) if idx else 'none'}]")
    row = ""
    for c in cites:  # whole citations per line, lines of <= WIDTH
        if row and len(row) + 3 + len(c) > WIDTH - 2:
            lines.append("  " + row)
            row = ""
        row = f"{row}   {c}" if row else c
    lines.append("  " + row)
    return "\n".join(lines)


# --- 1.3 operators on the roofline --------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _operators(dtype: str, N: int, d: int, sram: int, matmul_n: int, context: int) -> tuple:
    b = DTYPE_BYTES[dtype]
    mm = 2 * matmul_n**3
    attn = 4 * N * N * d
    nn = N * N  # elementwise ops run over the N x N scores
    ops = (
        (
            "elementwise",
            "elementwise",
            f"elementwise op over {N}x{N}",
            float(nn),
            2 * nn * b,
            "1 FLOP per element; each element read and written once",
        ),
        (
            "softmax",
            "softmax",
            f"softmax over {N}x{N}",
            float(SOFTMAX_FLOPS * nn),
            2 * nn * b,
            f"{SOFTMAX_FLOPS} FLOPs per element (max, subtract, exp, sum, scale); read + write once",
        ),
        (
            "decode",
            "decode",
            f"decode attention, MHA, {context:,} keys",
            4.0 * context * d,
            (2 * context * d + 2 * d) * b,
            "4Ld FLOPs; K, V read once, q read, o written",
        ),
        (
            "standard",
            "std attn",
            f"standard attention, N={N:,}",
            float(attn),
            standard_io(N, d) * b,
            "4N²d FLOPs; Q, K, V, O once + S, P written and read back",
        ),
        (
            "flash",
            "FA",
            f"FlashAttention, N={N:,} (HBM model)",
            float(attn),
            flash_io(N, d, sram, "fa2") * b,
            f"4N²d FLOPs; flash_io, FA2 order, M={sram:,}: K, V re-read per Q block",
        ),
        (
            "matmul",
            "matmul",
            f"matmul {matmul_n}x{matmul_n}x{matmul_n}",
            float(mm),
            3 * matmul_n**2 * b,
            "2n³ FLOPs; A, B read and C written once",
        ),
        (
            "flash_l2",
            "FA, L2",
            f"FlashAttention, N={N:,} (L2 re-reads)",
            float(attn),
            4 * N * d * b,
            "4N²d FLOPs; Q, K, V read and O written once",
        ),
    )
    return tuple(Operator(k, sh, lab, f, float(by), f / by, how) for k, sh, lab, f, by, how in ops)


@dataclass(frozen=True)
class Operator:
    """One operator counted from first principles, and (once placed on a roofline) what it can
    reach there."""

    key: str  # 'softmax', 'flash', ...
    short: str  # plot label
    label: str  # table label
    flops: float
    bytes: float  # HBM bytes moved
    intensity: float  # FLOP/byte
    counted: str  # how, in words
    attainable: float = float("nan")  # FLOP/s on the roofline (nan until placed)
    fraction: float = float("nan")  # of the peak
    bound: str = ""  # 'memory-bound' or 'compute-bound'
    time_s: float = float("nan")  # the roofline's lower bound on its time


def operators(
    dtype: str = "bf16",
    *,
    N: int = 4096,
    d: int = 128,
    sram: int = 100_000,
    matmul_n: int = 4096,
    context: int = 4096,
) -> list[dict]:
    """Typical operators with FLOPs, HBM bytes and arithmetic intensity counted from first
    principles, for elements of `dtype` (DTYPE_BYTES bytes each), as frozen `Operator`s.

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
    dtype = as_dtype(dtype)
    N = as_int("N", N, 1, None)
    d = as_int("d", d, 1, None)
    sram = as_int("sram", sram, 4 * d, None)
    matmul_n = as_int("matmul_n", matmul_n, 1, None)
    context = as_int("context", context, 1, None)
    return _operators(dtype, N, d, sram, matmul_n, context)


def _verdict(intensity: float, ridge: float) -> str:
    return "memory-bound" if intensity < ridge else "compute-bound"


@dataclass(frozen=True)
class RooflinePoints:
    """Everything the roofline figure shows, as numbers."""

    gpu: str
    dtype: str
    peak: float  # FLOP/s
    bandwidth: float  # HBM bytes/s
    ridge: float  # peak / bandwidth, FLOP/byte
    grid: np.ndarray  # intensities I_MIN..I_MAX, log-spaced
    roof: np.ndarray  # attainable FLOP/s on the grid: min(peak, I x bandwidth)
    operators: tuple  # Operator, each placed on this roof
    user: Operator  # a kernel of the slider's intensity, placed the same way


def roofline_points(gpu="H100-SXM", dtype: str = "bf16", intensity: float = 10.0) -> RooflinePoints:
    """The roofline of `gpu` in `dtype`, the typical operators on it, and your kernel.

    ValueError names the value for an unknown GPU, a dtype the GPU has no peak for, or an
    intensity <= 0.

    >>> u = roofline_points("H100", "bf16", 10).user
    >>> round(u.attainable / 1e12, 1), u.bound
    (33.5, 'memory-bound')
    """
    g = get_gpu(gpu)
    dtype = as_dtype(dtype)
    p = peak(g, dtype)
    intensity = as_float("intensity", intensity, 0.0, None, lo_open=True)
    ridge = ridge_point(g, dtype)  # the roofline itself lives in hardware.py

    def place(o: Operator) -> Operator:
        att = attainable(o.intensity, g, dtype)
        return dataclasses.replace(
            o,
            attainable=att,
            fraction=att / p,
            bound=_verdict(o.intensity, ridge),
            time_s=roofline_time(o.flops, o.bytes, g, dtype),
        )

    user = Operator("user", "your kernel", "your kernel", intensity, 1.0, intensity, "slider")
    return RooflinePoints(
        g.name,
        dtype,
        p,
        g.hbm_bandwidth,
        ridge,
        GRID,
        readonly(attainable(GRID, g, dtype)),
        tuple(place(o) for o in operators(dtype)),
        place(user),
    )


# --- why fusion ---------------------------------------------------------------------------------


def fusion_traffic(
    k: int, N: int = 32768, gpu="H100-SXM", dtype: str = "bf16", flops_per_element: float = 1.0
) -> dict:
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
    dtype = as_dtype(dtype)
    g = get_gpu(gpu)
    fpe = as_float("flops_per_element", flops_per_element, 0.0, None)
    b = DTYPE_BYTES[dtype]
    per_kernel_bytes = 2 * N * N * b
    per_kernel_flops = fpe * N * N
    unfused_s = k * roofline_time(per_kernel_flops, per_kernel_bytes, g, dtype)
    fused_s = roofline_time(k * per_kernel_flops, per_kernel_bytes, g, dtype)
    return {
        "k": k,
        "N": N,
        "gpu": g.name,
        "dtype": dtype,
        "unfused_bytes": k * per_kernel_bytes,
        "fused_bytes": per_kernel_bytes,
        "unfused_s": unfused_s,
        "fused_s": fused_s,
        "speedup": unfused_s / fused_s,
    }


def fusion_rows(ks=(1, 2, 3, 4, 6, 8), N: int = 32768, gpu="H100-SXM", dtype: str = "bf16") -> list[dict]:
    """`fusion_traffic` for each k in `ks` (one row each)."""
    return [fusion_traffic(k, N, gpu, dtype) for k in ks]
