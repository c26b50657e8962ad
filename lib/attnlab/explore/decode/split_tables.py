"""Notebook 04's split-KV tables: predicted time and SM utilization per batch and split count,
across contexts, where the wave tail and the merge go, and every split count of one case."""

from __future__ import annotations

from attnlab.machine.hardware import SPLIT_MARGIN, recommended_split
from attnlab.machine.hardware import decode_time, get_gpu
from attnlab.explore import style
from attnlab.explore.decode.split_kv import split_kv_plan

__all__ = ["split_table", "split_vs_context", "wave_tail", "split_rows_table"]


def _cell(r) -> str:
    return f"{style.seconds(r.time)} ({r.utilization:.0%})"


def split_table(
    batches=(1, 16, 256), splits=(1, 4, 16, 64), context: int = 4096, kv_heads: int = 8, gpu="H100-SXM"
) -> str:
    """Predicted time of one layer (and SM utilization) for each batch x split count."""
    rows = []
    for b in batches:
        row = {"batch": b}
        for s in splits:
            row[s] = _cell(decode_time(b, context, kv_heads, s, gpu))
        rows.append(row)
    head = (
        f"one layer, {kv_heads} KV heads, head_dim 128, context {context:,}, {get_gpu(gpu).name}: "
        f"time (SM utilization)\n"
    )
    return head + style.table(
        rows,
        {"batch": "batch", **{s: f"{s} split" + ("s" if s > 1 else "") for s in splits}},
        {s: str for s in splits},
    )


def split_vs_context(
    batch: int = 256, contexts=(1024, 4096, 32768), splits=(1, 4, 16, 64), kv_heads: int = 8, gpu="H100-SXM"
) -> str:
    """One batch size over several contexts: time (utilization) per split count, and the change
    of the largest split count against no split."""
    rows = []
    for ctx in contexts:
        runs = {s: decode_time(batch, ctx, kv_heads, s, gpu) for s in splits}
        rows.append(
            {
                "context": ctx,
                **{s: _cell(runs[s]) for s in splits},
                "change": runs[splits[-1]].time / runs[splits[0]].time - 1,
            }
        )
    head = f"batch {batch}, {kv_heads} KV heads, {get_gpu(gpu).name}: time (SM utilization)\n"
    return head + style.table(
        rows,
        {
            "context": "context",
            **{s: f"{s} split" + ("s" if s > 1 else "") for s in splits},
            "change": f"{splits[-1]} vs {splits[0]}",
        },
        {"context": ",", **{s: str for s in splits}, "change": "+.1%"},
    )


def wave_tail(
    batch: int = 256, context: int = 32768, kv_heads: int = 8, splits=(1, 64), gpu="H100-SXM"
) -> str:
    """Where the time goes for each split count: blocks over SMs, whole waves, the tail that the
    last, partial wave wastes (against an ideal schedule with no tail), and the merge."""
    G = get_gpu(gpu)
    rows = []
    for s in splits:
        r = decode_time(batch, context, kv_heads, s, G)
        ideal = r.attn_time * (r.blocks / G.sms) / r.waves
        rows.append(
            {
                "splits": s,
                "blocks": r.blocks,
                "per_sm": r.blocks / G.sms,
                "waves": r.waves,
                "attn": r.attn_time * 1e6,
                "tail": (r.attn_time - ideal) * 1e6,
                "merge": r.merge_time * 1e6,
                "time": r.time * 1e6,
            }
        )
    head = f"batch {batch}, context {context:,}, {kv_heads} KV heads, {G.name} ({G.sms} SMs); times in µs\n"
    return head + style.table(
        rows,
        {
            "splits": "splits",
            "blocks": "blocks",
            "per_sm": f"blocks / {G.sms}",
            "waves": "waves",
            "attn": "attention",
            "tail": "of it tail",
            "merge": "merge",
            "time": "total",
        },
        {
            "blocks": ",",
            "per_sm": ".2f",
            "waves": ",",
            "attn": ",.0f",
            "tail": ",.0f",
            "merge": ",.0f",
            "time": ",.0f",
        },
    )


def split_rows_table(batch: int = 2, context: int = 16384, kv_heads: int = 8, gpu="H100-SXM") -> str:
    """Every split count of `attnlab.machine.hardware.SPLITS` for one configuration: blocks, waves,
    utilization, attention and merge time, total, speedup against no split; the fastest marked,
    and the recommended one (`hardware.recommended_split`: the fewest splits within 1 % of it)."""
    p = split_kv_plan(batch, context, kv_heads, 1, gpu)
    rec = recommended_split(batch, context, kv_heads, gpu)[0]

    def note(s):
        marks = ["fastest"] * (s == p.best.splits) + ["recommended"] * (s == rec)
        return "<- " + ", ".join(marks) if marks else ""

    rows = [
        {
            "splits": r.splits,
            "blocks": r.blocks,
            "waves": r.waves,
            "util": r.utilization,
            "attn": r.attn_time,
            "merge": r.merge_time,
            "time": r.time,
            "speedup": p.base.time / r.time,
            "best": note(r.splits),
        }
        for r in p.runs
    ]
    head = (
        f"batch {batch}, context {context:,}, {kv_heads} KV heads, {p.gpu} ({p.sms} SMs)\n"
        f"recommended: the fewest splits within {SPLIT_MARGIN:.0%} of the fastest; speedup: against no split\n"
    )
    return head + style.table(
        rows,
        {
            "splits": "splits",
            "blocks": "blocks",
            "waves": "waves",
            "util": "utilization",
            "attn": "attention",
            "merge": "merge",
            "time": "total",
            "speedup": "speedup",
            "best": "note",
        },
        {
            "blocks": ",",
            "waves": ",",
            "util": ".0%",
            "attn": style.seconds,
            "merge": lambda t: style.seconds(t) if t else "-",
            "time": style.seconds,
            "speedup": lambda x: f"{x:.2f}x",
            "best": str,
        },
    )
