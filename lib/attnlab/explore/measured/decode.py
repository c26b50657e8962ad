"""Notebook 04's figure of a run: split-KV decode against `hardware.decode_time`. Its tables of
the run (time beside the model, KV bandwidth against the copy ceiling) are
`explore.decode.measured_tables`."""

from __future__ import annotations

from attnlab.explore import style

__all__ = ["decode_figure"]


def decode_figure(
    res: dict, cases=((1, 32768), (2, 16384), (16, 8192), (256, 1024), (256, 4096), (256, 32768))
):
    """Measured time per split count (solid) against the model (dashed), one line per case, of
    the decode section `res` (`measured.section(run, "decode")`: its schema rows)."""
    fig = style.new_figure(1, height=3.8, width=9.5)
    ax = fig.axes[0]
    colors = [
        style.COLORS["fa1"],
        style.COLORS["fa2"],
        style.COLORS["memory"],
        style.COLORS["standard"],
        style.COLORS["compute"],
        "#8c564b",
    ]
    for (batch, ctx), c in zip(cases, colors):
        rs = sorted(
            (r for r in res["rows"] if (r["shape"]["batch"], r["shape"]["context"]) == (batch, ctx)),
            key=lambda r: r["shape"]["splits"],
        )
        if not rs:
            continue
        s = [r["shape"]["splits"] for r in rs]
        ax.plot(s, [r["time_us"] for r in rs], "-o", color=c, ms=4, label=f"batch {batch}, context {ctx:,}")
        ax.plot(s, [r["extra"]["model_us_measured_bw"] for r in rs], "--", color=c, alpha=0.7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.grid(True, alpha=0.25)
    ax.set_xlabel("KV splits per (request, KV head)")
    ax.set_ylabel("decode attention time per layer (µs)")
    ax.set_title(
        f"{res['device']}: split-KV measured (solid) vs model at measured bandwidth (dashed)", fontsize=9
    )
    ax.legend(fontsize=style.SMALL, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig
