"""MLA decode on the roofline (notebook 06, §6): the absorbed and the materialised form against
MHA and GQA, on every GPU of data/gpus.json, as intensity and as a share of the ridge point.

`mla_verdicts` and `mla_statement` are the course's one statement of MLA decode intensity: each
form of `attnlab.core.mla` named, with its verdict against each GPU's ridge point (the verdict needs
the machine, so it lives here and not in the layer-1 `attnlab.core.mla`).

Pure part: `mla_rows(l_kv)` from `attnlab.core.mla` and `attnlab.core.decode.intensity`; `mla_figure` draws
them on each GPU's bf16 roofline.
"""

from __future__ import annotations

import textwrap

import numpy as np

from attnlab.core.decode import intensity
from attnlab.machine.hardware import DTYPE_BYTES, attainable, dtype_name, get_gpu, gpus, ridge_point
from attnlab.core.mla import DEEPSEEK_V3, FORM_LABELS, FORMS, MLAShape, mla_forms
from attnlab.explore import style

__all__ = [
    "mla_cases",
    "mla_rows",
    "mla_table",
    "mla_figure",
    "mla_verdicts",
    "mla_statement",
    "models_side_by_side",
]


def mla_cases(l_kv: int = 8192) -> dict:
    """label -> bf16 FLOP/byte of one decode step at context l_kv (one query per head); the MLA
    rows are the named forms of `attnlab.core.mla.mla_forms`."""
    forms = mla_forms(l_kv)
    return {
        "MHA (g = 1)": intensity(1, 1, l_kv),
        "GQA (g = 8)": intensity(8, 1, l_kv),
        "MLA gqa_view (lecture: g = 128)": forms["gqa_view"],
        "MLA materialised K, V": forms["materialised"],
        "MLA absorbed (576-wide latent)": forms["absorbed"],
    }


def mla_rows(l_kv: int = 8192) -> list[dict]:
    """One row per case: intensity and intensity / ridge on each GPU."""
    ridges = {g: ridge_point(g, "bf16") for g in gpus()}
    return [
        {"case": lab, "I": i, **{g: i / r for g, r in ridges.items()}} for lab, i in mla_cases(l_kv).items()
    ]


def mla_table(l_kv: int = 8192) -> str:
    ridges = {g: ridge_point(g, "bf16") for g in gpus()}
    head = (
        f"decode, one query per head, context {l_kv:,} tokens, bf16; intensity / ridge point per GPU "
        f"(ridges: {', '.join(f'{g} {r:.0f}' for g, r in ridges.items())} FLOP/byte)\n"
    )
    return head + style.table(
        mla_rows(l_kv),
        {"case": "case", "I": "FLOP/byte", **{g: f"/ ridge {g}" for g in ridges}},
        {"I": ".1f", **{g: ".2f" for g in ridges}},
    )


def mla_figure(l_kv: int = 8192):
    """Each GPU's bf16 roofline (TFLOP/s against FLOP/byte, log-log) with the five cases on it."""
    fig = style.new_figure(1, height=4.4, width=9.5)
    ax = fig.axes[0]
    grid = np.geomspace(0.5, 3000, 200)
    colors = [style.COLORS[k] for k in ("standard", "memory", "compute", "fa1", "fa2")]
    for g, ls in zip(gpus(), ("-", "--", "-.", ":")):
        ax.plot(
            grid,
            attainable(grid, g, "bf16") / 1e12,
            ls,
            color="0.35",
            lw=1.3,
            label=f"{g} roof (ridge {ridge_point(g, 'bf16'):.0f})",
        )
    for (lab, i), c in zip(mla_cases(l_kv).items(), colors):  # materialised dashed: it sits on MHA
        ax.axvline(
            i, color=c, lw=2, alpha=0.8, ls="--" if "materialised" in lab else "-", label=f"{lab}: {i:.1f}"
        )
    style.log_axis(ax, "x", 0.5, 3000)
    style.log_axis(ax, "y", 1, 5000)
    ax.grid(True, alpha=0.25)
    ax.set_xlabel("arithmetic intensity (FLOP/byte, bf16)")
    ax.set_ylabel("attainable TFLOP/s (bf16 dense)")
    ax.set_title(
        f"MLA decode vs MHA/GQA on each GPU's roofline (1 query/head, context {l_kv:,}, bf16)", fontsize=9.5
    )
    ax.legend(fontsize=style.SMALL, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


def mla_verdicts(
    gpus=("H100-SXM", "H200-SXM"),
    l_kv: int = 8192,
    l_qo: int = 1,
    shape: MLAShape = DEEPSEEK_V3,
    *,
    dtype: str = "bf16",
) -> dict:
    """{form: {gpu name: "memory-bound" | "compute-bound"}}: each form's intensity against each
    GPU's ridge point in `dtype` (`hardware.ridge_point`).

    >>> v = mla_verdicts()
    >>> v["gqa_view"], v["absorbed"]
    ({'H100-SXM': 'memory-bound', 'H200-SXM': 'memory-bound'}, {'H100-SXM': 'memory-bound', 'H200-SXM': 'compute-bound'})
    """
    if isinstance(gpus, (str, bytes)) or not hasattr(gpus, "__iter__"):
        raise TypeError(f"gpus must be a sequence of GPU names, got {gpus!r} ({type(gpus).__name__})")
    chips = [get_gpu(g) for g in gpus]
    if not chips:
        raise ValueError("gpus=() is empty; valid: one or more names of hardware.gpus()")
    dtype = dtype_name(dtype)
    forms = mla_forms(l_kv, l_qo, shape, dtype_bytes=DTYPE_BYTES[dtype])
    ridges = {g.name: ridge_point(g, dtype) for g in chips}
    return {
        f: {n: "memory-bound" if i < r else "compute-bound" for n, r in ridges.items()}
        for f, i in forms.items()
    }


def mla_statement(
    gpus=("H100-SXM", "H200-SXM"), l_kv: int = 8192, l_qo: int = 1, *, dtype: str = "bf16"
) -> str:
    """The course's one statement of MLA decode intensity (DeepSeek-V3's shape): each form named,
    its FLOP/byte from `mla_forms`, and its verdict on each GPU of `gpus`."""
    dtype = dtype_name(dtype)
    forms = mla_forms(l_kv, l_qo, dtype_bytes=DTYPE_BYTES[dtype])
    verdicts = mla_verdicts(gpus, l_kv, l_qo, dtype=dtype)
    names = list(next(iter(verdicts.values())))
    ridges = {n: ridge_point(get_gpu(n), dtype) for n in names}
    heads = [f"{n} ({r:.0f})" for n, r in ridges.items()]
    cells = {
        f: [f"{verdicts[f][n].replace('-bound', '')} ({i / ridges[n]:.2f}x)" for n in names]
        for f, i in forms.items()
    }
    widths = [max(len(h), *(len(c[j]) for c in cells.values())) for j, h in enumerate(heads)]
    wf = max(map(len, FORMS))
    caption = (
        f"MLA decode (DeepSeek-V3 shape), context {l_kv:,}, {l_qo} quer{'y' if l_qo == 1 else 'ies'} "
        f"per head, {dtype}, from attnlab.core.mla.mla_forms; per GPU (its ridge point in FLOP/byte): "
        f"memory- or compute-bound, and intensity / ridge"
    )
    lines = [
        *textwrap.wrap(caption, 100),
        "  ".join([f"{'form':<{wf}}", "FLOP/byte", *(h.ljust(w) for h, w in zip(heads, widths))]).rstrip(),
        "  ".join(["-" * wf, "-" * 9, *("-" * w for w in widths)]),
    ]
    for f, i in forms.items():
        lines.append(
            "  ".join([f"{f:<{wf}}", f"{i:9.1f}", *(c.ljust(w) for c, w in zip(cells[f], widths))]).rstrip()
        )
    lines += [f"  {f}: {FORM_LABELS[f]}" for f in FORMS]
    return "\n".join(lines)


def models_side_by_side(
    names=("DeepSeek-V3", "Llama-3.1-70B"),
    gpu="H200",
    *,
    batch: int = 64,
    context: int = 8192,
    dtype: str = "bf16",
) -> str:
    """Notebook 00's report of a model (`attnlab.course.your_model.your_model`) for two or more
    models side by side, in 100 characters: the KV cache and the decode intensity against the
    GPU's ridge point."""
    from attnlab.machine.your_model import your_model  # the report notebook 00 prints

    rs = [your_model(n, gpu, batch=batch, context=context, dtype=dtype) for n in names]

    def kind(m):
        return f"MLA, latent {m.head_dim}" if m.mla else f"GQA, group {m.group}" if m.group > 1 else "MHA"

    lines = {
        "attention": [kind(r.model) for r in rs],
        "KV bytes per token": [f"{r.kv_bytes_per_token:,.0f} B" for r in rs],
        "KV cache": [
            f"{style.binary_bytes(r.kv_cache_bytes)}"
            + ("" if r.kv_cache_bytes <= r.hbm_bytes else " (does not fit)")
            for r in rs
        ],
        "decode FLOP/byte": [f"{r.intensity:,.1f}" + (" (absorbed)" if r.model.mla else "") for r in rs],
        "  in the g = 128 view": [f"{r.gqa_view_intensity:,.1f}" if r.model.mla else "-" for r in rs],
        f"vs ridge {rs[0].ridge:,.0f}": ["memory-bound" if r.memory_bound else "compute-bound" for r in rs],
    }
    rows = [{"what": k, **{i: v[i] for i in range(len(rs))}} for k, v in lines.items()]
    head = (
        f"{rs[0].gpu} ({style.binary_bytes(rs[0].hbm_bytes)} HBM), {rs[0].dtype}, batch {batch}, "
        f"context {context:,}\n"
    )
    return head + style.table(
        rows, {"what": "", **{i: r.model.name for i, r in enumerate(rs)}}, {i: str for i in range(len(rs))}
    )
