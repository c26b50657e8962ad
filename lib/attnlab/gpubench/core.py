"""What every benchmark section and sweep shares, and the one loop that runs them.

The declarations (gpubench.declare: a `Section` names its cases, builds each case's inputs and
float32 answer, and lists its `Impl`s, ours and each peer, each yielding the `Launch`es it has on
a case) are what a section module writes; `measure(section)` is the loop that runs them: every launch's output checked against the reference (NaN or inf
refused, the section's tolerance), then timed by the one timer (`time_per_call`: a batch of
calls in one CUDA graph, the median over replays; round-robin repeats where the section asks),
and written as a row of the run file's schema (attnlab.runfile.row), a library's implementations
(FlashInfer) after the rest. Beside it: the run's `header`, the `ceilings` measured once per
process (copy bandwidth and bf16 matmul rate), `eager_time` (the host's launch included), the
table a command line prints, and the JSON written after every case.

`measure` checks its arguments before it measures, and stops at a declaration that breaks its
contract while it runs (naming the section and the launch).

This module is long because the loop and the timer it calls are one contract with the header and
ceilings every row is read against: how a row is made is read here from top to bottom.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
from types import SimpleNamespace

from attnlab.gpubench.declare import Impl, Launch, Section, arity, callable_arg, text_arg
from attnlab.validate import as_bool, as_int, choice, short

__all__ = [
    "header",
    "ceilings",
    "time_per_call",
    "eager_time",
    "table",
    "library_version",
    "write_json",
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
    On a CPU (a dry run under the interpreter): wall clock of two calls. `fn` returns a tensor, or
    a tuple of tensors whose parts, joined (`joined`), are `expect`.

    Graph replay leaves out the host's launch overhead, which would hide small kernels; the replay's
    answer is checked against `expect` (the output is poisoned first), so a capture that recorded
    nothing is caught."""
    import time

    import torch

    callable_arg("fn", fn)
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
        for part in res if isinstance(res, (tuple, list)) else (res,):
            part.fill_(float("nan"))  # the replay must write it again
        g.replay()
        torch.cuda.synchronize()
        if not (joined(res).float().reshape(expect.shape) - expect).abs().max().item() <= 1e-2:
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

    callable_arg("fn", fn)
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

    text_arg("name", name)
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


# -- the one loop ---------------------------------------------------------------------------------


def joined(o, what: str = "a launch"):
    """A launch's answer as one tensor: a tensor as it is; a tuple of tensors (two launches writing
    two buffers, e.g. a prefill chunk's rows and the decodes' after them) flattened and joined in
    order, so no copy into one buffer is timed."""
    import torch

    parts = o if isinstance(o, (tuple, list)) else (o,)
    if not parts or not all(isinstance(t, torch.Tensor) for t in parts):
        raise TypeError(f"{what} must return a tensor or a tuple of tensors; got {short(o)}")
    return parts[0] if len(parts) == 1 else torch.cat([t.reshape(-1) for t in parts])


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

    ref = launch.ref if launch.ref is not None else c.ref
    try:
        o = joined(launch.fn(), f"fn of launch {launch.name!r}").float().clone()
        if ref is not None and o.dim() == 1 and o.numel() == ref.numel():
            o = o.view(ref.shape)  # the parts' rows, in order, are the answer's
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
        raise TypeError(f"section must be a gpubench.declare.Section; got {type(section).__name__}")
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
            arity("cases", case, section.fields)
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
