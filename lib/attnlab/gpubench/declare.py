"""The declarations a benchmark section or sweep is made of: a `Section` names its cases, builds
each case's inputs and float32 answer, and lists its `Impl`s (ours and each peer), each yielding
the `Launch`es it has on a case; gpubench.core.measure runs it. Each is checked when it is made
(a wrong type or value refused by name, as attnlab.core.variants.registry's Entry is), so a
broken declaration fails at import, not in the middle of a GPU run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from attnlab.validate import as_float, as_int, choice, short

__all__ = ["Launch", "Impl", "Section", "arity", "text_arg", "callable_arg"]


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
        text_arg("name of a Launch", self.name)
        callable_arg(f"fn of launch {self.name!r}", self.fn)
        callable_arg(f"timed of launch {self.name!r}", self.timed, none=True)
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
        text_arg("name of an Impl", self.name)
        if "," in self.name or self.name.split() != [self.name] or self.name.startswith("-"):
            raise ValueError(
                f"name of an Impl={self.name!r} is not allowed; valid: one word without commas, not "
                "starting with '-' (a command line lists implementations by commas after a flag)"
            )
        callable_arg(f"launches of impl {self.name!r}", self.launches)
        for f in ("ours", "ranked"):
            if not isinstance(getattr(self, f), bool):
                raise TypeError(
                    f"{f} of impl {self.name!r} must be True or False; got {short(getattr(self, f))}"
                )
        if self.library is not None:
            text_arg(f"library of impl {self.name!r}", self.library)


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
        text_arg("name of a Section", self.name)
        where = f"of section {self.name!r}"
        if not isinstance(self.doc, str):
            raise TypeError(
                f"doc {where} must be a str (its command line's description); got {short(self.doc)}"
            )
        if self.fields is not None:
            if not isinstance(self.fields, tuple) or not self.fields:
                raise TypeError(f"fields {where} must be a tuple of names or None; got {short(self.fields)}")
            for f in self.fields:
                text_arg(f"fields {where}", f)
        for f in ("cases", "dry_cases"):
            cases = getattr(self, f)
            if not isinstance(cases, tuple) or not cases:
                raise TypeError(f"{f} {where} must be a non-empty tuple of cases; got {short(cases)}")
            for case in cases:
                arity(f"{f} {where}", case, self.fields)
        for f in ("shape", "dry_shape"):
            if not isinstance(getattr(self, f), dict):
                raise TypeError(f"{f} {where} must be a dict of sizes; got {short(getattr(self, f))}")
        callable_arg(f"inputs {where}", self.inputs)
        for f in ("extra", "settings", "finish", "check"):
            callable_arg(f"{f} {where}", getattr(self, f), none=True)
        if not isinstance(self.impls, tuple) or not self.impls:
            raise TypeError(f"impls {where} must be a non-empty tuple of Impl; got {short(self.impls)}")
        for i in self.impls:
            if not isinstance(i, Impl):
                raise TypeError(f"impls {where} must hold gpubench.declare.Impl; got {short(i)}")
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


def text_arg(name: str, value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TypeError(f"{name} must be a non-empty str; got {short(value)} ({type(value).__name__})")
    return value


def callable_arg(name: str, value, none: bool = False) -> None:
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


def arity(name: str, case, fields) -> None:
    """A case: a tuple of as many values as `fields` names (any tuple where fields is None)."""
    if not isinstance(case, tuple):
        raise TypeError(f"{name}: each case must be a tuple of its numbers; got {short(case)}")
    if fields is not None and len(case) != len(fields):
        raise ValueError(
            f"{name}: each case holds {len(fields)} value(s), {' x '.join(fields)}; got {short(case)}"
        )
