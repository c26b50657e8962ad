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
group "gaps" `paged_decode` (automatic split) at the long-tailed batches 4, 8 and 16 and the
d = 64 prefill at 4 x 4K causal (Gluon defaults, Hopper kernel, cuDNN): where targets stayed short;
group "gluon" the FA3 steps of
`kernels.gluon_fa3` at 1 x 4K, 32 heads, d = 128 (as in the recorded steps file): the first step
(TMA + wgmma, 8 warps that load and compute), the defaults and the last step (+ intra-warpgroup
overlap), without and with the causal mask, beside FlashInfer's FA3 template and cuDNN on the same
inputs. The raw page also gives every warp-stall reason (cycles per issued instruction), which
`summarize` collects under "stalls".

The file is long because each group's calls are written out here, one function a group, beside
the one reader (`summarize`) of the report they make.

Each call is warmed up three times, then made once between cudaProfilerStart and Stop, so the
report holds exactly the kernels of CALLS, in order (a decode call launches two: split, merge).
Llama-3-8B shapes (32 query heads, 8 KV heads, d = 128, bf16). Decode: contiguous split_kv_decode
at its best split, and paged_decode over gpubench.paged's shuffled NHD pool of page size 16 with the
launch pinned to what the recorded profile measured (1 x 32K: 128-key tiles, 2 stages; 16 x 8K:
64-key tiles, 2 stages), without and with the page-id prefetch, beside FlashInfer's tensor-core
decode on the same pool. Prefill at 1 x 4K: the Hopper kernel (no mask, causal), FlashInfer's
FA3 template and cuDNN (no mask). Calls whose library is missing are left out, and say so.
"""
from __future__ import annotations

import csv
import json
import re
import sys

__all__ = ["calls", "profile", "summarize", "RAW_METRICS", "STALL_METRICS", "GROUPS", "main"]

#: Metrics read from the raw page beside the details page's sections -> key in the summary
RAW_METRICS = {"dram__bytes_read.sum.per_second": "dram_read_tb_per_s",
               "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor_pipe_active_pct"}
#: details-page metric name -> key in the summary
DETAILS = {"Duration": "duration_us", "DRAM Throughput": "dram_pct", "Compute (SM) Throughput": "sm_pct",
           "Achieved Occupancy": "achieved_occupancy_pct", "Theoretical Occupancy": "theoretical_occupancy_pct",
           "Registers Per Thread": "registers", "Dynamic Shared Memory Per Block": "dyn_smem_kb",
           "Waves Per SM": "waves_per_sm", "Issue Slots Busy": "issue_busy_pct",
           "Warp Cycles Per Issued Instruction": "cycles_per_issue", "Block Limit Registers": "block_limit_registers",
           "Block Limit Shared Mem": "block_limit_smem", "L2 Hit Rate": "l2_hit_pct"}
#: every stall reason of the warp-state section, as ncu --metrics takes them
STALL_METRICS = r"regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
_STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
GROUPS = ("recorded", "gluon", "scheduled", "gaps")
_RULES = ("CPIStall", "TheoreticalOccupancy", "IssueSlotUtilization", "HighPipeUtilization")


def calls(torch, dry: bool = False, group: str = "recorded") -> list[tuple[str, int, object]]:
    """(name, kernels it launches, fn) for every call of the profile that can run here."""
    if group not in GROUPS:
        raise ValueError(f"group must be one of {GROUPS}, got {group!r}")
    if group == "gluon":
        return _gluon_calls(torch, dry)
    if group == "scheduled":
        return _scheduled_calls(torch, dry)
    if group == "gaps":
        return _gap_calls(torch, dry)
    from attnlab.gpubench.paged import pool
    from attnlab.kernels.decode import split_kv_decode, workspace
    from attnlab.kernels.hopper import flash_attention_hopper
    from attnlab.kernels.paged import paged_decode
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    hq, hkv, d = (4, 2, 32) if dry else (32, 8, 128)
    bf16 = dict(device=dev, dtype=torch.bfloat16)
    out = []
    decode = [(1, 64, 4, 2, 16)] if dry else [(1, 32768, 32, 32, 128), (16, 8192, 2, 4, 64)]
    for B, n, s_contig, s_paged, block_n in decode:
        torch.manual_seed(0)
        q = torch.randn(B, hq, d, **bf16)
        k, v = (torch.randn(B, hkv, n, d, **bf16) for _ in "kv")
        p = pool(torch, k, v, 16, 0)
        wc, wp, o = workspace(B, hq, d, s_contig, dev), workspace(B, hq, d, s_paged, dev), torch.empty_like(q)
        out.append((f"contiguous {B}x{n} s{s_contig}", 2,
                    lambda q=q, k=k, v=v, s=s_contig, w=wc: split_kv_decode(q, k, v, s, ws=w)))
        for pf in (False, True):
            out.append((f"paged ps16 {B}x{n} s{s_paged} bn{block_n} pf{int(pf)}", 2,
                        lambda q=q, p=p, s=s_paged, w=wp, o=o, bn=block_n, pf=pf: paged_decode(
                            q, p.k_pool, p.v_pool, p.indptr, p.indices, p.last, page_size=16, splits=s,
                            out=o, ws=w, block_n=bn, num_stages=None if dry else 2, prefetch=pf)))
        if dev == "cuda":
            try:
                import flashinfer
                wrap = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                    torch.zeros(128 << 20, dtype=torch.uint8, device=dev), "NHD", use_tensor_cores=True)
                wrap.plan(p.indptr, p.indices, p.last, hq, hkv, d, 16, pos_encoding_mode="NONE",
                          q_data_type=q.dtype, kv_data_type=q.dtype)
                out.append((f"flashinfer-tc ps16 {B}x{n}", 2, lambda w=wrap, q=q, p=p: w.run(q, (p.k_pool, p.v_pool))))
            except Exception as e:                        # noqa: BLE001 - FlashInfer absent
                print(f"left out: flashinfer decode ({type(e).__name__}: {str(e)[:100]})", flush=True)
    torch.manual_seed(0)
    N = 64 if dry else 4096
    q, k, v = (torch.randn(1, hq, N, d, **bf16) for _ in range(3))
    out.append((f"hopper 1x{N} non-causal", 1, lambda: flash_attention_hopper(q, k, v)))
    out.append((f"hopper 1x{N} causal", 1, lambda: flash_attention_hopper(q, k, v, causal=True)))
    if dev == "cuda":
        out += _prefill_peers(torch, q, k, v, False, f"1x{N} non-causal")
    return out


def _prefill_peers(torch, q, k, v, causal: bool, label: str) -> list:
    """FlashInfer's FA3 template (NHD copies made here, outside the timing) and SDPA cuDNN."""
    out = []
    try:
        import flashinfer
        qn, kn, vn = (t[0].transpose(0, 1).contiguous() for t in (q, k, v))
        out.append((f"flashinfer-fa3 {label}", 1, lambda: flashinfer.single_prefill_with_kv_cache(
            qn, kn, vn, causal=causal, backend="fa3")))
    except Exception as e:                                # noqa: BLE001 - FlashInfer absent
        print(f"left out: flashinfer prefill ({type(e).__name__}: {str(e)[:100]})", flush=True)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out.append((f"sdpa-cudnn {label}", 1, cudnn))
    return out


