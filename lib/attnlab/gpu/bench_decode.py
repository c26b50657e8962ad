"""Decode attention on a real GPU: split-KV against the lecture's simplified-GPU time model.

    python -m attnlab.gpu.bench_decode --out results.json      # on a CUDA machine

A Llama-3-8B-shaped layer (32 query heads, 8 KV heads, d = 128, bf16): for each (batch, context)
case and split count, `split_kv_decode` (split kernel + merge kernel) is timed with CUDA-graph
graph replay (median, launch overhead excluded; the plain per-call time with launches is kept too), beside `attnlab.hardware.decode_time` for this GPU: once with the datasheet
bandwidth and once with the copy bandwidth measured in the same run. Correctness first: each
configuration that is timed is also checked against a float32 reference on the same inputs.
"""
from __future__ import annotations

import datetime as _dt
import math
import sys

from ..models import get_model

__all__ = ["run", "main"]

#: The layer measured: Llama-3-8B's attention shape, from data/models.json.
_SHAPE = get_model("Llama-3-8B")
HEADS, KV_HEADS, HEAD_DIM = _SHAPE.q_heads, _SHAPE.kv_heads, _SHAPE.head_dim
CASES = [(1, 32768, (1, 2, 4, 8, 16, 32, 64)),
         (2, 16384, (1, 2, 4, 8, 16, 32, 64)),
         (16, 8192, (1, 2, 4, 8, 16)),
         (256, 1024, (1, 4, 16, 64)),
         (256, 4096, (1, 4, 16, 64)),
         (256, 32768, (1, 64))]


def _bench(fn, calls: int = 20, reps: int = 15):
    """Per-call time in ms from CUDA-graph replay: `calls` calls captured in one graph, the graph
    replayed `reps` times, median over replays. Without the graph the host's launch overhead of
    the two Triton kernels (~50 us here) would hide the small cases."""
    import torch
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()                                  # compile and warm up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / calls)
    times.sort()
    return times[len(times) // 2]


def run(cases=CASES, gpu_name: str = "H200-SXM", seed: int = 0) -> dict:
    import torch
    from triton.testing import do_bench

    from ..hardware import decode_time
    from ..hardware import get_gpu
    from .decode_triton import split_kv_decode, workspace

    torch.manual_seed(seed)
    spec = get_gpu(gpu_name)
    a = torch.randn(1 << 28, device="cuda", dtype=torch.bfloat16)
    b = torch.empty_like(a)
    copy_bw = 2 * a.numel() * 2 / (do_bench(lambda: b.copy_(a), warmup=50, rep=300, return_mode="median") * 1e-3)
    del a, b
    res = {"device": torch.cuda.get_device_name(0),
           "sms": torch.cuda.get_device_properties(0).multi_processor_count,
           "torch": torch.__version__, "triton": __import__("triton").__version__,
           "date": _dt.date.today().isoformat(), "model_gpu": spec.name,
           "shape": {"heads": HEADS, "kv_heads": KV_HEADS, "head_dim": HEAD_DIM, "dtype": "bf16"},
           "copy_bytes_per_s": copy_bw, "rows": []}
    for batch, ctx, splits_list in cases:
        q = torch.randn(batch, HEADS, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, KV_HEADS, ctx, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(batch, KV_HEADS, ctx, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        ref = None
        if batch * ctx <= 64 * 1024:        # fp32 reference where it is cheap
            kr = k.float().repeat_interleave(HEADS // KV_HEADS, dim=1)
            vr = v.float().repeat_interleave(HEADS // KV_HEADS, dim=1)
            s = torch.einsum("bhd,bhnd->bhn", q.float(), kr) / math.sqrt(HEAD_DIM)
            ref = torch.einsum("bhn,bhnd->bhd", torch.softmax(s, dim=-1), vr)
            del kr, vr, s
        for splits in splits_list:
            err = None
            if ref is not None:
                out = split_kv_decode(q, k, v, splits)
                err = float((out - ref).norm() / ref.norm())
            ws = workspace(batch, HEADS, HEAD_DIM, splits, q.device)
            ms = _bench(lambda: split_kv_decode(q, k, v, splits, ws=ws))
            ms_events = do_bench(lambda: split_kv_decode(q, k, v, splits, ws=ws), warmup=10, rep=50,
                                 return_mode="median")
            m = decode_time(batch, ctx, KV_HEADS, splits, spec, head_dim=HEAD_DIM,
                            group=HEADS // KV_HEADS)
            kv_bytes = 2 * batch * KV_HEADS * ctx * HEAD_DIM * 2
            res["rows"].append({
                "batch": batch, "context": ctx, "splits": splits, "us": ms * 1e3,
                "us_with_launch": ms_events * 1e3,
                "model_us": m.time * 1e6,
                "model_us_measured_bw": m.time * 1e6 * spec.hbm_bandwidth / copy_bw,
                "model_utilization": m.utilization, "blocks": m.blocks, "waves": m.waves,
                "achieved_bytes_per_s": kv_bytes / (ms * 1e-3), "rel_err": err})
        del q, k, v
        torch.cuda.empty_cache()
    return res


def table(res: dict) -> str:
    lines = [f"{res['device']} ({res['sms']} SMs), torch {res['torch']}, triton {res['triton']}; "
             f"copy {res['copy_bytes_per_s'] / 1e12:.2f} TB/s; model GPU {res['model_gpu']}",
             f"{'batch':>5} {'ctx':>6} {'splits':>6} {'meas us':>9} {'model us':>9} {'model@copy':>10} "
             f"{'util':>5} {'TB/s':>5} rel_err"]
    for r in res["rows"]:
        err = "" if r["rel_err"] is None else f"{r['rel_err']:.1e}"
        lines.append(f"{r['batch']:5d} {r['context']:6d} {r['splits']:6d} {r['us']:9.1f} {r['model_us']:9.1f} "
                     f"{r['model_us_measured_bw']:10.1f} {r['model_utilization']:5.2f} "
                     f"{r['achieved_bytes_per_s'] / 1e12:5.2f} {err}")
    return "\n".join(lines)


def main(argv=None) -> int:
    from . import bench_cli
    return bench_cli(run, table, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
