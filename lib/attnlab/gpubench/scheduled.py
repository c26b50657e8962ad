"""Plan-driven persistent decode on a real GPU: one CUDA graph per plan, replayed across batches.

    python -m attnlab.gpubench.scheduled --out results.json         # on a CUDA machine
    TRITON_INTERPRET=1 python -m attnlab.gpubench.scheduled --dry    # tiny sizes on a CPU: the code path

A Llama-3-8B-shaped layer (32 query heads, 8 KV heads, d = 128, bf16, page size 16) on notebook
05's long-tailed recorded batches (`workload.recorded_lengths("longtail", b)`, b = 1 .. 256), all
in one NHD pool, each batch's pages a shuffled subset. For each plan (per-request, fixed 1024,
balanced, balanced-128: the balanced plan with FlashInfer's floor of 128 tokens a chunk; "+fused":
the decoder's merge folded into kernel 1, one launch) on num_ctas = CTAS_PER_SM x the GPU's SMs:
every batch is planned first, so the ScheduledDecoder's maxima (items per CTA, outputs) hold them
all; the graph is captured once, on the first batch, and every batch after is `load`ed into the
same buffers and replayed. Each answer (every batch's replay, not only the first) is checked
against a float32 reference (max |error| at most 0.05) before it is timed. The time is taken as
for every other row of the run (gpubench.core.measure: 20 calls of the decoder's two launches
captured in one graph, replayed, median of 10; on a CPU the wall clock of eager runs), so the
host's cost of launching one graph per call (a few µs, more than the GPU work of a small batch)
counts for no implementation.

Beside the measured time: the plan's predicted utilization and `Plan.time` on the H200 (the
SM-sharing model), and the host cost of planning + fixed_size_workspace (plan_us, median of 5)
and of load (load_us). On the same batch: `paged_decode` (splits=None), the one decode call
`decode_paged` (the decoder it chose) and FlashInfer's BatchDecodeWithPagedKVCacheWrapper (tensor
cores), each plan() timed on the host; paged-ahead (asked for only) is `paged_decode` with its
loop pipelined by hand (ahead=True). --plans picks among KINDS, paged, paged-ahead, decode_paged,
flashinfer;
--draw N measures the long-tailed lengths of seed N instead of the recorded draw (seed 0).

This module is long because every implementation here runs on the same batches, set up once
for the run (one pool, one generator), and each plan's decoder is sized over all of them.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from types import SimpleNamespace

import numpy as np

from attnlab.machine.schedule import fixed_size_workspace, plan_balanced, plan_fixed_split, plan_per_request
from attnlab.machine.workload import RECORDED_BATCHES, lengths, recorded_lengths
from attnlab.gpubench.cli import section_main, seed_arg
from attnlab.kernels.tuning import CTAS_PER_SM, PLAN_MIN_CHUNK
from attnlab.gpubench.declare import Impl, Launch, Section
from attnlab.gpubench.paged import SHAPE, decode_paged_launch, flashinfer_decode
from attnlab.gpubench.reference import reference

__all__ = ["SECTION", "KINDS", "PLANS", "setup", "main"]

KINDS = ("per-request", "fixed", "balanced", "balanced-128", "balanced+fused", "balanced-128+fused")
#: the plans a run times by default (--plans takes any of KINDS, and the peers paged, flashinfer)
PLANS = ("per-request", "fixed", "balanced", "balanced-128+fused")
#: "balanced-128": the balanced plan with FlashInfer's decode floor, chunks of at least
#: kernels.tuning.PLAN_MIN_CHUNK (128) tokens; "+fused": ScheduledDecoder(fused_merge=True), one
#: launch (each output merged by its last item). The plans are made for kernels.tuning.CTAS_PER_SM
#: persistent programs per SM, as decode_paged makes its plan.
CASES = tuple((b,) for b in RECORDED_BATCHES)
PAGE_SIZE = 16
GPU = "H200-SXM"  # data/gpus.json's name for the predictions
CHUNK = 1024
DRY = dict(cases=((1,), (3,)), shape=dict(heads=8, kv_heads=2, head_dim=32), ctas=4, chunk=16)


def _lengths(batch: int, dry: bool, draw: int = 0) -> np.ndarray:
    """The batch's (1, l_kv) pairs: the recorded long-tailed draw (seed 0), or another seed's."""
    if dry:
        pairs = lengths("longtail", batch, seed=draw, mean=40, max_len=100)
    else:
        pairs = recorded_lengths("longtail", batch) if draw == 0 else lengths("longtail", batch, seed=draw)
    return np.array(pairs, np.int64)


def _planner(kind: str, hkv: int, group: int, ctas: int, chunk: int):
    kind = kind.removesuffix("+fused")
    kw = dict(kv_heads=hkv, num_ctas=ctas, group=group)
    if kind == "per-request":
        return lambda L: plan_per_request(L, **kw)
    if kind == "fixed":
        return lambda L: plan_fixed_split(L, chunk=chunk, **kw)
    if kind == "balanced-128":
        return lambda L: plan_balanced(L, min_chunk=PLAN_MIN_CHUNK, **kw)
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


def setup(torch, sizes, shape, dev, *, dry: bool = False, seed: int = 0, draw: int = 0):
    """(batches, pools, refs) for batch sizes `sizes`: each batch's lengths (the long-tailed draw
    of seed `draw`; 0 the recorded one), q and page table (a shuffled subset of one shared NHD
    pool's pages), the pools (k, v), and each batch's float32 reference answer keyed by
    id(batch). The sweeps of this workload use the same."""
    gen = torch.Generator().manual_seed(seed)
    lens = {bsz: _lengths(bsz, dry, draw) for bsz in sizes}
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


def _ctas(torch, dry: bool) -> int:
    """The persistent programs the plans are made for: CTAS_PER_SM x the GPU's SMs (DRY's off it)."""
    if dry or not torch.cuda.is_available():
        return DRY["ctas"]
    return CTAS_PER_SM * torch.cuda.get_device_properties(0).multi_processor_count


def _inputs(torch, case, ctx):
    """One recorded batch; every batch of the run is set up at the first (one pool, one generator:
    `setup`), so that each plan's decoder can be sized over all of them."""
    if "batches" not in ctx.state:
        sizes = [c[0] for c in ctx.cases]
        ctx.state["batches"], ctx.state["pools"], ctx.state["refs"] = setup(
            torch, sizes, ctx.shape, ctx.device, dry=ctx.dry, seed=ctx.seed, draw=ctx.options.draw
        )
    i = ctx.cases.index(case)
    b = ctx.state["batches"][i]
    tokens = int(b.lens[:, 1].sum())
    yield SimpleNamespace(
        b=b,
        index=i,
        pools=ctx.state["pools"],
        # another draw names its seed; the recorded one (0) is the case the recorded rows have
        case={"batch": b.q.shape[0], **({"draw": ctx.options.draw} if ctx.options.draw else {})},
        ref=ctx.state["refs"][id(b)],
        flop=None,
        bytes=tokens * 2 * ctx.shape["kv_heads"] * ctx.shape["head_dim"] * 2 + 2 * b.q.numel() * 2,
        extra={"tokens": tokens, "longest": int(b.lens[:, 1].max())},
    )


def _decoder(torch, kind, ctx):
    """Plan kind `kind`'s plans of every batch and its ScheduledDecoder, sized over all of them
    (made at its first batch, kept in ctx.state for the batches after)."""
    from attnlab.kernels.scheduled import ScheduledDecoder

    if kind in ctx.state:
        return ctx.state[kind]
    batches, hq, hkv, d = ctx.state["batches"], *(ctx.shape[k] for k in ("heads", "kv_heads", "head_dim"))
    ctas = _ctas(torch, ctx.dry)
    planner = _planner(kind, hkv, hq // hkv, ctas, DRY["chunk"] if ctx.dry else CHUNK)
    plans = [planner(b.lens) for b in batches]
    s = SimpleNamespace(planner=planner, plans=plans, ctas=ctas, captured_on=None)  # None: no graph (a CPU)
    s.max_items = max(int(np.bincount(p.cta).max()) for p in plans)
    s.max_outputs = max(p.num_outputs for p in plans)
    sizes = (max(b.q.shape[0] for b in batches), hq, hkv, d, ctas, s.max_items, ctx.state["pools"].k.shape[0])
    s.dec = ScheduledDecoder(
        *sizes,
        PAGE_SIZE,
        torch.bfloat16,
        ctx.device,
        max_outputs=s.max_outputs,
        fused_merge=kind.endswith("+fused"),
    )
    ctx.state[kind] = s  # kept only once it is whole
    return s


def _scheduled(kind: str):
    """Plan kind `kind` as an implementation: its batch loaded into the decoder's buffers and
    replayed in the graph captured on the first batch (eager runs on a CPU); the host costs of
    planning and of loading, and the plan's prediction, in the row's extra."""

    def launches(torch, c, ctx):
        s = _decoder(torch, kind, ctx)
        b, pools, dec = c.b, c.pools, s.dec
        plan = s.plans[c.index]

        def host():  # what the CPU does before every step
            t0 = time.perf_counter()
            fixed_size_workspace(s.planner(b.lens), s.ctas, s.max_items, s.max_outputs)
            return time.perf_counter() - t0

        plan_us = sorted(host() for _ in range(5))[2] * 1e6
        graph = b.q.device.type == "cuda"
        t0 = time.perf_counter()
        dec.load(plan, b.q, b.indptr, b.indices, b.last)
        if graph:
            torch.cuda.synchronize()
        load_us = (time.perf_counter() - t0) * 1e6
        if graph and dec.graph is None:
            dec.capture(pools.k, pools.v)  # once per plan kind, on its first batch
            s.captured_on = b.q.shape[0]
        step = dec.replay if graph else (lambda: dec.run(pools.k, pools.v))

        def checked():  # the replay must write every element
            dec.out.fill_(float("nan"))
            return step()

        yield Launch(
            f"sched {kind}",
            checked,
            timed=lambda: dec.run(pools.k, pools.v),
            extra={
                "plan_us": plan_us,
                "load_us": load_us,
                "items": len(plan.work),
                "max_items": s.max_items,
                "max_outputs": s.max_outputs,
                "ctas": s.ctas,
                "utilization": plan.utilization,
                "predicted_us": plan.time(GPU, head_dim=ctx.shape["head_dim"]) * 1e6,
                "captured_on": s.captured_on,
            },
        )

    return launches


def _paged_rows(name: str, **kw):
    """paged_decode(splits=None) with its automatic split, and `kw` (ahead=True: the loop
    pipelined by hand in registers)."""

    def launches(torch, c, ctx):
        from attnlab.kernels.paged import choose_splits, paged_decode

        b, pools = c.b, c.pools
        out = torch.empty_like(b.q)
        auto = choose_splits(
            b.q.shape[0], pools.k.shape[2], b.indptr, b.indices, b.last, PAGE_SIZE, b.q.device
        )
        yield Launch(
            name,
            lambda: paged_decode(
                b.q, pools.k, pools.v, b.indptr, b.indices, b.last, page_size=PAGE_SIZE, out=out, **kw
            ),
            launch={"auto": True},
            extra=auto,
        )

    return launches


_paged = _paged_rows("paged")


def _decode_paged(torch, c, ctx):
    """The one decode call (kernels.decode_paged), planned once outside the timing as FlashInfer's
    wrapper is: the decoder it chose and its launch in the row, its plan() on the host (plan_us,
    median of 5) beside FlashInfer's."""
    yield decode_paged_launch(
        torch, c.b.q, c.pools.k, c.pools.v, c.b.indptr, c.b.indices, c.b.last, PAGE_SIZE
    )


def _flashinfer(torch, c, ctx):
    """FlashInfer's tensor-core decode wrapper on the batch (gpubench.paged.flashinfer_decode; the
    rows name no page size: the section has one)."""
    if c.b.q.device.type != "cuda":
        return
    b, pools = c.b, c.pools
    pool = SimpleNamespace(
        k_pool=pools.k, v_pool=pools.v, page_size=PAGE_SIZE, indices=b.indices, indptr=b.indptr, last=b.last
    )
    for launch in flashinfer_decode(torch, SimpleNamespace(q=b.q, pool=pool), tensor_cores=(True,)):
        yield dataclasses.replace(launch, launch={})


SECTION = Section(
    name="scheduled",
    doc=__doc__,
    fields=("batch",),
    cases=CASES,
    dry_cases=DRY["cases"],
    shape=SHAPE,
    dry_shape=DRY["shape"],
    inputs=_inputs,
    impls=(
        *(Impl(kind, _scheduled(kind), ours=True) for kind in KINDS),
        Impl("paged", _paged, ours=True),
        Impl("paged-ahead", _paged_rows("paged-ahead", ahead=True), ours=True),
        Impl("decode_paged", _decode_paged, ours=True),
        Impl("flashinfer", _flashinfer, library="flashinfer"),
    ),
    tolerance=0.05,  # max |error|, bf16 inputs against the float32 reference
    settings=lambda ctx: {
        "page_size": PAGE_SIZE,
        "dist": "longtail",
        "draw": ctx.options.draw,
        "gpu_model": GPU,
    },
    options=(("--draw", "the long-tailed lengths' seed (0: the recorded draw)", seed_arg, 0),),
    default_impls=(*PLANS, "paged", "decode_paged", "flashinfer"),
    subset="--plans",
    allowed=RECORDED_BATCHES,
)


def main(argv=None) -> int:
    return section_main(SECTION, argv)


if __name__ == "__main__":
    sys.exit(main())
