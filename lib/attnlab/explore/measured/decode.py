"""Notebook 04's views of a run: split-KV decode against `hardware.decode_time` and the KV
bandwidth of every decode kernel against the measured copy ceiling."""
from __future__ import annotations

from attnlab.explore import style
from attnlab.explore.measured.reader import provenance, section

__all__ = ["decode_summary", "decode_figure", "decode_bandwidth_summary"]


def decode_summary(res: dict) -> str:
    """Provenance and, per (batch, context, splits), measured time beside the model's."""
    head = (f"{res['device']} ({res['sms']} SMs), torch {res['torch']}, triton {res['triton']}, "
            f"measured {res['date']}; copy bandwidth measured {res['copy_bytes_per_s'] / 1e12:.2f} TB/s\n"
            f"Llama-3-8B layer (32 query heads, 8 KV heads, d = 128, bf16); time per call from CUDA-graph "
            f"replay; model = attnlab.machine.hardware.decode_time for the {res['model_gpu']}\n")
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
