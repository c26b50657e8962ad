"""Notebook 05's views of a run: paged decode beside FlashInfer, cascade decode, the variants
beside FlexAttention and the persistent kernel's plans. Each reads its section's schema rows
(`reader.section`). This file is long because it holds the notebook's four measured views, which
share one way of splitting a wide table (`_tables`)."""

from __future__ import annotations

import textwrap

from attnlab.explore import style
from attnlab.explore.measured.reader import impl_name, provenance, section

__all__ = [
    "paged_summary",
    "variants_summary",
    "cascade_summary",
    "SCHEDULES",
    "schedules_summary",
    "schedules_figure",
]

WIDTH = 100


def _tables(head: str, rows, key: dict, parts, fmts) -> str:
    """`head` wrapped at WIDTH, then one table per (title, columns) of `parts`, each with the key
    columns first: a wide view split so that every line fits WIDTH characters."""
    text = "\n".join(textwrap.fill(line, WIDTH, break_on_hyphens=False) for line in head.splitlines())
    return (
        text
        + "\n"
        + "\n\n".join(f"{title}\n" + style.table(rows, {**key, **cols}, fmts) for title, cols in parts)
    )


def paged_summary(res: dict) -> str:
    """Per batch x context and page size: our paged decode (best split and the automatic one)
    beside FlashInfer's decode wrapper (tensor cores on, off), our kernel on contiguous KV and
    cuDNN, in µs, and FlashInfer (tensor cores) over ours: above 1 means ours is faster."""
    head = (
        f"{res['device']} ({res['sms']} SMs), {res['date']}: torch {res['torch']}, Triton {res['triton']}, "
        f"FlashInfer {res['flashinfer']}; bf16, {res['shape']['heads']}/{res['shape']['kv_heads']} heads, "
        f"d = {res['shape']['head_dim']}; µs per call, CUDA-graph replay\n"
    )
    rows = []
    for b, n in sorted({(r["shape"]["batch"], r["shape"]["context"]) for r in res["rows"]}):
        case = [r for r in res["rows"] if (r["shape"]["batch"], r["shape"]["context"]) == (b, n)]
        flat: dict = {}
        for r in case:  # the best split of each contiguous kernel
            if r["shape"].get("page_size") is None:
                name = impl_name(r)
                flat[name] = min(r["time_us"], flat.get(name, float("inf")))
        for ps in sorted({r["shape"].get("page_size") for r in case} - {None}, reverse=True):
            at = [r for r in case if r["shape"].get("page_size") == ps]
            paged = [r for r in at if impl_name(r) == "paged"]
            ours = min(r["time_us"] for r in paged if not r["shape"].get("auto"))
            auto = next(r["time_us"] for r in paged if r["shape"].get("auto"))
            fi = {impl_name(r): r["time_us"] for r in at if r["impl"].startswith("flashinfer")}
            rows.append(
                {
                    "case": f"{b} x {n // 1024}K",
                    "ps": ps,
                    "ours": ours,
                    "auto": auto,
                    "fi_tc": fi.get("flashinfer-tc", float("nan")),
                    "fi": fi.get("flashinfer", float("nan")),
                    "contig": flat.get("contiguous", float("nan")),
                    "cudnn": flat.get("sdpa-cudnn", float("nan")),
                    "ratio": fi.get("flashinfer-tc", float("nan")) / ours,
                }
            )
    key = {"case": "batch x context", "ps": "page"}
    parts = [
        (
            "ours and FlashInfer's tensor-core decode",
            {
                "ours": "ours (best split)",
                "auto": "ours (auto)",
                "fi_tc": "FlashInfer TC",
                "ratio": "FlashInfer TC / ours",
            },
        ),
        (
            "the others",
            {"fi": "FlashInfer CUDA cores", "contig": "ours contiguous", "cudnn": "cuDNN contiguous"},
        ),
    ]
    return _tables(
        head,
        rows,
        key,
        parts,
        {k: ".1f" for k in ("ours", "auto", "fi_tc", "fi", "contig", "cudnn")} | {"ratio": ".2f"},
    )


def variants_summary(res: dict) -> str:
    """A run's variants section (`measured.section(run, "variants")`): per case and variant, the
    TFLOP/s of our kernels with the variant compiled in (`variant_prefill`, the FA2 loop;
    `flash_attention_hopper`; `flash_attention_gluon`, the FA3-style kernel, where the run has it),
    of compiled FlexAttention, and the best peer's time over each of ours (above 1: ours is
    faster). TFLOP/s count only the pairs the mask leaves."""
    rows = []
    for key in dict.fromkeys(tuple(r["shape"][k] for k in ("batch", "N", "variant")) for r in res["rows"]):
        at = {
            r["impl"]: r
            for r in res["rows"]
            if tuple(r["shape"][k] for k in ("batch", "N", "variant")) == key
        }
        peers = {k: r for k, r in at.items() if not r["ours"]}
        best = min(peers, key=lambda k: peers[k]["time_us"])
        nan = {"tflops": float("nan"), "time_us": float("nan")}
        fa2, hop, glu = (at.get(k, nan) for k in ("ours", "ours-hopper", "ours-gluon"))
        rows.append(
            {
                "case": f"{key[0]} x {key[1]:,}",
                "variant": key[2],
                "fa2": fa2["tflops"],
                "hopper": hop["tflops"],
                "gluon": glu["tflops"],
                "flex": at.get("flex", nan)["tflops"],
                "best": best,
                "r_fa2": peers[best]["time_us"] / fa2["time_us"],
                "r_hop": peers[best]["time_us"] / hop["time_us"],
                "r_glu": peers[best]["time_us"] / glu["time_us"],
            }
        )
    head = (
        f"{res['device']} ({res['sms']} SMs), {res['date']}: torch {res['torch']}, Triton {res['triton']}; "
        f"bf16, {res['shape']['heads']}/{res['shape']['kv_heads']} heads, d = {res['shape']['head_dim']}; "
        "TFLOP/s, and the best peer's time over ours\n"
    )
    key = {"case": "batch x N", "variant": "variant"}
    parts = [
        ("TFLOP/s", {"fa2": "FA2", "hopper": "Hopper", "gluon": "Gluon", "flex": "FlexAttention"}),
        (
            "the best peer's time over ours",
            {"best": "best peer", "r_fa2": "best / FA2", "r_hop": "best / Hopper", "r_glu": "best / Gluon"},
        ),
    ]
    return _tables(
        head,
        rows,
        key,
        parts,
        {
            "fa2": ".0f",
            "hopper": ".0f",
            "gluon": ".0f",
            "flex": ".0f",
            "r_fa2": ".2f",
            "r_hop": ".2f",
            "r_glu": ".2f",
        },
    )


def cascade_summary(res: dict) -> str:
    """Run `res`'s cascade section measured beside what the library counts: KV tokens read
    (cascade against full tables) and the time of paged decode over the full tables against the
    cascade's (its automatic split, and its best split of all)."""
    sec = section(res, "cascade")
    rows = []
    for n in sorted({r["shape"]["n"] for r in sec["rows"]}):
        at = [r for r in sec["rows"] if r["shape"]["n"] == n]
        get = {impl_name(r): r for r in at if impl_name(r) != "cascade" or r["shape"]["auto"]}
        fixed = min((r for r in at if impl_name(r) == "cascade"), key=lambda r: r["time_us"])
        c, p = get["cascade"], get["paged"]
        rows.append(
            {
                "n": n,
                "prefix": c["shape"]["prefix"],
                "unique": c["shape"]["unique"],
                "saving": c["extra"]["saving"],
                "auto": c["time_us"],
                "best": fixed["time_us"],
                "paged": p["time_us"],
                "fi_tc": get.get("flashinfer-tc", {}).get("time_us", float("nan")),
                "fi_cascade": get.get("flashinfer-cascade", {}).get("time_us", float("nan")),
                "speedup": p["time_us"] / c["time_us"],
                "time_saved": 1 - c["time_us"] / p["time_us"],
            }
        )
    head = (
        provenance(res, "cascade")
        + "\nn requests share one prefix; page size 16; µs per call, CUDA-graph replay; "
        "'KV saved' is attnlab.core.decode.cascade_intensity's count of K/V tokens not read\n"
    )
    key = {"n": "n", "prefix": "prefix", "unique": "own tokens"}
    parts = [
        (
            "ours, µs per call",
            {"auto": "cascade (auto)", "best": "cascade (best split)", "paged": "paged, full tables"},
        ),
        ("FlashInfer, µs per call", {"fi_tc": "FlashInfer TC, full", "fi_cascade": "FlashInfer cascade"}),
        (
            "counted against measured",
            {"saving": "KV saved (counted)", "time_saved": "time saved", "speedup": "paged / cascade"},
        ),
    ]
    return _tables(
        head,
        rows,
        key,
        parts,
        {
            "saving": ".0%",
            "auto": ".1f",
            "best": ".1f",
            "paged": ".1f",
            "fi_tc": ".1f",
            "fi_cascade": ".1f",
            "speedup": ".2f",
            "time_saved": ".0%",
        },
    )


SCHEDULES = ("sched per-request", "sched fixed", "sched balanced", "sched balanced-128+fused")


def _schedules(res):
    """The scheduled section, its batches, and its rows by (batch, impl text)."""
    sec = section(res, "scheduled")
    batches = sorted({r["shape"]["batch"] for r in sec["rows"]})
    at = {(r["shape"]["batch"], r["impl"]): r for r in sec["rows"]}
    return sec, batches, at


def schedules_summary(res: dict) -> str:
    """The persistent kernel under each plan (one CUDA graph per plan, replayed across the batches),
    beside the plan's utilization and predicted time, paged_decode and FlashInfer; "balanced-128+fused"
    is the balanced plan with chunks of at least 128 tokens and the merge folded into kernel 1 (rows
    a recorded file lacks read nan)."""
    sec, batches, at = _schedules(res)
    rows = []
    for b in batches:
        row = {
            "batch": b,
            "tokens": next(r["extra"]["tokens"] for r in sec["rows"] if r["shape"]["batch"] == b),
        }
        nan = {"time_us": float("nan"), "extra": {}}
        for s in SCHEDULES:
            r = at.get((b, s), nan)
            key = s.split()[1]
            row[key] = r["time_us"]
            row[key + "_pred"] = r["extra"].get("predicted_us", float("nan"))
            row[key + "_util"] = r["extra"].get("utilization", float("nan"))
        row["paged"] = at.get((b, "paged auto"), nan)["time_us"]
        row["fi"] = at.get((b, "flashinfer-tc"), nan)["time_us"]
        best = min(
            (row[k] for k in ("balanced", "balanced-128+fused") if row[k] == row[k]), default=float("nan")
        )
        row["ratio"] = row["fi"] / best
        rows.append(row)
    ctas = next(r["extra"]["ctas"] for r in sec["rows"] if "ctas" in r["extra"])
    head = (
        provenance(res, "scheduled")
        + f"\nrecorded {sec.get('dist')} batches, 32/8 heads, d = 128, bf16, page size "
        f"{sec.get('page_size')}, plans for {ctas} CTAs; µs per call, one CUDA graph per plan captured on the "
        "first batch and replayed on every batch; predicted = Plan.time (SMs share the bandwidth)\n"
    )
    key = {"batch": "batch", "tokens": "KV tokens"}
    parts = []
    for pair in (("per-request", "fixed"), ("balanced", "balanced-128+fused")):
        cols = {}
        for s in pair:
            cols.update({s: f"{s} µs", s + "_pred": "predicted", s + "_util": "util."})
        parts.append((" and ".join(pair) + " plans", cols))
    parts.append(
        (
            "beside",
            {"paged": "paged_decode (auto)", "fi": "FlashInfer TC", "ratio": "FlashInfer / best balanced"},
        )
    )
    fmts = {k: ".1f" for _, cols in parts for k in cols}
    fmts.update({k: ".2f" for _, cols in parts for k in cols if k.endswith("_util") or k == "ratio"})
    return _tables(head, rows, key, parts, fmts)


def schedules_figure(res: dict):
    """Measured time per batch for each plan the run has (solid) and its prediction (dashed), beside
    paged_decode with automatic splits and FlashInfer; log-log."""
    sec, batches, at = _schedules(res)
    fig = style.new_figure(1, height=3.9, width=9.5)
    ax = fig.axes[0]
    colors = {
        "sched per-request": style.COLORS["standard"],
        "sched fixed": style.COLORS["memory"],
        "sched balanced": style.COLORS["fa2"],
        "sched balanced-128+fused": style.COLORS["compute"],
    }
    for s in SCHEDULES:
        bs = [b for b in batches if (b, s) in at]
        ax.plot(
            bs,
            [at[(b, s)]["time_us"] for b in bs],
            "-o",
            ms=4,
            color=colors[s],
            label=f"{s.split()[1]} plan, measured",
        )
        ax.plot(
            bs,
            [at[(b, s)]["extra"]["predicted_us"] for b in bs],
            "--",
            color=colors[s],
            alpha=0.7,
            label=f"{s.split()[1]} plan, predicted",
        )
    for impl, c, label in (
        ("paged auto", style.COLORS["muted"], "paged_decode, auto splits"),
        ("flashinfer-tc", style.COLORS["fa1"], "FlashInfer TC decode"),
    ):
        bs = [b for b in batches if (b, impl) in at]
        ax.plot(bs, [at[(b, impl)]["time_us"] for b in bs], "-s", ms=4, color=c, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.grid(True, alpha=0.25)
    ax.set_xlabel("batch (requests, long-tailed lengths)")
    ax.set_ylabel("decode attention time per layer (µs)")
    ctas = next(r["extra"]["ctas"] for r in sec["rows"] if "ctas" in r["extra"])
    shown = sum(any((b, s) in at for b in batches) for s in SCHEDULES)
    ax.set_title(
        f"{res['device']}: one persistent kernel, {shown} plans (32/8 heads, d=128, bf16, {ctas} CTAs)",
        fontsize=9.5,
    )
    ax.legend(fontsize=style.SMALL, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig
