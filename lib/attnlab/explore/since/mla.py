"""MLA decode on the roofline (notebook 06, §6): the absorbed and the materialised form against
MHA and GQA, on every GPU of data/gpus.json, as intensity and as a share of the ridge point.

Pure part: `mla_rows(l_kv)` from `attnlab.mla` and `attnlab.decode.intensity`; `mla_figure` draws
them on each GPU's bf16 roofline.
"""
from __future__ import annotations

import numpy as np

from ...decode import intensity
from ...hardware import attainable, gpus, ridge_point
from ...mla import mla_forms
from .. import style

__all__ = ["mla_cases", "mla_rows", "mla_table", "mla_figure"]


def mla_cases(l_kv: int = 8192) -> dict:
    """label -> bf16 FLOP/byte of one decode step at context l_kv (one query per head); the MLA
    rows are the named forms of `attnlab.mla.mla_forms`."""
    forms = mla_forms(l_kv)
    return {"MHA (g = 1)": intensity(1, 1, l_kv), "GQA (g = 8)": intensity(8, 1, l_kv),
            "MLA gqa_view (lecture: g = 128)": forms["gqa_view"],
            "MLA materialised K, V": forms["materialised"],
            "MLA absorbed (576-wide latent)": forms["absorbed"]}


def mla_rows(l_kv: int = 8192) -> list[dict]:
    """One row per case: intensity and intensity / ridge on each GPU."""
    ridges = {g: ridge_point(g, "bf16") for g in gpus()}
    return [{"case": lab, "I": i, **{g: i / r for g, r in ridges.items()}} for lab, i in mla_cases(l_kv).items()]


def mla_table(l_kv: int = 8192) -> str:
    ridges = {g: ridge_point(g, "bf16") for g in gpus()}
    head = (f"decode, one query per head, context {l_kv:,} tokens, bf16; intensity / ridge point per GPU "
            f"(ridges: {', '.join(f'{g} {r:.0f}' for g, r in ridges.items())} FLOP/byte)\n")
    return head + style.table(mla_rows(l_kv), {"case": "case", "I": "FLOP/byte", **{g: f"/ ridge {g}" for g in ridges}},
                              {"I": ".1f", **{g: ".2f" for g in ridges}})


def mla_figure(l_kv: int = 8192):
    """Each GPU's bf16 roofline (TFLOP/s against FLOP/byte, log-log) with the five cases on it."""
    fig = style.new_figure(1, height=4.4, width=9.5)
    ax = fig.axes[0]
    grid = np.geomspace(0.5, 3000, 200)
    colors = [style.COLORS[k] for k in ("standard", "memory", "compute", "fa1", "fa2")]
    for g, ls in zip(gpus(), ("-", "--", "-.", ":")):
        ax.plot(grid, attainable(grid, g, "bf16") / 1e12, ls, color="0.35", lw=1.3,
                label=f"{g} roof (ridge {ridge_point(g, 'bf16'):.0f})")
    for (lab, i), c in zip(mla_cases(l_kv).items(), colors):       # materialised dashed: it sits on MHA
        ax.axvline(i, color=c, lw=2, alpha=0.8, ls="--" if "materialised" in lab else "-", label=f"{lab}: {i:.1f}")
    style.log_axis(ax, "x", 0.5, 3000)
    style.log_axis(ax, "y", 1, 5000)
    ax.grid(True, alpha=0.25)
    ax.set_xlabel("arithmetic intensity (FLOP/byte, bf16)")
    ax.set_ylabel("attainable TFLOP/s (bf16 dense)")
    ax.set_title(f"MLA decode vs MHA/GQA on each GPU's roofline (1 query/head, context {l_kv:,}, bf16)",
                 fontsize=9.5)
    ax.legend(fontsize=style.SMALL, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig
