"""The Gluon FA3 prefill against its strongest peers, on the cases FA3 is judged on: head dim 128
and 64, batch 1 to 8, causal and not, 32 query heads with 32 KV heads (MHA) and with 8 (GQA, as
Llama-3 runs it); bf16, N_q = N_k.

    python -m attnlab.gpubench.prefill_fa3 --out fa3.json      # on an sm_90 GPU
    python -m attnlab.gpubench.prefill_fa3 --dry                # tiny sizes on a CPU: the code path

Implementations, on the same inputs in the same run:
- ours-gluon: `kernels.gluon_fa3.flash_attention_gluon` at its defaults (steps=None), and, where
  those are persistent (causal), the same steps without `persistent` (launch "steps":
  "not_persistent"): one program per tile, the kernel before its persistent scheduler, so that
  the run shows what the scheduler adds on inputs it was not chosen on (sm_90 only: Gluon
  kernels do not run under the interpreter);
- sdpa-cudnn: torch SDPA with the cuDNN backend forced, GQA by enable_gqa (its fastest call);
- flashinfer-fa3 (batch 1: `single_prefill_with_kv_cache`) and flashinfer-batch-fa3
  (`BatchPrefillWithRaggedKVCacheWrapper(backend="fa3")`, planned outside the timing, every batch).
--draw N draws the inputs from another seed (N = 0: the seed the defaults were chosen on). Each
output is checked against the float32 reference, then timed by CUDA-graph replay; each of our
rows gets the prefill section's within_rule verdict (against cuDNN's error). ratio_to_best is
the best peer's time over ours on the same case: the best call of the best library.
"""

from __future__ import annotations

import sys
from attnlab.gpubench.cli import section_main, seed_arg
from attnlab.gpubench.declare import Impl, Launch, Section
from attnlab.gpubench.prefill import (
    flashinfer_batch_prefill,
    flashinfer_prefill,
    masked_pair,
    sdpa_prefill,
    verdicts,
)

__all__ = ["SECTION", "CASES", "main"]

HEADS = 32
#: (batch, N, head dim, KV heads): the FA3 table's cases, MHA then GQA
CASES = tuple(
    (b, n, d, hkv)
    for hkv in (HEADS, 8)
    for d, shapes in (
        (128, ((1, 4096), (1, 8192), (1, 16384), (2, 8192), (4, 4096), (8, 2048))),
        (64, ((1, 4096), (1, 16384), (4, 4096))),
    )
    for b, n in shapes
)


def _inputs(torch, case, ctx):
    """One case's Q, K, V (seeded by the case and the draw), without a mask, then causal."""
    batch, n, d, hkv = case
    hq = ctx.shape.get("heads", HEADS)
    hkv = min(hkv, hq)
    seed = ctx.seed + 7919 * ctx.options.draw + batch + n + d + hkv
    named = {"batch": batch, "N": n, "head_dim": d, "kv_heads": hkv}
    yield from masked_pair(torch, seed, (batch, hq, hkv, n, d), ctx.device, named)


def _runnable(case) -> str | None:
    """What is wrong with a --cases entry the Gluon kernel cannot run (a sentence), or None."""
    _, _, d, hkv = case
    if d not in (64, 128):
        return f"head_dim must be 64 or 128 (the Gluon kernel's), not {d}"
    if HEADS % hkv:
        return f"kv_heads must divide the {HEADS} query heads, not {hkv}"
    return None


def _ours(torch, c, ctx):
    if not (c.q.is_cuda and torch.cuda.get_device_capability(c.q.device) == (9, 0)):
        return  # Gluon kernels run on sm_90 only, not under the interpreter
    from attnlab.kernels.gluon_fa3 import flash_attention_gluon
    from attnlab.kernels.tuning import gluon_default_steps

    yield Launch("ours-gluon", lambda: flash_attention_gluon(c.q, c.k, c.v, causal=c.causal)[0])
    steps = gluon_default_steps(c.q.shape[3], c.causal)
    if "persistent" in steps:
        before = tuple(s for s in steps if s != "persistent")
        yield Launch(
            "ours-gluon",
            lambda: flash_attention_gluon(c.q, c.k, c.v, causal=c.causal, steps=before)[0],
            launch={"steps": "not_persistent"},
        )


def _flashinfer(torch, c, ctx):
    yield from flashinfer_prefill(torch, c, ctx, ("fa3",))
    yield from flashinfer_batch_prefill(torch, c, ctx, ("fa3",))


SECTION = Section(
    name="prefill_fa3",
    doc=__doc__,
    fields=("batch", "N", "head_dim", "kv_heads"),
    cases=CASES,
    dry_cases=((1, 40, 64, 2), (2, 33, 64, 4)),
    shape={"heads": HEADS},
    dry_shape={"heads": 4},
    inputs=_inputs,
    check=_runnable,
    impls=(
        Impl("ours", _ours, ours=True),
        Impl("sdpa", lambda torch, c, ctx: sdpa_prefill(torch, c, ctx, ("cudnn",))),
        Impl("flashinfer", _flashinfer, library="flashinfer"),
    ),
    timing=dict(calls=5, reps=7),
    settings=lambda ctx: {"draw": ctx.options.draw},
    finish=verdicts,
    options=(("--draw", "the inputs' seed offset (0: the inputs the defaults were chosen on)", seed_arg, 0),),
)


def main(argv=None) -> int:
    return section_main(SECTION, argv)


if __name__ == "__main__":
    sys.exit(main())
