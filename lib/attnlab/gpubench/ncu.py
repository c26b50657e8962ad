"""The kernels behind data/measurements/h200-2026-12-01-ncu.json, run once each for Nsight Compute,
and the distillation of its report into that file's shape.

    ncu --clock-control none --profile-from-start off --set full -f -o prof \\
        python -m attnlab.gpubench.ncu                 # on a CUDA machine: each call once
    ncu -i prof.ncu-rep --page details --csv > details.csv
    ncu -i prof.ncu-rep --page raw --csv --metrics $(python -m attnlab.gpubench.ncu --metrics) > raw.csv
    python -m attnlab.gpubench.ncu --summarize details.csv raw.csv --out profile.json
    TRITON_INTERPRET=1 python -m attnlab.gpubench.ncu --dry   # tiny sizes on a CPU: the calls run
    ... python -m attnlab.gpubench.ncu --group gluon      # the Gluon prefill's first and last steps

Group "recorded" (the default) is the 2026-12-01 profile; group "scheduled" the plan-driven
decoder's two kernels at batches 1 and 8 (balanced plan, with and without the 128-token floor);
group "gaps" `paged_decode` (cut by split_from_lengths) at the long-tailed batches 4, 8 and 16 and the
d = 64 prefill at 4 x 4K causal (Gluon defaults, Hopper kernel, cuDNN): where targets stayed short;
group "gluon" the FA3 steps of `kernels.gluon_fa3` at 1 x 4K, 32 heads, d = 128 (as in the
recorded steps file): the first step (TMA + wgmma, 8 warps that load and compute), the defaults
and the last step (+ intra-warpgroup overlap), without and with the causal mask, beside
FlashInfer's FA3 template and cuDNN on the same inputs; group "persistent" the Gluon prefill's
persistent scheduler at 4 x 4K causal (MHA, d = 128) beside one program per tile, FlashInfer's FA3
batch wrapper and cuDNN (`gpubench.prefill_fa3`'s launches); group "serving" MLA decode at 32 x 8K
and a mixed batch (2K chunk + 64 decodes), ours; "serving-fi" FlashInfer's FA3 on both. The raw page also gives every warp-stall
reason (cycles per issued instruction), which `summarize` collects under "stalls".

Each group is declared in `gpubench.ncu_groups` as launches of the sections and sweeps that
measure the same kernels (`gpubench.paged`, `gpubench.prefill`, `sweeps.paged`, `sweeps.ragged`),
on their inputs: a kernel is profiled as its benchmark calls it.

Each call is warmed up three times, then made once between cudaProfilerStart and Stop, so the
report holds exactly the kernels of the calls, in order (a decode call launches two: split,
merge). Llama-3-8B shapes (32 query heads, 8 KV heads, d = 128, bf16; the prefill calls 32 heads
for K and V too). Decode: contiguous split_kv_decode at its best split, and paged_decode over
gpubench.paged's shuffled NHD pool of page size 16 with the launch pinned to what the recorded
profile measured (1 x 32K: 128-key tiles, 2 stages; 16 x 8K: 64-key tiles, 2 stages), without and
with the page-id prefetch, beside FlashInfer's tensor-core decode on the same pool. Prefill at
1 x 4K: the Hopper kernel (no mask, causal), FlashInfer's FA3 template and cuDNN (no mask). Calls
whose library is missing are left out, and say so.
"""

from __future__ import annotations

import csv
import json
import re
import sys

from attnlab.gpubench import ncu_groups

__all__ = ["calls", "profile", "summarize", "RAW_METRICS", "STALL_METRICS", "GROUPS", "main"]

#: Metrics read from the raw page beside the details page's sections -> key in the summary
RAW_METRICS = {
    "dram__bytes_read.sum.per_second": "dram_read_tb_per_s",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pipe_active_pct",
}
#: a details-page duration's unit -> microseconds (ncu writes each kernel's in the unit that suits it)
_TO_US = {
    "ns": 1e-3,
    "nsecond": 1e-3,
    "us": 1.0,
    "usecond": 1.0,
    "ms": 1e3,
    "msecond": 1e3,
    "s": 1e6,
    "second": 1e6,
}
#: details-page metric name -> key in the summary
DETAILS = {
    "Duration": "duration_us",
    "DRAM Throughput": "dram_pct",
    "Compute (SM) Throughput": "sm_pct",
    "Achieved Occupancy": "achieved_occupancy_pct",
    "Theoretical Occupancy": "theoretical_occupancy_pct",
    "Registers Per Thread": "registers",
    "Dynamic Shared Memory Per Block": "dyn_smem_kb",
    "Waves Per SM": "waves_per_sm",
    "Issue Slots Busy": "issue_busy_pct",
    "Warp Cycles Per Issued Instruction": "cycles_per_issue",
    "Block Limit Registers": "block_limit_registers",
    "Block Limit Shared Mem": "block_limit_smem",
    "L2 Hit Rate": "l2_hit_pct",
}
#: every stall reason of the warp-state section, as ncu --metrics takes them
STALL_METRICS = r"regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
_STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
GROUPS = tuple(ncu_groups.GROUPS)  # recorded, gluon, scheduled, gaps, persistent, serving(-fi)
_RULES = ("CPIStall", "TheoreticalOccupancy", "IssueSlotUtilization", "HighPipeUtilization")


def calls(torch, dry: bool = False, group: str = "recorded") -> list[tuple[str, int, object]]:
    """(name, kernels it launches, fn) for every call of the profile that can run here."""
    return ncu_groups.calls(group, torch, dry)


