"""Decode intensity (notebook 04, §4.1): one KV head's FLOP/byte grows with the group size g and
the queries per step, never with the batch; where that sits on the bf16 roofline.

Pure part: `decode_intensity(g, l_qo, l_kv, batch, gpu)` -> DecodeIntensity, with FLOPs, bytes
and intensity from `attnlab.core.decode` and the roof from `attnlab.machine.hardware`.

This file is long because the explorer's roofline places the same `DecodeIntensity` the two tables
print (decode attention, the MHA / GQA / MLA references and a linear layer for contrast), and its
artists, made once for blitting, are most of the lines.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.validate import as_int
from attnlab.core.decode import decode_cost, intensity
from attnlab.machine.hardware import attainable, get_gpu, gpus, peak
from attnlab.machine.models import get_model
from attnlab.explore import style
from attnlab.explore._base import Explorer, readonly
from attnlab.explore._controls import dropdown, slider, steps

__all__ = [
    "DecodeIntensity",
    "decode_intensity",
    "intensity_table",
    "batch_table",
    "IntensityExplorer",
    "GROUPS",
    "BATCHES",
    "L_KV_STEPS",
    "LINEAR_N",
    "REFERENCES",
]

GROUPS = (1, 2, 4, 8, 16, 32, 64, 128)  # query heads per KV head
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
L_KV_MIN, L_KV_MAX = 128, 131072
L_KV_STEPS = [1 << k for k in range(7, 18)]  # 128 ... 131072: 8192 stays reachable
I_LIM = (0.5, 5000.0)  # FLOP/byte: every slider setting fits
TFLOPS_LIM = (0.5, 5000.0)  # TFLOP/s: every GPU's bf16 roof fits
LINEAR_N = 4096  # the contrast: a 4096 x 4096 linear layer
REFERENCES = (("MHA", 1), ("GQA g=8", 8), ("MLA, g=128 view", 128))
CURVE_L = readonly(np.geomspace(L_KV_MIN, L_KV_MAX, 61))
ROOF_GRID = readonly(np.geomspace(*I_LIM, 121))


@dataclass(frozen=True)
class DecodeIntensity:
    """Decode attention of one KV head and its g query heads, over a whole batch, in bf16."""

    g: int
    l_qo: int
    l_kv: int
    batch: int
    gpu: str
    head_dim: int
    intensity: float  # FLOP/byte, independent of the batch
    flops: float  # whole batch
    bytes: float  # whole batch
    ridge: float  # bf16 peak / bandwidth
    peak: float  # FLOP/s
    bandwidth: float  # bytes/s
    attainable: float  # FLOP/s on the roof at this intensity
    refs: dict  # "MHA" / "GQA g=8" / "MLA, g=128 view" -> intensity at the same l_qo, l_kv
    linear: float  # a LINEAR_N x LINEAR_N bf16 linear layer on the batch's tokens
    refs_attainable: dict  # label -> attainable FLOP/s of each reference on the roof
    linear_attainable: float  # attainable FLOP/s of the linear layer
    curve_l: np.ndarray  # context lengths
    curve_i: np.ndarray  # intensity against them at this g, l_qo
    roof_i: np.ndarray  # the roofline's grid of intensities ...
    roof: np.ndarray  # ... and attainable FLOP/s on it

    @property
    def asymptote(self) -> float:
        return float(self.g * self.l_qo)

    @property
    def fraction(self) -> float:
        return self.attainable / self.peak

    @property
    def bound(self) -> str:
        return "memory-bound" if self.intensity < self.ridge else "compute-bound"


def decode_intensity(
    g: int = 8, l_qo: int = 1, l_kv: int = 8192, batch: int = 1, gpu="H100-SXM", head_dim: int = 128
) -> DecodeIntensity:
    """One KV head with its g query heads for a batch of requests, bf16. FLOPs and bytes per
    request come from `attnlab.core.decode.decode_cost`; a batch multiplies both (no two requests
    share KV), so the intensity does not depend on it. For contrast, a linear layer with
    LINEAR_N x LINEAR_N bf16 weights on the batch's B tokens reaches B n / (n + 2B).

    >>> r = decode_intensity(8, 1, 8192)
    >>> round(r.intensity, 2), f"{r.intensity / r.ridge:.1%}", r.bound
    (7.99, '2.7%', 'memory-bound')
    """
    g = as_int("g", g, 1, None)
    l_qo = as_int("l_qo", l_qo, 1, None)
    l_kv = as_int("l_kv", l_kv, 1, None)
    batch = as_int("batch", batch, 1, None)
    head_dim = as_int("head_dim", head_dim, 1, None)
    G = get_gpu(gpu)
    flops, nbytes = decode_cost(g, l_qo, l_kv, head_dim, batch=batch)
    i = intensity(g, l_qo, l_kv)
    p = peak(G, "bf16")
    refs = {lab: float(intensity(gr, l_qo, l_kv)) for lab, gr in REFERENCES}
    linear = batch * LINEAR_N / (LINEAR_N + 2.0 * batch)
    return DecodeIntensity(
        g,
        l_qo,
        l_kv,
        batch,
        G.name,
        head_dim,
        float(i),
        float(flops),
        float(nbytes),
        p / G.hbm_bandwidth,
        p,
        G.hbm_bandwidth,
        float(attainable(i, G, "bf16")),
        refs,
        linear,
        {lab: float(attainable(x, G, "bf16")) for lab, x in refs.items()},
        float(attainable(linear, G, "bf16")),
        CURVE_L,
        readonly(intensity(g, l_qo, CURVE_L)),
        ROOF_GRID,
        readonly(attainable(ROOF_GRID, G, "bf16")),
    )


def intensity_table(l_kv: int = 8192, gpu="H100-SXM") -> str:
    """Decode intensity at `l_kv` for MHA, Llama-3-8B, Llama-3-70B and MLA (DeepSeek-V3 as g = 128),
    against the bf16 ridge point of `gpu`."""
    cases = [("MHA (every query head has its own KV)", 1)]
    for name in ("Llama-3-8B", "Llama-3-70B", "DeepSeek-V3"):
        m = get_model(name)
        label = f"{name} (MLA, gqa_view: g = 128)" if name == "DeepSeek-V3" else f"{name} (GQA)"
        cases.append((label, m.group))
    rows = []
    for label, g in cases:
        r = decode_intensity(g, 1, l_kv, 1, gpu)
        rows.append(
            {
                "case": label,
                "g": g,
                "i": r.intensity,
                "ridge": r.intensity / r.ridge,
                "att": r.attainable,
                "bound": r.bound,
            }
        )
    ridge = decode_intensity(1, 1, l_kv, 1, gpu).ridge
    head = f"context l_kv = {l_kv:,}, one query per step; {get_gpu(gpu).name} bf16 ridge point = {ridge:.0f} FLOP/byte\n"
    return head + style.table(
        rows,
        {
            "case": "model",
            "g": "g",
            "i": "FLOP/byte",
            "ridge": "of ridge",
            "att": "attainable",
            "bound": "bound by",
        },
        {
            "case": str,
            "i": lambda x: f"{x:.1f}" if x < 100 else f"{x:.0f}",
            "ridge": ".1%",
            "att": lambda x: f"{x / 1e12:.1f} TFLOP/s",
            "bound": str,
        },
    )


def batch_table(g: int = 8, l_kv: int = 8192, batches=(1, 16, 256), gpu="H100-SXM") -> str:
    """FLOPs, bytes and intensity of one layer's decode attention (one KV head) for several batch
    sizes: FLOPs and bytes grow with the batch, their ratio does not."""
    rows = [vars(decode_intensity(g, 1, l_kv, b, gpu)) for b in batches]
    return style.table(
        rows,
        {
            "batch": "batch",
            "flops": "FLOPs",
            "bytes": "HBM bytes",
            "intensity": "FLOP/byte",
            "linear": f"linear {LINEAR_N}x{LINEAR_N}: FLOP/byte",
        },
        {
            "flops": lambda x: style.si(x),
            "bytes": lambda x: style.si(x, "B"),
            "intensity": ".2f",
            "linear": ".1f",
        },
    )


class IntensityExplorer(Explorer):
    """Controls: group size g, queries per step l_qo (speculative tokens), context l_kv, batch;
    GPU.

    Left: the bf16 roofline with decode attention (star), MHA / GQA g=8 / MLA in the lecture's
    g = 128 view at the same l_qo and l_kv, and a linear layer on the same batch for contrast: batch moves the linear
    layer, never the attention point. Right: intensity against l_kv for this g and l_qo, its
    asymptote g l_qo and the ridge point. Both panels have fixed axes.
    """

    name = "intensity"
    size = (style.WIDTH, 4.4)

    def __init__(self, g: int = 8, l_qo: int = 1, l_kv: int = 8192, batch: int = 1, gpu: str = "H100-SXM"):
        super().__init__(g=g, l_qo=l_qo, l_kv=l_kv, batch=batch, gpu=get_gpu(gpu).name)

    def controls(self):
        return {
            "g": steps("group size g (query heads per KV head)", GROUPS, 8),
            "l_qo": slider("queries per step l_qo", 1, 1, 16),
            "l_kv": steps("context l_kv (tokens)", L_KV_STEPS, 8192),
            "batch": steps("batch (requests)", BATCHES, 1),
            "gpu": dropdown("GPU", gpus(), "H100-SXM"),
        }

    def compute(self, g, l_qo, l_kv, batch, gpu):
        return decode_intensity(g, l_qo, l_kv, batch, gpu)

    def build(self, fig):
        ax_r, ax_l = self.ax_r, self.ax_l = fig.subplots(1, 2)
        c = style.COLORS
        style.log_axis(ax_r, "x", *I_LIM)
        style.log_axis(ax_r, "y", *TFLOPS_LIM)
        style.log_axis(ax_l, "x", L_KV_MIN / 1.25, L_KV_MAX * 1.25, ticks=[128, 1024, 8192, 65536])
        style.log_axis(ax_l, "y", *I_LIM)
        for ax in (ax_r, ax_l):
            ax.grid(True, alpha=0.25)
        ax_r.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax_r.set_ylabel("attainable bf16 throughput (TFLOP/s)")
        ax_l.set_xlabel("context l_kv (tokens)")
        ax_l.set_ylabel("intensity (FLOP/byte)")
        (self.roof,) = ax_r.plot([], [], color="k", lw=2, label="roof: min(peak, I × BW)")
        self.ridge_v = ax_r.axvline(1, color=c["bound"], ls="--", lw=1, label="ridge point")
        self.refs = {
            lab: ax_r.plot([], [], "o", ms=6, mfc="white", mec=c["fa1"], mew=1.5)[0] for lab, _ in REFERENCES
        }
        self.ref_txt = {
            lab: ax_r.text(0, 0, lab, fontsize=style.SMALL, color=c["fa1"], ha="left", va="top")
            for lab, _ in REFERENCES
        }
        (self.linear,) = ax_r.plot(
            [], [], "s", ms=7, color=c["compute"], mec="k", mew=0.5, label=f"linear {LINEAR_N}², same batch"
        )
        (self.star,) = ax_r.plot(
            [], [], "*", ms=15, color=c["highlight"], mec="k", mew=0.8, label="decode attention (you)"
        )
        (ref_key,) = ax_r.plot(
            [], [], "o", ms=6, mfc="white", mec=c["fa1"], mew=1.5, label="MHA / GQA / MLA, same l_kv"
        )
        style.legend_below(ax_r)
        (self.curve,) = ax_l.plot([], [], color=c["fa1"], lw=2, label="I = g·l_qo·l_kv / (g·l_qo + l_kv)")
        self.asym = ax_l.axhline(1, color=c["fa1"], ls=":", lw=1, label="asymptote g × l_qo")
        self.ridge_h = ax_l.axhline(1, color=c["bound"], ls="--", lw=1, label="ridge point (bf16)")
        (self.dot,) = ax_l.plot([], [], "*", ms=14, color=c["highlight"], mec="k", mew=0.8)
        style.legend_below(ax_l)
        return [
            self.roof,
            self.ridge_v,
            *self.refs.values(),
            *self.ref_txt.values(),
            self.linear,
            self.star,
            self.curve,
            self.asym,
            self.ridge_h,
            self.dot,
            ax_r.title,
            ax_l.title,
        ]

    def draw(self, r: DecodeIntensity) -> str:
        tf = 1e12
        self.roof.set_data(r.roof_i, r.roof / tf)
        self.ridge_v.set_xdata([r.ridge] * 2)
        for lab, _ in REFERENCES:
            x, y = r.refs[lab], r.refs_attainable[lab] / tf
            self.refs[lab].set_data([x], [y])
            self.ref_txt[lab].set_position((x * 1.2, y / 1.3))
        self.linear.set_data([r.linear], [r.linear_attainable / tf])
        self.star.set_data([r.intensity], [r.attainable / tf])
        self.curve.set_data(r.curve_l, r.curve_i)
        self.asym.set_ydata([r.asymptote] * 2)
        self.ridge_h.set_ydata([r.ridge] * 2)
        self.dot.set_data([r.l_kv], [r.intensity])
        self.ax_r.set_title(
            f"bf16 roofline, {r.gpu}\ng={r.g}, l_qo={r.l_qo}, l_kv={r.l_kv:,}, batch {r.batch}"
        )
        self.ax_l.set_title(f"intensity against context\ng={r.g}, l_qo={r.l_qo}; ridge {r.ridge:.0f}")
        return (
            f"Decode attention: <b>{r.intensity:.1f} FLOP/byte</b> (asymptote g × l_qo = "
            f"{r.asymptote:.0f}), {r.intensity / r.ridge:.1%} of the ridge point "
            f"({r.ridge:.0f}): {r.bound}, at most {r.attainable / tf:.1f} TFLOP/s "
            f"({r.fraction:.1%} of peak). Batch {r.batch}: {style.si(r.flops)}FLOP over "
            f"{style.si(r.bytes, 'B')} per KV head, {r.batch}× one request's FLOPs <i>and</i> "
            f"bytes, so the same ratio; the linear layer on the same batch reaches {r.linear:.1f}."
        )
