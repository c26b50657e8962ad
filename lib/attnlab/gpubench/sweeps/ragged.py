"""Sweep the launch choices of our two decoders on `gpubench.scheduled`'s long-tailed batches, beside
FlashInfer's tensor-core decode in the same run: which rule and tiles `paged_decode(splits=None)`
should take, and which plan floor and tiles the plan-driven `ScheduledDecoder` should take, per batch.

    python -m attnlab.gpubench.sweeps.ragged --out sweep.json        # on a CUDA machine, ~3 minutes
    python -m attnlab.gpubench.sweeps.ragged --dry --cases 1 --out s.json   # a CPU: the code path

paged:      the lengths rule `split_from_lengths(waves=, min_chunk=)` (--rules, PAGED_RULES) x the
            launch (block_n, num_stages, prefetch) (--launches, LAUNCHES)
scheduled:  the balanced plan with a floor of `min_chunk` tokens a chunk (--floors, FLOORS) x the
            launch x the fused merge (one launch) or kernel 2; one decoder per configuration sized
            over every batch of the run, as the section does

A declaration measured by `gpubench.core.measure`, on the layer, pool, batches and references of
`gpubench.scheduled.setup`: each answer is checked against the float32 reference (max error at
most 5e-2) before it is timed by CUDA-graph replay. --dry takes DRY's grid. After the run, each
batch's fastest configuration of each decoder is printed beside FlashInfer's time (`best`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import sys
from types import SimpleNamespace

from attnlab.gpubench import paged
from attnlab.gpubench.cli import Parser, case_list, int_list, out_path, section_main
from attnlab.gpubench.declare import Impl, Launch, Section
from attnlab.machine.workload import RECORDED_BATCHES

__all__ = ["SECTION", "PAGED_RULES", "LAUNCHES", "FLOORS", "DRY", "launch_list", "best", "main"]

PAGED_RULES = tuple(itertools.product((1, 2, 4, 8), (256, 512, 1024)))  # (waves, min_chunk)
LAUNCHES = ((64, 2, False), (64, 3, True), (128, 2, False))  # (block_n, num_stages, prefetch)
FLOORS = (1, 128, 256, 512)
#: the grid of a --dry run; a launch of None: the kernel's own choice
DRY = dict(rules=((2, 1024),), launches=(None,), floors=(1,))
_LAUNCH = ("block_n", "num_stages", "prefetch")
#: what `best` reports of a configuration beside its launch: the split chosen, the plan's items
_CHOSEN = ("splits", "chunk", "items")


def launch_list(text: str):
    """An argparse type: "64x2x0,128x2x1,auto" -> ((64, 2, False), (128, 2, True), None), each
    block_n x num_stages x prefetch (0 or 1), or auto (the kernel's own choice)."""
    out = []
    for part in text.split(",") if text else []:
        nums = part.split("x")
        if part == "auto":
            out.append(None)
        elif len(nums) == 3 and all(n.isdigit() for n in nums) and nums[2] in "01" and int(nums[0]) > 0:
            out.append((int(nums[0]), int(nums[1]), nums[2] == "1"))
        else:
            raise argparse.ArgumentTypeError(
                f"each launch is block_n x num_stages x prefetch (0 or 1), or auto; got {part!r} in {text!r}"
            )
    if not out or len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"takes distinct launches; got {text!r}")
    return tuple(out)


def _grid(ctx, name: str):
    return getattr(ctx.options, name) or (DRY[name] if ctx.dry else _FULL[name])


