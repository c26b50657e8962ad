"""Real GPU measurements beside the model's predictions (notebook 03's GPU cell).

`prefill_results()` loads the recorded run in `data/h200_prefill.json` (made by
`python -m attnlab.gpu.bench` on an H200); `live_prefill()` runs that benchmark when a CUDA GPU is
present. `prefill_summary` and `prefill_figure` present either the same way.
"""
from __future__ import annotations

import json

import numpy as np

from ..hardware import data_path
from . import style

__all__ = ["prefill_results", "live_prefill", "prefill_summary", "prefill_figure", "decode_results",
           "live_decode", "decode_summary", "decode_figure", "paged_results", "live_paged", "paged_summary",
           "variants_summary", "not_live"]

IMPL_LABELS = {"standard": "standard (eager torch, S and P in HBM)",
               "triton": "FlashAttention-2 in Triton (this course)",
               "sdpa": "torch SDPA (fastest backend)"}
IMPL_COLORS = {"standard": style.COLORS["standard"], "triton": style.COLORS["fa2"],
               "sdpa": style.COLORS["fa1"]}


def _recorded(name: str) -> dict:
    with open(data_path(name)) as f:
        return json.load(f)


def _live(module: str, **kw) -> dict | None:
    """Run `attnlab.gpu.<module>.run` here if a CUDA GPU is visible (about 30 s); None otherwise."""
    import importlib

    from .. import gpu
    if not gpu.available():
        return None
    return importlib.import_module(f"..gpu.{module}", __package__).run(**kw)


def not_live() -> str:
    """What the optional GPU cell prints when it cannot measure here, and why."""
    from .. import gpu
    return f"{gpu.unavailable_reason()}: the recorded H200 measurements above stand."


def prefill_results(name: str = "h200_prefill.json") -> dict:
    """The recorded benchmark (device, versions, measured ceilings, checks, timed rows)."""
    return _recorded(name)


def live_prefill(**kw) -> dict | None:
    """Run the prefill benchmark here if a CUDA GPU is visible (about 30 s); None otherwise."""
    return _live("bench", **kw)


def prefill_summary(res: dict) -> str:
    """Provenance, ceilings, the worst correctness error, and the timing table with the model."""
    c = res["ceilings"]
    worst = max(x["rel_err"] for x in res["checks"])
    head = (f"{res['device']} ({res['sms']} SMs), torch {res['torch']}, triton {res['triton']}, "
            f"measured {res['date']}\n"
            f"ceilings measured in the same run: copy {c['copy_bytes_per_s'] / 1e12:.2f} TB/s, "
            f"bf16 matmul {c['bf16_matmul_flops'] / 1e12:.0f} TFLOP/s\n"
            f"correctness: {len(res['checks'])} checks against an fp32 reference, "
            f"worst relative error {worst:.1e} (bf16 inputs), NaN: {any(x['nan'] for x in res['checks'])}\n"
            f"Llama-3-8B-shaped layer: 32 query heads, 8 KV heads, d = 128, bf16, batch 1\n")
    rows = [dict(r, ratio=r["ms"] / r["model_ms"]) for r in res["rows"]]
    return head + style.table(rows, {"impl": "implementation", "N": "N", "causal": "causal",
                                     "ms": "measured ms", "tflops": "TFLOP/s",
                                     "model_ms": "model ms", "ratio": "measured/model",
                                     "model_bound": "model: bound by"},
                              {"causal": str, "ms": ".3f", "tflops": ".0f", "model_ms": ".3f",
                               "ratio": ".1f"})


def prefill_figure(res: dict, causal: bool = False):
    """Measured time against N for each implementation (solid) and the model (dashed), log-log."""
    fig = style.new_figure(2, height=3.6)
    ax_t, ax_f = fig.axes
    rows = [r for r in res["rows"] if r["causal"] == causal]
    for impl in ("standard", "triton", "sdpa"):
        rs = sorted((r for r in rows if r["impl"] == impl), key=lambda r: r["N"])
        if not rs:
            continue
        N = np.array([r["N"] for r in rs])
        ax_t.plot(N, [r["ms"] for r in rs], "-o", ms=4, color=IMPL_COLORS[impl], label=IMPL_LABELS[impl])
        ax_t.plot(N, [r["model_ms"] for r in rs], "--", color=IMPL_COLORS[impl], alpha=0.7)
        ax_f.plot(N, [r["tflops"] for r in rs], "-o", ms=4, color=IMPL_COLORS[impl], label=IMPL_LABELS[impl])
    peak = res["ceilings"]["bf16_matmul_flops"] / 1e12
    ax_f.axhline(peak, color=style.COLORS["bound"], ls=":", label=f"measured bf16 matmul ({peak:.0f})")
    for ax in (ax_t, ax_f):
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.25)
        ax.set_xlabel("sequence length N (tokens)")
    ax_t.set_yscale("log")
    ax_t.set_ylabel("time per layer (ms)")
    ax_f.set_ylabel("attention FLOP/s achieved (TFLOP/s)")
    ax_f.set_ylim(0, peak * 1.15)
    mask = "causal" if causal else "no mask"
    ax_t.set_title(f"{res['device']}: measured (solid) vs model (dashed), {mask}", fontsize=10)
    ax_f.set_title(f"Throughput, {mask}, bf16, d=128", fontsize=10)
    ax_t.legend(fontsize=style.SMALL, loc="upper left")
    style.legend_below(ax_f, ncol=1)
    return fig


# --- decode (notebook 04) -----------------------------------------------------------------------

def decode_results(name: str = "h200_decode.json") -> dict:
    """The recorded split-KV decode benchmark (`python -m attnlab.gpu.bench_decode`)."""
    return _recorded(name)


def live_decode(**kw) -> dict | None:
    """Run the decode benchmark here if a CUDA GPU is visible (about 30 s); None otherwise."""
    return _live("bench_decode", **kw)


def decode_summary(res: dict) -> str:
    """Provenance and, per (batch, context, splits), measured time beside the model's."""
    head = (f"{res['device']} ({res['sms']} SMs), torch {res['torch']}, triton {res['triton']}, "
            f"measured {res['date']}; copy bandwidth measured {res['copy_bytes_per_s'] / 1e12:.2f} TB/s\n"
            f"Llama-3-8B layer (32 query heads, 8 KV heads, d = 128, bf16); time per call from CUDA-graph "
            f"replay; model = attnlab.hardware.decode_time for the {res['model_gpu']}\n")
    errs = [r["rel_err"] for r in res["rows"] if r["rel_err"] is not None]
    head += (f"correctness: the {len(errs)} configurations with batch x context <= 64K (column 'checked') "
             f"against an fp32 reference, worst relative error {max(errs):.1e}\n"
             f"measured/model: against the model at the measured copy bandwidth\n")
    rows = []
    for r in res["rows"]:
        base = next(x for x in res["rows"] if x["batch"] == r["batch"] and x["context"] == r["context"]
                    and x["splits"] == 1)
        rows.append(dict(r, speedup=base["us"] / r["us"], ratio=r["us"] / r["model_us_measured_bw"],
                         tbs=r["achieved_bytes_per_s"] / 1e12,
                         checked="yes" if r["rel_err"] is not None else "-"))
    return head + style.table(rows, {"batch": "batch", "context": "context", "splits": "splits",
                                     "blocks": "blocks", "us": "measured us", "model_us": "model us",
                                     "model_us_measured_bw": "model us (measured bw)",
                                     "ratio": "measured/model", "speedup": "vs no split",
                                     "tbs": "KV TB/s", "checked": "checked"},
                              {"us": ".1f", "model_us": ".1f", "model_us_measured_bw": ".1f",
                               "ratio": ".2f", "speedup": ".2f", "tbs": ".2f"})


def decode_figure(res: dict, cases=((1, 32768), (2, 16384), (16, 8192), (256, 1024), (256, 4096),
                                    (256, 32768))):
    """Measured time per split count (solid) against the model (dashed), one line per case."""
    fig = style.new_figure(1, height=3.8, width=9.5)
    ax = fig.axes[0]
    colors = [style.COLORS["fa1"], style.COLORS["fa2"], style.COLORS["memory"], style.COLORS["standard"],
              style.COLORS["compute"], "#8c564b"]
    for (batch, ctx), c in zip(cases, colors):
        rs = sorted((r for r in res["rows"] if r["batch"] == batch and r["context"] == ctx),
                    key=lambda r: r["splits"])
        if not rs:
            continue
        s = [r["splits"] for r in rs]
        ax.plot(s, [r["us"] for r in rs], "-o", color=c, ms=4, label=f"batch {batch}, context {ctx:,}")
        ax.plot(s, [r["model_us_measured_bw"] for r in rs], "--", color=c, alpha=0.7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.grid(True, alpha=0.25)
    ax.set_xlabel("KV splits per (request, KV head)")
    ax.set_ylabel("decode attention time per layer (µs)")
    ax.set_title(f"{res['device']}: split-KV measured (solid) vs model at measured bandwidth (dashed)",
                 fontsize=9)
    ax.legend(fontsize=style.SMALL, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return fig


def _measurement(name: str) -> dict:
    with open(data_path("gpus.json").parent / "measurements" / name) as f:
        return json.load(f)


def paged_results(name: str = "h200-2026-12-01-paged.json") -> dict:
    """A recorded `python -m attnlab.gpu.bench_paged` run from data/measurements/."""
    return _measurement(name)


def variants_summary(names=("h200-2026-12-01-variants-4x4096.json",
                            "h200-2026-12-01-variants-1x16384.json")) -> str:
    """Recorded `python -m attnlab.gpu.bench_variants` runs: `variant_prefill` (the variant compiled
    into the kernel) beside compiled FlexAttention and, for plain causal, SDPA; TFLOP/s on the
    FLOPs the mask leaves, and the best peer's time over ours (above 1: ours is faster)."""
    runs = [_measurement(n) for n in names]
    r0 = runs[0]
    rows = []
    for res in runs:
        for key in dict.fromkeys((r["batch"], r["N"], r["variant"]) for r in res["rows"]):
            at = {r["impl"]: r for r in res["rows"] if (r["batch"], r["N"], r["variant"]) == key}
            peers = {k: r for k, r in at.items() if k != "ours"}
            best = min(peers, key=lambda k: peers[k]["us"])
            rows.append({"case": f"{key[0]} x {key[1]:,}", "variant": key[2], "ours": at["ours"]["tflops"],
                         "flex": at.get("flex", {}).get("tflops", float("nan")), "best": best,
                         "ratio": peers[best]["us"] / at["ours"]["us"]})
    head = (f"{r0['device']} ({r0['sms']} SMs), {r0['date']}: torch {r0['torch']}, Triton {r0['triton']}; "
            f"bf16, {r0['shape']['heads']}/{r0['shape']['kv_heads']} heads, d = {r0['shape']['head_dim']}\n")
    return head + style.table(rows, {"case": "batch x N", "variant": "variant", "ours": "ours TFLOP/s",
                                     "flex": "FlexAttention TFLOP/s", "best": "best peer",
                                     "ratio": "best peer time / ours"},
                              {"ours": ".0f", "flex": ".0f", "ratio": ".2f"})


def live_paged(**kw) -> dict | None:
    """Run the paged decode benchmark here if a CUDA GPU is visible (a minute or two; FlashInfer's
    columns need `pip install flashinfer-python`); None otherwise."""
    return _live("bench_paged", **kw)


def paged_summary(res: dict) -> str:
    """Per batch x context and page size: our paged decode (best split and the automatic one)
    beside FlashInfer's decode wrapper (tensor cores on, off), our kernel on contiguous KV and
    cuDNN, in µs, and FlashInfer (tensor cores) over ours: above 1 means ours is faster."""
    head = (f"{res['device']} ({res['sms']} SMs), {res['date']}: torch {res['torch']}, Triton {res['triton']}, "
            f"FlashInfer {res['flashinfer']}; bf16, {res['shape']['heads']}/{res['shape']['kv_heads']} heads, "
            f"d = {res['shape']['head_dim']}; µs per call, CUDA-graph replay\n")
    rows = []
    for (b, n) in sorted({(r["batch"], r["context"]) for r in res["rows"]}):
        case = [r for r in res["rows"] if (r["batch"], r["context"]) == (b, n)]
        flat: dict = {}
        for r in case:                                   # the best split of each contiguous kernel
            if r["page_size"] is None:
                flat[r["impl"]] = min(r["us"], flat.get(r["impl"], float("inf")))
        for ps in sorted({r["page_size"] for r in case if r["page_size"]}, reverse=True):
            at = [r for r in case if r["page_size"] == ps]
            ours = min(r["us"] for r in at if r["impl"] == "paged" and not r.get("auto"))
            auto = next(r["us"] for r in at if r["impl"] == "paged" and r.get("auto"))
            fi = {r["impl"]: r["us"] for r in at if r["impl"].startswith("flashinfer")}
            rows.append({"case": f"{b} x {n // 1024}K", "ps": ps, "ours": ours, "auto": auto,
                         "fi_tc": fi.get("flashinfer-tc", float("nan")), "fi": fi.get("flashinfer", float("nan")),
                         "contig": flat.get("contiguous", float("nan")), "cudnn": flat.get("sdpa-cudnn", float("nan")),
                         "ratio": fi.get("flashinfer-tc", float("nan")) / ours})
    return head + style.table(
        rows, {"case": "batch x context", "ps": "page", "ours": "ours (best split)", "auto": "ours (auto)",
               "fi_tc": "FlashInfer TC", "fi": "FlashInfer CUDA cores", "contig": "ours contiguous",
               "cudnn": "cuDNN contiguous", "ratio": "FlashInfer TC / ours"},
        {k: ".1f" for k in ("ours", "auto", "fi_tc", "fi", "contig", "cudnn")} | {"ratio": ".2f"})
