"""The course's GPU runs, as the notebooks show them (03: prefill, 04: decode, 05: paged, cascade,
schedules).

`python -m attnlab.gpubench` writes one file per run, data/measurements/<gpu>-<date>.json: the
device, its SM count, the versions of torch, Triton and FlashInfer, the commit measured, the
ceilings measured in the same run, each section's full result and one flat table of rows.
`newest_run()` loads the newest such file; `live_run()` makes a new run when a CUDA GPU is here.
Every function below takes either, so a notebook's GPU cell prints the same text for both.
"""
from __future__ import annotations

import json
import re

import numpy as np

from attnlab.machine.hardware import data_path
from attnlab.explore import style

__all__ = ["run_files", "newest_run", "live_run", "provenance", "section", "prefill_summary",
           "prefill_figure", "hopper_steps_summary", "decode_bandwidth_summary", "cascade_summary",
           "schedules_summary", "schedules_figure"]

_RUN = re.compile(r"^([a-z0-9]+)-(\d{4}-\d{2}-\d{2})\.json$")
PREFILL_IMPLS = ("ours-fa2", "ours-hopper", "sdpa-flash", "sdpa-cudnn", "flex", "flashinfer-fa2",
                 "flashinfer-fa3")
PREFILL_LABELS = {"ours-fa2": "ours, FA2 (notebook's kernel)", "ours-hopper": "ours, Hopper kernel",
                  "sdpa-flash": "SDPA flash", "sdpa-cudnn": "SDPA cuDNN", "flex": "FlexAttention",
                  "flashinfer-fa2": "FlashInfer fa2", "flashinfer-fa3": "FlashInfer fa3"}
PREFILL_COLORS = {"ours-fa2": style.COLORS["fa2"], "ours-hopper": "#006d2c", "sdpa-flash": style.COLORS["muted"],
                  "sdpa-cudnn": style.COLORS["compute"], "flex": style.COLORS["memory"],
                  "flashinfer-fa2": "#9ecae1", "flashinfer-fa3": style.COLORS["fa1"]}


def _dir():
    return data_path("gpus.json").parent / "measurements"


def run_files() -> list:
    """The run files, oldest first (by the date in the name, then the name)."""
    found = [(m.group(2), p.name, p) for p in _dir().glob("*.json") if (m := _RUN.match(p.name))]
    return [p for _, _, p in sorted(found)]


def newest_run() -> dict:
    """The newest run file's contents (see the module's docstring)."""
    files = run_files()
    if not files:
        raise FileNotFoundError(f"no run file <gpu>-<date>.json in {_dir()}")
    with open(files[-1]) as f:
        return {**json.load(f), "file": files[-1].name}


def live_run(sections=("prefill", "decode", "paged", "cascade", "scheduled")) -> dict | None:
    """Run those sections of `python -m attnlab.gpubench` here if a CUDA GPU is visible (minutes:
    FlashInfer's columns need `pip install flashinfer-python`, and its first calls compile);
    None otherwise. Nothing is written to disk."""
    from attnlab import kernels as gpu
    if not gpu.available():
        return None
    from attnlab.gpubench import run as bench
    res = bench.run(sections, out="")
    res["file"] = "(live run, not saved)"
    return res


def provenance(res: dict, name: str | None = None) -> str:
    """Device, date, versions, commit and ceilings of section `name` (or the run's); refuses an unknown name."""
    if name is not None:
        section(res, name)
    by, commits = res.get("ceilings_by_section", {}), res.get("commits_by_section", {})
    c = by[name] if name in by else res["ceilings"]
    commit = commits.get(name) or res.get("commit") or "unknown"
    return (f"{res['device']} ({res['sms']} SMs), {res['date']}: torch {res['torch']}, Triton {res['triton']}, "
            f"FlashInfer {res.get('flashinfer')}; kernels at commit {str(commit)[:7]}; "
            f"measured ceilings: copy {c['copy_bytes_per_s'] / 1e12:.2f} TB/s, bf16 matmul "
            f"{c['bf16_matmul_flops'] / 1e12:.0f} TFLOP/s [{res.get('file', '')}]")


def section(res: dict, name: str) -> dict:
    if name not in res.get("sections", {}):
        raise KeyError(f"this run has no '{name}' section; it has {sorted(res.get('sections', {}))}")
    return res["sections"][name]


# --- prefill (notebook 03) ----------------------------------------------------------------------

def _prefill_cases(sec):
    return sorted({(r["batch"], r["N"], r["causal"]) for r in sec["rows"]}, key=lambda c: (c[2], c[0], c[1]))


def prefill_summary(res: dict) -> str:
    """TFLOP/s of every implementation per (batch, N, mask), the Hopper kernel against the best
    library, and the model's time, max(FLOPs / matmul ceiling, bytes / copy ceiling)."""
    sec = section(res, "prefill")
    rows = []
    for case in _prefill_cases(sec):
        at = {r["impl"]: r for r in sec["rows"] if (r["batch"], r["N"], r["causal"]) == case}
        peers = {k: r for k, r in at.items() if not k.startswith("ours") and k != "standard"}
        best = min(peers, key=lambda k: peers[k]["us"])
        row = {"case": f"{case[0]} x {case[1] // 1024}K", "mask": "causal" if case[2] else "none"}
        row.update({k: at[k]["tflops"] if k in at else float("nan") for k in PREFILL_IMPLS})
        hop = at.get("ours-hopper", at["ours-fa2"])
        row.update(best=best, ratio=peers[best]["us"] / hop["us"], model=hop["model_us"] / hop["us"],
                   err=max(r["max_err"] for r in at.values()))
        rows.append(row)
    head = (provenance(res, "prefill") + "\nLlama-3-8B layer: 32 query heads, 8 KV heads, d = 128, bf16; TFLOP/s on the "
            "visible (query, key) pairs, CUDA-graph replay; every output checked against fp32 first\n")
    cols = {"case": "batch x N", "mask": "mask", **{k: PREFILL_LABELS[k].replace("ours, ", "") for k in PREFILL_IMPLS},
            "best": "best library", "ratio": "Hopper / best", "model": "model time / Hopper's",
            "err": "worst max err"}
    return head + style.table(rows, cols, {**{k: ".0f" for k in PREFILL_IMPLS}, "ratio": ".2f",
                                           "model": ".2f", "err": ".1e"})


def prefill_figure(res: dict, batch: int = 1):
    """Grouped bars: TFLOP/s per N for each implementation, no mask and causal, beside the
    measured matmul ceiling (the model's time for a fused kernel at these sizes)."""
    sec = section(res, "prefill")
    fig = style.new_figure(2, height=4.4)
    peak = res.get("ceilings_by_section", {}).get("prefill", res["ceilings"])["bf16_matmul_flops"] / 1e12
    impls = [k for k in PREFILL_IMPLS if any(r["impl"] == k for r in sec["rows"])]
    w = 0.8 / len(impls)
    for ax, causal in zip(fig.axes, (False, True)):
        Ns = sorted({r["N"] for r in sec["rows"] if r["batch"] == batch and r["causal"] == causal})
        for j, impl in enumerate(impls):
            tf = [next((r["tflops"] for r in sec["rows"] if (r["batch"], r["N"], r["causal"], r["impl"])
                        == (batch, n, causal, impl)), np.nan) for n in Ns]
            ax.bar(np.arange(len(Ns)) + (j - (len(impls) - 1) / 2) * w, tf, w, color=PREFILL_COLORS[impl],
                   label=PREFILL_LABELS[impl], edgecolor="black" if impl.startswith("ours") else "none", lw=0.6)
        ax.axhline(peak, color=style.COLORS["bound"], ls=":", label=f"model: measured matmul ceiling ({peak:.0f})")
        ax.set_xticks(range(len(Ns)), [style.k_label(n) for n in Ns])
        ax.set_xlabel("sequence length N (tokens)")
        ax.set_ylabel("attention TFLOP/s (visible pairs)")
        ax.set_ylim(0, peak * 1.12)
        ax.grid(True, axis="y", alpha=0.25)
        ax.set_title(f"{res['device']}, batch {batch}, 32/8 heads, d=128, bf16,\n"
                     f"{'causal' if causal else 'no mask'}", fontsize=9.5)
    fig.legend(*fig.axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=4,
               fontsize=style.SMALL, frameon=False)
    return fig


def hopper_steps_summary(name: str = "h200-2026-12-01-hopper-steps.json") -> str:
    """A recorded `python -m attnlab.gpubench.sweeps.hopper` run: each cumulative step of the Hopper kernel
    (TFLOP/s and its gain over the step before), then the best launch, against the best library."""
    with open(_dir() / name) as f:
        res = json.load(f)
    cases = sorted({(r["N"], r["causal"]) for r in res["rows"]}, key=lambda c: (c[1], c[0]))
    names = ["base", *["+".join(res["steps"][:i + 1]) for i in range(len(res["steps"]))]]
    rows = []
    for case in cases:
        at = {r["impl"]: r for r in res["rows"] if (r["N"], r["causal"]) == case}
        peer = max(r["tflops"] for r in at.values() if r.get("peer"))
        prev = None
        for n in names:
            if n in at:
                t = at[n]["tflops"]
                rows.append({"case": f"{case[0] // 1024}K{' causal' if case[1] else ''}",
                             "step": n.split("+")[-1] if n != "base" else "base (FA2 loop)", "tflops": t,
                             "gain": t / prev if prev else float("nan"), "vs": t / peer})
                prev = t
        ours = {k: r for k, r in at.items() if k.startswith("all")}
        if ours:
            best = max(ours, key=lambda k: ours[k]["tflops"])
            rows.append({"case": rows[-1]["case"], "step": f"best launch: {best}", "tflops": ours[best]["tflops"],
                         "gain": float("nan"), "vs": ours[best]["tflops"] / peer})
    head = (f"{res['device']} ({res['sms']} SMs), {res['date']}: torch {res['torch']}, Triton {res['triton']}, "
            f"FlashInfer {res.get('flashinfer')}; batch 1, 32/8 heads, d = 128, bf16; triton.testing.do_bench\n"
            "each step adds one change to the one above; steps at their default launch of that day "
            "(big_tiles then ran 2 stages: the 'best launch' row is 128 x 128 tiles, 3 stages)\n")
    return head + style.table(rows, {"case": "N", "step": "step", "tflops": "TFLOP/s", "gain": "x previous",
                                     "vs": "/ best library"}, {"tflops": ".0f", "gain": ".2f", "vs": ".2f"})


# --- decode (notebook 04) -----------------------------------------------------------------------

def decode_bandwidth_summary(res: dict) -> str:
    """KV bandwidth of decode per batch x context: ours (contiguous and paged, best split), cuDNN
    and FlashInfer's tensor-core decode, as TB/s and as a fraction of the measured copy ceiling."""
    sec = section(res, "paged")
    copy = res.get("ceilings_by_section", {}).get("paged", res["ceilings"])["copy_bytes_per_s"]
    rows = []
    for b, n in sorted({(r["batch"], r["context"]) for r in sec["rows"]}):
        at = [r for r in sec["rows"] if (r["batch"], r["context"]) == (b, n)]

        def best(impl, ps=None):
            us = [r["us"] for r in at if r["impl"] == impl and r.get("page_size") == ps]
            return min(us) if us else float("nan")
        t = {"contig": best("contiguous"), "paged": best("paged", 16), "cudnn": best("sdpa-cudnn"),
             "fi": best("flashinfer-tc", 16)}
        nbytes = at[0]["bytes"]
        row = {"case": f"{b} x {n // 1024}K", "MB": nbytes / 1e6}
        row.update({k: nbytes / (v * 1e-6) / 1e12 for k, v in t.items()})
        row["frac"] = max(row[k] for k in t) * 1e12 / copy
        rows.append(row)
    head = (provenance(res, "paged") + "\nLlama-3-8B decode (32/8 heads, d = 128, bf16); bytes = K, V, q read and o "
            "written once; best split of each kernel; FlashInfer and our paged kernel at page size 16\n")
    return head + style.table(rows, {"case": "batch x context", "MB": "MB moved", "contig": "ours contiguous",
                                     "paged": "ours paged", "cudnn": "cuDNN", "fi": "FlashInfer TC",
                                     "frac": "best / copy ceiling"},
                              {"MB": ".0f", "contig": ".2f", "paged": ".2f", "cudnn": ".2f", "fi": ".2f",
                               "frac": ".2f"})


# --- cascade and schedules (notebook 05) --------------------------------------------------------

def cascade_summary(res: dict) -> str:
    """Cascade decode measured beside what the library counts: KV tokens read (cascade against
    full tables) and the time of paged decode over the full tables against the cascade's."""
    sec = section(res, "cascade")
    rows = []
    for n in sorted({r["n"] for r in sec["rows"]}):
        at = [r for r in sec["rows"] if r["n"] == n]
        get = {r["impl"] + (" auto" if r.get("auto") else ""): r for r in at if not r.get("splits_fixed")}
        fixed = min((r for r in at if r["impl"] == "cascade"), key=lambda r: r["us"])
        c, p = get["cascade auto"], get["paged"]
        rows.append({"n": n, "prefix": c["prefix"], "unique": c["unique"], "saving": c["saving"],
                     "auto": c["us"], "best": fixed["us"], "paged": p["us"],
                     "fi_tc": get.get("flashinfer-tc", {}).get("us", float("nan")),
                     "fi_cascade": get.get("flashinfer-cascade", {}).get("us", float("nan")),
                     "speedup": p["us"] / c["us"], "time_saved": 1 - c["us"] / p["us"]})
    head = (provenance(res, "cascade") + "\nn requests share one prefix; page size 16; µs per call, CUDA-graph replay; "
            "'KV saved' is attnlab.core.decode.cascade_intensity's count of K/V tokens not read\n")
    return head + style.table(rows, {"n": "n", "prefix": "prefix", "unique": "own tokens", "saving": "KV saved (counted)",
                                     "auto": "cascade (auto)", "best": "cascade (best split)",
                                     "paged": "paged, full tables", "fi_tc": "FlashInfer TC, full",
                                     "fi_cascade": "FlashInfer cascade", "speedup": "paged / cascade",
                                     "time_saved": "time saved"},
                              {"saving": ".0%", "auto": ".1f", "best": ".1f", "paged": ".1f", "fi_tc": ".1f",
                               "fi_cascade": ".1f", "speedup": ".2f", "time_saved": ".0%"})


SCHEDULES = ("sched per-request", "sched fixed", "sched balanced")


def _schedules(res):
    sec = section(res, "scheduled")
    batches = sorted({r["batch"] for r in sec["rows"]})
    at = {(r["batch"], r["impl"]): r for r in sec["rows"]}
    return sec, batches, at


def schedules_summary(res: dict) -> str:
    """The persistent kernel under the three plans (one CUDA graph per plan, replayed across the
    batches), beside the plan's utilization and predicted time, paged_decode and FlashInfer."""
    sec, batches, at = _schedules(res)
    rows = []
    for b in batches:
        row = {"batch": b, "tokens": next(r["tokens"] for r in sec["rows"] if r["batch"] == b)}
        for s in SCHEDULES:
            r = at.get((b, s), {})
            key = s.split()[1]
            row[key] = r.get("us", float("nan"))
            row[key + "_pred"] = r.get("predicted_us", float("nan"))
            row[key + "_util"] = r.get("utilization", float("nan"))
        row["paged"] = at.get((b, "paged auto"), {}).get("us", float("nan"))
        row["fi"] = at.get((b, "flashinfer-tc"), {}).get("us", float("nan"))
        row["ratio"] = row["fi"] / row["balanced"]
        rows.append(row)
    ctas = next(r["ctas"] for r in sec["rows"] if "ctas" in r)
    head = (provenance(res, "scheduled") + f"\nrecorded {sec.get('dist')} batches, 32/8 heads, d = 128, bf16, page size "
            f"{sec.get('page_size')}, plans for {ctas} CTAs; µs per call, one CUDA graph per plan captured on the "
            "first batch and replayed on every batch; predicted = Plan.time (SMs share the bandwidth)\n")
    cols = {"batch": "batch", "tokens": "KV tokens"}
    for s in ("per-request", "fixed", "balanced"):
        cols.update({s: f"{s} µs", s + "_pred": "predicted", s + "_util": "util."})
    cols.update({"paged": "paged_decode (auto)", "fi": "FlashInfer TC", "ratio": "FlashInfer / balanced"})
    fmts = {k: ".1f" for k in cols if k not in ("batch", "tokens")}
    fmts.update({k: ".2f" for k in cols if k.endswith("_util") or k == "ratio"})
    return head + style.table(rows, cols, fmts)


def schedules_figure(res: dict):
    """Measured time per batch for each plan (solid) and its prediction (dashed), beside
    paged_decode with automatic splits and FlashInfer; log-log."""
    sec, batches, at = _schedules(res)
    fig = style.new_figure(1, height=3.9, width=9.5)
    ax = fig.axes[0]
    colors = {"sched per-request": style.COLORS["standard"], "sched fixed": style.COLORS["memory"],
              "sched balanced": style.COLORS["fa2"]}
    for s in SCHEDULES:
        bs = [b for b in batches if (b, s) in at]
        ax.plot(bs, [at[(b, s)]["us"] for b in bs], "-o", ms=4, color=colors[s], label=f"{s.split()[1]} plan, measured")
        ax.plot(bs, [at[(b, s)]["predicted_us"] for b in bs], "--", color=colors[s], alpha=0.7,
                label=f"{s.split()[1]} plan, predicted")
    for impl, c, label in (("paged auto", style.COLORS["muted"], "paged_decode, auto splits"),
                           ("flashinfer-tc", style.COLORS["fa1"], "FlashInfer TC decode")):
        bs = [b for b in batches if (b, impl) in at]
        ax.plot(bs, [at[(b, impl)]["us"] for b in bs], "-s", ms=4, color=c, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.grid(True, alpha=0.25)
    ax.set_xlabel("batch (requests, long-tailed lengths)")
    ax.set_ylabel("decode attention time per layer (µs)")
    ctas = next(r["ctas"] for r in sec["rows"] if "ctas" in r)
    ax.set_title(f"{res['device']}: one persistent kernel, three plans (32/8 heads, d=128, bf16, "
                 f"{ctas} CTAs)", fontsize=9.5)
    ax.legend(fontsize=style.SMALL, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig
