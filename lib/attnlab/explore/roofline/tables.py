"""Notebook 01's text tables (reproducible under strict nbval): the numbers of `roofline.numbers`
laid out for reading."""

from __future__ import annotations

import dataclasses
import math

from attnlab.machine.hardware import DTYPE_BYTES, get_gpu, gpus, peak
from attnlab.explore import style
from attnlab.explore.roofline.numbers import attention_share, fusion_rows, memory_levels, roofline_points

__all__ = [
    "share_table",
    "memory_table",
    "paper_a100",
    "ridge_table",
    "operator_table",
    "fusion_table",
    "intensity_label",
]


def intensity_label(x: float) -> str:
    """Intensity for a label: '0.25', '1.25', '62.1', '1,365'."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def share_table(model="Llama-3-8B", Ns=(1024, 4096, 16384, 32768, 131072), dtype: str = "bf16") -> str:
    """`attention_share` as a text table: FLOPs per token, attention's share, S and KV sizes."""
    return style.table(
        attention_share(model, Ns, dtype),
        {
            "N": "N (tokens)",
            "linear_flops": "linear GFLOP/tok",
            "attn_flops": "attention GFLOP/tok",
            "attn_share": "attn share",
            "score_bytes": "S, one head",
            "kv_bytes": "KV read per decode step",
        },
        {
            "N": ",",
            "linear_flops": lambda x: f"{x / 1e9:.2f}",
            "attn_flops": lambda x: f"{x / 1e9:.2f}",
            "attn_share": ".1%",
            "score_bytes": style.binary_bytes,
            "kv_bytes": style.binary_bytes,
        },
    )


def memory_table(names=None) -> str:
    """`memory_levels` as a text table (binary units for sizes, decimal TB/s for bandwidth; HBM is
    the capacity nvidia-smi reports where gpus.json has it, so '80 GB' parts show about 80 GiB)."""
    return style.table(
        memory_levels(names),
        {
            "gpu": "GPU",
            "hbm_bytes": "HBM",
            "hbm_bandwidth": "HBM bandwidth",
            "sram_per_sm": "SRAM per SM",
            "sms": "SMs",
            "sram_total": "all SMs",
            "l2_bytes": "L2",
            "hbm_per_l2": "HBM / L2",
            "sram_bandwidth": "SRAM BW",
        },
        {
            "hbm_bytes": lambda x: f"{x / 2**30:.1f} GiB",
            "hbm_bandwidth": lambda x: f"{x / 1e12:.2f} TB/s",
            "sram_per_sm": lambda x: f"{x / 2**10:.0f} KiB",
            "sram_total": lambda x: f"{x / 2**20:.2f} MiB",
            "l2_bytes": lambda x: f"{x / 2**20:.0f} MiB",
            "hbm_per_l2": lambda x: f"{x:,.0f}x",
            "sram_bandwidth": lambda x: "no source" if math.isnan(x) else f"~{x / 1e12:.0f} TB/s",
        },
    )


def paper_a100() -> str:
    """The FlashAttention paper's A100 figures (its Section 2.1, stored in gpus.json) and the two
    ratios they imply: SRAM is about 10x faster than HBM and about 4,000x smaller."""
    g = get_gpu("A100-80GB-SXM")
    fp = g.extra["flashattention_paper"]
    (c0, c1), (b0, b1) = fp["hbm_bytes_range"], fp["hbm_bandwidth_range"]
    sram_total = fp["sram_per_sm"] * fp["sms"]
    sram_bw = fp["sram_bandwidth"]
    return "\n".join(
        [
            f"FlashAttention paper, A100: HBM {c0 / 1e9:.0f}-{c1 / 1e9:.0f} GB at "
            f"{b0 / 1e12:.1f}-{b1 / 1e12:.1f} TB/s; SRAM {fp['sram_per_sm'] // 1024} KB on each of "
            f"{fp['sms']} SMs at ~{sram_bw / 1e12:.0f} TB/s",
            f"SRAM bandwidth / HBM bandwidth: {sram_bw / b1:.1f}x to {sram_bw / b0:.1f}x "
            f"({sram_bw / g.hbm_bandwidth:.1f}x against the 80GB SXM's {g.hbm_bandwidth / 1e12:.3f} TB/s)",
            f"HBM capacity / SRAM capacity: {g.hbm_bytes:,} / {sram_total:,} bytes "
            f"= {g.hbm_bytes / sram_total:,.0f}x",
        ]
    )


def ridge_table(names=None) -> str:
    """Ridge points (FLOP/byte) of every chip and dtype; '-' where the chip lacks the dtype."""
    dts = list(DTYPE_BYTES)
    rows = []
    for name in gpus() if names is None else names:
        g = get_gpu(name)
        rows.append(
            {"gpu": g.name, **{dt: (peak(g, dt) / g.hbm_bandwidth if dt in g.dtypes else None) for dt in dts}}
        )
    used = [dt for dt in dts if any(r[dt] is not None for r in rows)]
    return style.table(
        rows,
        {"gpu": "GPU", **{dt: dt for dt in used}},
        {dt: (lambda x: "-" if x is None else f"{x:.1f}") for dt in used},
    )


def operator_table(gpu="H100-SXM", dtype: str = "bf16") -> str:
    """The operators of `roofline_points` as a text table: FLOPs, bytes, intensity, the roofline's
    attainable throughput and lower bound on time, and the verdict."""
    r = roofline_points(gpu, dtype)
    return (
        "bytes: to and from HBM; TFLOP/s: attainable under the roofline; time: its lower bound\n"
        + style.table(
            [dataclasses.asdict(o) for o in r.operators],
            {
                "label": "operator",
                "flops": "FLOPs",
                "bytes": "bytes",
                "intensity": "FLOP/B",
                "attainable": "TFLOP/s",
                "fraction": "of peak",
                "time_s": "time >=",
                "bound": "bound",
            },
            {
                "label": str,
                "flops": lambda x: style.si(x),
                "bytes": lambda x: style.si(x, "B"),
                "intensity": intensity_label,
                "attainable": lambda x: f"{x / 1e12:,.1f}",
                "fraction": lambda x: f"{100 * x:.1f}%",
                "time_s": style.seconds,
                "bound": lambda v: v.replace("-bound", ""),
            },
        )
    )


def fusion_table(ks=(1, 2, 3, 4, 6, 8), N: int = 32768, gpu="H100-SXM", dtype: str = "bf16") -> str:
    """`fusion_rows` as a text table."""
    return style.table(
        fusion_rows(ks, N, gpu, dtype),
        {
            "k": "k kernels",
            "unfused_bytes": "HBM bytes unfused",
            "fused_bytes": "fused",
            "unfused_s": "time unfused",
            "fused_s": "fused",
            "speedup": "saving",
        },
        {
            "unfused_bytes": style.binary_bytes,
            "fused_bytes": style.binary_bytes,
            "unfused_s": style.seconds,
            "fused_s": style.seconds,
            "speedup": lambda x: f"{x:.1f}x",
        },
    )
