"""Formatters of recorded GPU results beside the model's predictions: split-KV decode against
`hardware.decode_time` (notebook 04), paged decode against FlashInfer and the variants against
FlexAttention (notebook 05). Each takes one section of a run (`runs.section(run, "decode")`, a
file under data/measurements/ or a live run); `runs` holds the rest of the run's views.
"""
from __future__ import annotations

from attnlab.explore import style

__all__ = ["decode_summary", "decode_figure", "paged_summary", "variants_summary", "not_live"]


def not_live() -> str:
    """What the optional GPU cell prints when it cannot measure here, and why."""
    from attnlab import kernels as gpu
    return f"{gpu.unavailable_reason()}: the recorded H200 measurements above stand."


# --- decode (notebook 04) -----------------------------------------------------------------------

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


def variants_summary(res: dict) -> str:
    """A run's variants section (`runs.section(run, "variants")`): per case and variant, the
    TFLOP/s of our two kernels with the variant compiled in (`variant_prefill`, the FA2 loop, and
    `flash_attention_hopper`), of compiled FlexAttention, and the best peer's time over each of
    ours (above 1: ours is faster). TFLOP/s count only the pairs the mask leaves."""
    rows = []
    for key in dict.fromkeys((r["batch"], r["N"], r["variant"]) for r in res["rows"]):
        at = {r["impl"]: r for r in res["rows"] if (r["batch"], r["N"], r["variant"]) == key}
        peers = {k: r for k, r in at.items() if k not in ("ours", "ours-hopper")}
        best = min(peers, key=lambda k: peers[k]["us"])
        nan = {"tflops": float("nan"), "us": float("nan")}
        fa2, hop = at.get("ours", nan), at.get("ours-hopper", nan)
        rows.append({"case": f"{key[0]} x {key[1]:,}", "variant": key[2], "fa2": fa2["tflops"],
                     "hopper": hop["tflops"], "flex": at.get("flex", nan)["tflops"], "best": best,
                     "r_fa2": peers[best]["us"] / fa2["us"], "r_hop": peers[best]["us"] / hop["us"]})
    head = (f"{res['device']} ({res['sms']} SMs), {res['date']}: torch {res['torch']}, Triton {res['triton']}; "
            f"bf16, {res['shape']['heads']}/{res['shape']['kv_heads']} heads, d = {res['shape']['head_dim']}\n")
    return head + style.table(rows, {"case": "batch x N", "variant": "variant", "fa2": "ours FA2 TFLOP/s",
                                     "hopper": "ours Hopper TFLOP/s", "flex": "FlexAttention TFLOP/s",
                                     "best": "best peer", "r_fa2": "best / FA2", "r_hop": "best / Hopper"},
                              {"fa2": ".0f", "hopper": ".0f", "flex": ".0f", "r_fa2": ".2f", "r_hop": ".2f"})


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
