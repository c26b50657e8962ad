"""Decode attention on a real GPU: split-KV against the lecture's simplified-GPU time model.

    python -m attnlab.gpubench.decode --out results.json      # on a CUDA machine

A Llama-3-8B-shaped layer (32 query heads, 8 KV heads, d = 128, bf16): for each (batch, context)
case and split count, `split_kv_decode` (split kernel + merge kernel) is timed by CUDA-graph
replay (`time_per_call`, median, launch overhead excluded; the plain per-call time with launches
is kept too), beside `attnlab.machine.hardware.decode_time` for this GPU: once with the datasheet
bandwidth and once with the copy bandwidth measured in the same run. Correctness first: each
configuration that is timed is also checked against a float32 reference on the same inputs.
"""

from __future__ import annotations

import math
import sys

from attnlab.machine.models import get_model
from attnlab.gpubench.cli import section_main

__all__ = ["run", "main"]

#: The layer measured: Llama-3-8B's attention shape, from data/models.json.
_SHAPE = get_model("Llama-3-8B")
HEADS, KV_HEADS, HEAD_DIM = _SHAPE.q_heads, _SHAPE.kv_heads, _SHAPE.head_dim
CASES = [
    (1, 32768, (1, 2, 4, 8, 16, 32, 64)),
    (2, 16384, (1, 2, 4, 8, 16, 32, 64)),
    (16, 8192, (1, 2, 4, 8, 16)),
    (256, 1024, (1, 4, 16, 64)),
    (256, 4096, (1, 4, 16, 64)),
    (256, 32768, (1, 64)),
]
DRY = dict(cases=[(2, 40, (1, 3))], shape=dict(heads=8, kv_heads=2, head_dim=32))


def run(
    cases=CASES,
    gpu_name: str = "H200-SXM",
    seed: int = 0,
    *,
    dry: bool = False,
    out: str | None = None,
    ceil: dict | None = None,
) -> dict:
    import torch
    from attnlab.machine.hardware import decode_time, get_gpu
    from attnlab.gpubench.cli import write_json
    from attnlab.gpubench.core import eager_time, header, time_per_call
    from attnlab.kernels.decode import split_kv_decode, workspace

    torch.manual_seed(seed)
    spec = get_gpu(gpu_name)
    shape = DRY["shape"] if dry else dict(heads=HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM)
    hq, hkv, d = shape["heads"], shape["kv_heads"], shape["head_dim"]
    res = header(torch, shape)
    res.pop("flashinfer", None)
    cuda = torch.cuda.is_available()
    if ceil:
        res["copy_bytes_per_s"] = ceil["copy_bytes_per_s"]
    res.setdefault("copy_bytes_per_s", 1e9)  # a dry run: no ceiling to read against
    copy_bw = res["copy_bytes_per_s"]
    res.update(model_gpu=spec.name)
    dev = "cuda" if cuda else "cpu"
    for batch, ctx, splits_list in DRY["cases"] if dry else cases:
        q = torch.randn(batch, hq, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(batch, hkv, ctx, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(batch, hkv, ctx, d, device=dev, dtype=torch.bfloat16)
        ref = None
        if batch * ctx <= 64 * 1024:  # fp32 reference where it is cheap
            kr = k.float().repeat_interleave(hq // hkv, dim=1)
            vr = v.float().repeat_interleave(hq // hkv, dim=1)
            s = torch.einsum("bhd,bhnd->bhn", q.float(), kr) / math.sqrt(d)
            ref = torch.einsum("bhn,bhnd->bhd", torch.softmax(s, dim=-1), vr)
            del kr, vr, s
        for splits in splits_list:
            ws = workspace(batch, hq, d, splits, q.device)
            out_ = split_kv_decode(q, k, v, splits, ws=ws).clone()
            err = None if ref is None else float((out_ - ref).norm() / ref.norm())
            us, how = time_per_call(lambda: split_kv_decode(q, k, v, splits, ws=ws), out_.float())
            us_events = (
                eager_time(lambda: split_kv_decode(q, k, v, splits, ws=ws), warmup=10, rep=50)[0]
                if cuda
                else us
            )
            m = decode_time(batch, ctx, hkv, splits, spec, head_dim=d, group=hq // hkv)
            kv_bytes = 2 * batch * hkv * ctx * d * 2
            res["rows"].append(
                {
                    "batch": batch,
                    "context": ctx,
                    "splits": splits,
                    "us": us,
                    "timing": how,
                    "us_with_launch": us_events,
                    "model_us": m.time * 1e6,
                    "model_us_measured_bw": m.time * 1e6 * spec.hbm_bandwidth / copy_bw,
                    "model_utilization": m.utilization,
                    "blocks": m.blocks,
                    "waves": m.waves,
                    "bytes": kv_bytes,
                    "achieved_bytes_per_s": kv_bytes / (us * 1e-6),
                    "rel_err": err,
                }
            )
        del q, k, v
        if cuda:
            torch.cuda.empty_cache()
        write_json(out, res)
    return res


def main(argv=None) -> int:
    # no --cases: each of CASES holds its split counts too
    return section_main(
        "decode", argv, __doc__, None, CASES, DRY["cases"], lambda a, cases, _: run(dry=a.dry, out=a.out)
    )


if __name__ == "__main__":
    sys.exit(main())