def _gluon_calls(torch, dry: bool) -> list:
    from attnlab.gpubench.sweeps.gluon import STEP_SETS
    from attnlab.kernels.gluon_fa3 import flash_attention_gluon
    if dry:
        return []                       # Gluon kernels do not run under the interpreter
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 32, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = []
    for causal in (False, True):
        label = f"1x4096 {'causal' if causal else 'non-causal'}"
        for name, steps in (("no_ws", STEP_SETS["no_ws"]), ("default", None), ("split_pp_ov", STEP_SETS["split_pp_ov"])):
            out.append((f"gluon {name} {label}", 1,
                        lambda c=causal, s=steps: flash_attention_gluon(q, k, v, causal=c, steps=s)))
        out += _prefill_peers(torch, q, k, v, causal, label)
    return out


def _scheduled_calls(torch, dry: bool) -> list:
    """The plan-driven decoder's two kernels (items, merge) at batches 1 and 8 of the long-tailed
    recorded batches, balanced plan without and with the 128-token floor, eager launches."""
    import numpy as np

    from attnlab.gpubench import scheduled as S
    from attnlab.kernels.scheduled import ScheduledDecoder
    shape = S.DRY["shape"] if dry else S.SHAPE
    hq, hkv, d = shape["heads"], shape["kv_heads"], shape["head_dim"]
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    ctas = S.DRY["ctas"] if dry else S.CTAS_PER_SM * torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator().manual_seed(0)
    out = []
    for bsz in ((1, 3) if dry else (1, 8)):
        lens = S._lengths(bsz, dry)
        pages = int((-(-lens[:, 1] // S.PAGE_SIZE)).sum()) + 1
        k, v = (torch.randn(pages, S.PAGE_SIZE, hkv, d, generator=gen).to(device=dev, dtype=torch.bfloat16)
                for _ in "kv")
        b = S._batch(torch, bsz, lens, pages, shape, dev, gen)
        for kind in ("balanced", "balanced-128"):
            plan = S._planner(kind, hkv, hq // hkv, ctas, S.CHUNK)(lens)
            dec = ScheduledDecoder(bsz, hq, hkv, d, ctas, int(np.bincount(plan.cta).max()), pages, S.PAGE_SIZE,
                                   torch.bfloat16, dev, max_outputs=plan.num_outputs)
            dec.load(plan, b.q, b.indptr, b.indices, b.last)
            out.append((f"sched {kind} batch {bsz} ({len(plan.work)} items)", 2,
                        lambda dec=dec, k=k, v=v: dec.run(k, v)))
    return out


def _gap_calls(torch, dry: bool) -> list:
    """Where issue targets stayed short: `paged_decode` with its automatic split on the long-tailed
    recorded batches 4, 8 and 16 (split and merge kernels), and prefill at d = 64, batch 4 x 4K
    causal: the Gluon kernel's defaults, the Hopper kernel and cuDNN."""
    from attnlab.gpubench import scheduled as S
    from attnlab.kernels.paged import paged_decode
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    batches, pools, _ = S.setup(torch, [1, 3] if dry else [4, 8, 16], S.DRY["shape"] if dry else S.SHAPE, dev,
                                dry=dry)
    out = [(f"paged auto ragged batch {b.q.shape[0]}", 2, lambda b=b: paged_decode(
        b.q, pools.k, pools.v, b.indptr, b.indices, b.last, page_size=b.page_size)) for b in batches]
    if dry:
        return out                      # Gluon kernels do not run under the interpreter
    from attnlab.kernels.gluon_fa3 import flash_attention_gluon
    from attnlab.kernels.hopper import flash_attention_hopper
    torch.manual_seed(0)
    q = torch.randn(4, 32, 4096, 64, device=dev, dtype=torch.bfloat16)
    k, v = (torch.randn(4, 8, 4096, 64, device=dev, dtype=torch.bfloat16) for _ in "kv")
    label = "4x4096 d64 causal"
    out.append((f"gluon default {label}", 1, lambda: flash_attention_gluon(q, k, v, causal=True)))
    out.append((f"hopper {label}", 1, lambda: flash_attention_hopper(q, k, v, causal=True)))
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    out.append((f"sdpa-cudnn {label}", 1, cudnn))
    return out


def profile(torch, todo) -> list[tuple[str, int]]:
    """Warm each call up (a call that fails is left out, and says so), then make each once inside
    the profiler's range. Returns the (name, kernels) of the calls made, in order."""
    ok = []
    for name, kernels, fn in todo:
        try:
            for _ in range(3):
                fn()
            ok.append((name, kernels, fn))
        except Exception as e:                            # noqa: BLE001
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
    if not made or any(not (isinstance(c, (tuple, list)) and len(c) == 2 and isinstance(c[0], str)
                                and isinstance(c[1], int) and not isinstance(c[1], bool) and c[1] >= 1)
                       for c in made):
        raise ValueError(f"made must list (call name, kernels >= 1) pairs, as profile() returns; got {made!r:.200}")
    with open(details_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    with open(raw_csv, newline="") as f:
        raw = list(csv.reader(f))
    if not rows or "ID" not in rows[0] or len(raw) < 2 or "ID" not in raw[0]:
        raise ValueError(f"{details_csv} and {raw_csv} must be ncu --csv exports of the details and raw pages "
                         "(an ID column, and in the raw page a units row under the header)")
    head = raw[0]
    if raw[1][head.index("ID")] != "":
        raise ValueError(f"{raw_csv}: the second row must be the units row ncu --page raw --csv writes")
    by_id = {r[head.index("ID")]: dict(zip(head, r)) for r in raw[2:]}   # row 1 holds the units
    kernels: dict[int, dict] = {}
    for r in rows:
        e = kernels.setdefault(int(r["ID"]), {"kernel": r["Kernel Name"][:60], "grid": r["Grid Size"],
                                              "block": r["Block Size"], "notes": set()})
        if r["Metric Name"] in DETAILS:
            e[DETAILS[r["Metric Name"]]] = _number(r["Metric Value"])
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
            stalls = {_STALL.match(m).group(1): _number(x) for m, x in raw_row.items()
                      if _STALL.match(m) and isinstance(_number(x), float)}
            out.append({"call": name, **{k: v for k, v in e.items() if k != "notes"},
                        **{key: _number(raw_row[m]) for m, key in RAW_METRICS.items() if m in raw_row},
                        **({"stalls": stalls} if stalls else {}), "ncu_notes": sorted(e["notes"])})
    return out


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry", action="store_true", help="tiny sizes; on a CPU under the Triton interpreter")
    ap.add_argument("--metrics", action="store_true", help="print RAW_METRICS for ncu --metrics, and stop")
    ap.add_argument("--group", default="recorded", choices=GROUPS, help="which calls to profile")
    ap.add_argument("--summarize", nargs=2, metavar=("DETAILS_CSV", "RAW_CSV"))
    ap.add_argument("--made", help="the calls a profiling run made: written by a run (default ncu_calls.json, "
                                   "none for --dry), read by --summarize")
    ap.add_argument("--out", help="with --summarize: write the summary as JSON here")
    args = ap.parse_args(argv)
    if args.metrics:
        print(",".join([*RAW_METRICS, STALL_METRICS]))
        return 0
    if args.summarize:
        with open(args.made or "ncu_calls.json") as f:
            made = [tuple(x) if isinstance(x, list) else x for x in json.load(f)]
        doc = {"kernels": summarize(*args.summarize, made)}
        text = json.dumps(doc, indent=1)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text + "\n")
        else:
            print(text)
        return 0
    import os
    import torch
    if args.dry and not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    made = profile(torch, calls(torch, dry=args.dry, group=args.group))
    if args.made or not args.dry:
        with open(args.made or "ncu_calls.json", "w") as f:
            json.dump(made, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
