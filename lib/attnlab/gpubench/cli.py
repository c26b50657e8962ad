"""The command line the GPU harnesses share, built from each section's declarations: --out, --dry,
--cases "AxB,..." (as many numbers a case as the section's fields name), the section's named
subset of implementations (--peers, --plans, ...) as choices, and its options. A bad argument is a usage error before anything runs:
exit status 2 and one line naming the argument, never a traceback."""

from __future__ import annotations

import argparse
import os
import sys

__all__ = [
    "Parser",
    "UsageError",
    "case_list",
    "name_list",
    "int_list",
    "seed_arg",
    "out_path",
    "existing_file",
    "check_arg",
    "need_gpu",
    "describe",
    "parse",
    "section_main",
]

NO_GPU = "no CUDA GPU here: the full-size cases need one; --dry runs the small cases on the CPU"


class UsageError(SystemExit):
    """argparse's usage error, exit status 2, carrying its one line as the message."""

    def __init__(self, line: str):
        super().__init__(2)
        self.line = line

    def __str__(self) -> str:
        return self.line


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose error is one line on stderr, then exit status 2 (UsageError)."""

    def error(self, message):
        line = f"{self.prog}: error: {message} (see --help for usage)"
        sys.stderr.write(line + "\n")
        raise UsageError(line)


def describe(doc: str) -> str:
    """A command line's description: its module docstring's first paragraph."""
    return " ".join(doc.strip().split("\n\n")[0].split())


def _at_least(text: str, what: str, low: int) -> int:
    """int(text), refused as a usage error below `low`."""
    kind = "a positive integer" if low == 1 else f"an integer >= {low}"
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must be {kind}; got {text!r}") from None
    if n < low:
        raise argparse.ArgumentTypeError(f"{what} must be {kind}; got {text!r}")
    return n


def _positive(text: str, what: str) -> int:
    return _at_least(text, what, 1)


def _unique(items, text: str, what: str, show=repr):
    if not items:
        raise argparse.ArgumentTypeError(f"takes at least one {what}; got {text!r}")
    seen = [x for i, x in enumerate(items) if x in items[:i]]
    if seen:
        raise argparse.ArgumentTypeError(f"lists {show(seen[0])} twice; got {text!r}")
    return tuple(items)


def case_list(fields, check=None, what: str = "case"):
    """An argparse type: "AxB,CxD" -> ((A, B), (C, D)), each case as many positive integers as
    `fields` names (("batch", "context")), at least one case, none twice; `check(case)`: what is
    wrong with a case the section cannot run (a sentence), or None."""
    fields = tuple(fields)

    def parse_cases(text: str):
        cases = []
        for part in text.split(","):
            nums = part.split("x") if part else []
            if len(nums) != len(fields):
                raise argparse.ArgumentTypeError(
                    f"each {what} is {' x '.join(fields)} ({len(fields)} number{'s' if len(fields) > 1 else ''}"
                    f"{', joined by x' if len(fields) > 1 else ''}); got {part!r} in {text!r}"
                )
            case = tuple(_positive(n, f) for n, f in zip(nums, fields))
            wrong = check(case) if check else None
            if wrong:
                raise argparse.ArgumentTypeError(f"{wrong}; got {part!r} in {text!r}")
            cases.append(case)
        return _unique(cases, text, what, lambda c: "x".join(map(str, c)))

    parse_cases.__name__ = "cases"
    return parse_cases


def launch_grid(fields):
    """An argparse type: "auto,64x32x8x2" -> (None, (64, 32, 8, 2)), each launch as many positive
    integers as `fields` names, joined by x, or auto (the kernel's own choice); at least one, none
    twice.

    >>> launch_grid(("block_h", "block_n"))("auto,64x32")
    (None, (64, 32))
    """
    cases = case_list(fields, what="launch")

    def parse_launches(text: str):
        parts = text.split(",") if text else []
        out = [None if p == "auto" else cases(p)[0] for p in parts]
        return _unique(out, text, "launch", lambda x: "auto" if x is None else "x".join(map(str, x)))

    parse_launches.__name__ = "launches"
    return parse_launches


def name_list(allowed, what: str = "name"):
    """An argparse type: "a,b" -> ("a", "b"), each one of `allowed`, at least one, none twice."""
    allowed = tuple(allowed)

    def parse_names(text: str):
        names = [p.strip() for p in text.split(",") if p.strip()]
        bad = [n for n in names if n not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(f"takes {','.join(allowed)}; got {bad[0]!r} in {text!r}")
        return _unique(names, text, what)

    parse_names.__name__ = what
    return parse_names


def seed_arg(text: str) -> int:
    """An argparse type: a seed, an integer >= 0."""
    return _at_least(text, "a seed", 0)


def int_list(what: str):
    """An argparse type: "16,1" -> (16, 1), positive integers, at least one, none twice."""

    def parse_ints(text: str):
        return _unique([_positive(p, what) for p in text.split(",")] if text else [], text, what)

    parse_ints.__name__ = what
    return parse_ints


def out_path(text: str) -> str:
    """An argparse type: a file to write, checked before anything runs: its folder exists, it is
    no folder itself ("" passes: write nothing)."""
    if text == "":
        return text
    folder = os.path.dirname(os.path.abspath(text))
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name in it")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"the folder of {text!r} does not exist ({folder})")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"the folder of {text!r} is not writable ({folder})")
    return text


def existing_file(text: str) -> str:
    """An argparse type: a file to read, which must exist."""
    if not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    return text


def check_arg(ap: argparse.ArgumentParser, flag: str, kind, value):
    """`kind(value)` (an argparse type) for a value checked after parsing; its refusal is a usage
    error naming `flag`."""
    try:
        return kind(value)
    except argparse.ArgumentTypeError as e:
        ap.error(f"argument {flag}: {e}")


def need_gpu(ap: argparse.ArgumentParser, dry: bool, message: str = NO_GPU) -> None:
    """Refuse at once (a usage error) when there is no CUDA GPU and this is no --dry run; on
    --dry without CUDA set TRITON_INTERPRET=1 before any kernel is defined."""
    import torch

    if torch.cuda.is_available():
        return
    if not dry:
        ap.error(message)
    os.environ.setdefault("TRITON_INTERPRET", "1")


def parse(
    argv,
    doc: str,
    fields,
    default_cases,
    dry_cases,
    subset=None,
    extra=(),
    *,
    prog=None,
    allowed=None,
    check=None,
    gpu_message: str = NO_GPU,
):
    """(args, cases, chosen subset), everything checked before it returns. `fields` names the
    numbers of a case (("batch", "context")), as many as `default_cases`' tuples hold; None: no
    --cases; `allowed`: the values a case's first number may take off --dry; `check`: see case_list.
    `subset` = (flag, allowed names[, default names: all allowed]); `extra` = (flag, help[, type])
    triples. No CUDA and no --dry: refused (`need_gpu`)."""
    ap = Parser(prog=prog, description=describe(doc))
    ap.add_argument(
        "--out", type=out_path, help="write the full result as JSON here (rewritten as rows come in)"
    )
    ap.add_argument("--dry", action="store_true", help="tiny sizes; on a CPU under the Triton interpreter")
    if fields is not None:
        fields = tuple(fields)
        if len(fields) != len(default_cases[0]):
            raise ValueError(f"fields must name the {len(default_cases[0])} numbers of a case; got {fields}")
        example = ",".join("x".join(map(str, c)) for c in default_cases[:2])
        ap.add_argument(
            "--cases",
            type=case_list(fields, check),
            help=f"{' x '.join(fields)} list, e.g. {example} (default: the section's CASES)",
        )
    for flag, text, *kind in extra:
        ap.add_argument(flag, help=text, **({"type": kind[0]} if kind else {}))
    if subset:
        ap.add_argument(
            subset[0],
            type=name_list(subset[1], subset[0].lstrip("-").removesuffix("s")),
            default=tuple(subset[2] if len(subset) > 2 else subset[1]),
            help=f"subset of {','.join(subset[1])}",
        )
    args = ap.parse_args(argv)
    cases = getattr(args, "cases", None)
    if cases and allowed is not None and not args.dry:
        bad = [c[0] for c in cases if c[0] not in allowed]
        if bad:
            ap.error(
                f"argument --cases: {fields[0]} must be one of {','.join(map(str, allowed))} "
                f"(--dry takes any); got {bad[0]}"
            )
    need_gpu(ap, args.dry, gpu_message)
    cases = list(cases) if cases else dry_cases if args.dry else default_cases
    chosen = getattr(args, subset[0].lstrip("-").replace("-", "_")) if subset else None
    return args, cases, chosen


def section_main(section, argv=None, prog: str | None = None) -> int:
    """A declared section's or sweep's `main` (a gpubench.declare.Section): its command line built
    from the declaration (--cases from its fields, its implementations as the choices of its
    subset flag, its options), checked before anything runs (`parse`); then `core.measure` and
    the rows' table; exit 0. `prog`: the command's name (default: python -m
    attnlab.gpubench.<section name>)."""
    from attnlab.gpubench.core import measure, table
    from attnlab.gpubench.declare import Section

    if not isinstance(section, Section):
        raise TypeError(f"section must be a gpubench.declare.Section; got {type(section).__name__}")
    extra = [(flag, text, kind) for flag, text, kind, _ in section.options]
    subset = (section.subset, section.impl_names(), section.default_impls or section.impl_names())
    args, cases, chosen = parse(
        argv,
        section.doc,
        section.fields,
        section.cases,
        section.dry_cases,
        subset,
        extra,
        prog=prog or f"python -m attnlab.gpubench.{section.name}",
        check=section.check,
        allowed=section.allowed,
    )
    options = {
        f.lstrip("-").replace("-", "_"): getattr(args, f.lstrip("-").replace("-", "_"))
        for f, *_ in section.options
    }
    options = {k: v for k, v in options.items() if v is not None}
    print(table(measure(section, cases, chosen, dry=args.dry, out=args.out, options=options)))
    return 0
