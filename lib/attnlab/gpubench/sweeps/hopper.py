"""Measure `flash_attention_hopper` step by step on a real GPU, beside cuDNN / FlashAttention SDPA
and FlashInfer's FA3 prefill in the same run.

    python -m attnlab.gpubench.sweeps.hopper --out hopper.json     # on a CUDA machine
    python -m attnlab.gpubench.sweeps.hopper --dry                 # tiny, on a CPU under the interpreter

Llama-3-8B's attention shape (batch 1, 32 query heads, 8 KV heads, d = 128, bf16), N in 4K, 8K, 16K,
causal and not: the prefill section's inputs, reference and counts (`gpubench.prefill`). For each:
- ours: every cumulative step set of HOPPER_STEPS (base, +tma, +causal_split, ...) at its own
  default launch, then a small grid of (block_m, block_n, num_warps, num_stages) for all steps
  (steps=all) and for all but warp_specialize (steps=all-ws), the default launches left out;
- fa2: kernels.fa2's FlashAttention-2 kernel, for the record;
- sdpa: torch SDPA with the FLASH_ATTENTION and CUDNN_ATTENTION backends forced;
- flashinfer: single_prefill_with_kv_cache(backend="fa3"), last (its first call compiles).
Each launch is checked against the float32 reference at its own size (a compile error or an
error over 3e-2 drops that launch, printed, and the sweep goes on), then timed by CUDA-graph
replay as in the prefill section (gpubench.core.measure, the loop every section shares).
FLOPs = 4 B H d x (visible (query, key) pairs). explore.measured.hopper_steps_summary reads the
file it writes.
"""

from __future__ import annotations

import itertools
import sys

from attnlab.gpubench.cli import section_main
from attnlab.gpubench.declare import Impl, Launch, Section
from attnlab.gpubench.paged import SHAPE
from attnlab.gpubench.prefill import DRY_SHAPE, flashinfer_prefill, inputs, model_columns, sdpa_prefill

__all__ = ["SECTION", "GRID", "NO_WS_GRID", "main"]

#: the launches timed for all steps; NO_WS_GRID for all but warp_specialize (its 4-warp launches
#: do not compile with Triton 3.6)
GRID = {"block_m": (128,), "block_n": (64, 128), "num_warps": (4, 8), "num_stages": (2, 3, 4)}
NO_WS_GRID = {"block_m": (128,), "block_n": (64, 128), "num_warps": (4, 8), "num_stages": (3,)}
#: one launch of each kind on a dry run, none of them a default
DRY_GRID = {"block_m": (16,), "block_n": (16,), "num_warps": (4,), "num_stages": (2,)}


def _steps(torch, c, ctx):
    """Each cumulative step set at its default launch, then the grid's other launches."""
    from attnlab.kernels.hopper import flash_attention_hopper
    from attnlab.kernels.hopper_kernel import HOPPER_STEPS, cumulative_steps
    from attnlab.kernels.tuning import launch_config

    def call(**kw):
        return lambda: flash_attention_hopper(c.q, c.k, c.v, causal=c.causal, **kw)

    for st in cumulative_steps():
        yield Launch("hopper", call(steps=st), launch={"steps": "+".join(st) or "base"})
    d = c.q.shape[3]
    grids = (DRY_GRID, DRY_GRID) if ctx.dry else (GRID, NO_WS_GRID)
    for tag, st, grid in (("all", HOPPER_STEPS, grids[0]), ("all-ws", HOPPER_STEPS[:-1], grids[1])):
        for values in itertools.product(*grid.values()):
            kw = dict(zip(grid, values))
            if launch_config(d, c.causal, st) == kw:
                continue  # the default launch: a step row above
            yield Launch("hopper", call(steps=st, **kw), launch={"steps": tag, **kw})


def _fa2(torch, c, ctx):
    from attnlab.kernels.fa2 import flash_attention_triton

    yield Launch("fa2", lambda: flash_attention_triton(c.q, c.k, c.v, causal=c.causal))


def _settings(ctx) -> dict:
    from attnlab.kernels.hopper_kernel import HOPPER_STEPS

    return {"steps": list(HOPPER_STEPS), "ceilings": ctx.ceilings}


SECTION = Section(
    name="hopper-steps",
    doc=__doc__,
    fields=("N",),
    cases=((4096,), (8192,), (16384,)),
    dry_cases=((40,),),
    shape=SHAPE,
    dry_shape=DRY_SHAPE,
    inputs=lambda torch, case, ctx: inputs(torch, (1, *case), ctx),
    impls=(
        Impl("ours", _steps, ours=True),
        Impl("fa2", _fa2, ours=True),
        Impl("sdpa", sdpa_prefill),
        Impl(
            "flashinfer",
            lambda torch, c, ctx: flashinfer_prefill(torch, c, ctx, ("fa3",)),
            library="flashinfer",
        ),
    ),
    extra=model_columns,
    tolerance=3e-2,
    timing=dict(calls=5, reps=7),
    settings=_settings,
)


def main(argv=None) -> int:
    """The command line (--cases N,..., --peers, --out, --dry; no GPU without --dry refused),
    then core.measure and the rows' table."""
    return section_main(SECTION, argv, prog="python -m attnlab.gpubench.sweeps.hopper")


if __name__ == "__main__":
    sys.exit(main())
