"""Notebook 04's two tables of the recorded GPU run, each at most 100 characters wide: the split-KV
decode kernel beside the time model (`split_measured_table`), and the KV bandwidth of each decode
kernel at its best split (`bandwidth_table`). The rows come from the run file through
`attnlab.explore.measured`; the header names the device, date, versions and ceilings (the commit
and the history of a section stay in the run file and in docs/gpu-notes.md)."""

from __future__ import annotations

import textwrap

from attnlab.explore import style
from attnlab.explore.measured import impl_name, section

__all__ = ["run_header", "split_measured_table", "bandwidth_table"]

WIDTH = 100


def run_header(res: dict, name: str | None = None) -> str:
    """Device, SMs, date, library versions and the measured ceilings of run `res` (of its section
    `name` where the run records them per section), wrapped at 100 characters."""
    sec = {} if name is None else res.get("sections", {}).get(name, {})
    c = res.get("ceilings_by_section", {}).get(name, res["ceilings"])
    text = (
        f"{res['device']} ({res['sms']} SMs), measured {sec.get('date', res['date'])}: torch {res['torch']}, "
        f"Triton {res['triton']}, FlashInfer {res.get('flashinfer')}; ceilings measured in the same run: "
        f"copy {c['copy_bytes_per_s'] / 1e12:.2f} TB/s, bf16 matmul {c['bf16_matmul_flops'] / 1e12:.0f} "
        f"TFLOP/s [{res.get('file', '')}]"
    )
    return textwrap.fill(text, WIDTH)


def split_measured_table(sec: dict) -> str:
    """The decode section (`measured.section(run, "decode")`: its settings and schema rows): per
    (batch, context, splits) the measured time beside the model's, in µs, with the speedup over no
    split and the KV bandwidth (the row's TB/s: K and V bytes over the time)."""
    head = (
        f"{sec['device']} ({sec['sms']} SMs), torch {sec['torch']}, Triton {sec['triton']}, measured "
        f"{sec['date']}; Llama-3-8B layer (32 query heads, 8 KV heads, d = 128, bf16); time per call "
        f"from CUDA-graph replay. model: attnlab.machine.hardware.decode_time for the {sec['model_gpu']} "
        f"at its datasheet bandwidth; model@copy: at the copy bandwidth measured in the run, "
        f"{sec['copy_bytes_per_s'] / 1e12:.2f} TB/s; ratio: measured / model@copy; speedup: against no "
        f"split; TB/s: KV bytes over the measured time."
    )
    errs = [r["error"] for r in sec["rows"] if r["error"] is not None]
    head += (
        f" checked: the {len(errs)} configurations with batch x context <= 64K, against an fp32 "
        f"reference, worst relative error {max(errs):.1e}."
    )
    time = {tuple(r["shape"][k] for k in ("batch", "context", "splits")): r["time_us"] for r in sec["rows"]}
    rows = []
    for r in sec["rows"]:
        b, n, s = (r["shape"][k] for k in ("batch", "context", "splits"))
        rows.append(
            dict(
                r["extra"],
                batch=b,
                context=n,
                splits=s,
                us=r["time_us"],
                speedup=time[(b, n, 1)] / r["time_us"],
                ratio=r["time_us"] / r["extra"]["model_us_measured_bw"],
                tbs=r["tbps"],
                checked="yes" if r["error"] is not None else "-",
            )
        )
    return (
        textwrap.fill(head, WIDTH)
        + "\n"
        + style.table(
            rows,
            {
                "batch": "batch",
                "context": "context",
                "splits": "splits",
                "blocks": "blocks",
                "us": "measured µs",
                "model_us": "model",
                "model_us_measured_bw": "model@copy",
                "ratio": "ratio",
                "speedup": "speedup",
                "tbs": "TB/s",
                "checked": "checked",
            },
            {
                "us": ".1f",
                "model_us": ".1f",
                "model_us_measured_bw": ".1f",
                "ratio": ".2f",
                "speedup": ".2f",
                "tbs": ".2f",
            },
        )
    )


def bandwidth_table(res: dict) -> str:
    """KV bandwidth (TB/s) of decode per batch x context in the paged section: ours (contiguous
    and paged, best split), cuDNN and FlashInfer's tensor-core decode, and the best of them as a
    fraction of the measured copy ceiling."""
    sec = section(res, "paged")
    copy = res.get("ceilings_by_section", {}).get("paged", res["ceilings"])["copy_bytes_per_s"]
    rows = []
    for b, n in sorted({(r["shape"]["batch"], r["shape"]["context"]) for r in sec["rows"]}):
        at = [r for r in sec["rows"] if (r["shape"]["batch"], r["shape"]["context"]) == (b, n)]

        def best(impl, ps=None):
            us = [r["time_us"] for r in at if impl_name(r) == impl and r["shape"].get("page_size") == ps]
            return min(us) if us else float("nan")

        t = {
            "contig": best("contiguous"),
            "paged": best("paged", 16),
            "cudnn": best("sdpa-cudnn"),
            "fi": best("flashinfer-tc", 16),
        }
        nbytes = at[0]["bytes"]
        row = {"case": f"{b} x {n // 1024}K", "MB": nbytes / 1e6}
        row.update({k: nbytes / (v * 1e-6) / 1e12 for k, v in t.items()})
        row["frac"] = max(row[k] for k in t) * 1e12 / copy
        rows.append(row)
    head = (
        run_header(res, "paged")
        + "\n"
        + textwrap.fill(
            "Llama-3-8B decode (32/8 heads, d = 128, bf16); TB/s of bytes = K, V, q read and o written once; "
            "best split of each kernel; FlashInfer and our paged kernel at page size 16",
            WIDTH,
        )
        + "\n"
    )
    return head + style.table(
        rows,
        {
            "case": "batch x context",
            "MB": "MB moved",
            "contig": "ours contiguous",
            "paged": "ours paged",
            "cudnn": "cuDNN",
            "fi": "FlashInfer TC",
            "frac": "best / copy ceiling",
        },
        {"MB": ".0f", "contig": ".2f", "paged": ".2f", "cudnn": ".2f", "fi": ".2f", "frac": ".2f"},
    )
