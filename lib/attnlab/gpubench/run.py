"""One GPU harness for the course: every kernel beside the libraries a user would pick instead,
measured in one run on one GPU, written to one file.

    python -m attnlab.gpubench                          # every section -> data/measurements/<gpu>-<date>.json
    python -m attnlab.gpubench --sections prefill,decode --out run.json --merge
    python -m attnlab.gpubench --dry                    # tiny sizes on a CPU (Triton interpreter): the code path

Sections (each a harness of its own, runnable alone; this module runs them in order and keeps
their full results under "sections"):

    prefill    gpubench.prefill    ours (FA2, Hopper) vs SDPA flash / cuDNN, FlexAttention, FlashInfer fa2 / fa3
    decode     gpubench.decode     split-KV decode, a split sweep measured beside `hardware.decode_time`
    paged      gpubench.paged      paged decode vs contiguous, SDPA and FlashInfer's decode wrapper
    cascade    gpubench.cascade    cascade decode vs paged decode over full tables and FlashInfer's wrappers
    variants   gpubench.variants   variants compiled into the prefill kernel vs compiled FlexAttention
    scheduled  gpubench.scheduled  the persistent kernel under three plans, replayed in one CUDA graph

The ceilings (copy bandwidth, bf16 matmul rate) are measured once, first, and every section reads
against them. Beside the sections the file holds one flat table, "rows", with the same columns for
every row: section, case, impl, us, flops, bytes, tflops, tb_per_s, frac (of the ceiling the row
is bound by: matmul rate if it has FLOPs and is compute-heavy, else copy bandwidth), x_best (the
fastest peer's time in the same case / this row's: above 1, faster than every library), err.
The file is rewritten after each section, so a timeout keeps what came before.
"""
from __future__ import annotations

import importlib
import json
import os
import re
import sys
import traceback

from attnlab.gpubench.cli import write_json

__all__ = ["SECTIONS", "OURS", "flatten", "run", "default_path", "main"]

SECTIONS = ("prefill", "decode", "paged", "cascade", "variants", "scheduled")
#: impl names that are this course's kernels, by section; every other impl is a peer
OURS = {"prefill": ("ours-fa2", "ours-hopper"), "decode": ("ours",), "paged": ("paged", "contiguous"),
        "cascade": ("cascade", "paged", "paged-unique"), "variants": ("ours", "ours-hopper"),
        "scheduled": ("per-request", "fixed", "balanced", "paged")}
#: the keys that make a row's case (all rows of a case are compared), and those that name its impl
_CASE = {"prefill": ("batch", "N", "causal"), "decode": ("batch", "context"), "paged": ("batch", "context"),
         "cascade": ("n", "prefix", "unique"), "variants": ("batch", "N", "variant"),
         "scheduled": ("batch",)}
_IMPL = {"prefill": (), "decode": ("splits",), "paged": ("page_size", "splits", "auto"),
         "cascade": ("splits", "auto"), "variants": (), "scheduled": ()}


def _case(section: str, r: dict) -> str:
    parts = []
    for k in _CASE[section]:
        v = r.get(k)
        parts.append(("causal" if v else "") if k == "causal" else f"{k} {v}")
    return ", ".join(p for p in parts if p)


def _impl(section: str, r: dict) -> str:
    name = r.get("impl", "ours")
    for k in _IMPL[section]:
        v = r.get(k)
        if k == "auto":
            name += " auto" if v else ""
        elif v is not None:
            name += f" {'ps' if k == 'page_size' else 's'}{v}"
    return name


def flatten(section: str, res: dict, ceil: dict) -> list[dict]:
    """One section's rows in the shared columns (see the module's docstring)."""
    peak, copy = ceil["bf16_matmul_flops"], ceil["copy_bytes_per_s"]
    rows = []
    for r in res.get("rows", []):
        us = r["us"]
        flops = r.get("flops")
        nbytes = r.get("bytes", r.get("kv_bytes"))
        frac = None
        if flops and (not nbytes or flops / peak > nbytes / copy):
            frac = flops / us * 1e6 / peak
        elif nbytes:
            frac = nbytes / us * 1e6 / copy
        rows.append({"section": section, "case": _case(section, r), "impl": _impl(section, r),
                     "ours": r.get("impl", "ours").split(" ")[0] in OURS[section], "us": us,
                     "flops": flops, "bytes": nbytes, "tflops": flops / us * 1e-6 if flops else None,
                     "tb_per_s": nbytes / us * 1e-6 if nbytes else None, "frac": frac,
                     "err": r.get("max_err", r.get("rel_err")), "model_us": r.get("model_us_measured_bw",
                                                                                 r.get("model_us"))})
    for row in rows:
        peers = [x["us"] for x in rows if x["case"] == row["case"] and not x["ours"] and x is not row
                 and x["impl"] != "standard"]
        row["x_best"] = min(peers) / row["us"] if peers else None
    return rows


