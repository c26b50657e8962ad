"""Measure `flash_attention_hopper` step by step on a real GPU, beside cuDNN / FlashAttention SDPA
(and FlashInfer's FA3 prefill when it imports) in the same run.

    python -m attnlab.gpubench.sweeps.hopper --out hopper.json     # on a CUDA machine, ~4 minutes
    python -m attnlab.gpubench.sweeps.hopper --dry                 # tiny, on a CPU under the interpreter

Llama-3-8B's attention shape (batch 1, 32 query heads, 8 KV heads, d = 128, bf16), N in 4K, 8K, 16K,
causal and not. For each (N, causal):
1. every cumulative step set of HOPPER_STEPS (base, +tma, +causal_split, ...) at its own default
   launch, then a small grid of (block_m, block_n, num_warps, num_stages) for all steps (and for all
   but warp_specialize), plus kernels.fa2's FA2 kernel for the record;
2. the peers: torch SDPA with the FLASH_ATTENTION and CUDNN_ATTENTION backends (enable_gqa=True),
   FlashInfer single_prefill(backend="fa3") if installed;
3. before timing, each configuration's max error against a float32 SDPA-math reference on upcast
   inputs at N = 1000 (no block divides it); every configuration sits in its own try block, so a
   compile error is recorded (type and first 200 characters) and the sweep goes on. Grid
   configurations past the time budget are recorded as skipped.
Times: triton.testing.do_bench, median. FLOPs = 4 B H d x (visible (query, key) pairs), the exact
count of the causal triangle. The JSON is rewritten as rows come in; the table prints last.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import platform
import sys
import time

from attnlab.gpubench.cli import parse, write_json
from attnlab.gpubench.core import eager_time

__all__ = ["sweep", "table", "main", "visible_pairs"]

BATCH, HEADS, KV_HEADS, HEAD_DIM = 1, 32, 8, 128
NS = (4096, 8192, 16384)
CHECK_N = 1000
GRID = {"block_m": (128,), "block_n": (64, 128), "num_warps": (4, 8), "num_stages": (2, 3, 4)}
NO_WS_GRID = {"block_m": (128,), "block_n": (64, 128), "num_warps": (4, 8), "num_stages": (3,)}
BUDGET_S = 170  # grid configurations start only while the sweep is younger than this


def visible_pairs(n_q: int, n_k: int, causal: bool) -> int:
    """(query, key) pairs attention computes: n_q n_k, or with the bottom-right causal mask
    sum_i clamp(i + n_k - n_q + 1, 0, n_k) (= n^2 - n(n-1)/2 for a square)."""
    if not causal:
        return n_q * n_k
    off = n_k - n_q
    i0 = max(0, -off)  # first row that sees a key
    i1 = min(n_q, n_k - off)  # rows from here on see all n_k keys
    part = sum(range(i0 + off + 1, i1 + off + 1)) if i1 > i0 else 0
    return part + max(0, n_q - max(i1, i0)) * n_k


def _err(torch, out, ref):
    return float((out.float() - ref).abs().max())


def sweep(
    ns=NS,
    heads=HEADS,
    kv_heads=KV_HEADS,
    d=HEAD_DIM,
    check_n=CHECK_N,
    grid=GRID,
    no_ws_grid=NO_WS_GRID,
    out_path=None,
    budget_s=BUDGET_S,
) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from attnlab.kernels import interpreting
    from attnlab.kernels.fa2 import flash_attention_triton
    from attnlab.kernels.hopper import HOPPER_STEPS, cumulative_steps, flash_attention_hopper
    from attnlab.kernels.tuning import launch_config

    t_start = time.perf_counter()
    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    dtype = torch.bfloat16

    def timer(fn):  # ms: do_bench's median (a dry run: wall clock of one call)
        return eager_time(fn, warmup=25, rep=100)[0] * 1e-3

    result = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu (interpreter)" if interpreting() else "cpu",
        "sms": torch.cuda.get_device_properties(0).multi_processor_count if cuda else None,
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "python": platform.python_version(),
        "date": _dt.date.today().isoformat(),
        "shape": {"batch": BATCH, "heads": heads, "kv_heads": kv_heads, "head_dim": d, "dtype": "bf16"},
        "steps": list(HOPPER_STEPS),
        "checks": [],
        "rows": [],
        "errors": [],
    }
    try:
        import flashinfer

        result["flashinfer"] = flashinfer.__version__
    except Exception as e:  # noqa: BLE001
        flashinfer = None
        result["flashinfer"] = f"absent ({type(e).__name__}: {str(e)[:100]})"

    def save():
        write_json(out_path, result)

    def rand(h, n):
        return torch.randn(BATCH, h, n, d, device=dev, dtype=dtype)

    # configurations: (label, kind, kwargs, grid row?); kind "ours" calls flash_attention_hopper
    def configs(causal):
        out = [(("+".join(st) or "base"), "ours", {"steps": st}, False) for st in cumulative_steps()]
        out.append(("fa2 (kernels.fa2)", "fa2", {}, False))
        for g, st in ((grid, HOPPER_STEPS), (no_ws_grid, HOPPER_STEPS[:-1])):
            for bm, bn, nw, ns_ in itertools.product(*g.values()):
                kw = {"steps": st, "block_m": bm, "block_n": bn, "num_warps": nw, "num_stages": ns_}
                if launch_config(d, causal, st) == {key: kw[key] for key in g}:
                    continue  # the default launch, already in the step rows
                tag = "all" if st == HOPPER_STEPS else "all-ws"
                out.append((f"{tag} {bm}x{bn} w{nw} s{ns_}", "ours", kw, True))
        return out

    def call(kind, kw, q, k, v, causal):
        if kind == "fa2":
            return flash_attention_triton(q, k, v, causal=causal)
        return flash_attention_hopper(q, k, v, causal=causal, **kw)

    peers = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}

    def peer_fn(name, q, k, v, causal, nhd):
        if name == "flashinfer-fa3":
            qn, kn, vn = nhd
            return lambda: flashinfer.single_prefill_with_kv_cache(qn, kn, vn, causal=causal, backend="fa3")
        backend = peers[name]

        def fn():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

        return fn

    peer_names = list(peers) + (["flashinfer-fa3"] if flashinfer is not None and cuda else [])
    for causal in (False, True):
        # -- correctness at check_n, against float32 SDPA math on the upcast inputs -----------------
        torch.manual_seed(1)
        cq, ck, cv = rand(heads, check_n), rand(kv_heads, check_n), rand(kv_heads, check_n)
        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(
                cq.float(), ck.float(), cv.float(), is_causal=causal, enable_gqa=True
            )
        ok = {}
        for label, kind, kw, grid_row in configs(causal):
            if grid_row and time.perf_counter() - t_start > budget_s:
                result["errors"].append({"config": label, "causal": causal, "error": "skipped: time budget"})
                continue
            try:
                t0 = time.perf_counter()
                err = _err(torch, call(kind, kw, cq, ck, cv, causal), ref)
                result["checks"].append(
                    {
                        "config": label,
                        "causal": causal,
                        "n": check_n,
                        "max_err": err,
                        "compile_s": time.perf_counter() - t0,
                    }
                )
                if not err < 3e-2:
                    raise ValueError(f"max error {err:.3g} at N={check_n}")
                ok[label] = (kind, kw)
            except Exception as e:  # noqa: BLE001 - record and go on
                result["errors"].append(
                    {
                        "config": label,
                        "causal": causal,
                        "error": f"{type(e).__name__}: {' '.join(str(e).split())[:200]}",
                    }
                )
                print(f"  causal={causal} {label}: {result['errors'][-1]['error']}", flush=True)
        save()
        del cq, ck, cv, ref
        # -- timings -------------------------------------------------------------------------------
        for n in ns:
            torch.manual_seed(0)
            q, k, v = rand(heads, n), rand(kv_heads, n), rand(kv_heads, n)
            nhd = tuple(t[0].transpose(0, 1).contiguous() for t in (q, k, v))
            flops = 4 * BATCH * heads * d * visible_pairs(n, n, causal)
            for name in peer_names:
                try:
                    ms = timer(peer_fn(name, q, k, v, causal, nhd))
                    result["rows"].append(
                        {
                            "impl": name,
                            "peer": True,
                            "N": n,
                            "causal": causal,
                            "ms": ms,
                            "tflops": flops / (ms * 1e-3) / 1e12,
                        }
                    )
                except Exception as e:  # noqa: BLE001
                    result["errors"].append(
                        {
                            "config": name,
                            "causal": causal,
                            "N": n,
                            "error": f"{type(e).__name__}: {' '.join(str(e).split())[:200]}",
                        }
                    )
            for label, (kind, kw) in ok.items():
                try:
                    ms = timer(lambda kind=kind, kw=kw, q=q, k=k, v=v: call(kind, kw, q, k, v, causal))
                    row = {
                        "impl": label,
                        "peer": False,
                        "N": n,
                        "causal": causal,
                        "ms": ms,
                        "tflops": flops / (ms * 1e-3) / 1e12,
                    }
                    row.update({key: list(val) if key == "steps" else val for key, val in kw.items()})
                    result["rows"].append(row)
                except Exception as e:  # noqa: BLE001
                    result["errors"].append(
                        {
                            "config": label,
                            "causal": causal,
                            "N": n,
                            "error": f"{type(e).__name__}: {' '.join(str(e).split())[:200]}",
                        }
                    )
            save()
            del q, k, v, nhd
            if cuda:
                torch.cuda.empty_cache()
    result["wall_s"] = time.perf_counter() - t_start
    save()
    return result


def table(result: dict) -> str:
    lines = [
        f"{result['device']} ({result['sms']} SMs), torch {result['torch']}, triton {result['triton']}, "
        f"flashinfer {result['flashinfer']}; B={result['shape']['batch']} H={result['shape']['heads']} "
        f"KV={result['shape']['kv_heads']} d={result['shape']['head_dim']} bf16; {result.get('wall_s', 0):.0f} s"
    ]
    for e in result["errors"]:
        lines.append(f"error  causal={e['causal']!s:5s} {e.get('N', '')!s:>5s} {e['config']}: {e['error']}")
    groups = {}
    for r in result["rows"]:
        groups.setdefault((r["causal"], r["N"]), []).append(r)
    step_labels = {"base"} | {"+".join(result["steps"][:i]) for i in range(1, len(result["steps"]) + 1)}
    for (causal, n), rows in sorted(groups.items()):
        best_peer = max((r["tflops"] for r in rows if r["peer"]), default=float("nan"))
        ours = [r for r in rows if not r["peer"]]
        best = max(ours, key=lambda r: r["tflops"], default=None)
        lines.append(f"-- N={n} causal={causal}: best peer {best_peer:.0f} TFLOP/s")
        prev = None
        for r in rows:
            shown = r["peer"] or r["impl"] in step_labels or r["impl"].startswith("fa2") or r is best
            if not shown:
                continue
            gain = ""
            if r["impl"] in step_labels:
                gain = f"  step x{r['tflops'] / prev:.2f}" if prev else ""
                prev = r["tflops"]
            mark = "  <- best of ours" if r is best else ""
            lines.append(
                f"   {r['impl'][:66]:66s} {r['ms']:8.3f} ms {r['tflops']:6.0f} TFLOP/s "
                f"{r['tflops'] / best_peer:5.2f} x peer{gain}{mark}"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    args, cases, _ = parse(
        argv, __doc__, ("N",), [(n,) for n in NS], [(40,)], prog="python -m attnlab.gpubench.sweeps.hopper"
    )
    ns = tuple(c[0] for c in cases)
    kw = {}
    if args.dry:  # tiny: the step rows and one grid row of each kind
        kw = dict(
            heads=4,
            kv_heads=2,
            d=32,
            check_n=37,
            grid={"block_m": (16,), "block_n": (16,), "num_warps": (4,), "num_stages": (2,)},
            no_ws_grid={"block_m": (16,), "block_n": (16,), "num_warps": (4,), "num_stages": (2,)},
        )
    result = sweep(ns, out_path=args.out, **kw)
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
