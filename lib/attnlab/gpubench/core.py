"""What every benchmark section shares: one timer (`time_per_call`, CUDA events around a batch of
calls, the median over repetitions) and `checked_time` (time a call only after its output matched
the float32 reference)."""
from __future__ import annotations

__all__ = ["time_per_call", "checked_time"]


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