def _inputs(torch, case, ctx):
    """One batch of the run's shared pool (`scheduled.setup` over every batch, made once)."""
    from attnlab.gpubench.scheduled import setup

    if "setup" not in ctx.state:
        sizes = [c[0] for c in ctx.cases]
        ctx.state["setup"] = setup(torch, sizes, ctx.shape, ctx.device, dry=ctx.dry, seed=ctx.seed)
    batches, pools, refs = ctx.state["setup"]
    b = batches[[c[0] for c in ctx.cases].index(case[0])]
    tokens = int(b.lens[:, 1].sum())
    kv_bytes = 2 * ctx.shape["kv_heads"] * ctx.shape["head_dim"] * 2  # bf16 K and V of a token
    pool = SimpleNamespace(
        k_pool=pools.k, v_pool=pools.v, page_size=b.page_size, indices=b.indices, indptr=b.indptr, last=b.last
    )
    yield SimpleNamespace(
        case={"batch": case[0]},
        q=b.q,
        b=b,
        pool=pool,
        ref=refs[id(b)],
        flop=None,
        bytes=tokens * kv_bytes + 2 * b.q.numel() * 2,
        extra={"tokens": tokens, "longest": int(b.lens[:, 1].max())},
    )


@contextlib.contextmanager
def _rule(waves: int, floor: int):
    """paged_decode's lengths rule replaced, for the calls inside, by split_from_lengths with
    these `waves` and `min_chunk` (the kernel takes no rule of its own), on every batch: the
    long-tailed ones too, which the shipped choice now cuts by `fill_from_lengths`."""
    from attnlab.kernels import paged as kernel
    from attnlab.kernels.tuning import split_from_lengths

    shipped = kernel.split_from_lengths, kernel.FILL_SKEW
    kernel.split_from_lengths = functools.partial(split_from_lengths, waves=waves, min_chunk=floor)
    kernel.FILL_SKEW = float("inf")
    try:
        yield
    finally:
        kernel.split_from_lengths, kernel.FILL_SKEW = shipped


def _paged(torch, c, ctx):
    from attnlab.kernels.paged import choose_splits, paged_decode

    p, o = c.pool, torch.empty_like(c.q)
    for (waves, floor), launch in itertools.product(_grid(ctx, "rules"), _grid(ctx, "launches")):
        bn, ns, pf = launch or (None, None, None)

        def fn(waves=waves, floor=floor, bn=bn, ns=ns, pf=pf):
            with _rule(waves, floor):
                return paged_decode(
                    c.q,
                    p.k_pool,
                    p.v_pool,
                    p.indptr,
                    p.indices,
                    p.last,
                    page_size=p.page_size,
                    out=o,
                    block_n=bn,
                    num_stages=ns,
                    prefetch=pf,
                )

        with _rule(waves, floor):
            auto = choose_splits(
                c.q.shape[0], p.k_pool.shape[2], p.indptr, p.indices, p.last, p.page_size, c.q.device
            )
        yield Launch(
            "paged",
            fn,
            launch={"waves": waves, "min_chunk": floor, **dict(zip(_LAUNCH, (bn, ns, pf)))},
            extra={"splits": auto["splits"], "chunk": auto["min_chunk"]},
        )


def _decoder(torch, ctx, floor, launch, fused):
    """One ScheduledDecoder and the plan of every batch of the run for this configuration, made
    once (None, printed, where it cannot be built)."""
    import traceback

    import numpy as np

    from attnlab.kernels.tuning import CTAS_PER_SM
    from attnlab.kernels.scheduled import ScheduledDecoder
    from attnlab.kernels.tuning import sms
    from attnlab.machine.schedule import plan_balanced

    batches, pools, _ = ctx.state["setup"]
    hq, hkv, d = ctx.shape["heads"], ctx.shape["kv_heads"], ctx.shape["head_dim"]
    ctas = CTAS_PER_SM * sms(ctx.device)
    bn, ns, pf = launch or (None, None, None)
    try:
        plans = {
            id(b): plan_balanced(b.lens, kv_heads=hkv, num_ctas=ctas, group=hq // hkv, min_chunk=floor)
            for b in batches
        }
        dec = ScheduledDecoder(
            max(b.q.shape[0] for b in batches),
            hq,
            hkv,
            d,
            ctas,
            max(int(np.bincount(p.cta).max()) for p in plans.values()),
            pools.k.shape[0],
            batches[0].page_size,
            torch.bfloat16,
            batches[0].q.device,
            max_outputs=max(p.num_outputs for p in plans.values()),
            block_n=bn,
            num_stages=ns,
            prefetch=pf,
            fused_merge=fused,
        )
        return dec, plans
    except Exception:  # noqa: BLE001 - drop this configuration only
        print(
            f"  scheduled {floor} {launch} fused={fused}: failed\n" + traceback.format_exc(limit=3),
            flush=True,
        )
        return None


def _scheduled(torch, c, ctx):
    """Each configuration's decoder loaded with this batch's plan; the launch is timed before the
    next configuration is loaded (measure times each launch as it comes)."""
    p = c.pool
    for floor, launch, fused in itertools.product(
        _grid(ctx, "floors"), _grid(ctx, "launches"), (False, True)
    ):
        key = ("scheduled", floor, launch, fused)
        if key not in ctx.state:
            ctx.state[key] = _decoder(torch, ctx, floor, launch, fused)
        if ctx.state[key] is None:
            continue
        dec, plans = ctx.state[key]
        plan = plans[id(c.b)]
        dec.load(plan, c.q, p.indptr, p.indices, p.last)
        yield Launch(
            "scheduled",
            lambda dec=dec: dec.run(p.k_pool, p.v_pool),
            launch={"min_chunk": floor, **dict(zip(_LAUNCH, launch or (None,) * 3)), "fused": fused},
            extra={"items": len(plan.work)},
        )


def _flashinfer(torch, c, ctx):
    yield from paged.flashinfer_decode(torch, c, tensor_cores=(True,))


def best(rows: list[dict]) -> list[dict]:
    """Per batch (schema rows): FlashInfer's time, and each decoder's fastest configuration (its
    launch, the split or items it came to, its time) with FlashInfer's time / its time."""
    out = []
    for batch in sorted({r["shape"]["batch"] for r in rows}):
        at = [r for r in rows if r["shape"]["batch"] == batch]
        fi = [r["time_us"] for r in at if r["impl"].startswith("flashinfer")]
        line = {"batch": batch, "flashinfer_us": min(fi) if fi else None}
        for impl in ("paged", "scheduled"):
            mine = [r for r in at if r["impl"].split(" ")[0] == impl]
            if mine:
                r = min(mine, key=lambda r: r["time_us"])
                line[impl] = {
                    **{k: v for k, v in r["shape"].items() if k != "batch"},
                    **{k: r["extra"][k] for k in _CHOSEN if k in r["extra"]},
                    "us": r["time_us"],
                    "ratio": min(fi) / r["time_us"] if fi else None,
                }
        out.append(line)
    return out


def _finish(rows) -> None:
    import json

    for line in best(rows):
        print(json.dumps(line), flush=True)


_FULL = dict(rules=PAGED_RULES, launches=LAUNCHES, floors=FLOORS)
PROG = "python -m attnlab.gpubench.sweeps.ragged"

SECTION = Section(
    name="ragged-sweep",
    doc=__doc__,
    fields=("batch",),
    cases=tuple((b,) for b in RECORDED_BATCHES),
    dry_cases=((1,), (3,)),
    shape=paged.SECTION.shape,
    dry_shape=paged.SECTION.dry_shape,
    inputs=_inputs,
    impls=(
        Impl("paged", _paged, ours=True),
        Impl("scheduled", _scheduled, ours=True),
        Impl("flashinfer", _flashinfer, library="flashinfer"),
    ),
    tolerance=5e-2,
    finish=_finish,
    subset="--impls",
    allowed=RECORDED_BATCHES,
    options=(
        (
            "--rules",
            "waves x min_chunk of paged's lengths rule, e.g. 2x1024",
            case_list(("waves", "min_chunk")),
            None,
        ),
        ("--launches", "block_n x num_stages x prefetch (0/1) or auto, e.g. 64x2x0,auto", launch_list, None),
        ("--floors", "the balanced plan's min_chunk floors, e.g. 1,128", int_list("floor"), None),
    ),
)


def main(argv=None) -> int:
    """The section's command line, which here needs --out (the rows are the sweep's result)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not {"-h", "--help"} & set(argv):
        need = Parser(prog=PROG, add_help=False)
        need.add_argument("--out", type=out_path, required=True)
        need.parse_known_args(argv)
    return section_main(SECTION, argv, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
