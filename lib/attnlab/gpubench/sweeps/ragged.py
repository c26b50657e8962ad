"""Sweep the launch choices of our two decoders on `gpubench.scheduled`'s long-tailed batches, beside
FlashInfer's tensor-core decode in the same run: which rule and tiles `paged_decode(splits=None)`
should take, and which plan floor and tiles the plan-driven `ScheduledDecoder` should take, per batch.

    python -m attnlab.gpubench.sweeps.ragged --out sweep.json        # on a CUDA machine, ~3 minutes

paged:      the lengths rule `split_from_lengths(waves=, min_chunk=)` (PAGED_RULES) x the launch
            (block_n, num_stages, prefetch) (LAUNCHES)
scheduled:  the balanced plan with a floor of `min_chunk` tokens a chunk (FLOORS) x the launch x the
            fused merge (one launch) or kernel 2; one decoder per configuration sized over every
            batch, its graph captured on the first and replayed on the rest, as the section does

Same layer, pool, batches, reference and timer as `gpubench.scheduled` (its `setup`); each answer
is checked against the float32 reference before it is timed. The JSON holds one row per
(batch, configuration) with its time, and FlashInfer's time on the batch.
"""

from __future__ import annotations

import functools
import itertools
import json
import sys
import traceback

from attnlab.gpubench.core import time_per_call
from attnlab.gpubench.paged import SHAPE

__all__ = ["PAGED_RULES", "LAUNCHES", "FLOORS", "BATCHES", "sweep", "best", "main"]

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
PAGED_RULES = tuple(itertools.product((1, 2, 4, 8), (256, 512, 1024)))  # (waves, min_chunk)
LAUNCHES = ((64, 2, False), (64, 3, True), (128, 2, False))  # (block_n, num_stages, prefetch)
FLOORS = (1, 128, 256, 512)


def _check(o, ref):
    err = (o.float() - ref).abs().max().item()
    if not err <= 0.05:  # bf16 inputs, fp32 reference (the section's rule)
        raise RuntimeError(f"max_err {err:.2e} vs the float32 reference")
    return err


def _paged(torch, batches, pools, refs, rows):
    from attnlab.kernels import paged
    from attnlab.kernels.tuning import split_from_lengths

    for (waves, floor), (bn, ns, pf) in itertools.product(PAGED_RULES, LAUNCHES):
        paged.split_from_lengths = functools.partial(split_from_lengths, waves=waves, min_chunk=floor)
        try:
            for b in batches:
                out = torch.empty_like(b.q)

                def fn(b=b, out=out):
                    return paged.paged_decode(
                        b.q,
                        pools.k,
                        pools.v,
                        b.indptr,
                        b.indices,
                        b.last,
                        page_size=b.page_size,
                        out=out,
                        block_n=bn,
                        num_stages=ns,
                        prefetch=pf,
                    )

                o = fn().clone()
                err = _check(o, refs[id(b)])
                us = time_per_call(fn, o)[0]
                auto = paged.choose_splits(
                    b.q.shape[0], pools.k.shape[2], b.indptr, b.indices, b.last, b.page_size, b.q.device
                )
                rows.append(
                    {
                        "batch": b.q.shape[0],
                        "impl": "paged",
                        "waves": waves,
                        "min_chunk": floor,
                        "block_n": bn,
                        "num_stages": ns,
                        "prefetch": pf,
                        "splits": auto["splits"],
                        "chunk": auto["min_chunk"],
                        "us": us,
                        "max_err": err,
                    }
                )
                print(
                    f"  paged w{waves} c{floor} {bn}/{ns}/{pf:d} b{b.q.shape[0]:4d} {us:8.1f} us", flush=True
                )
        except Exception:  # noqa: BLE001 - drop this configuration only
            print(
                f"  paged w{waves} c{floor} {bn}/{ns}/{pf}: failed\n" + traceback.format_exc(limit=3),
                flush=True,
            )
        finally:
            paged.split_from_lengths = split_from_lengths


