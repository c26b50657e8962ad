"""What standard attention costs a real prefill (notebook 02, §2.3-2.4): time and memory of one
prefill of a model on a GPU against the prompt length, where the extra traffic overtakes compute,
and how much one headline ratio depends on what is counted.

Pure parts: `prefill_curves` -> PrefillCurves; `max_fitting_n`, `crossover_rows`,
`ratio_conventions`; text tables `prefill_table`, `crossover_table`, `conventions_table`.
The time model is `models.prefill_cost`'s (see its docstring: one accounting for both
implementations, every kernel at its roofline): this module only evaluates it over many N at once.
What it leaves out on purpose: sliding windows and soft-capping, L2 hits, kernel launches, the KV
cache and the weights' own memory.

This file is long because the curves, the crossover and the ratio under other conventions are three
readings of the one cost model (`models.prefill_cost`) for the same reshaped model
(`with_head_dim`), and each table sits beside the numbers it prints.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from attnlab.validate import as_int, choice
from attnlab.core.attention import block_sizes
from attnlab.machine.hardware import DTYPE_BYTES, get_gpu, gpus, peak, ridge_point
from attnlab.machine.models import Model, get_model, models, prefill_cost, prefill_cost_curve
from attnlab.explore import style
from attnlab.explore._base import readonly

__all__ = [
    "dense_models",
    "dense_model",
    "with_head_dim",
    "PrefillCurves",
    "prefill_curves",
    "max_fitting_n",
    "crossover_rows",
    "crossover_table",
    "ratio_conventions",
    "conventions_table",
    "prefill_table",
    "binary_bytes",
    "HEAD_DIMS",
    "N_STEPS",
    "N_GRID",
    "SRAM",
    "DTYPE",
    "TIME_LIM",
    "MEM_LIM",
]

binary_bytes = style.binary_bytes

HEAD_DIMS = (64, 128, 256)
N_STEPS = tuple(1024 << k for k in range(8))  # 1K .. 128K, the slider's stops
N_GRID = readonly(np.unique(np.round(1024 * 2 ** (np.arange(0, 29) / 4)).astype(np.int64)))
SRAM = 100_000  # elements, the lecture's M
DTYPE = "bf16"
_CROSS_GRID = np.unique(np.round(2 ** (8 + np.arange(0, 14 * 32 + 1) / 32)).astype(np.int64))
TIME_LIM = (1e-4, 2e3)  # seconds; every setting fits (tests check)
MEM_LIM = (2.0**16, 2.0**44)  # bytes: 64 KiB .. 16 TiB


def dense_models() -> list[str]:
    """Models with a dense per-head attention shape: all of models() except MLA entries
    (DeepSeek-V3 is stored as its decode-time equivalent, head_dim 576, not its prefill shape)."""
    return [m for m in models() if "kv_lora_rank" not in get_model(m).extra]


def dense_model(model) -> Model:
    """get_model(model), refused by name when it has no dense prefill shape (MLA)."""
    m = get_model(model)
    if "kv_lora_rank" in m.extra:
        raise ValueError(
            f"model={m.name!r} has no dense attention shape for prefill (MLA, stored as "
            f"its decode-time equivalent); valid: {', '.join(dense_models())}"
        )
    return m


def with_head_dim(model, head_dim: int) -> Model:
    """The model with head dim `head_dim`, keeping the attention width q_heads x head_dim (and
    kv_heads x head_dim) fixed, so parameters and attention FLOPs stay the same and only the
    split into heads changes. Llama-3-8B (32 x 128) at d = 64 has 64 query heads, at d = 256 16."""
    m = dense_model(model)
    d = choice("head_dim", head_dim, HEAD_DIMS)
    width, kv_width = m.q_heads * m.head_dim, m.kv_heads * m.head_dim
    if width % d or kv_width % d:
        raise ValueError(
            f"head_dim={d} does not divide {m.name}'s attention width {width} "
            f"(KV width {kv_width}); valid: {', '.join(map(str, HEAD_DIMS))}"
        )
    if d == m.head_dim:
        return m
    return dataclasses.replace(m, q_heads=width // d, kv_heads=kv_width // d, head_dim=d)


def _crossover(m: Model, g, key: str = "extra_io_s") -> float | None:
    """N (tokens) where `prefill_cost_curve`'s `key` (standard attention's extra time by default)
    first equals the compute time, interpolated on a 32-points-per-octave grid from 256 to 4M;
    None if it never does there."""
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


@dataclass(frozen=True)
class PrefillCurves:
    """One prefill of N tokens with standard attention and with FlashAttention against
    N = 1K .. 128K (arrays on the grid N) and the same numbers at N = n (the `at_n` dict), by
    `models.prefill_cost`'s one accounting (each kernel at its roofline). Times in seconds,
    memory in bytes."""

    model: str
    gpu: str
    head_dim: int  # the head dim used (the model's own unless reshaped)
    own_head_dim: int  # the model's published head dim
    heads: int  # query heads at this head dim
    layers: int
    hbm_bytes: float  # the GPU's HBM capacity
    block_c: int  # FA1's K/V block at M = SRAM
    N: np.ndarray
    compute_s: np.ndarray  # matmuls at peak
    standard_s: np.ndarray  # the prefill with standard attention
    flash_s: np.ndarray  # the prefill with FlashAttention
    extra_s: np.ndarray  # standard_s - flash_s, never negative
    extra_raw_s: np.ndarray  # standard_s - flash_s, signed
    flash_io_s: np.ndarray  # FlashAttention's own traffic time (FA1, causal skipping, no L2)
    sp_bytes: np.ndarray  # S and P of one layer
    ml_bytes: np.ndarray  # FlashAttention's m and l (fp32) of one layer
    at_n: dict  # the arrays' values at N = n, plus N, total_ratio, fits
    crossover_n: float | None  # where the extra time reaches compute (None: not below 4M tokens)

    @property
    def reshaped(self) -> bool:
        return self.head_dim != self.own_head_dim


def prefill_curves(
    model: str = "Llama-3-8B", gpu: str = "H100-SXM", head_dim: int | None = None, n: int = 32768
) -> PrefillCurves:
    """One prefill with standard attention and with FlashAttention against N, and at N = n
    (bf16, M = 100,000), every kernel at its roofline (`models.prefill_cost`):

        compute_s   = (2 params N + 2 layers heads N^2 d) / peak
        flash_s     = 2 params N / peak + max(attention FLOPs / peak, flash_io_s)
        standard_s  = 2 params N / peak + Algorithm 0's three kernels, each max(FLOPs/peak, bytes/BW)
        extra_s     = max(0, standard_s - flash_s)

    `head_dim=None` keeps the model's own; another value reshapes it keeping q_heads x head_dim
    (`with_head_dim`).

    >>> r = prefill_curves("Llama-3-8B", "H100-SXM", n=32768)
    >>> round(r.at_n["total_ratio"], 2), r.at_n["fits"]
    (2.66, False)
    """
    own = dense_model(model)
    m = with_head_dim(model, own.head_dim if head_dim is None else head_dim)
    g = get_gpu(gpu)
    n = as_int("n", n, N_STEPS[0], N_STEPS[-1])
    Ns = np.append(N_GRID, n)
    r = prefill_cost_curve(m, g, Ns, sram=SRAM, dtype=DTYPE)
    ml = m.q_heads * Ns.astype(np.float64) * 2 * 4
    curves = {
        "compute_s": r["compute_s"],
        "standard_s": r["standard_s"],
        "flash_s": r["flash_s"],
        "extra_s": r["extra_io_s"],
        "extra_raw_s": r["standard_s"] - r["flash_s"],
        "flash_io_s": r["flash_io_s"],
        "sp_bytes": r["sp_bytes_per_layer"],
        "ml_bytes": ml,
    }
    point = {k: float(v[-1]) for k, v in curves.items()}
    point.update(N=n, total_ratio=float(r["total_ratio"][-1]), fits=bool(point["sp_bytes"] <= g.hbm_bytes))
    _, bc = block_sizes(m.head_dim, SRAM)
    return PrefillCurves(
        m.name,
        g.name,
        m.head_dim,
        own.head_dim,
        m.q_heads,
        m.layers,
        float(g.hbm_bytes),
        bc,
        N_GRID,
        *readonly(*(v[:-1] for v in curves.values())),
        point,
        _crossover(m, g),
    )


def max_fitting_n(model, gpu, dtype: str = DTYPE) -> int:
    """The largest N whose S and P for all heads of one layer fit in the GPU's HBM:
    2 q_heads N^2 bytes_per_element <= hbm_bytes (nothing else counted: no weights, no KV cache).

    Example: Llama-3-8B on an 80 GiB H100: floor(sqrt(80 GiB / (2 x 32 x 2))) = 25,905 tokens.
    """
    m = dense_model(model)
    g = get_gpu(gpu)
    bpe = DTYPE_BYTES[choice("dtype", dtype, tuple(DTYPE_BYTES))]
    n = math.isqrt(int(g.hbm_bytes // (2 * m.q_heads * bpe)))
    while 2 * m.q_heads * (n + 1) ** 2 * bpe <= g.hbm_bytes:  # guard the integer rounding
        n += 1
    return n


def crossover_rows(
    model: str = "Llama-3-8B", head_dim: int | None = None, names=None, n: int = 32768
) -> list[dict]:
    """Per GPU, for one prefill of `model` (`with_head_dim` if `head_dim` is given): the bf16
    ridge point, the prompt length where standard attention's extra time reaches the compute
    time ('extra_n'; None where it never does below 4M tokens) and standard / FlashAttention at
    N = n ('ratio'), by `models.prefill_cost`'s accounting.

    Example: Llama-3-8B on the H100 SXM: extra_n about 11,200 tokens, ratio 2.66 at 32K.
    """
    m = dense_model(model) if head_dim is None else with_head_dim(model, head_dim)
    n = as_int("n", n, 1, N_STEPS[-1])
    rows = []
    for name in gpus() if names is None else names:
        g = get_gpu(name)
        rows.append(
            {
                "gpu": g.name,
                "ridge": ridge_point(g, DTYPE),
                "extra_n": _crossover(m, g),
                "ratio": prefill_cost(m, g, n, sram=SRAM, dtype=DTYPE).total_ratio,
            }
        )
    return rows


def crossover_table(model: str = "Llama-3-8B", head_dim: int | None = None) -> str:
    """`crossover_rows` as a text table."""
    k = lambda v: "never" if v is None else f"{round(v, -2):,.0f}"  # noqa: E731
    return style.table(
        crossover_rows(model, head_dim),
        {
            "gpu": "GPU",
            "ridge": "ridge (bf16, FLOP/B)",
            "extra_n": "extra = compute at N",
            "ratio": "standard / FlashAttn at 32K",
        },
        {"ridge": ".0f", "extra_n": k, "ratio": ".2f"},
    )


def ratio_conventions(model: str = "Llama-3-8B", gpu: str = "H100-SXM", N: int = 32768) -> list[dict]:
    """The standard / FlashAttention prefill ratio of `prefill_cost` (bf16, M = 100,000) under
    other choices of what counts, to show how much a single number like the lecture's
    "about 2.5x" depends on them. One row per convention, changing one thing each:

        ours              prefill_cost: every kernel at its roofline; FlashAttention's traffic
                          FA1 order, the lecture's tile rule, masked blocks skipped
        hidden            FlashAttention's own traffic assumed hidden under its compute
                          (flash time = compute_s), the accounting the lecture's numbers suggest
        no skipping       FlashAttention's traffic counted without causal block skipping
        FA2 own tiles     FA2 order with its own tile rule (B_r = ceil(M/4d)), masked blocks skipped
        no embedding      linear FLOPs without the input embedding (2 x vocab x hidden per token)

    Each row: convention, standard_s, flash_s, ratio = standard_s / flash_s.
    """
    m = dense_model(model)
    g = get_gpu(gpu)
    N = as_int("N", N, 1, N_STEPS[-1])
    cost = lambda **kw: prefill_cost(m, g, N, sram=SRAM, dtype=DTYPE, **kw)  # noqa: E731
    base = cost()
    embed = 2 * m.vocab * m.hidden * N / peak(g, DTYPE)
    variants = [
        (
            "ours: each kernel at its roofline; FA1 traffic, masked blocks skipped",
            base.standard_s,
            base.flash_s,
        ),
        ("FlashAttention's traffic assumed hidden under its compute", base.standard_s, base.compute_s),
        (
            "FlashAttention's traffic without causal block skipping",
            base.standard_s,
            cost(causal_skip=False).flash_s,
        ),
        (
            "FA2 order with its own tiles (B_r = ceil(M/4d))",
            base.standard_s,
            cost(order="fa2", rule="fa2").flash_s,
        ),
        (
            "linear FLOPs without the input embedding (a lookup)",
            base.standard_s - embed,
            base.flash_s - embed,
        ),
    ]
    return [{"convention": c, "standard_s": t, "flash_s": f, "ratio": t / f} for c, t, f in variants]


def conventions_table(model: str = "Llama-3-8B", gpu: str = "H100-SXM", N: int = 32768) -> str:
    """`ratio_conventions` as a text table."""
    return style.table(
        ratio_conventions(model, gpu, N),
        {"convention": "what changes", "standard_s": "standard", "flash_s": "FlashAttn", "ratio": "ratio"},
        {"standard_s": style.seconds, "flash_s": style.seconds, "ratio": ".2f"},
    )


def prefill_table(model: str = "Llama-3-8B", gpu: str = "H100-SXM", Ns=N_STEPS) -> str:
    """`models.prefill_cost` at each N as a text table: compute at peak, the prefill with
    FlashAttention and with standard attention, the extra time over compute, their ratio, S+P of
    one layer and whether it fits in the GPU's HBM."""
    g = get_gpu(gpu)
    rows = []
    for N in Ns:
        c = prefill_cost(model, g, int(N), sram=SRAM, dtype=DTYPE)
        rows.append(
            {
                "N": c.N,
                "compute": c.compute_s,
                "flash": c.flash_s,
                "standard": c.standard_s,
                "extra/compute": c.extra_io_s / c.compute_s,
                "ratio": c.total_ratio,
                "sp": c.sp_bytes_per_layer,
                "fits": c.fits,
            }
        )
    return style.table(
        rows,
        {
            "N": "N",
            "compute": "compute",
            "flash": "FlashAttn",
            "standard": "standard",
            "extra/compute": "extra/compute",
            "ratio": "std / FlashAttn",
            "sp": "S+P per layer",
            "fits": f"fits {binary_bytes(g.hbm_bytes)}",
        },
        {
            "N": ",",
            "compute": style.seconds,
            "flash": style.seconds,
            "standard": style.seconds,
            "extra/compute": ".2f",
            "ratio": ".2f",
            "sp": binary_bytes,
            "fits": lambda f: "yes" if f else "no",
        },
    )
