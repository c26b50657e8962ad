"""Decode attention on a real GPU: split-KV against the lecture's simplified-GPU time model.

    python -m attnlab.gpubench.decode --out results.json      # on a CUDA machine
    TRITON_INTERPRET=1 python -m attnlab.gpubench.decode --dry # tiny sizes on a CPU: the code path

A Llama-3-8B-shaped layer (32 query heads, 8 KV heads, d = 128, bf16): for each (batch, context)
case and split count, `split_kv_decode` (split kernel + merge kernel) is timed by CUDA-graph
replay (gpubench.core.measure: median, launch overhead excluded; the eager per-call time with
launches is kept too, us_with_launch), beside `attnlab.machine.hardware.decode_time` for this GPU:
once with the datasheet bandwidth (model_us) and once with the copy bandwidth measured in the same
run (model_us_measured_bw), with the model's utilization, blocks and waves. Correctness first:
each configuration with batch x context <= 64K is checked against a float32 reference on the same
inputs (the relative error of the norm). bytes = K and V read once (bf16).
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

from attnlab.gpubench.cli import section_main
from attnlab.gpubench.core import eager_time
from attnlab.gpubench.declare import Impl, Launch, Section
from attnlab.gpubench.paged import SHAPE
from attnlab.gpubench.reference import reference

__all__ = ["SECTION", "main"]

#: (batch, context, the split counts timed): each case holds its own splits, so no --cases
CASES = (
    (1, 32768, (1, 2, 4, 8, 16, 32, 64)),
    (2, 16384, (1, 2, 4, 8, 16, 32, 64)),
    (16, 8192, (1, 2, 4, 8, 16)),
    (256, 1024, (1, 4, 16, 64)),
    (256, 4096, (1, 4, 16, 64)),
    (256, 32768, (1, 64)),
)
#: data/gpus.json's GPU the model predicts for
GPU = "H200-SXM"
#: the float32 reference is computed where batch x context is at most this
CHECKED = 64 * 1024


def _inputs(torch, case, ctx):
    batch, n, splits = case
    hq, hkv, d = ctx.shape["heads"], ctx.shape["kv_heads"], ctx.shape["head_dim"]
    torch.manual_seed(ctx.seed + batch + n)
    bf = dict(device=ctx.device, dtype=torch.bfloat16)
    q = torch.randn(batch, hq, d, **bf)
    k, v = (torch.randn(batch, hkv, n, d, **bf) for _ in "kv")
    yield SimpleNamespace(
        q=q,
        k=k,
        v=v,
        splits=splits,
        case={"batch": batch, "context": n},
        ref=reference(torch, q, k, v) if batch * n <= CHECKED else None,
        flop=None,
        bytes=2 * k.numel() * k.element_size(),
    )


def _ours(torch, c, ctx):
    from attnlab.kernels.decode import split_kv_decode, workspace

    for s in c.splits:
        ws = workspace(*c.q.shape[:2], c.q.shape[2], s, c.q.device)
        yield Launch(
            "ours", lambda s=s, ws=ws: split_kv_decode(c.q, c.k, c.v, s, ws=ws), launch={"splits": s}
        )


def _model(c, launch, us, ctx) -> dict:
    """What a decode row adds: the time model at the datasheet and at the measured copy
    bandwidth, its utilization, blocks and waves, and the eager time with the host's launch."""
    import torch

    from attnlab.machine.hardware import decode_time, get_gpu

    spec = get_gpu(GPU)
    batch, hq, d = c.q.shape
    hkv, n = c.k.shape[1], c.k.shape[2]
    m = decode_time(batch, n, hkv, launch.launch["splits"], spec, head_dim=d, group=hq // hkv)
    eager = eager_time(launch.fn, warmup=10, rep=50)[0] if torch.cuda.is_available() else us
    return {
        "us_with_launch": eager,
        "model_us": m.time * 1e6,
        "model_us_measured_bw": m.time * 1e6 * spec.hbm_bandwidth / ctx.ceilings["copy_bytes_per_s"],
        "model_utilization": m.utilization,
        "blocks": m.blocks,
        "waves": m.waves,
    }


SECTION = Section(
    name="decode",
    doc=__doc__,
    fields=None,
    cases=CASES,
    dry_cases=((2, 40, (1, 3)),),
    shape=SHAPE,
    dry_shape=dict(heads=8, kv_heads=2, head_dim=32),
    inputs=_inputs,
    impls=(Impl("ours", _ours, ours=True),),
    extra=_model,
    error="relative",
    tolerance=0.02,  # bf16 inputs and output against float32: 1.6e-3 recorded at most
    settings=lambda ctx: {"model_gpu": GPU, "copy_bytes_per_s": ctx.ceilings["copy_bytes_per_s"]},
)


def main(argv=None) -> int:
    return section_main(SECTION, argv)


if __name__ == "__main__":
    sys.exit(main())
