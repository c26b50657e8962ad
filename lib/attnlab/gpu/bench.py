"""Prefill attention on a real GPU: correctness at real sizes and timings beside the model.

    python -m attnlab.gpu.bench --out results.json      # on a CUDA machine

For a Llama-3-8B-shaped layer (32 query heads, 8 KV heads, d = 128, bf16, batch 1) and N from 1K
to 16K it times three implementations with CUDA events (triton.testing.do_bench, median):
- "standard": Algorithm 0 in eager torch: S = QK^T written to HBM, softmax writes P, then PV
  (non-causal only: the mask would add a fourth pass);
- "triton": `flash_attention_triton`, this course's FlashAttention-2 kernel;
- "sdpa": torch.nn.functional.scaled_dot_product_attention (the fastest backend torch picks).
Each row carries the model's prediction: roofline time max(FLOPs / peak, bytes / bandwidth) with
bytes from `attnlab.iomodel` (standard_io for Algorithm 0; Q, K, V read once and O written once for
the fused kernels) and the ceilings measured in the same run (a device copy, a bf16 matmul).
Correctness first: each implementation against a float32 reference on upcast inputs, at sizes
that do not divide the blocks, causal and not.
"""
from __future__ import annotations

import datetime as _dt
import math
import platform
import sys

from ..models import get_model

__all__ = ["run", "main"]

#: The layer measured: Llama-3-8B's attention shape, from data/models.json.
_SHAPE = get_model("Llama-3-8B")
HEADS, KV_HEADS, HEAD_DIM = _SHAPE.q_heads, _SHAPE.kv_heads, _SHAPE.head_dim


def _ceilings(torch, do_bench):
    n = 1 << 28                                    # 512 MiB of bf16 per buffer
    a = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    b = torch.empty_like(a)
    ms = do_bench(lambda: b.copy_(a), warmup=50, rep=300, return_mode="median")
    copy_bw = 2 * a.numel() * 2 / (ms * 1e-3)
    del a, b
    m = 8192
    x = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    ms = do_bench(lambda: x @ y, warmup=50, rep=300, return_mode="median")
    return {"copy_bytes_per_s": copy_bw, "bf16_matmul_flops": 2 * m ** 3 / (ms * 1e-3)}


def _standard(torch, q, k, v, scale):
    g = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    s = torch.matmul(q * scale, k.transpose(-1, -2))    # kernel 1: S to HBM (scale folded into Q)
    p = torch.softmax(s, dim=-1)                          # kernel 2: S in, P out
    return torch.matmul(p, v)                             # kernel 3: P, V in, O out


def _rel(torch, out, ref):
    return float((out.float() - ref).norm() / ref.norm())


