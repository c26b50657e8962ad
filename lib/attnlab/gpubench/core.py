"""What every benchmark section and sweep shares, and the one loop that runs them.

The declarations: a `Section` names its cases, builds each case's inputs and float32 answer,
and lists its `Impl`s (ours and each peer), each yielding the `Launch`es it has on a case.
`measure(section)` is the loop: every launch's output checked against the reference (NaN or inf
refused, the section's tolerance), then timed by the one timer (`time_per_call`: a batch of
calls in one CUDA graph, the median over replays; round-robin repeats where the section asks),
and written as a row of the run file's schema (attnlab.runfile.row), a library's implementations
(FlashInfer) after the rest. Beside it: the run's `header`, the `ceilings` measured once per
process (copy bandwidth and bf16 matmul rate), `eager_time` (the host's launch included), the
table a command line prints, and the JSON written after every case.

This module is long because the loop, its declarations and the timer it calls are one contract:
a section module depends on all of it, and splitting it would make a reader of one section open
three files to see how its rows are made.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

__all__ = [
    "header",
    "ceilings",
    "time_per_call",
    "eager_time",
    "table",
    "library_version",
    "write_json",
    "Launch",
    "Impl",
    "Section",
    "phases",
    "context",
    "measure",
]

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
        commit = (
            os.environ.get("ATTNLAB_COMMIT")
            or subprocess.run(
                ["git", "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                timeout=10,
                cwd=os.path.dirname(__file__),
            ).stdout.strip()
            or None
        )
    except Exception:  # noqa: BLE001 - no git there
        commit = None
    res = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu (dry run, Triton interpreter)",
        "sms": props.multi_processor_count if cuda else None,
        "l2_bytes": getattr(props, "L2_cache_size", None) if cuda else None,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "flashinfer": None,
        "commit": commit,
        "date": _dt.date.today().isoformat(),
        "shape": {**shape, "dtype": "bf16"},
        "rows": [],
    }
    if cuda:  # the ceiling TB/s is read against
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
        mm = 2 * m**3 / (eager_time(lambda: x @ y, warmup=50, rep=300)[0] * 1e-6)
        _CEILINGS.update(copy_bytes_per_s=copy, bf16_matmul_flops=mm)
    return dict(_CEILINGS)


def table(res: dict) -> str:
    """A run's or one section's rows (in the schema) as text under its provenance, via
    attnlab.fmt.table."""
    from attnlab import fmt

    rows = res["rows"]
    head = (
        f"{res['device']} ({res['sms']} SMs), torch {res['torch']}, triton {res['triton']}, "
        f"flashinfer {res.get('flashinfer')}, commit {res.get('commit')}\n"
    )

    def num(spec):
        return lambda v: "" if v is None else format(v, spec)

    cols = {
        "section": "section",
        "what": "case",
        "impl": "impl",
        "time_us": "us",
        "tflops": "TFLOP/s",
        "tbps": "TB/s",
        "ratio_to_best": "best/us",
        "error": "err",
    }
    return head + fmt.table(
        [{**r, "what": r["what"][:34], "impl": r["impl"][:22]} for r in rows],
        cols,
        {
            "time_us": ".1f",
            "tflops": num(".1f"),
            "tbps": num(".2f"),
            "ratio_to_best": num(".2f"),
            "error": num(".1e"),
        },
    )


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
            fn()  # compile and warm up outside the capture
    cur.wait_stream(side)
    torch.cuda.synchronize()
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(calls):
                res = fn()
        res.fill_(float("nan"))  # the replay must write it again
        g.replay()
        torch.cuda.synchronize()
        if not (res.float() - expect).abs().max().item() <= 1e-2:
            raise RuntimeError("graph replay gave a different answer")
        step, how = g.replay, "graph"
    except Exception as e:  # noqa: BLE001 - any failure: time without
        torch.cuda.set_stream(cur)  # a failed capture can leave its stream current
        torch.cuda.synchronize()
        step, how = (
            (lambda: [fn() for _ in range(calls)]),
            f"events ({type(e).__name__}: {' '.join(str(e).split())[:80]})",
        )
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


def library_version(name: str) -> tuple[bool, str]:
    """(importable, what the result file records): library `name`'s version, or why it is absent.
    Imported only when its rows are due, so a crash while importing it keeps the rows before."""
    import importlib

    try:
        return True, importlib.import_module(name).__version__
    except Exception as e:  # noqa: BLE001
        return False, f"absent ({type(e).__name__}: {str(e)[:100]})"


def write_json(path, obj) -> None:
    """Write obj as indented JSON to path; nothing when path is None or "" (out="": write nothing).
    The harnesses call it after every row or section, so a timeout keeps what came before."""
    if path:
        with open(path, "w") as f:
            json.dump(obj, f, indent=1)


# -- the declarations and the one loop ------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """One call of an implementation on a case, as its row will name it: `name` and `launch` (the
    launch's parameters: page size, splits, ...) make the row's impl text and join its shape;
    `extra` is what only this row records (a plan's host cost, the split count chosen, ...);
    `timed`, when given, is what is timed instead of `fn` (a graph replay of the same work); `ref`
    an answer other than the case's."""

    name: str
    fn: Callable
    launch: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    timed: Callable | None = None
    ref: Any = None


@dataclass(frozen=True)
class Impl:
    """Ours or a peer: `launches(torch, case, ctx)` yields the Launches it has on that case (none
    where it does not apply). `library`: a library imported only in its phase, after every other
    implementation (FlashInfer: its import can crash and its first calls compile, so our rows come
    first); `ranked=False`: kept beside the others but left out of ratio_to_best (Algorithm 0)."""

    name: str
    launches: Callable
    ours: bool = False
    library: str | None = None
    ranked: bool = True


@dataclass(frozen=True)
class Section:
    """A benchmark section, declared: `fields` names the numbers of a case (--cases AxB); `cases`
    and `dry_cases` the full-size and the CPU cases; `shape` and `dry_shape` the layer;
    `inputs(torch, case, ctx)` yields the Case namespaces one case is measured on (each with
    `.case`, the case's parameters; `.ref`, the float32 answer or None; `.flop`, `.bytes`; and
    optionally `.extra`), after which its tensors are freed; `impls` ours and the peers; `extra(c,
    launch, us, ctx)` what the section adds to a row (the model's time, ...); `error`: "max" (max
    |o - ref|) or "relative" (the norm's); `tolerance`: a row over it is dropped, printed;
    `timing`: `time_per_call`'s calls and reps; `settings(ctx)`: the section's settings beside
    the header; `finish(rows)`: verdicts over the section's rows; `options`: (flag, help, argparse
    type, default) the command line adds; `default_impls`: what a run measures unless told;
    `subset`: the command-line flag that picks implementations; `allowed`: the values a case's
    first number may take off --dry (None: any); `repeats`: each launch of a case timed this many
    times, round-robin over the case's launches (the median is its time; the times in extra),
    after `untimed_rounds` rounds whose times are dropped (the clocks and caches settle);
    `check(case)`: what is wrong with a case the section cannot run (a sentence), or None: the
    command line refuses such a --cases as a usage error."""

    name: str
    doc: str
    fields: tuple
    cases: tuple
    dry_cases: tuple
    shape: dict
    dry_shape: dict
    inputs: Callable
    impls: tuple
    extra: Callable | None = None
    error: str = "max"
    tolerance: float | None = None
    timing: dict = field(default_factory=dict)
    settings: Callable | None = None
    finish: Callable | None = None
    options: tuple = ()
    default_impls: tuple | None = None
    subset: str = "--peers"
    allowed: tuple | None = None
    repeats: int = 1
    untimed_rounds: int = 0
    check: Callable | None = None

    def impl_names(self) -> tuple:
        return tuple(i.name for i in self.impls)


def _error(o, ref, kind: str):
    if ref is None:
        return None
    d = o - ref
    return float(d.norm() / ref.norm()) if kind == "relative" else d.abs().max().item()


def _dropped(ctx, c, name: str, launch: dict, what: str) -> None:
    """Print why a launch (or an implementation, on this case) has no row, with a short
    traceback, and keep the reason in ctx.dropped (the result's "dropped": a compile error or a
    wrong answer stays on record)."""
    import sys
    import traceback

    from attnlab.runfile import case_text, impl_text

    e = sys.exc_info()[1]
    print(f"  {name} {launch}: {what}\n" + traceback.format_exc(limit=3), flush=True)
    ctx.dropped.append(
        {
            "what": case_text(c.case),
            "impl": impl_text(name, launch),
            "stage": what,
            "reason": f"{type(e).__name__}: {' '.join(str(e).split())[:200]}",
        }
    )


def _checked(section: Section, launch: Launch, c, ctx):
    """(output, error) of one launch, or None (dropped): the call's output (copied: it may live
    in a reused buffer) must be finite and within the section's tolerance of the reference."""
    ref = launch.ref if launch.ref is not None else c.ref
    try:
        o = launch.fn().float().clone()
        if not bool(o.isfinite().all()):
            raise RuntimeError("the output has NaN or inf")
        err = _error(o, ref, section.error)
        if section.tolerance is not None and err is not None and not err <= section.tolerance:
            raise RuntimeError(f"error {err:.2e} is over the section's tolerance {section.tolerance}")
        return o, err
    except Exception:  # noqa: BLE001 - drop this row only
        _dropped(ctx, c, launch.name, launch.launch, "failed")
        return None


def _timed(section: Section, launch: Launch, o, c, ctx):
    """(µs, how) by the one timer, or None (dropped) when the timing itself fails."""
    try:
        return time_per_call(launch.timed or launch.fn, o, **section.timing)
    except Exception:  # noqa: BLE001 - drop this row only
        _dropped(ctx, c, launch.name, launch.launch, "timing failed")
        return None


def _row(section: Section, impl: Impl, launch: Launch, c, ctx, err, times: list, how: str) -> dict:
    """The schema row of one launch timed `len(times)` times (the median is its time_us; with
    more than one repeat the times themselves go to extra["repeat_us"])."""
    from attnlab.runfile import row

    us = sorted(times)[len(times) // 2]
    flop, nbytes = launch.extra.get("flop", c.flop), launch.extra.get("bytes", c.bytes)
    extra = {
        **getattr(c, "extra", {}),
        **{k: v for k, v in launch.extra.items() if k not in ("flop", "bytes")},
    }
    if section.extra:
        extra.update(section.extra(c, launch, us, ctx))
    extra["timing"] = how
    if len(times) > 1:
        extra["repeat_us"] = list(times)
    r = row(
        section.name,
        c.case,
        launch.name,
        launch.launch,
        ours=impl.ours,
        time_us=us,
        flop=flop,
        nbytes=nbytes,
        error=err,
        commit=ctx.commit,
        extra=extra,
    )
    shown = "" if err is None else f"{err:.1e}"
    print(f"  {r['what'][:30]:30s} {r['impl'][:26]:26s} {us:10.1f} us  err {shown:8s} {how}", flush=True)
    return r


def _case_rows(section: Section, phase, c, ctx) -> list:
    """(impl, row) of one Case: every launch of every implementation of the phase checked, then timed
    (once each, in turn; or, with section.repeats > 1, all of them round-robin that many times, so
    that a drift of the machine falls on every implementation alike)."""

    import torch

    todo, rows = [], []
    for impl in phase:
        try:
            for launch in impl.launches(torch, c, ctx):
                got = _checked(section, launch, c, ctx)
                if got is None:
                    continue
                if (
                    section.repeats == 1 and not section.untimed_rounds
                ):  # timed now: a launch may depend on the generator's state
                    t = _timed(section, launch, got[0], c, ctx)
                    if t is not None:
                        rows.append((impl, _row(section, impl, launch, c, ctx, got[1], [t[0]], t[1])))
                else:
                    todo.append((impl, launch, *got, []))
        except Exception:  # noqa: BLE001 - a peer missing or changed: drop its rows here
            _dropped(ctx, c, impl.name, {}, "skipped")
    hows: dict = {}
    for k in range(section.untimed_rounds + section.repeats if todo else 0):
        for impl, launch, o, err, times in todo:
            t = _timed(section, launch, o, c, ctx)
            if t is not None and k >= section.untimed_rounds:
                times.append(t[0])
                hows[id(launch)] = t[1]
    rows += [
        (impl, _row(section, impl, launch, c, ctx, err, times, hows[id(launch)]))
        for impl, launch, o, err, times in todo
        if times
    ]
    return rows


def phases(impls) -> list:
    """The implementations in the order they run: those without a library, then each library's
    in turn, so a library that crashes or compiles for minutes keeps the rows before it."""
    libs = list(dict.fromkeys(i.library for i in impls if i.library))
    groups = [[i for i in impls if not i.library]] + [[i for i in impls if i.library == lib] for lib in libs]
    return [g for g in groups if g]


def context(
    section: Section,
    cases,
    *,
    dry: bool = False,
    seed: int = 0,
    options: dict | None = None,
    shape: dict | None = None,
    ceilings=None,
    commit=None,
) -> SimpleNamespace:
    """What a section's `inputs` and its implementations' `launches` are handed (`ctx`): dry,
    seed, the layer's shape (the section's, or its dry one), the cases, the run's ceilings and
    commit, the device, the section's options by name (declared defaults, then `options`), a
    `state` dict its implementations share over the run, and the launches `dropped` so far.
    measure builds one per run; gpubench.ncu_groups one per profiled call."""
    import torch

    opts = {flag.lstrip("-").replace("-", "_"): default for flag, _, _, default in section.options}
    opts.update(options or {})
    return SimpleNamespace(
        dry=dry,
        seed=seed,
        shape=shape or (section.dry_shape if dry else section.shape),
        cases=list(cases),
        ceilings=ceilings,
        commit=commit,
        device="cuda" if torch.cuda.is_available() else "cpu",
        options=SimpleNamespace(**opts),
        state={},
        dropped=[],
    )


def measure(
    section: Section,
    cases=None,
    impls=None,
    *,
    dry: bool = False,
    out: str | None = None,
    seed: int = 0,
    ceil: dict | None = None,
    options: dict | None = None,
) -> dict:
    """Run declared `section`: the header, its settings, its rows in the run file's schema
    (attnlab.runfile.row; ratio_to_best filled by runfile.rank) and under "dropped" each launch
    that has none and why (a wrong answer, a compile error), written to `out` after every case
    (nothing when out is None or ""). `cases`: the section's cases unless given; `impls`: names
    of its implementations (default_impls, else all); `options`: the values of its declared
    command-line options by name (the defaults where missing); `ceil`: the run's ceilings (measured
    here once per process otherwise, on CUDA)."""
    import torch

    from attnlab.runfile import rank

    if not isinstance(section, Section):
        raise TypeError(f"section must be a gpubench.core.Section; got {type(section).__name__}")
    names = section.impl_names()
    chosen = tuple(impls) if impls is not None else (section.default_impls or names)
    unknown = [n for n in chosen if n not in names]
    if unknown or not chosen:
        raise ValueError(f"impls must be names of {names}; got {chosen!r}")
    cuda = torch.cuda.is_available()
    shape = section.dry_shape if dry else section.shape
    res = header(torch, shape)
    cases = list(cases) if cases else list(section.dry_cases if dry else section.cases)
    ceilings_ = ceil or (ceilings(torch) if cuda else {"copy_bytes_per_s": 1e9, "bf16_matmul_flops": 1e10})
    ctx = context(
        section, cases, dry=dry, seed=seed, options=options, ceilings=ceilings_, commit=res["commit"]
    )
    if section.settings:
        res.update(section.settings(ctx))
    print(f"{section.name}: {res['device']}, torch {res['torch']}, triton {res['triton']}", flush=True)
    unranked = set()  # the row names of implementations left out of ratio_to_best
    for phase in phases([i for i in section.impls if i.name in chosen]):
        lib = phase[0].library
        if lib:
            ok, res[lib] = library_version(lib)  # imported only now: a crash keeps the rows before
            if not ok:
                print(f"{lib}: {res[lib]}", flush=True)
                continue
        for case in cases:
            print(
                f"{section.name} {' x '.join(map(str, case))}: {', '.join(i.name for i in phase)}", flush=True
            )
            for c in section.inputs(torch, case, ctx):
                for impl, r in _case_rows(section, phase, c, ctx):
                    res["rows"].append(r)
                    if not impl.ranked:
                        unranked.add(r["impl"].split(" ")[0])
                write_json(out, res)
            if cuda:
                torch.cuda.empty_cache()
    rank(res["rows"], tuple(unranked))
    res["dropped"] = ctx.dropped
    if section.finish:
        section.finish(res["rows"])
    write_json(out, res)
    return res
