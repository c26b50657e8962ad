"""What every benchmark section shares: the run's header (`header`), the ceilings measured once
per process (`ceilings`: copy bandwidth and bf16 matmul rate), the float32 reference
(`reference`), one timer for every row (`time_per_call`: a batch of calls in one CUDA graph, the
median over replays), `eager_time` (the host's launch included) and `checked_time` (time a call
only after its output matched the reference)."""
from __future__ import annotations

import datetime as _dt
import math
import os
import subprocess

__all__ = ["header", "ceilings", "reference", "compiled_flex", "time_per_call", "eager_time", "checked_time", "flashinfer_last",
           "try_peer", "table"]

_CEILINGS: dict = {}


def header(torch, shape: dict) -> dict:
    """A section's result before its rows: device, SMs, L2, versions, commit, date, shape (bf16),
    an empty "rows", and on CUDA the copy ceiling (from `ceilings`, measured once a process)."""
    import triton
    if not isinstance(shape, dict):
        raise TypeError(f"shape must be a dict of sizes; got {type(shape).__name__}")
    cuda = torch.cuda.is_available()
    props = torch.cuda.get_device_properties(0) if cuda else None
    try:
        commit = os.environ.get("ATTNLAB_COMMIT") or subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
            cwd=os.path.dirname(__file__)).stdout.strip() or None
    except Exception:                                     # noqa: BLE001 - no git there
        commit = None
    res = {"device": torch.cuda.get_device_name(0) if cuda else "cpu (dry run, Triton interpreter)",
           "sms": props.multi_processor_count if cuda else None,
           "l2_bytes": getattr(props, "L2_cache_size", None) if cuda else None,
           "torch": torch.__version__, "triton": triton.__version__, "flashinfer": None,
           "commit": commit, "date": _dt.date.today().isoformat(),
           "shape": {**shape, "dtype": "bf16"}, "rows": []}
    if cuda:                                              # the ceiling TB/s is read against
        res["copy_bytes_per_s"] = ceilings(torch)["copy_bytes_per_s"]
    return res


def ceilings(torch) -> dict:
    """The copy bandwidth (read + write) and the bf16 matmul rate, measured here (CUDA only) once
    per process: every section of a run reads against the same two numbers."""
    if not _CEILINGS:
        a = torch.empty(1 << 28, device="cuda", dtype=torch.bfloat16)
        b = torch.empty_like(a)
        copy = 4 * a.numel() / (eager_time(lambda: b.copy_(a), warmup=50, rep=300)[0] * 1e-6)
        del a, b
        m = 8192
        x, y = (torch.randn(m, m, device="cuda", dtype=torch.bfloat16) for _ in "xy")
        mm = 2 * m ** 3 / (eager_time(lambda: x @ y, warmup=50, rep=300)[0] * 1e-6)
        _CEILINGS.update(copy_bytes_per_s=copy, bf16_matmul_flops=mm)
    return dict(_CEILINGS)


