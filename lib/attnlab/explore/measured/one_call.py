"""Notebook 05's view of the one decode call, `kernels.decode_paged`, beside FlashInfer's
tensor-core decode: one recorded H200 run of the harness on four long-tailed draws (seed 0, the
recorded batches, which the split rules were not chosen on, and seeds 1-3, which the fill rule's
constants were chosen on) and on uniform batches.

    one_call_rows(name)      one row per (draw, batch): the decoder and rule it chose, its time,
                             FlashInfer's, and the ratio
    one_call_summary(name)   the long-tailed ratios as a table (one column per draw, beside
                             draws 1-3 with every request cut into one count of chunks), the
                             uniform ratios, and the noise band: how far the ratio moved where
                             both runs launched the same, and how far FlashInfer's own calls moved
"""

from __future__ import annotations

from attnlab.explore import style
from attnlab.explore.measured.reader import recorded

__all__ = ["ONE_CALL_FILE", "BEFORE_FILE", "one_call_rows", "one_call_summary"]

#: the recorded run: gpubench.scheduled on draws 0-3 and gpubench.paged, FlashInfer beside
ONE_CALL_FILE = "h200-2026-12-04-decode-one-call.json"
#: draws 1-3 timed with every request of a split launch cut into one count of chunks (the
#: longest request's, from `split_from_lengths`)
BEFORE_FILE = "h200-2026-12-04-decode-draws.json"


def _calls(rows: list, key) -> dict:
    """case key -> {"ours": (us, row), "fi": us} of a section's decode_paged and FlashInfer TC rows."""
    out: dict = {}
    for r in rows:
        if r["impl"].startswith("decode_paged"):
            out.setdefault(key(r["shape"]), {})["ours"] = (r["time_us"], r)
        elif r["impl"].startswith("flashinfer-tc"):
            out.setdefault(key(r["shape"]), {})["fi"] = r["time_us"]
    return out


def one_call_rows(name: str = ONE_CALL_FILE) -> list[dict]:
    """One dict per (draw, batch) of the long-tailed sections, then one per uniform case of the
    paged section (draw None): batch (and context, page size where uniform), the decoder chosen
    ("split" or "plan") and the split rule ("lengths", "fill"; None for the plan), decode_paged's
    and FlashInfer's µs and FlashInfer's time over ours (above 1: ours is faster)."""
    res, rows = recorded(name), []
    for draw, sec in sorted(res["scheduled"].items()):
        for batch, c in sorted(_calls(sec["rows"], lambda s: s["batch"]).items()):
            us, r = c["ours"]
            rule = r["extra"].get("rule") if r["shape"]["decoder"] == "split" else None
            rows.append(
                dict(
                    draw=int(draw), batch=batch, decoder=r["shape"]["decoder"], rule=rule, ours=us, fi=c["fi"]
                )
            )
    key = lambda s: (s["batch"], s["context"], s["page_size"])  # noqa: E731
    for (batch, n, ps), c in _calls(res["paged"]["rows"], key).items():
        us, r = c["ours"]
        rule = r["extra"].get("rule")
        rows.append(
            dict(draw=None, batch=batch, context=n, page_size=ps, decoder=r["shape"]["decoder"], rule=rule,
                 ours=us, fi=c["fi"])
        )  # fmt: skip
    for r in rows:
        r["ratio"] = r["fi"] / r["ours"]
    return rows


def _before(name: str) -> dict:
    """(draw, batch) -> FlashInfer's µs over decode_paged's in the run of BEFORE_FILE's kind, and
    (draw, batch) -> FlashInfer's µs there."""
    draws = recorded(name)["draws"]
    ratio = {
        (int(d), int(b)): v["flashinfer_tc_us"] / v["decode_paged_us"]
        for d, bs in draws.items()
        for b, v in bs.items()
    }
    fi = {(int(d), int(b)): v["flashinfer_tc_us"] for d, bs in draws.items() for b, v in bs.items()}
    return ratio, fi


def one_call_summary(name: str = ONE_CALL_FILE, before: str = BEFORE_FILE) -> str:
    """The long-tailed ratios (FlashInfer's time over decode_paged's) per batch and draw, with
    the decoder and the split rule chosen, beside draws 1-3 cut by one count of chunks; the
    weakest and strongest ratio; the uniform cases; and the band: the largest move of the ratio
    where both runs launched the same (one request, and the plan from batch 64), and of
    FlashInfer's own calls."""
    res, rows = recorded(name), one_call_rows(name)
    then, fi_then = _before(before)
    tail = [r for r in rows if r["draw"] is not None]
    draws = sorted({r["draw"] for r in tail})
    table, cols, fmt = [], {"batch": "batch", "chose": "decoder (rule)"}, {}
    for d in draws:
        cols[f"d{d}"], fmt[f"d{d}"] = f"draw {d}", ".2f"
    for d in sorted({d for d, _ in then}):
        cols[f"b{d}"], fmt[f"b{d}"] = f"count {d}", ".2f"
    for batch in sorted({r["batch"] for r in tail}):
        mine = [r for r in tail if r["batch"] == batch]
        chose = sorted({f"{r['decoder']} ({r['rule']})" if r["rule"] else r["decoder"] for r in mine})
        row = {"batch": batch, "chose": ", ".join(chose)}
        row.update({f"d{r['draw']}": r["ratio"] for r in mine})
        row.update({f"b{d}": v for (d, b), v in then.items() if b == batch})
        table.append(row)
    got = [r["ratio"] for r in tail]
    lose = sorted({(r["batch"]) for r in tail if r["ratio"] < 1})
    both = [r for r in tail if (r["draw"], r["batch"]) in then]
    band = max(abs(r["fi"] / fi_then[(r["draw"], r["batch"])] - 1) for r in both)
    kept = [r for r in both if r["batch"] == 1 or r["decoder"] == "plan"]  # the same launch twice
    same = max(abs(r["ratio"] / then[(r["draw"], r["batch"])] - 1) for r in kept)
    uniform = [r for r in rows if r["draw"] is None]
    uni = ", ".join(
        f"{r['batch']} x {r['context'] // 1024}K page {r['page_size']}: {r['ratio']:.2f}" for r in uniform
    )
    lines = [
        f"{res['device']}, {res['date']}, FlashInfer {res['flashinfer']}; 32/8 heads, d = 128, bf16, page 16,",
        "CUDA-graph replay; FlashInfer's tensor-core decode time over decode_paged's (above 1: ours is",
        "faster); draw 0: the recorded batches (not used to choose the rules), draws 1-3: seeds 1-3;",
        "'count N': draw N with every request cut into one count of chunks (the longest request's)",
        style.table(table, cols, fmt),
        "",
        f"long-tailed: {min(got):.2f} to {max(got):.2f}; below 1 at batch {', '.join(map(str, lose))}",
        style.wrap(f"uniform: {uni}", 100),
        f"band: where both runs launched the same (batch 1, the plan) the ratio moved by up to {same:.0%};",
        f"FlashInfer's own calls moved by up to {band:.0%} between the two runs",
    ]
    return "\n".join(lines)
