"""Plan-driven persistent decode on a real GPU: one CUDA graph per plan, replayed across batches.

    python -m attnlab.gpubench.scheduled --out results.json         # on a CUDA machine
    TRITON_INTERPRET=1 python -m attnlab.gpubench.scheduled --dry    # tiny sizes on a CPU: the code path

A Llama-3-8B-shaped layer (32 query heads, 8 KV heads, d = 128, bf16, page size 16) on notebook
05's long-tailed recorded batches (`workload.recorded_lengths("longtail", b)`, b = 1 .. 256), all
in one NHD pool, each batch's pages a shuffled subset. For each plan (per-request, fixed 1024,
balanced, balanced-128: the balanced plan with FlashInfer's floor of 128 tokens a chunk; "+fused":
the decoder's merge folded into kernel 1, one launch) on num_ctas = CTAS_PER_SM x the GPU's SMs:
every batch is planned first, so the ScheduledDecoder's maxima (items per CTA, outputs) hold them all; the graph is captured once, on the first batch, and
every batch after is `load`ed into the same buffers and replayed. Each answer (every batch's
replay, not only the first) is checked against a float32 reference before it is timed. The time
is taken as for every other row of the run (`gpubench.core.time_per_call`: 20 calls of the
decoder's two launches captured in one graph, replayed, median of 10; on a CPU the wall clock of
eager runs), so the host's cost of launching one graph per call (a few µs, more than the GPU work
of a small batch) counts for no implementation.

Beside the measured time: the plan's predicted utilization and `Plan.time` on the H200 (the
SM-sharing model), and the host cost of planning + fixed_size_workspace (plan_us, median of 5)
and of load (load_us: the copies into the static buffers). Peers on the same batch: our
`paged_decode` with splits=None, and FlashInfer's BatchDecodeWithPagedKVCacheWrapper
(use_tensor_cores=True) when `import flashinfer` works, its plan() cost beside ours. Every row is
tried on its own (a failure drops it, with a short traceback); the JSON is rewritten after each.
"""

from __future__ import annotations

import sys
import time
import traceback
from types import SimpleNamespace

import numpy as np

from attnlab.machine.schedule import fixed_size_workspace, plan_balanced, plan_fixed_split, plan_per_request
from attnlab.machine.workload import RECORDED_BATCHES, lengths, recorded_lengths
from attnlab.gpubench.core import header, time_per_call, try_peer
from attnlab.gpubench.reference import reference
from attnlab.gpubench.cli import flashinfer_version, write_json
from attnlab.gpubench.paged import SHAPE, flashinfer_decode

__all__ = ["run", "setup", "table", "main"]

KINDS = ("per-request", "fixed", "balanced", "balanced-128", "balanced+fused", "balanced-128+fused")
#: what a run times by default (--plans takes any of KINDS)
PLANS = ("per-request", "fixed", "balanced", "balanced-128+fused")
#: "balanced-128": the balanced plan with FlashInfer's decode floor, chunks of at least 128 tokens;
#: "+fused": ScheduledDecoder(fused_merge=True), one launch (each output merged by its last item)
MIN_CHUNK = 128
#: Persistent programs per SM the plans are made for: two resident 4-warp programs keep more loads
#: in flight than one (on the H200, balanced plan: batch 256 in 712 µs with 264 CTAs, 1,147 with 132).
CTAS_PER_SM = 2
CASES = [(b,) for b in RECORDED_BATCHES]
PAGE_SIZE = 16
GPU = "H200-SXM"  # data/gpus.json's name for the predictions
CHUNK = 1024
DRY = dict(cases=[(1,), (3,)], shape=dict(heads=8, kv_heads=2, head_dim=32), ctas=4, chunk=16)


def _lengths(batch: int, dry: bool) -> np.ndarray:
    pairs = (
        lengths("longtail", batch, seed=0, mean=40, max_len=100)
        if dry
        else recorded_lengths("longtail", batch)
    )
    return np.array(pairs, np.int64)