def reference(torch, q, k, v, causal=False, soft_cap=None, window=0):
    """float32 attention of the (rounded) inputs. k, v: (B, hkv, n_k, d). q: (B, hq, d), one
    decode query per request over all its keys (a few requests at a time), or (B, hq, n_q, d),
    prefill (one KV head's query group and query chunk at a time; causal, soft cap and sliding
    window as the variants define them, the queries the last n_q positions)."""
    if q.dim() not in (3, 4) or k.dim() != 4 or k.shape != v.shape:
        raise ValueError(f"q must be (B, hq, d) or (B, hq, n_q, d) and k, v (B, hkv, n_k, d); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.dim() == 3:
        if causal or soft_cap or window:
            raise ValueError("causal, soft_cap and window apply to a prefill q (B, hq, n_q, d) only")
        B, hq, d = q.shape
        hkv, n = k.shape[1], k.shape[2]
        ref = torch.empty(B, hq, d, dtype=torch.float32, device=q.device)
        step = max(1, (1 << 26) // (hkv * n * d))
        for i in range(0, B, step):
            qf = q[i:i + step].float().view(-1, hkv, hq // hkv, d)
            s = torch.einsum("bhgd,bhnd->bhgn", qf, k[i:i + step].float()) / math.sqrt(d)
            ref[i:i + step] = torch.einsum("bhgn,bhnd->bhgd", torch.softmax(s, -1),
                                           v[i:i + step].float()).reshape(-1, hq, d)
        return ref
    B, hq, n_q, d = q.shape
    hkv, n_k = k.shape[1], k.shape[2]
    g = hq // hkv
    ref = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    rows = max(1, (1 << 26) // (g * n_k))
    kv_idx = torch.arange(n_k, device=q.device)[None, :]
    for b in range(B):
        for h in range(hkv):
            kf, vf = k[b, h].float(), v[b, h].float()
            for i in range(0, n_q, rows):
                qf = q[b, h * g:(h + 1) * g, i:i + rows].float()
                s = qf @ kf.T / math.sqrt(d)
                if soft_cap:
                    s = soft_cap * torch.tanh(s / soft_cap)
                q_idx = torch.arange(i, i + qf.shape[1], device=q.device)[:, None] + n_k - n_q
                vis = torch.ones_like(s[0], dtype=torch.bool)
                if causal or window:
                    vis &= kv_idx <= q_idx
                if window:
                    vis &= kv_idx > q_idx - window
                p = torch.nan_to_num(torch.softmax(s.masked_fill(~vis, float("-inf")), -1))
                ref[b, h * g:(h + 1) * g, i:i + rows] = p @ vf
    return ref


def compiled_flex(torch):
    """`torch.compile(flex_attention, dynamic=False)` on CUDA (the eager function elsewhere), with
    dynamo's recompile limit raised to 64 first: every shape and mask of a run compiles once, and
    past the default limit of 8 dynamo would fall back, silently, to the unfused implementation
    (which materialises the scores: a wrong timing, and at 16K tokens an out-of-memory error)."""
    from torch.nn.attention.flex_attention import flex_attention
    import torch._dynamo.config as dc
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(dc, name):
            setattr(dc, name, max(getattr(dc, name), 64))
    return torch.compile(flex_attention, dynamic=False) if torch.cuda.is_available() else flex_attention


def flashinfer_last(peers) -> list[list[str]]:
    """The peers in two phases, FlashInfer's (whose JIT compiles, and whose import can crash) after
    the rest, so a timeout or crash there keeps our rows; empty phases left out.

    >>> flashinfer_last(("paged", "flashinfer", "sdpa"))
    [['paged', 'sdpa'], ['flashinfer']]
    """
    return [p for p in ([x for x in peers if x != "flashinfer"], [x for x in peers if x == "flashinfer"]) if p]


def try_peer(name: str, fn, *args, word: str = "skipped", limit: int = 2) -> bool:
    """Call fn(*args); a failure (a library missing, an API changed) is printed with a short
    traceback and drops only what this call would have added. True when it ran through."""
    import traceback
    try:
        fn(*args)
        return True
    except Exception:                                     # noqa: BLE001 - keep the other peers
        print(f"  {name}: {word}\n" + traceback.format_exc(limit=limit), flush=True)
        return False


def table(res: dict, section: str | None = None) -> str:
    """A run (rows in the schema) or one section's result (`section` names it: its own rows are
    put in the schema first) as text under its provenance, via attnlab.fmt.table."""
    from attnlab import fmt
    from attnlab.runfile import section_rows
    rows = res["rows"] if section is None else section_rows(section, res["rows"], res.get("commit"))
    head = (f"{res['device']} ({res['sms']} SMs), torch {res['torch']}, triton {res['triton']}, "
            f"flashinfer {res.get('flashinfer')}, commit {res.get('commit')}\n")

    def num(spec):
        return lambda v: "" if v is None else format(v, spec)
    cols = {"section": "section", "what": "case", "impl": "impl", "time_us": "us", "tflops": "TFLOP/s",
            "tbps": "TB/s", "ratio_to_best": "best/us", "error": "err"}
    return head + fmt.table([{**r, "what": r["what"][:34], "impl": r["impl"][:22]} for r in rows], cols,
                            {"time_us": ".1f", "tflops": num(".1f"), "tbps": num(".2f"),
                             "ratio_to_best": num(".2f"), "error": num(".1e")})


def _events(torch, step, calls: int, reps: int) -> float:
    """Median over `reps` of CUDA events around one `step()` that makes `calls` calls: us per call."""
    times = []
    for _ in range(reps):
        a, b = (torch.cuda.Event(enable_timing=True) for _ in "ab")
        a.record()
        step()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return sorted(times)[len(times) // 2]


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
    return _events(torch, step, calls, reps), how


def eager_time(fn, warmup: int = 25, rep: int = 100):
    """(us per call, how) of eager calls, the host's launch included: triton.testing.do_bench's
    median on CUDA; on a CPU (a dry run), wall clock of one call."""
    import time

    import torch
    if not torch.cuda.is_available():
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6, "wall"
    from triton.testing import do_bench
    return do_bench(fn, warmup=warmup, rep=rep, return_mode="median") * 1e3, "do_bench"


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
