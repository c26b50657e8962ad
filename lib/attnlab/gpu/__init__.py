"""Optional GPU path: Triton kernels and their benchmark harnesses.

`python -m attnlab.gpu.bench` runs every harness below in one run and writes one file,
data/measurements/<gpu>-<date>.json (its docstring says what is in it).

    flash_triton.flash_attention_triton   FlashAttention-2 forward (prefill)    bench_prefill.py
    hopper_triton.flash_attention_hopper  prefill + Hopper steps (TMA, ...),     bench_prefill.py, tune_hopper.py,
                                          soft-cap / window compiled in          bench_variants.py
    decode_triton.split_kv_decode         split-KV decode, contiguous KV         bench_decode.py
    paged_triton.paged_decode             split-KV decode over a paged KV cache  bench_paged.py, tune_paged.py
    cascade_triton.cascade_decode         shared prefix read once + paged decode  bench_cascade.py
    variants_triton.variant_prefill       prefill, soft-cap / window compiled in  bench_variants.py
    scheduled_triton.scheduled_decode     persistent decode driven by a schedule  bench_scheduled.py
      (.ScheduledDecoder: static buffers, one CUDA graph replayed across batches)

`ncu_profile.py` makes the recorded Nsight Compute profile's calls (decode and prefill kernels
beside FlashInfer's and cuDNN's) and distils the report.

Nothing in the rest of attnlab imports this package at import time (explore.runs calls it from a
live GPU cell only); it imports torch and triton lazily. On a
machine without a GPU the kernels still run under Triton's interpreter (set TRITON_INTERPRET=1
before importing a kernel module): slow, for small correctness checks only.

    from attnlab import gpu
    gpu.available()          # True when torch sees a CUDA device and triton imports
"""
from __future__ import annotations

import os

__all__ = ["available", "unavailable_reason", "interpreting", "bench_cli", "time_per_call", "checked_time"]


def interpreting() -> bool:
    """True when Triton kernels run on the CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def available() -> bool:
    """True when a CUDA GPU is visible to torch and triton is importable."""
    return unavailable_reason() is None


def unavailable_reason() -> str | None:
    """Why the GPU path cannot run here, in a sentence a learner can act on; None if it can."""
    try:
        import torch
        import triton  # noqa: F401  (only whether it imports)
    except ImportError:
        return ("torch and Triton are not installed here (the notebooks do not need them); "
                "on a Linux machine with a CUDA GPU, `pip install -e '.[gpu]'` adds them")
    if not torch.cuda.is_available():
        return "No CUDA GPU here"
    return None


def bench_cli(run, table, description: str, argv=None) -> int:
    """The command line shared by the benchmark harnesses: run, optionally save JSON, print the table."""
    import argparse
    import json

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", help="write the full result as JSON here")
    args = ap.parse_args(argv)
    res = run()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    print(table(res))
    return 0


def time_per_call(fn, expect, calls: int = 20, reps: int = 10):
    """(us per call, how). CUDA: `calls` calls captured in one graph, replayed `reps` times, median;
    CUDA events around `calls` eager calls if the capture fails or its answer differs from `expect`.
    On a CPU (a dry run under the interpreter): wall clock of two calls. `fn` returns a tensor.

    Graph replay leaves out the host's launch overhead, which would hide small kernels; the replay's
    answer is checked against `expect` (the output is poisoned first), so a capture that recorded
    nothing is caught."""
    import time

    import torch
    if not torch.cuda.is_available():
        t0 = time.perf_counter()
        fn(), fn()
        return (time.perf_counter() - t0) / 2 * 1e6, "wall"
    cur = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()                                          # compile and warm up outside the capture
    cur.wait_stream(side)
    torch.cuda.synchronize()
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(calls):
                res = fn()
        res.fill_(float("nan"))                           # the replay must write it again
        g.replay()
        torch.cuda.synchronize()
        if not (res.float() - expect).abs().max().item() <= 1e-2:
            raise RuntimeError("graph replay gave a different answer")
        step, how = g.replay, "graph"
    except Exception as e:                                # noqa: BLE001 - any failure: time without
        torch.cuda.set_stream(cur)                        # a failed capture can leave its stream current
        torch.cuda.synchronize()
        step, how = (lambda: [fn() for _ in range(calls)]), f"events ({type(e).__name__}: {' '.join(str(e).split())[:80]})"
    times = []
    for _ in range(reps):
        a, b = (torch.cuda.Event(enable_timing=True) for _ in "ab")
        a.record()
        step()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return sorted(times)[len(times) // 2], how


def checked_time(fn, ref, what: str, **kw):
    """(max |error| against `ref`, us per call, how) for one harness row, or None: the output is
    checked before it is timed (`time_per_call`, with `kw`), and a failure, printed with a short
    traceback, drops this row only. `fn`'s output is copied first: it may live in a reused buffer."""
    import traceback
    try:
        o = fn().float().clone()
        err = (o - ref).abs().max().item()
        return (err, *time_per_call(fn, o, **kw))
    except Exception:                                     # noqa: BLE001 - drop this row only
        print(f"  {what}: failed\n" + traceback.format_exc(limit=3), flush=True)
        return None