def run(Ns=(1024, 2048, 4096, 8192, 16384), check_sizes=((1000, 1000), (1025, 4097), (4096, 4096)),
        seed: int = 0) -> dict:
    import torch
    import torch.nn.functional as F
    from triton.testing import do_bench

    from ..iomodel import standard_io
    from .flash_triton import flash_attention_triton

    torch.manual_seed(seed)
    dev = torch.cuda.get_device_properties(0)
    result = {"device": torch.cuda.get_device_name(0), "sms": dev.multi_processor_count,
              "torch": torch.__version__, "triton": __import__("triton").__version__,
              "python": platform.python_version(),
              "date": _dt.date.today().isoformat(), "shape": {"batch": 1, "heads": HEADS,
              "kv_heads": KV_HEADS, "head_dim": HEAD_DIM, "dtype": "bf16"}}
    result["ceilings"] = _ceilings(torch, do_bench)
    scale = 1 / math.sqrt(HEAD_DIM)

    checks = []
    for n_q, n_k in check_sizes:
        q = torch.randn(1, HEADS, n_q, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, KV_HEADS, n_k, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1, KV_HEADS, n_k, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        for causal in (False, True):
            qf, kf, vf = (t.float() for t in (q, k, v))
            kr, vr = (t.repeat_interleave(HEADS // KV_HEADS, dim=1) for t in (kf, vf))
            s = torch.matmul(qf, kr.transpose(-1, -2)) * scale
            if causal:                             # bottom-right alignment, as the kernel
                i = torch.arange(n_q, device="cuda")[:, None]
                j = torch.arange(n_k, device="cuda")[None, :]
                s = s.masked_fill(j > i + (n_k - n_q), float("-inf"))
            ref = torch.nan_to_num(torch.softmax(s, dim=-1)) @ vr
            out = flash_attention_triton(q, k, v, causal=causal)
            checks.append({"impl": "triton", "n_q": n_q, "n_k": n_k, "causal": causal,
                           "rel_err": _rel(torch, out, ref), "nan": bool(torch.isnan(out).any())})
            if n_q == n_k:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
                checks.append({"impl": "sdpa", "n_q": n_q, "n_k": n_k, "causal": causal,
                               "rel_err": _rel(torch, out, ref), "nan": bool(torch.isnan(out).any())})
                if not causal:
                    out = _standard(torch, q, k, v, scale)
                    checks.append({"impl": "standard", "n_q": n_q, "n_k": n_k, "causal": causal,
                                   "rel_err": _rel(torch, out, ref), "nan": bool(torch.isnan(out).any())})
        del q, k, v
    result["checks"] = checks

    peak = result["ceilings"]["bf16_matmul_flops"]
    bw = result["ceilings"]["copy_bytes_per_s"]
    rows = []
    for N in Ns:
        q = torch.randn(1, HEADS, N, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, KV_HEADS, N, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1, KV_HEADS, N, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        for causal in (False, True):
            flops = 4 * HEADS * N * N * HEAD_DIM * (0.5 if causal else 1.0)
            fused_bytes = 2 * (2 * HEADS * N * HEAD_DIM + 2 * KV_HEADS * N * HEAD_DIM)
            impls = {"triton": lambda: flash_attention_triton(q, k, v, causal=causal),
                     "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                    enable_gqa=True)}
            if not causal:
                impls["standard"] = lambda: _standard(torch, q, k, v, scale)
            for name, fn in impls.items():
                ms = do_bench(fn, warmup=25, rep=200, return_mode="median")
                nbytes = 2 * HEADS * standard_io(N, HEAD_DIM) if name == "standard" else fused_bytes
                model_s = max(flops / peak, nbytes / bw)
                rows.append({"impl": name, "N": N, "causal": causal, "ms": ms,
                             "tflops": flops / (ms * 1e-3) / 1e12, "model_bytes": nbytes,
                             "model_ms": model_s * 1e3,
                             "model_bound": "memory" if nbytes / bw > flops / peak else "compute"})
        del q, k, v
        torch.cuda.empty_cache()
    result["rows"] = rows
    return result


def table(result: dict) -> str:
    lines = [f"{result['device']} ({result['sms']} SMs), torch {result['torch']}, triton {result['triton']}",
             f"measured ceilings: copy {result['ceilings']['copy_bytes_per_s'] / 1e12:.2f} TB/s, "
             f"bf16 matmul {result['ceilings']['bf16_matmul_flops'] / 1e12:.0f} TFLOP/s"]
    for c in result["checks"]:
        lines.append(f"check {c['impl']:8s} n_q={c['n_q']:5d} n_k={c['n_k']:5d} causal={c['causal']!s:5s} "
                     f"rel_err={c['rel_err']:.1e} nan={c['nan']}")
    lines.append(f"{'impl':9s} {'N':>6s} {'causal':>6s} {'ms':>9s} {'TFLOP/s':>8s} {'model ms':>9s} bound")
    for r in result["rows"]:
        lines.append(f"{r['impl']:9s} {r['N']:6d} {r['causal']!s:>6s} {r['ms']:9.3f} {r['tflops']:8.1f} "
                     f"{r['model_ms']:9.3f} {r['model_bound']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    from . import bench_cli
    return bench_cli(run, table, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