def default_path(device: str, date: str) -> str:
    """data/measurements/<gpu>-<date>.json, the gpu the last word of the device's name (h200)."""
    from attnlab.machine.hardware import data_path
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower().split()[-1]).strip("-") or "gpu"
    return str(data_path("gpus.json").parent / "measurements" / f"{slug}-{date}.json")


def run(sections=SECTIONS, *, dry: bool = False, out: str | None = None, merge: bool = False) -> dict:
    import torch

    from attnlab.gpubench.paged import _header
    from attnlab.gpubench.prefill import ceilings
    cuda = torch.cuda.is_available()
    res = _header(torch, {})
    res.pop("shape")
    res.pop("rows")
    res.pop("copy_bytes_per_s", None)
    res["ceilings"] = ceilings(torch) if cuda else {"copy_bytes_per_s": 1e9, "bf16_matmul_flops": 1e10}
    if out is None and not dry:                           # out="": write nothing
        out = default_path(res["device"], res["date"])
    if merge and out and os.path.exists(out):
        with open(out) as f:
            old = json.load(f)
        res["sections"] = old.get("sections", {})
        res["ceilings_by_section"] = old.get("ceilings_by_section", {})
        res["commits_by_section"] = old.get("commits_by_section", {})
    for key in ("sections", "ceilings_by_section", "commits_by_section"):
        res.setdefault(key, {})
    c = res["ceilings"]
    print(f"{res['device']}: torch {res['torch']}, triton {res['triton']}; copy "
          f"{c['copy_bytes_per_s'] / 1e12:.2f} TB/s, bf16 matmul {c['bf16_matmul_flops'] / 1e12:.0f} TFLOP/s",
          flush=True)

    def save():
        res["rows"] = [row for name, sec in res["sections"].items()
                       for row in flatten(name, sec, res["ceilings_by_section"].get(name, c))]
        write_json(out, res)
    for name in sections:
        print(f"=== {name}", flush=True)
        try:
            mod = importlib.import_module(f".{name}", __package__)
            kw = {"ceil": c} if name in ("prefill", "decode") else {}
            if dry and name != "decode":                  # decode picks its own dry cases
                kw["cases"] = mod.DRY["cases"]
            sec = mod.run(dry=dry, **kw)
        except Exception:                                 # noqa: BLE001 - keep the other sections
            print(f"{name}: failed\n" + traceback.format_exc(limit=6), flush=True)
            continue
        for key in ("flashinfer",):
            if sec.get(key) and not res.get(key):
                res[key] = sec[key]
        res["sections"][name] = sec
        res["ceilings_by_section"][name] = c
        res["commits_by_section"][name] = res.get("commit")
        save()
    save()
    return res


def table(res: dict) -> str:
    lines = [f"{res['device']} ({res['sms']} SMs), torch {res['torch']}, triton {res['triton']}, "
             f"flashinfer {res.get('flashinfer')}, commit {res.get('commit')}",
             f"{'section':9s} {'case':34s} {'impl':22s} {'us':>9} {'TFLOP/s':>7} {'TB/s':>5} {'frac':>5} "
             f"{'x_best':>6} {'err':>7}"]

    def f(v, spec):
        return format(v, spec) if v is not None else " " * len(format(0.0, spec))
    for r in res["rows"]:
        lines.append(f"{r['section']:9s} {r['case'][:34]:34s} {r['impl'][:22]:22s} {r['us']:9.1f} "
                     f"{f(r['tflops'], '7.1f')} {f(r['tb_per_s'], '5.2f')} {f(r['frac'], '5.2f')} "
                     f"{f(r['x_best'], '6.2f')} {f(r['err'], '7.1e')}")
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"subset of {','.join(SECTIONS)}")
    ap.add_argument("--out", help="result file (default data/measurements/<gpu>-<date>.json; none on --dry)")
    ap.add_argument("--merge", action="store_true", help="keep the other sections already in --out")
    ap.add_argument("--dry", action="store_true", help="tiny sizes; on a CPU under the Triton interpreter")
    args = ap.parse_args(argv)
    sections = tuple(s for s in args.sections.split(",") if s)
    if set(sections) - set(SECTIONS):
        ap.error(f"--sections takes {','.join(SECTIONS)}; got {args.sections}")
    import torch
    if args.dry and not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    res = run(sections, dry=args.dry, out=args.out, merge=args.merge)
    print(table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