def profile(torch, todo) -> list[tuple[str, int]]:
    """Warm each call up (a call that fails is left out, and says so), then make each once inside
    the profiler's range. Returns the (name, kernels) of the calls made, in order."""
    ok = []
    for name, kernels, fn in todo:
        try:
            for _ in range(3):
                fn()
            ok.append((name, kernels, fn))
        except Exception as e:  # noqa: BLE001
            print(f"left out: {name} ({type(e).__name__}: {str(e)[:200]})", flush=True)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
    for name, _, fn in ok:
        fn()
        if cuda:
            torch.cuda.synchronize()
        print(f"profiled: {name}", flush=True)
    if cuda:
        torch.cuda.cudart().cudaProfilerStop()
    return [(name, kernels) for name, kernels, _ in ok]


def _number(text: str):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return text


def summarize(details_csv: str, raw_csv: str, made: list[tuple[str, int]]) -> list[dict]:
    """One entry per profiled kernel: the call that launched it (`made`, as `profile` returns),
    the kernel's name, grid and block, the DETAILS metrics, RAW_METRICS and the first sentence
    of each of the profiler's stall / occupancy / issue / pipe notes."""
    if not made or any(
        not (
            isinstance(c, (tuple, list))
            and len(c) == 2
            and isinstance(c[0], str)
            and isinstance(c[1], int)
            and not isinstance(c[1], bool)
            and c[1] >= 1
        )
        for c in made
    ):
        raise ValueError(
            f"made must list (call name, kernels >= 1) pairs, as profile() returns; got {made!r:.200}"
        )
    with open(details_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    with open(raw_csv, newline="") as f:
        raw = list(csv.reader(f))
    if not rows or "ID" not in rows[0] or len(raw) < 2 or "ID" not in raw[0]:
        raise ValueError(
            f"{details_csv} and {raw_csv} must be ncu --csv exports of the details and raw pages "
            "(an ID column, and in the raw page a units row under the header)"
        )
    head = raw[0]
    if raw[1][head.index("ID")] != "":
        raise ValueError(f"{raw_csv}: the second row must be the units row ncu --page raw --csv writes")
    by_id = {r[head.index("ID")]: dict(zip(head, r)) for r in raw[2:]}  # row 1 holds the units
    kernels: dict[int, dict] = {}
    for r in rows:
        e = kernels.setdefault(
            int(r["ID"]),
            {
                "kernel": r["Kernel Name"][:60],
                "grid": r["Grid Size"],
                "block": r["Block Size"],
                "notes": set(),
            },
        )
        if r["Metric Name"] in DETAILS:
            value = _number(r["Metric Value"])
            if r["Metric Name"] == "Duration" and isinstance(value, float):  # ncu picks ns, us, ms or s
                value *= _TO_US.get(r.get("Metric Unit", "us"), 1.0)
            e[DETAILS[r["Metric Name"]]] = value
        desc = r.get("Rule Description") or ""
        if r.get("Rule Name") in _RULES and desc and "Warp Stall Sampling" not in desc:
            e["notes"].add(desc.split(". ")[0][:300].rstrip(".") + ".")
    want = sum(k for _, k in made)
    if len(kernels) != want:
        raise ValueError(f"the report holds {len(kernels)} kernels; the calls made launch {want}")
    out, ids = [], iter(sorted(kernels))
    for name, count in made:
        for _ in range(count):
            i = next(ids)
            e = kernels[i]
            raw_row = by_id[str(i)]
            stalls = {
                _STALL.match(m).group(1): _number(x)
                for m, x in raw_row.items()
                if _STALL.match(m) and isinstance(_number(x), float)
            }
            out.append(
                {
                    "call": name,
                    **{k: v for k, v in e.items() if k != "notes"},
                    **{key: _number(raw_row[m]) for m, key in RAW_METRICS.items() if m in raw_row},
                    **({"stalls": stalls} if stalls else {}),
                    "ncu_notes": sorted(e["notes"]),
                }
            )
    return out


def main(argv=None) -> int:
    from attnlab.gpubench.cli import Parser, describe, check_arg, existing_file, need_gpu, out_path

    ap = Parser(prog="python -m attnlab.gpubench.ncu", description=describe(__doc__))
    ap.add_argument("--dry", action="store_true", help="tiny sizes; on a CPU under the Triton interpreter")
    ap.add_argument("--metrics", action="store_true", help="print RAW_METRICS for ncu --metrics, and stop")
    ap.add_argument("--group", default="recorded", choices=GROUPS, help="which calls to profile")
    ap.add_argument("--summarize", nargs=2, type=existing_file, metavar=("DETAILS_CSV", "RAW_CSV"))
    ap.add_argument(
        "--made",
        help="the calls a profiling run made: written by a run (default ncu_calls.json, "
        "none for --dry), read by --summarize",
    )
    ap.add_argument("--out", type=out_path, help="with --summarize: write the summary as JSON here")
    args = ap.parse_args(argv)
    if args.metrics:
        print(",".join([*RAW_METRICS, STALL_METRICS]))
        return 0
    if args.out is not None and not args.summarize:
        ap.error("argument --out: writes the summary, so it needs --summarize")
    if args.summarize:
        path = args.made or "ncu_calls.json"
        try:
            with open(path) as f:
                made = [tuple(x) if isinstance(x, list) else x for x in json.load(f)]
            doc = {"kernels": summarize(*args.summarize, made)}
        except (OSError, ValueError) as e:  # no calls file, not JSON, not the report of those calls
            ap.error(f"argument --summarize: {e}")
        text = json.dumps(doc, indent=1)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text + "\n")
        else:
            print(text)
        return 0
    if args.made:  # a profiling run writes it: its folder must exist
        check_arg(ap, "--made", out_path, args.made)
    need_gpu(ap, args.dry)
    import torch

    made = profile(torch, calls(torch, dry=args.dry, group=args.group))
    if args.made or not args.dry:
        with open(args.made or "ncu_calls.json", "w") as f:
            json.dump(made, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
