"""Sweep `paged_decode`'s launch parameters on a real GPU, beside FlashInfer's tensor-core decode
in the same run: which split count, KV tile (block_n), warps, pipeline stages and page-id
prefetch are fastest for each batch x context and page size, and how far the best is from
FlashInfer.

    python -m attnlab.gpubench.sweeps.paged --out sweep.json        # on a CUDA machine, ~2 minutes
    python -m attnlab.gpubench.sweeps.paged --dry --cases 1x20       # tiny sizes on a CPU: the code path

A declaration measured by `gpubench.core.measure`, on `gpubench.paged`'s cases, shapes, data and
pools (Llama-3-8B decode, bf16, shuffled NHD pages; --page-sizes, as there): each configuration
is checked against the float32 reference (max error at most 5e-2) and timed by CUDA-graph replay;
the grid is SPLITS (by batch) x --block-n x --warps x --stages x --prefetch (the defaults BLOCK_N,
WARPS, STAGES and the kernel's own prefetch choice; DRY under --dry). After the run, each case
and page size's fastest configuration is printed beside FlashInfer's time (`best`).
"""

from __future__ import annotations

import argparse
import itertools
import sys

from attnlab.gpubench import paged
from attnlab.gpubench.cli import int_list, section_main
from attnlab.gpubench.declare import Impl, Launch, Section

__all__ = ["SECTION", "SPLITS", "BLOCK_N", "WARPS", "STAGES", "DRY", "best", "main"]

#: the split counts each batch is swept over (other batches: 1, 2, 4)
SPLITS = {1: (16, 32, 64, 128), 16: (2, 4, 8, 16), 64: (1, 2, 4), 256: (1, 2, 4)}
BLOCK_N = (32, 64, 128)
WARPS = (4, 8)
STAGES = (2, 3)
#: the grid of a --dry run: the interpreter takes 16-key tiles and ignores warps and stages
DRY = dict(splits=(1, 2), block_n=(16,), warps=(4,), stages=(2,))
_PREFETCH = {"auto": None, "0": False, "1": True}


def prefetch_list(text: str):
    """An argparse type: "auto,0,1" -> (None, False, True): the kernel's choice, off, on."""
    items = [p.strip() for p in text.split(",")] if text else []
    bad = [p for p in items if p not in _PREFETCH]
    if bad or not items or len(set(items)) != len(items):
        raise argparse.ArgumentTypeError(f"takes distinct values of auto,0,1; got {text!r}")
    return tuple(_PREFETCH[p] for p in items)


def _grid(torch, c, ctx):
    """Every configuration of the grid on the case's pool (none on its contiguous copy)."""
    from attnlab.kernels.paged import paged_decode

    if c.pool is None:
        return
    p, o, opt = c.pool, torch.empty_like(c.q), ctx.options
    batch = c.case["batch"]
    splits = DRY["splits"] if ctx.dry else SPLITS.get(batch, (1, 2, 4))
    block_n = opt.block_n or (DRY["block_n"] if ctx.dry else BLOCK_N)
    warps = opt.warps or (DRY["warps"] if ctx.dry else WARPS)
    stages = opt.stages or (DRY["stages"] if ctx.dry else STAGES)
    for s, bn, nw, st, pf in itertools.product(splits, block_n, warps, stages, opt.prefetch):
        yield Launch(
            "paged",
            lambda s=s, bn=bn, nw=nw, st=st, pf=pf: paged_decode(
                c.q,
                p.k_pool,
                p.v_pool,
                p.indptr,
                p.indices,
                p.last,
                page_size=p.page_size,
                splits=s,
                out=o,
                block_n=bn,
                num_warps=nw,
                num_stages=st,
                prefetch=pf,
            ),
            launch={
                "page_size": p.page_size,
                "splits": s,
                "block_n": bn,
                "num_warps": nw,
                "num_stages": st,
                "prefetch": pf,
            },
        )


def _flashinfer(torch, c, ctx):
    if c.pool is not None:
        yield from paged.flashinfer_decode(torch, c, tensor_cores=(True,))


def best(rows: list[dict]) -> list[dict]:
    """Per case and page size (schema rows): the fastest configuration of ours, its time, and
    FlashInfer's on the same pool with its ratio to ours (> 1: ours is faster)."""
    out = []
    for what, ps in dict.fromkeys((r["what"], r["shape"]["page_size"]) for r in rows):
        at = [r for r in rows if r["what"] == what and r["shape"]["page_size"] == ps]
        ours = [r for r in at if r["ours"]]
        fi = [r["time_us"] for r in at if not r["ours"]]
        if not ours:
            continue
        r = min(ours, key=lambda r: r["time_us"])
        out.append(
            {
                "case": what,
                "page_size": ps,
                "best": r["impl"],
                "us": r["time_us"],
                "flashinfer_tc_us": min(fi) if fi else None,
                "ratio": min(fi) / r["time_us"] if fi else None,
            }
        )
    return out


def _finish(rows) -> None:
    for line in best(rows):
        ratio = "-" if line["ratio"] is None else f"{line['ratio']:.3f}"
        fi = line["flashinfer_tc_us"]
        print(
            f"{line['case']}, ps {line['page_size']}: best {line['us']:8.1f} us ({line['best']}); "
            f"flashinfer-tc {'-' if fi is None else f'{fi:.1f} us'}; flashinfer / ours = {ratio}",
            flush=True,
        )


SECTION = Section(
    name="paged-sweep",
    doc=__doc__,
    fields=paged.SECTION.fields,
    cases=paged.SECTION.cases,
    dry_cases=paged.SECTION.dry_cases[:1],
    shape=paged.SECTION.shape,
    dry_shape=paged.SECTION.dry_shape,
    inputs=paged.SECTION.inputs,
    impls=(
        Impl("paged", _grid, ours=True),
        Impl("flashinfer", _flashinfer, library="flashinfer"),
    ),
    tolerance=5e-2,
    finish=_finish,
    subset="--impls",
    options=(
        *paged.SECTION.options,
        (
            "--block-n",
            f"KV tiles, e.g. 64,128 (default {','.join(map(str, BLOCK_N))})",
            int_list("block_n"),
            None,
        ),
        ("--warps", f"warps, e.g. 4 (default {','.join(map(str, WARPS))})", int_list("warps"), None),
        (
            "--stages",
            f"pipeline stages, e.g. 2 (default {','.join(map(str, STAGES))})",
            int_list("stages"),
            None,
        ),
        ("--prefetch", "page-id prefetch: auto (the kernel's choice), 0, 1", prefetch_list, (None,)),
    ),
)


def main(argv=None) -> int:
    return section_main(SECTION, argv, prog="python -m attnlab.gpubench.sweeps.paged")


if __name__ == "__main__":
    sys.exit(main())
