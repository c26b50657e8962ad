"""`kernels.gluon_fa3` on an sm_90 GPU: every step set checked, then timed (Gluon kernels do not
run under Triton's interpreter, so this is where their numbers come from).

    python -m attnlab.gpubench.sweeps.gluon smoke     small odd shapes, GQA, N_q != N_k, N = 1,
                                                      every step set against a float32 reference;
                                                      soft_cap / window too (window 1, one wider
                                                      than N_k, rows that see no key)
    python -m attnlab.gpubench.sweeps.gluon full      the step table: per shape and mask, each step
                                                      set NaN-poisoned, checked (error within 2 x
                                                      SDPA bf16's + 1e-3, lse, -inf rows), timed
                                                      beside kernels.hopper and SDPA cuDNN / flash
    ... smoke final / full final                      the defaults (steps=None) and stage counts
    ... smoke early_k / full early_k                  early_k_release (K and V stages freed apart)
                                                      beside the defaults and a 3-stage overlap
    ... smoke default                                 the defaults alone (steps=None)
    python -m attnlab.gpubench.sweeps.gluon ladder    the lesson's step table: FA3's steps added one at a
                                                      time at today's defaults, each set checked, then
                                                      timed REPEATS times in interleaved rounds (the
                                                      spread of the repeats is the noise band)
    python -m attnlab.gpubench.sweeps.gluon record RUN.json OUT.json DATE COMMIT [early_k | ladder]
                                                      (ladder: RUN.json may be A.json,B.json, runs
                                                      on one machine whose repeats are pooled)
                                                      a `full` run as data/measurements/'s steps file

This file is long because each mode's table of step sets sits beside the loop that checks and
times it, and `record` beside both.

Results go to $OUT/gluon_check.json (or gluon_smoke.json), $OUT defaulting to the current folder.
Timing is triton.testing.do_bench (median, eager: the host's launch and descriptor creation are
included); flop = 4 B H N^2 d, halved when causal. `h200-2026-12-02-gluon-steps.json` is the
`full` run at commit d86b56a, recorded with `record`; `h200-2026-12-03-gluon-early-k.json` the
`full early_k` run of 568957d's kernel before that commit changed the defaults, recorded with
`record ... early_k`.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import time
import traceback

__all__ = [
    "STEP_SETS",
    "SMOKE",
    "LADDER",
    "LADDER_CASES",
    "reference",
    "smoke",
    "full",
    "ladder",
    "record",
    "record_ladder",
    "main",
]

_SPLIT = ("warp_specialize", "split_warpgroups", "lpt_order", "tma_store")
STEP_SETS = {
    "split": _SPLIT,
    "split_pp": _SPLIT + ("pingpong",),
    "split_ov": _SPLIT + ("intra_overlap",),
    "split_pp_ov": _SPLIT + ("pingpong", "intra_overlap"),
    "ws": ("warp_specialize", "lpt_order", "tma_store"),
    "no_ws": ("lpt_order", "tma_store"),
}
# name -> (steps, num_stages, block_n, head dims it is timed at); "final" mode: the defaults and stage counts
FINAL = {
    "default": (None, None, None, (64, 128)),
    "split_s3": (_SPLIT, 3, None, (128,)),
    "split_pp_s3": (_SPLIT + ("pingpong",), 3, None, (128,)),
    "split_pp_s4": (_SPLIT + ("pingpong",), 4, None, (64,)),
    "no_ws_s4": (("lpt_order", "tma_store"), 4, None, (64,)),
    "split_pp_n256": (_SPLIT + ("pingpong",), None, 256, (64,)),
    "no_ws_n256": (("lpt_order", "tma_store"), None, 256, (64,)),
}
VARIANTS = {name: (st, None, None, (64, 128)) for name, st in STEP_SETS.items()}
_EK = ("early_k_release",)
#: "early_k" mode: each consumer frees a K stage after its QK^T and a V stage after its PV, apart
#: (FA3's two pipelines), with and without ping-pong and the overlap; the smoke checks EARLY_SMOKE
EARLY = {
    "default": (None, None, None, (64, 128)),
    "split_pp_ov_s3": (_SPLIT + ("pingpong", "intra_overlap"), 3, None, (64, 128)),
    "split_ek": (_SPLIT + _EK, None, None, (64, 128)),
    "split_pp_ek": (_SPLIT + ("pingpong",) + _EK, None, None, (64, 128)),
    "split_pp_ov_ek": (_SPLIT + ("pingpong", "intra_overlap") + _EK, None, None, (64, 128)),
    "split_pp_ov_ek_s3": (_SPLIT + ("pingpong", "intra_overlap") + _EK, 3, None, (64, 128)),
}
EARLY_SMOKE = ("split_ek", "split_pp_ek", "split_pp_ov_ek")
#: "ladder" mode, the lesson's step table: name -> (label, steps, num_stages, base), each row one
#: FA3 step added to its base row: the cumulative steps, the third stage before the overlap, and
#: the overlap on two stages beside ping-pong on two
LADDER = {
    "no_ws": ("TMA + wgmma", ("lpt_order", "tma_store"), 2, None),
    "ws": ("+ producer warp", ("warp_specialize", "lpt_order", "tma_store"), 2, "no_ws"),
    "split": ("+ 2 consumers", _SPLIT, 2, "ws"),
    "split_pp": ("+ ping-pong", _SPLIT + ("pingpong",), 2, "split"),
    "split_pp_s3": ("+ 3rd stage", _SPLIT + ("pingpong",), 3, "split_pp"),
    "split_pp_ov_s3": ("+ overlap", _SPLIT + ("pingpong", "intra_overlap"), 3, "split_pp_s3"),
    "split_pp_ov": ("overlap on 2 stages", _SPLIT + ("pingpong", "intra_overlap"), 2, "split_pp"),
}
#: (B, H, N, d): shapes the defaults were not chosen on (those were 1-4 x 4K, 1 x 8K, 1 x 16K), seed 1
LADDER_CASES = [(2, 32, 8192, 128), (1, 32, 16384, 128), (4, 32, 8192, 64)]
REPEATS = 5
MODES = {"final": FINAL, "default": {"default": FINAL["default"]}, "early_k": EARLY}
RESULTS: dict = {"cases": []}


def dump(name="gluon_check.json"):
    with open(os.path.join(os.environ.get("OUT", "."), name), "w") as f:
        json.dump(RESULTS, f, indent=1)


def reference(q, k, v, causal, scale, soft_cap=0.0, window=0):
    """float32 o and lse, a few heads at a time (bottom-right causal); soft_cap c: logits
    c tanh(s / c); window w: q_idx - w < kv_idx <= q_idx (causal implied). 0 is off."""
    B, H, nq, d = q.shape
    g = H // k.shape[1]
    o = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.empty((B, H, nq), dtype=torch.float32, device=q.device)
    chunk = max(1, (1 << 30) // (nq * k.shape[2] * 4))
    for b in range(B):
        for h0 in range(0, H, chunk):
            hs = range(h0, min(H, h0 + chunk))
            qq = q[b, hs].float()
            kk = k[b, [h // g for h in hs]].float()
            vv = v[b, [h // g for h in hs]].float()
            s = torch.matmul(qq, kk.transpose(-1, -2)) * scale
            if soft_cap:
                s = soft_cap * torch.tanh(s / soft_cap)
            if causal or window:
                i = torch.arange(nq, device=q.device)[:, None] + k.shape[2] - nq  # q_idx
                j = torch.arange(k.shape[2], device=q.device)[None, :]
                s = s.masked_fill(j > i, float("-inf"))
                if window:
                    s = s.masked_fill(j <= i - window, float("-inf"))
            l = torch.logsumexp(s, -1)
            p = torch.exp(s - torch.where(torch.isinf(l), 0.0, l)[..., None])
            o[b, hs] = torch.matmul(p, vv)
            lse[b, hs] = l
            del s, p
    return o, lse


def errors(o, lse, ro, rl):
    nan = bool(torch.isnan(o).any() or torch.isnan(lse).any())
    inf_ok = bool(torch.equal(torch.isinf(lse), torch.isinf(rl)))
    fin = torch.isfinite(rl)
    e_o = (o.float() - ro).abs().max().item()
    e_l = (lse[fin] - rl[fin]).abs().max().item() if fin.any() else 0.0
    return {"nan": nan, "inf_rows_ok": inf_ok, "err_o": e_o, "err_lse": e_l}


def inputs(B, H, hkv, nq, nk, d, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    mk = lambda h, n: torch.randn((B, h, n, d), generator=g, device="cuda", dtype=torch.bfloat16)  # noqa: E731
    return mk(H, nq), mk(hkv, nk), mk(hkv, nk)


#: (B, H, Hkv, N_q, N_k, d, causal, soft_cap, window): the plain cases, then the variants (odd sizes,
#: GQA, N_q != N_k, N_q > N_k so that rows see no key, window 1, a window wider than N_k, both)
SMOKE = [
    (1, 4, 4, 256, 256, 128, False, 0, 0),
    (1, 4, 4, 256, 256, 128, True, 0, 0),
    (2, 8, 2, 300, 500, 128, True, 0, 0),
    (1, 4, 2, 1000, 777, 64, False, 0, 0),
    (2, 4, 4, 300, 200, 64, True, 0, 0),
    (1, 2, 1, 1, 1, 128, True, 0, 0),
    (1, 4, 4, 384, 384, 64, True, 0, 0),
    (2, 8, 2, 300, 500, 128, False, 30.0, 0),
    (1, 4, 2, 1000, 777, 64, True, 30.0, 0),
    (2, 4, 4, 333, 517, 128, False, 0, 100),
    (1, 4, 2, 777, 1000, 64, False, 0, 1),
    (1, 2, 1, 300, 200, 128, False, 0, 5000),
    (2, 4, 2, 384, 384, 64, True, 30.0, 200),
    (1, 4, 4, 1000, 700, 128, False, 5.0, 129),
    (1, 2, 1, 1, 1, 64, False, 30.0, 1),
]


def smoke(table=None):
    """Every step set of `table` (default VARIANTS) on the SMOKE shapes, against the reference."""
    table = VARIANTS if table is None else table
    for (B, H, hkv, nq, nk, d, causal, cap, w), (name, (st, ns, bn, dims)) in itertools.product(
        SMOKE, table.items()
    ):
        if d not in dims:
            continue
        q, k, v = inputs(B, H, hkv, nq, nk, d)
        ro, rl = reference(q, k, v, causal, d**-0.5, cap, w)
        var = (f" soft_cap={cap}" if cap else "") + (f" window={w}" if w else "")
        print(f"smoke {(B, H, hkv, nq, nk, d)} causal={causal}{var} {name} ...", end=" ", flush=True)
        try:
            o, lse = flash_attention_gluon(
                q, k, v, causal=causal, soft_cap=cap, window=w, steps=st, num_stages=ns, block_n=bn
            )
            torch.cuda.synchronize()
            e = errors(o, lse, ro, rl)
            ok = not e["nan"] and e["inf_rows_ok"] and e["err_o"] < 2e-2 and e["err_lse"] < 1e-2
            print("OK" if ok else "BAD", e, flush=True)
        except Exception as ex:  # noqa: BLE001
            print("FAIL", type(ex).__name__, str(ex)[:400], flush=True)
            ok, e = False, {"error": f"{type(ex).__name__}: {str(ex)[:400]}"}
        RESULTS["cases"].append(
            {
                "smoke": [B, H, hkv, nq, nk, d],
                "causal": causal,
                "soft_cap": cap,
                "window": w,
                "steps": name,
                "ok": ok,
                **e,
            }
        )
    dump("gluon_smoke.json")


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def full(only=None, table=None):
    """Every entry of `table` (default VARIANTS) at each shape: poisoned outputs checked, then
    timed beside the peers."""
    table = VARIANTS if table is None else table
    shapes = [
        (1, 32, 4096, 128),
        (2, 32, 4096, 128),
        (4, 32, 4096, 128),
        (1, 32, 8192, 128),
        (1, 32, 16384, 128),
        (4, 32, 4096, 64),
    ]
    rows = []
    for (B, H, N, d), causal in itertools.product(shapes, (False, True)):
        q, k, v = inputs(B, H, H, N, N, d)
        scale = d**-0.5
        ro, rl = reference(q, k, v, causal, scale)
        ref_sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        tol = 2 * (ref_sdpa.float() - ro).abs().max().item() + 1e-3
        del ref_sdpa
        flop = 4 * B * H * N * N * d / (2 if causal else 1)
        rec = {"shape": [B, H, N, d], "causal": causal, "tol_o": tol, "tflops": {}, "check": {}}
        for name, (st, ns, bn, dims) in table.items():
            if (only and name not in only) or d not in dims:
                continue
            try:
                o, lse = flash_attention_gluon(q, k, v, causal=causal, steps=st, num_stages=ns, block_n=bn)
                o.fill_(float("nan"))
                lse.fill_(float("nan"))  # poisoned: the call below must write every element
                o2, lse2 = flash_attention_gluon(q, k, v, causal=causal, steps=st, num_stages=ns, block_n=bn)
                torch.cuda.synchronize()
                e = errors(o2, lse2, ro, rl)
                e["ok"] = (not e["nan"]) and e["inf_rows_ok"] and e["err_o"] <= tol and e["err_lse"] <= 1e-2
                rec["check"][name] = e
                del o, lse, o2, lse2
                ms = bench(
                    lambda: flash_attention_gluon(q, k, v, causal=causal, steps=st, num_stages=ns, block_n=bn)
                )
                rec["tflops"]["gluon_" + name] = flop / ms * 1e-9
            except Exception as ex:  # noqa: BLE001
                rec["check"][name] = {"error": f"{type(ex).__name__}: {str(ex)[:300]}"}
                traceback.print_exc()
        try:
            ms = bench(lambda: flash_attention_hopper(q, k, v, causal=causal))
            rec["tflops"]["hopper"] = flop / ms * 1e-9
        except Exception as ex:  # noqa: BLE001
            rec["hopper_error"] = f"{type(ex).__name__}: {str(ex)[:300]}"
        for bname, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel(be):
                    ms = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                rec["tflops"][bname] = flop / ms * 1e-9
            except Exception as ex:  # noqa: BLE001
                rec[bname + "_error"] = f"{type(ex).__name__}: {str(ex)[:300]}"
        print(json.dumps(rec), flush=True)
        RESULTS["cases"].append(rec)
        rows.append(rec)
        dump()
        del q, k, v, ro, rl
        torch.cuda.empty_cache()
    names = sorted({n for r in rows for n in r["tflops"] if n.startswith("gluon_")})
    print(
        "\nshape (B,H,N,d)      causal  "
        + " ".join(f"{n[6:]:>10}" for n in names)
        + "     hopper      cudnn sdpa_flash  best/cudnn  default/cudnn  correct"
    )
    for r in rows:
        t = r["tflops"]
        best = max(
            (t[n] for n in names if n in t and r["check"].get(n[6:], {}).get("ok")), default=float("nan")
        )
        cu = t.get("cudnn", float("nan"))
        ok = all(c.get("ok") for c in r["check"].values())
        print(
            f"{str(tuple(r['shape'])):20} {str(r['causal']):6} "
            + " ".join(f"{t.get(n, math.nan):10.1f}" for n in names)
            + f" {t.get('hopper', math.nan):10.1f} {cu:10.1f} {t.get('sdpa_flash', math.nan):10.1f}"
            + f" {best / cu:11.3f} {t.get('gluon_default', math.nan) / cu:14.3f}  {ok}"
        )


def ladder(cases=LADDER_CASES, repeats=REPEATS):
    """The step table with its noise band: per case and mask, every LADDER set NaN-poisoned and
    checked, then all sets and cuDNN timed `repeats` times in interleaved rounds (one do_bench
    median each, after one round that is not kept), so drift over the run falls on every set alike."""
    for (B, H, N, d), causal in itertools.product(cases, (False, True)):
        q, k, v = inputs(B, H, H, N, N, d, seed=1)
        ro, rl = reference(q, k, v, causal, d**-0.5)
        ref_sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        tol = 2 * (ref_sdpa.float() - ro).abs().max().item() + 1e-3
        del ref_sdpa
        flop = 4 * B * H * N * N * d / (2 if causal else 1)
        rec = {"shape": [B, H, N, d], "causal": causal, "tol_o": tol, "check": {}, "ms": {}}
        calls = {}
        for name, (_, st, ns, _) in LADDER.items():
            try:
                kw = dict(causal=causal, steps=st, num_stages=ns)
                o, lse = flash_attention_gluon(q, k, v, **kw)
                o.fill_(float("nan"))
                lse.fill_(float("nan"))
                o2, lse2 = flash_attention_gluon(q, k, v, **kw)
                torch.cuda.synchronize()
                e = errors(o2, lse2, ro, rl)
                e["ok"] = (not e["nan"]) and e["inf_rows_ok"] and e["err_o"] <= tol and e["err_lse"] <= 1e-2
                rec["check"][name] = e
                if e["ok"]:
                    calls[name] = lambda kw=kw: flash_attention_gluon(q, k, v, **kw)
                del o, lse, o2, lse2
            except Exception as ex:  # noqa: BLE001
                rec["check"][name] = {"error": f"{type(ex).__name__}: {str(ex)[:300]}"}
                traceback.print_exc()

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        calls["cudnn"] = cudnn
        for fn in calls.values():  # one round not kept: clocks ramp up from idle
            bench(fn)
        for _ in range(repeats):
            for name, fn in calls.items():
                rec["ms"].setdefault(name, []).append(bench(fn))
        rec["tflops"] = {n: [flop / ms * 1e-9 for ms in t] for n, t in rec["ms"].items()}
        print(
            json.dumps(
                {
                    "shape": rec["shape"],
                    "causal": causal,
                    "tflops": {n: [round(x, 1) for x in t] for n, t in rec["tflops"].items()},
                }
            ),
            flush=True,
        )
        RESULTS["cases"].append(rec)
        dump("gluon_ladder.json")
        del q, k, v, ro, rl
        torch.cuda.empty_cache()


def _torch():
    global torch, F, triton, SDPBackend, sdpa_kernel, flash_attention_gluon, flash_attention_hopper
    import torch
    import torch.nn.functional as F
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from attnlab.kernels.gluon_fa3 import flash_attention_gluon
    from attnlab.kernels.hopper import flash_attention_hopper

    RESULTS.update(device=torch.cuda.get_device_name(), triton=triton.__version__, torch=torch.__version__)


#: the cumulative FA3 steps of the recorded table, as `record` labels them
RECORD_STEPS = {
    "no_ws": (
        "TMA+wgmma",
        "TMA loads into a ring of mbarrier-guarded stages, wgmma, 8 warps that load and compute",
    ),
    "ws": ("+producer warp", "a 1-warp TMA producer partition (warp specialisation), one 8-warp consumer"),
    "split": ("+2 consumers", "two independent 4-warp consumer partitions of 64 rows each"),
    "split_pp": ("+ping-pong", "ping-pong: the two consumers take turns issuing their GEMMs"),
    "split_pp_ov": (
        "+overlap",
        "intra-warpgroup overlap: QK^T(j) issued with PV(j-1), softmax(j) under PV(j-1)",
    ),
}


#: the step sets of the early_k mode, as `record` labels them when asked for them
RECORD_EARLY = {
    "default": (
        "defaults then",
        "steps=None before the early_k run changed it: d = 128 two consumers + "
        "ping-pong (no mask) or two consumers (causal), 2 stages; d = 64 as now",
    ),
    "split_pp_ov_s3": ("pp + ov, 3 stages", "two consumers, ping-pong, intra-warpgroup overlap, 3 stages"),
    "split_ek": ("early K", "two consumers, each K stage freed after its QK^T, V after its PV"),
    "split_pp_ek": ("pp, early K", "the same with ping-pong"),
    "split_pp_ov_ek": ("pp + ov, early K", "ping-pong, overlap, early K release, 2 stages"),
    "split_pp_ov_ek_s3": ("pp + ov, early K, 3 st.", "the same on 3 stages"),
}


def record(run: dict, *, date: str, commit: str, sms: int = 132, steps: dict = RECORD_STEPS) -> dict:
    """A `full` run's result as the recorded steps file (`explore.measured.gluon_steps_summary`
    reads it): one row per (case, implementation), the check's verdict beside each time; `steps`
    names the step sets and what each means (RECORD_STEPS, or RECORD_EARLY for an early_k run)."""
    rows = []
    for c in run["cases"]:
        B, H, N, d = c["shape"]
        for k, v in c["tflops"].items():
            name = k.replace("gluon_", "")
            chk = c["check"].get(name, {}) if k.startswith("gluon_") else {}
            rows.append(
                {
                    "batch": B,
                    "heads": H,
                    "N": N,
                    "head_dim": d,
                    "causal": c["causal"],
                    "impl": name,
                    "tflops": v,
                    "checked": chk.get("ok"),
                    "max_err": chk.get("err_o"),
                }
            )
    return {
        "device": run["device"],
        "sms": sms,
        "torch": run["torch"],
        "triton": run["triton"],
        "date": date,
        "commit": commit,
        "method": "build-time check of kernels.gluon_fa3 (each step's output NaN-poisoned, then checked against "
        "a float32 reference within 2 x SDPA bf16's error + 1e-3), timed by triton.testing.do_bench "
        "(median, eager: the host's launch and descriptor creation included), flop = 4 B H N^2 d, "
        "halved when causal; 32 query heads, 32 KV heads (no GQA), bf16",
        "steps": list(steps),
        "step_labels": {k: v[0] for k, v in steps.items()},
        "step_meaning": {k: v[1] for k, v in steps.items()},
        "peers": {
            "hopper": "kernels.hopper (Triton)",
            "cudnn": "SDPA cuDNN",
            "sdpa_flash": "SDPA flash (FA2)",
        },
        "rows": rows,
    }


def record_ladder(runs, *, date: str, commit: str, sms: int = 132) -> dict:
    """`ladder` runs (one dict, or a list of them: processes on one machine, whose repeats are
    pooled, so the band holds the spread between processes too) as data/measurements/'s ladder
    file (`explore.measured.steps` reads it): one row per (case, implementation) with every
    repeat's TFLOP/s and the check's verdict (a set is checked only if every run's check passed)."""
    runs = [runs] if isinstance(runs, dict) else list(runs)
    if not runs or any(r["device"] != runs[0]["device"] for r in runs):
        raise ValueError("record_ladder needs one or more runs of one device")
    rows = []
    for cases in zip(*(r["cases"] for r in runs)):
        c = cases[0]
        if any((k["shape"], k["causal"]) != (c["shape"], c["causal"]) for k in cases):
            raise ValueError("the runs of record_ladder must hold the same cases in the same order")
        B, H, N, d = c["shape"]
        for name in c["tflops"]:
            checks = [k["check"].get(name, {}) for k in cases]
            rows.append(
                {
                    "batch": B,
                    "heads": H,
                    "N": N,
                    "head_dim": d,
                    "causal": c["causal"],
                    "impl": name,
                    "tflops": sorted(x for k in cases for x in k["tflops"][name]),
                    "checked": True if name == "cudnn" else all(ch.get("ok") for ch in checks),
                    "max_err": max((ch["err_o"] for ch in checks if "err_o" in ch), default=None),
                }
            )
    first = runs[0]
    return {
        "device": first["device"],
        "sms": sms,
        "torch": first["torch"],
        "triton": first["triton"],
        "date": date,
        "commit": commit,
        "processes": len(runs),
        "repeats": sum(len(r["cases"][0]["tflops"]["cudnn"]) for r in runs),
        "method": "each step set's output NaN-poisoned, then checked against a float32 reference within "
        "2 x SDPA bf16's error + 1e-3; then every set and cuDNN timed in interleaved rounds "
        "(one triton.testing.do_bench median per round, eager, after one round not kept), in "
        f"{len(runs)} process(es) on one machine, their repeats pooled; flop = 4 B H N^2 d, "
        "halved when causal; 32 query and 32 KV heads, bf16, seed 1",
        "steps": list(LADDER),
        "step_labels": {k: v[0] for k, v in LADDER.items()},
        "step_meaning": {k: (", ".join(v[1]) + f"; {v[2]} stages") for k, v in LADDER.items()},
        "step_base": {k: v[3] for k, v in LADDER.items()},
        "peers": {"cudnn": "SDPA cuDNN"},
        "rows": rows,
    }


def _parser():
    from attnlab.gpubench.cli import Parser, describe, out_path

    ap = Parser(prog="python -m attnlab.gpubench.sweeps.gluon", description=describe(__doc__))
    sub = ap.add_subparsers(dest="mode")
    for mode, text in (
        ("smoke", "small odd shapes, every step set against a float32 reference"),
        ("full", "the step table: each step set checked, then timed beside the peers"),
    ):
        p = sub.add_parser(mode, help=text)
        p.add_argument(
            "table", nargs="?", choices=tuple(MODES), help="run this table of step sets instead of VARIANTS"
        )
    sub.add_parser("ladder", help="the lesson's step table, timed REPEATS times in interleaved rounds")
    p = sub.add_parser("record", help="a `full` run as data/measurements/'s steps file")
    p.add_argument("run", help="the run's JSON (ladder: several, comma-separated, from one machine)")
    p.add_argument("out", type=out_path, help="the steps file to write")
    p.add_argument("date")
    p.add_argument("commit")
    p.add_argument("kind", nargs="?", choices=("early_k", "ladder"), help="the run's mode, if not `full`")
    return ap


def main(argv=None) -> int:
    """The command line (see the module's docstring), checked before anything runs; a mode's
    table of step sets is passed down to it."""
    from attnlab.gpubench.cli import need_gpu

    argv = sys.argv[1:] if argv is None else list(argv)
    ap = _parser()
    modes = ("smoke", "full", "ladder", "record")
    if argv and not argv[0].startswith("-") and argv[0] not in modes:
        ap.error(f"argument mode: mode must be smoke, full, ladder or record; got {argv[0]!r}")
    args = ap.parse_args(argv or ["full"])
    if args.mode == "record":
        loaded = []
        for path in args.run.split(","):  # ladder: several runs, comma-separated
            try:
                with open(path) as f:
                    loaded.append(json.load(f))
            except (OSError, ValueError) as e:
                ap.error(f"argument run: {path}: {e}")
        if args.kind == "ladder":
            rec = record_ladder(loaded, date=args.date, commit=args.commit)
        else:
            rec = record(
                loaded[0],
                date=args.date,
                commit=args.commit,
                steps=RECORD_EARLY if args.kind == "early_k" else RECORD_STEPS,
            )
        with open(args.out, "w") as f:
            json.dump(rec, f, indent=1)
        return 0
    need_gpu(
        ap,
        False,
        "no CUDA GPU here: the Gluon kernel runs on an sm_90 GPU only (not under Triton's interpreter)",
    )
    import torch as _t

    major, minor = _t.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        ap.error(f"the Gluon kernel runs on an sm_90 GPU only; this one is sm_{major}{minor}")
    _torch()
    if args.mode == "ladder":
        t0 = time.time()
        ladder()
        print(f"ladder done in {time.time() - t0:.0f}s", flush=True)
        return 0
    table = MODES[args.table] if args.table else VARIANTS
    if args.table == "early_k" and args.mode == "smoke":
        table = {k: v for k, v in table.items() if k in EARLY_SMOKE}
    t0 = time.time()
    smoke(table) if args.mode == "smoke" else full(table=table)
    print(f"{args.mode} done in {time.time() - t0:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