def _planner(kind: str, hkv: int, group: int, ctas: int, chunk: int):
    kind = kind.removesuffix("+fused")
    kw = dict(kv_heads=hkv, num_ctas=ctas, group=group)
    if kind == "per-request":
        return lambda L: plan_per_request(L, **kw)
    if kind == "fixed":
        return lambda L: plan_fixed_split(L, chunk=chunk, **kw)
    if kind == "balanced-128":
        return lambda L: plan_balanced(L, min_chunk=MIN_CHUNK, **kw)
    return lambda L: plan_balanced(L, **kw)


def _batch(torch, batch, lens, pool_pages, shape, dev, gen):
    """q, the int32 page table on the device (a shuffled subset of the pool's pages)."""
    hq, d = shape["heads"], shape["head_dim"]
    kv = lens[:, 1]
    pages = -(-kv // PAGE_SIZE)
    i32 = dict(dtype=torch.int32, device=dev)
    indices = torch.randperm(pool_pages, generator=gen)[: int(pages.sum())].to(**i32)
    indptr = torch.tensor(np.concatenate([[0], np.cumsum(pages)]), **i32)
    last = torch.tensor(kv - PAGE_SIZE * (pages - 1), **i32)
    q = torch.randn(batch, hq, d, generator=gen).to(device=dev, dtype=torch.bfloat16)
    return SimpleNamespace(q=q, indptr=indptr, indices=indices, last=last, lens=lens, page_size=PAGE_SIZE)


def _reference(torch, b, k_pool, v_pool):
    """gpubench.core.reference of each request over its K/V gathered through the page table."""
    B, hq, d = b.q.shape
    hkv = k_pool.shape[2]
    ref = torch.empty(B, hq, d, dtype=torch.float32, device=b.q.device)
    indptr = b.indptr.tolist()
    for i in range(B):
        pages = b.indices[indptr[i] : indptr[i + 1]].long()
        n = int(b.lens[i, 1])
        k, v = (p[pages].reshape(-1, hkv, d)[:n].transpose(0, 1)[None] for p in (k_pool, v_pool))
        ref[i] = reference(torch, b.q[i : i + 1], k, v)[0]
    return ref


def setup(torch, sizes, shape, dev, *, dry: bool = False, seed: int = 0):
    """(batches, pools, refs) for batch sizes `sizes`: each batch's lengths, q and page table (a
    shuffled subset of one shared NHD pool's pages), the pools (k, v), and each batch's float32
    reference answer keyed by id(batch). The sweeps of this workload use the same."""
    gen = torch.Generator().manual_seed(seed)
    lens = {bsz: _lengths(bsz, dry) for bsz in sizes}
    pool_pages = max(int((-(-L[:, 1] // PAGE_SIZE)).sum()) for L in lens.values()) + 1
    hkv, d = shape["kv_heads"], shape["head_dim"]
    pools = SimpleNamespace(
        **{
            n: torch.randn(pool_pages, PAGE_SIZE, hkv, d, generator=gen).to(device=dev, dtype=torch.bfloat16)
            for n in "kv"
        }
    )
    batches = [_batch(torch, bsz, lens[bsz], pool_pages, shape, dev, gen) for bsz in sizes]
    return batches, pools, {id(b): _reference(torch, b, pools.k, pools.v) for b in batches}


def _scheduled(torch, res, kind, batches, pools, shape, ctas, chunk, add):
    """Plan every batch, size the decoder over all of them, capture on the first, replay the rest."""
    from attnlab.kernels.scheduled import ScheduledDecoder

    hq, hkv, d = shape["heads"], shape["kv_heads"], shape["head_dim"]
    planner = _planner(kind, hkv, hq // hkv, ctas, chunk)
    plans = [planner(b.lens) for b in batches]
    max_items = max(int(np.bincount(p.cta).max()) for p in plans)
    max_outputs = max(p.num_outputs for p in plans)
    dev = batches[0].q.device
    dec = ScheduledDecoder(
        max(b.q.shape[0] for b in batches),
        hq,
        hkv,
        d,
        ctas,
        max_items,
        pools.k.shape[0],
        PAGE_SIZE,
        torch.bfloat16,
        dev,
        max_outputs=max_outputs,
        fused_merge=kind.endswith("+fused"),
    )
    graph = dev.type == "cuda"
    for i, (b, plan) in enumerate(zip(batches, plans)):

        def host():  # what the CPU does before every step
            t0 = time.perf_counter()
            p = planner(b.lens)
            fixed_size_workspace(p, ctas, max_items, max_outputs)
            return time.perf_counter() - t0

        plan_us = sorted(host() for _ in range(5))[2] * 1e6
        t0 = time.perf_counter()
        dec.load(plan, b.q, b.indptr, b.indices, b.last)
        if graph:
            torch.cuda.synchronize()
        load_us = (time.perf_counter() - t0) * 1e6
        if graph and dec.graph is None:
            dec.capture(pools.k, pools.v)  # once per plan kind, on the first batch
        step = dec.replay if graph else (lambda: dec.run(pools.k, pools.v))
        dec.out.fill_(float("nan"))  # the replay must write every element
        add(
            b,
            f"sched {kind}",
            step,
            plan_us=plan_us,
            load_us=load_us,
            timed=lambda: dec.run(pools.k, pools.v),
            items=len(plan.work),
            max_items=max_items,
            max_outputs=max_outputs,
            ctas=ctas,
            utilization=plan.utilization,
            predicted_us=plan.time(GPU, head_dim=d) * 1e6,
            captured_on=batches[0].q.shape[0],
        )


def _paged(torch, b, pools, add):
    from attnlab.kernels.paged import choose_splits, paged_decode

    out = torch.empty_like(b.q)
    auto = choose_splits(b.q.shape[0], pools.k.shape[2], b.indptr, b.indices, b.last, PAGE_SIZE, b.q.device)
    add(
        b,
        "paged auto",
        lambda: paged_decode(
            b.q, pools.k, pools.v, b.indptr, b.indices, b.last, page_size=PAGE_SIZE, out=out
        ),
        **auto,
    )


def run(cases=CASES, plans=PLANS, *, dry: bool = False, out: str | None = None, seed: int = 0) -> dict:
    import torch

    shape = DRY["shape"] if dry else SHAPE
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    res = header(torch, shape)
    res.update(page_size=PAGE_SIZE, dist="longtail", gpu_model=GPU, rows=[])
    ctas = CTAS_PER_SM * res["sms"] if res["sms"] else DRY["ctas"]
    chunk = DRY["chunk"] if dry else CHUNK
    print(f"{res['device']}: torch {res['torch']}, triton {res['triton']}, {ctas} CTAs", flush=True)
    sizes = [c[0] for c in cases]
    batches, pools, refs = setup(torch, sizes, shape, dev, dry=dry, seed=seed)
    kv_bytes = 2 * shape["kv_heads"] * shape["head_dim"] * 2

    def save():
        write_json(out, res)

    def add(b, impl, fn, timed=None, **extra):
        try:
            o = fn().float().clone()
            err = (o - refs[id(b)]).abs().max().item()
            if not err <= 0.05:  # bf16 inputs, fp32 reference
                raise RuntimeError(f"max_err {err:.2e} vs the float32 reference")
            us, how = time_per_call(timed or fn, o)
        except Exception:  # noqa: BLE001 - drop this row only
            print(f"  batch {b.q.shape[0]} {impl}: failed\n" + traceback.format_exc(limit=3), flush=True)
            return
        nbytes = int(b.lens[:, 1].sum()) * kv_bytes + 2 * b.q.numel() * 2
        res["rows"].append(
            {
                "batch": b.q.shape[0],
                "impl": impl,
                "tokens": int(b.lens[:, 1].sum()),
                "longest": int(b.lens[:, 1].max()),
                **extra,
                "us": us,
                "timing": how,
                "bytes": nbytes,
                "tb_per_s": nbytes / us * 1e-6,
                "max_err": err,
            }
        )
        r = res["rows"][-1]
        print(f"  batch {r['batch']:4d} {impl:18s} {us:10.1f} us  err {err:.1e}  {how}", flush=True)
        save()

    for kind in plans:
        print(f"scheduled, {kind} plan: one graph for batches {sizes}", flush=True)
        try_peer(
            kind,
            _scheduled,
            torch,
            res,
            kind,
            batches,
            pools,
            shape,
            ctas,
            chunk,
            add,
            word="failed",
            limit=4,
        )
    print("paged_decode, splits=None", flush=True)
    for b in batches:
        try_peer(f"paged batch {b.q.shape[0]}", _paged, torch, b, pools, add, word="failed", limit=3)
    ok, res["flashinfer"] = flashinfer_version()  # imported only now: a crash keeps the rest
    if ok and dev == "cuda":
        print("flashinfer, use_tensor_cores=True", flush=True)
        for b in batches:
            c = SimpleNamespace(
                q=b.q,
                pool=SimpleNamespace(
                    k_pool=pools.k,
                    v_pool=pools.v,
                    page_size=PAGE_SIZE,
                    indices=b.indices,
                    indptr=b.indptr,
                    last=b.last,
                ),
            )
            try:
                flashinfer_decode(
                    torch, c, lambda name, fn, b=b, **kw: add(b, name, fn, **kw), tensor_cores=(True,)
                )
            except Exception:  # noqa: BLE001
                print(
                    f"  flashinfer batch {b.q.shape[0]}: failed\n" + traceback.format_exc(limit=3), flush=True
                )
    else:
        print(f"flashinfer: {res['flashinfer']}", flush=True)
    save()
    return res


def table(res: dict) -> str:
    """One line per (batch, implementation): measured beside predicted, host costs beside FlashInfer's.
    items: the plan's work items; /cta: the slots per CTA the graph was captured with; best/us: the
    run schema's ratio_to_best (1.0 = the fastest of the batch)."""
    from attnlab import fmt
    from attnlab.runfile import section_rows

    ratio = [r["ratio_to_best"] for r in section_rows("scheduled", res["rows"])]
    rows = sorted(
        ({**r, "best": x} for r, x in zip(res["rows"], ratio)), key=lambda r: (r["batch"], r["impl"])
    )
    cols = {
        "batch": "batch",
        "tokens": "tokens",
        "impl": "impl",
        "items": "items",
        "max_items": "/cta",
        "utilization": "util",
        "predicted_us": "pred_us",
        "us": "us",
        "tb_per_s": "TB/s",
        "best": "best/us",
        "max_err": "max_err",
        "plan_us": "plan_us",
        "load_us": "load_us",
    }

    def num(spec):
        return lambda v: "" if v is None else format(v, spec)

    return (
        f"{res['device']} ({res['sms']} SMs), torch {res['torch']}, triton {res['triton']}, "
        f"flashinfer {res['flashinfer']}; {res['dist']} batches, page size {res['page_size']}\n"
        + fmt.table(
            [{k: r.get(k) for k in cols} for r in rows],
            cols,
            {
                "items": num("d"),
                "max_items": num("d"),
                "utilization": num(".2f"),
                "predicted_us": num(".1f"),
                "us": ".1f",
                "tb_per_s": ".2f",
                "best": num(".2f"),
                "max_err": ".1e",
                "plan_us": num(".0f"),
                "load_us": num(".0f"),
            },
        )
    )


def main(argv=None) -> int:
    from attnlab.gpubench.cli import parse

    args, cases, plans = parse(
        argv,
        __doc__,
        ("batch",),
        CASES,
        DRY["cases"],
        ("--plans", KINDS, PLANS),
        prog="python -m attnlab.gpubench.scheduled",
        allowed=RECORDED_BATCHES,
    )
    print(table(run(cases, plans, dry=args.dry, out=args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