def _scheduled(torch, batches, pools, refs, rows, ctas):
    import numpy as np
    from attnlab.kernels.scheduled import ScheduledDecoder
    from attnlab.machine.schedule import plan_balanced

    hq, hkv, d = SHAPE["heads"], SHAPE["kv_heads"], SHAPE["head_dim"]
    for floor, (bn, ns, pf), fused in itertools.product(FLOORS, LAUNCHES, (False, True)):
        try:
            plans = [
                plan_balanced(b.lens, kv_heads=hkv, num_ctas=ctas, group=hq // hkv, min_chunk=floor)
                for b in batches
            ]
            dec = ScheduledDecoder(
                max(b.q.shape[0] for b in batches),
                hq,
                hkv,
                d,
                ctas,
                max(int(np.bincount(p.cta).max()) for p in plans),
                pools.k.shape[0],
                batches[0].page_size,
                torch.bfloat16,
                batches[0].q.device,
                max_outputs=max(p.num_outputs for p in plans),
                block_n=bn,
                num_stages=ns,
                prefetch=pf,
                fused_merge=fused,
            )
            for b, plan in zip(batches, plans):
                dec.load(plan, b.q, b.indptr, b.indices, b.last)
                o = dec.run(pools.k, pools.v).clone()
                err = _check(o, refs[id(b)])
                us = time_per_call(lambda: dec.run(pools.k, pools.v), o)[0]
                rows.append(
                    {
                        "batch": b.q.shape[0],
                        "impl": "scheduled",
                        "min_chunk": floor,
                        "block_n": bn,
                        "num_stages": ns,
                        "prefetch": pf,
                        "fused": fused,
                        "items": len(plan.work),
                        "us": us,
                        "max_err": err,
                    }
                )
                print(
                    f"  sched c{floor} {bn}/{ns}/{pf:d} fused={fused:d} b{b.q.shape[0]:4d} {us:8.1f} us",
                    flush=True,
                )
        except Exception:  # noqa: BLE001
            print(
                f"  sched c{floor} {bn}/{ns}/{pf} fused={fused}: failed\n" + traceback.format_exc(limit=3),
                flush=True,
            )


def _flashinfer(torch, batches, pools, refs, rows):
    from types import SimpleNamespace
    from attnlab.gpubench.paged import flashinfer_decode

    for b in batches:
        c = SimpleNamespace(
            q=b.q,
            pool=SimpleNamespace(
                k_pool=pools.k,
                v_pool=pools.v,
                page_size=b.page_size,
                indices=b.indices,
                indptr=b.indptr,
                last=b.last,
            ),
        )

        def add(name, fn, b=b, **kw):
            o = fn().clone()
            rows.append(
                {
                    "batch": b.q.shape[0],
                    "impl": name,
                    "us": time_per_call(fn, o)[0],
                    "max_err": _check(o, refs[id(b)]),
                }
            )

        try:
            flashinfer_decode(torch, c, add, tensor_cores=(True,))
        except Exception:  # noqa: BLE001
            print(f"  flashinfer batch {b.q.shape[0]}: failed\n" + traceback.format_exc(limit=3), flush=True)


def sweep(batches=BATCHES, parts=("flashinfer", "paged", "scheduled"), seed: int = 0) -> list[dict]:
    import torch
    from attnlab.gpubench.scheduled import CTAS_PER_SM, setup
    from attnlab.kernels.tuning import sms

    dev = "cuda"
    bs, pools, refs = setup(torch, list(batches), SHAPE, dev, seed=seed)
    rows: list[dict] = []
    for part in parts:
        print(part, flush=True)
        if part == "flashinfer":
            _flashinfer(torch, bs, pools, refs, rows)
        elif part == "paged":
            _paged(torch, bs, pools, refs, rows)
        else:
            _scheduled(torch, bs, pools, refs, rows, CTAS_PER_SM * sms(dev))
    return rows


def best(rows: list[dict]) -> list[dict]:
    """Per batch: FlashInfer's time, and each decoder's fastest configuration with its ratio to it."""
    out = []
    for batch in sorted({r["batch"] for r in rows}):
        at = [r for r in rows if r["batch"] == batch]
        fi = [r["us"] for r in at if r["impl"].startswith("flashinfer")]
        line = {"batch": batch, "flashinfer_us": min(fi) if fi else None}
        for impl in ("paged", "scheduled"):
            mine = [r for r in at if r["impl"] == impl]
            if mine:
                r = min(mine, key=lambda r: r["us"])
                line[impl] = {k: v for k, v in r.items() if k not in ("batch", "impl", "max_err")}
                line[impl]["ratio"] = line["flashinfer_us"] / r["us"] if fi else None
        out.append(line)
    return out


def main(argv=None) -> int:
    from attnlab.gpubench.cli import Parser, describe, need_gpu, out_path

    ap = Parser(prog="python -m attnlab.gpubench.sweeps.ragged", description=describe(__doc__))
    ap.add_argument("--out", type=out_path, required=True, help="write every row and the best per batch here")
    args = ap.parse_args(argv)
    need_gpu(ap, False, "no CUDA GPU here: this sweep times the kernels on one and has no CPU path")
    rows = sweep()
    res = {"rows": rows, "best": best(rows)}
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    for line in res["best"]:
        print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
