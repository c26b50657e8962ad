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

Each declaration is checked when it is made (a wrong type or value is refused by name, as
attnlab.core.variants.registry's Entry does), and `measure` checks its arguments before it
measures: a broken declaration fails at import, not in the middle of a GPU run.

This module is long because the loop, its declarations, their checks and the timer it calls are
one contract: a section module depends on all of it, and splitting it would make a reader of one
section open three files to see how its rows are made.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

from attnlab.validate import as_bool, as_float, as_int, choice, short

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

    _callable("fn", fn)
    calls, reps = as_int("calls", calls, 1), as_int("reps", reps, 1)
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

    _callable("fn", fn)
    warmup, rep = as_int("warmup", warmup, 0), as_int("rep", rep, 1)
    if not torch.cuda.is_available():
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6, "wall"
    from triton.testing import do_bench

    return do_bench(fn, warmup=warmup, rep=rep, return_mode="median") * 1e3, "do_bench"


def library_version(name: str) -> tuple[bool, str]:
    """(importable, what the result file records): library `name`'s version ("unknown version"
    where it has no __version__), or why it is absent. Imported only when its rows are due, so a
    crash while importing it keeps the rows before."""
    import importlib

    _text("name", name)
    try:
        mod = importlib.import_module(name)
    except Exception as e:  # noqa: BLE001
        return False, f"absent ({type(e).__name__}: {str(e)[:100]})"
    return True, str(getattr(mod, "__version__", "unknown version"))


def write_json(path, obj) -> None:
    """Write obj as indented JSON to path; nothing when path is None or "" (out="": write nothing).
    The harnesses call it after every row or section, so a timeout keeps what came before; the
    file is replaced whole (runfile.replace_with), so a kill while writing keeps it too."""
    from attnlab.runfile import replace_with

    if path:
        replace_with(path, lambda f: json.dump(obj, f, indent=1))


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

    def __post_init__(self):
        _text("name of a Launch", self.name)
        _callable(f"fn of launch {self.name!r}", self.fn)
        _callable(f"timed of launch {self.name!r}", self.timed, none=True)
        for f in ("launch", "extra"):
            if not isinstance(getattr(self, f), dict):
                raise TypeError(
                    f"{f} of launch {self.name!r} must be a dict by name; got {short(getattr(self, f))}"
                )


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

    def __post_init__(self):
        _text("name of an Impl", self.name)
        if "," in self.name or self.name.split() != [self.name] or self.name.startswith("-"):
            raise ValueError(
                f"name of an Impl={self.name!r} is not allowed; valid: one word without commas, not "
                "starting with '-' (a command line lists implementations by commas after a flag)"
            )
        _callable(f"launches of impl {self.name!r}", self.launches)
        for f in ("ours", "ranked"):
            if not isinstance(getattr(self, f), bool):
                raise TypeError(
                    f"{f} of impl {self.name!r} must be True or False; got {short(getattr(self, f))}"
                )
        if self.library is not None:
            _text(f"library of impl {self.name!r}", self.library)


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

    def __post_init__(self):
        _text("name of a Section", self.name)
        where = f"of section {self.name!r}"
        if not isinstance(self.doc, str):
            raise TypeError(
                f"doc {where} must be a str (its command line's description); got {short(self.doc)}"
            )
        if self.fields is not None:
            if not isinstance(self.fields, tuple) or not self.fields:
                raise TypeError(f"fields {where} must be a tuple of names or None; got {short(self.fields)}")
            for f in self.fields:
                _text(f"fields {where}", f)
        for f in ("cases", "dry_cases"):
            cases = getattr(self, f)
            if not isinstance(cases, tuple) or not cases:
                raise TypeError(f"{f} {where} must be a non-empty tuple of cases; got {short(cases)}")
            for case in cases:
                _arity(f"{f} {where}", case, self.fields)
        for f in ("shape", "dry_shape"):
            if not isinstance(getattr(self, f), dict):
                raise TypeError(f"{f} {where} must be a dict of sizes; got {short(getattr(self, f))}")
        _callable(f"inputs {where}", self.inputs)
        for f in ("extra", "settings", "finish", "check"):
            _callable(f"{f} {where}", getattr(self, f), none=True)
        if not isinstance(self.impls, tuple) or not self.impls:
            raise TypeError(f"impls {where} must be a non-empty tuple of Impl; got {short(self.impls)}")
        for i in self.impls:
            if not isinstance(i, Impl):
                raise TypeError(f"impls {where} must hold gpubench.core.Impl; got {short(i)}")
        names = self.impl_names()
        twice = [n for k, n in enumerate(names) if n in names[:k]]
        if twice:
            raise ValueError(f"impls {where} name {twice[0]!r} twice; each implementation needs its own name")
        choice(f"error {where}", self.error, ("max", "relative"))
        if self.tolerance is not None:
            as_float(f"tolerance {where}", self.tolerance, 0.0, None, lo_open=True)
        if not isinstance(self.timing, dict) or not set(self.timing) <= {"calls", "reps"}:
            raise ValueError(
                f"timing {where} takes calls and reps (time_per_call's); got {short(self.timing)}"
            )
        for k, v in self.timing.items():
            as_int(f"timing[{k!r}] {where}", v, 1)
        as_int(f"repeats {where}", self.repeats, 1)
        as_int(f"untimed_rounds {where}", self.untimed_rounds, 0)
        flags = ["--out", "--dry", "--cases", "-h", "--help"]
        if not isinstance(self.options, tuple):
            raise TypeError(
                f"options {where} must be a tuple of (flag, help, type, default); got {short(self.options)}"
            )
        for opt in self.options:
            if not (isinstance(opt, tuple) and len(opt) == 4 and (opt[2] is None or callable(opt[2]))):
                raise TypeError(
                    f"options {where} must hold (flag, help, type, default) tuples; got {short(opt)}"
                )
            _flag(f"options {where}", opt[0], flags)
            flags.append(opt[0])
        _flag(f"subset {where}", self.subset, flags)
        if self.default_impls is not None:
            if not isinstance(self.default_impls, tuple) or not self.default_impls:
                raise TypeError(f"default_impls {where} must be a non-empty tuple of names or None")
            for n in self.default_impls:
                choice(f"default_impls {where}", n, names)
        if self.allowed is not None and not isinstance(self.allowed, tuple):
            raise TypeError(f"allowed {where} must be a tuple of values or None; got {short(self.allowed)}")
        for f in ("allowed", "check"):
            if getattr(self, f) is not None and self.fields is None:
                raise ValueError(f"{f} {where} judges a --cases, which a section without fields has none of")

    def impl_names(self) -> tuple:
        return tuple(i.name for i in self.impls)


def _text(name: str, value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TypeError(f"{name} must be a non-empty str; got {short(value)} ({type(value).__name__})")
    return value


def _callable(name: str, value, none: bool = False) -> None:
    if not (callable(value) or (none and value is None)):
        raise TypeError(f"{name} must be callable{' or None' if none else ''}; got {short(value)}")


def _flag(name: str, flag, taken) -> None:
    """A command-line flag of a section: "--word", none of `taken` nor named as one of them by
    argparse ("--page-sizes" and "--page_sizes" are both page_sizes: argparse refuses the first
    as a raw ArgumentError, and takes the second silently into the same value)."""
    if not isinstance(flag, str) or not flag.startswith("--") or len(flag) < 3:
        raise ValueError(f"{name}: a flag must be '--name'; got {short(flag)}")

    def dest(f):
        return f.lstrip("-").replace("-", "_")

    if dest(flag) in map(dest, taken):
        raise ValueError(f"{name}: the flag {flag!r} is taken (by {', '.join(taken)})")


def _arity(name: str, case, fields) -> None:
    """A case: a tuple of as many values as `fields` names (any tuple where fields is None)."""
    if not isinstance(case, tuple):
        raise TypeError(f"{name}: each case must be a tuple of its numbers; got {short(case)}")
    if fields is not None and len(case) != len(fields):
        raise ValueError(
            f"{name}: each case holds {len(fields)} value(s), {' x '.join(fields)}; got {short(case)}"
        )


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


class _DeclaredType(TypeError):
    """A section's declaration broken at run time (not a peer's failure): measure stops on it."""


class _DeclaredValue(ValueError):
    """A section's declaration broken at run time (not a peer's failure): measure stops on it."""


def _checked(section: Section, launch: Launch, c, ctx):
    """(output, error) of one launch, or None (dropped): the call's output (copied: it may live
    in a reused buffer) must be a tensor, finite and within the section's tolerance of the
    reference."""
    import torch

    ref = launch.ref if launch.ref is not None else c.ref
    try:
        o = launch.fn()
        if not isinstance(o, torch.Tensor):
            raise TypeError(f"fn of launch {launch.name!r} must return a tensor; got {short(o)}")
        o = o.float().clone()
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
        more = section.extra(c, launch, us, ctx)
        if not isinstance(more, dict):
            raise _DeclaredType(f"extra of section {section.name!r} must return a dict; got {short(more)}")
        extra.update(more)
    extra["timing"] = how
    if len(times) > 1:
        extra["repeat_us"] = list(times)
    try:
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
    except (TypeError, ValueError) as e:  # the section's counts or parameters, not the launch
        kind = _DeclaredType if isinstance(e, TypeError) else _DeclaredValue
        raise kind(f"section {section.name!r}, launch {launch.name!r}: {e}") from None
    shown = "" if err is None else f"{err:.1e}"
    print(f"  {r['what'][:30]:30s} {r['impl'][:26]:26s} {us:10.1f} us  err {shown:8s} {how}", flush=True)
    return r


def _case_ok(section: Section, c) -> None:
    """A Case that section.inputs yielded: .case a dict, .ref, .flop and .bytes present."""
    missing = [a for a in ("case", "ref", "flop", "bytes") if not hasattr(c, a)]
    if missing or not isinstance(c.case, dict):
        raise TypeError(
            f"inputs of section {section.name!r} must yield Cases with .case (a dict), .ref, .flop "
            f"and .bytes; got {short(c)}{f' without {missing}' if missing else ''}"
        )


def _launches(impl: Impl, torch, c, ctx, seen: set):
    """impl's Launches on Case `c`, each checked as a declaration: a Launch, and no row's name
    of this case twice (`seen`: the (case, impl) texts so far, added to)."""
    from attnlab.runfile import case_text, impl_text

    got = impl.launches(torch, c, ctx)
    try:
        it = iter(got)
    except TypeError:
        raise _DeclaredType(
            f"launches of impl {impl.name!r} must yield Launches (a generator); got {short(got)}"
        ) from None
    for launch in it:
        if not isinstance(launch, Launch):
            raise _DeclaredType(f"launches of impl {impl.name!r} must yield Launches; got {short(launch)}")
        key = (case_text(c.case), impl_text(launch.name, launch.launch))
        if key in seen:
            raise _DeclaredValue(
                f"impl {impl.name!r} launches {key[1]!r} on case {key[0]!r} a second time: its rows "
                "could not be told apart; give the launches different names or launch parameters"
            )
        seen.add(key)
        yield launch


def _case_rows(section: Section, phase, c, ctx, seen: set) -> list:
    """(impl, row) of one Case: every launch of every implementation of the phase checked, then timed
    (once each, in turn; or, with section.repeats > 1, all of them round-robin that many times, so
    that a drift of the machine falls on every implementation alike; a launch whose timing fails
    in any round has no row)."""

    import torch

    todo, rows = [], []
    for impl in phase:
        try:
            for launch in _launches(impl, torch, c, ctx, seen):
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
        except (_DeclaredType, _DeclaredValue):
            raise
        except Exception:  # noqa: BLE001 - a peer missing or changed: drop its rows here
            _dropped(ctx, c, impl.name, {}, "skipped")
    hows: dict = {}
    failed: set = set()
    for k in range(section.untimed_rounds + section.repeats if todo else 0):
        for impl, launch, o, err, times in todo:
            if id(launch) in failed:
                continue
            t = _timed(section, launch, o, c, ctx)
            if t is None:
                failed.add(id(launch))
            elif k >= section.untimed_rounds:
                times.append(t[0])
                hows[id(launch)] = t[1]
    rows += [
        (impl, _row(section, impl, launch, c, ctx, err, times, hows[id(launch)]))
        for impl, launch, o, err, times in todo
        if times and id(launch) not in failed
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
    if isinstance(impls, str) or not (impls is None or isinstance(impls, (tuple, list))):
        raise TypeError(f"impls must be a tuple of names of {names} or None; got {short(impls)}")
    chosen = tuple(impls) if impls is not None else (section.default_impls or names)
    unknown = [n for n in chosen if n not in names]
    if unknown or not chosen:
        raise ValueError(f"impls must be names of {names}; got {chosen!r}")
    if cases is not None:
        if not isinstance(cases, (tuple, list)):
            raise TypeError(f"cases must be a list of case tuples or None; got {short(cases)}")
        if not cases:
            raise ValueError("cases must hold at least one case (None: the section's own); got []")
        for case in cases:
            _arity("cases", case, section.fields)
    as_int("seed", seed)
    dry = as_bool("dry", dry)
    known = [flag.lstrip("-").replace("-", "_") for flag, *_ in section.options]
    for k in options or {}:
        choice(f"options of section {section.name!r}", k, known or ["(none)"])
    if out and not os.path.isdir(os.path.dirname(os.path.abspath(out))):
        raise ValueError(
            f"out={out!r}: its folder does not exist; the rows are written there after every case"
        )
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
    unranked = []  # the rows of implementations left out of ratio_to_best
    seen: set = set()  # (case, impl) of every launch so far: a second is a declaration's error
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
                _case_ok(section, c)
                for impl, r in _case_rows(section, phase, c, ctx, seen):
                    res["rows"].append(r)
                    if not impl.ranked:
                        unranked.append(r)
                write_json(out, res)
            if cuda:
                torch.cuda.empty_cache()
    # ranked by row, not by name: a ranked launch named as an unranked one keeps its rank
    rank([r for r in res["rows"] if not any(r is u for u in unranked)])
    res["dropped"] = ctx.dropped
    if section.finish:
        section.finish(res["rows"])
    write_json(out, res)
    return res
