"""The command line the GPU harnesses share: --out, --dry, --cases "AxB,..." and one subset flag."""
from __future__ import annotations

import argparse
import json
import os

__all__ = ["parse", "section_main", "flashinfer_version", "write_json"]


def parse(argv, doc: str, cases_help: str, default_cases, dry_cases, subset=None, extra=()):
    """(args, cases, chosen subset). `subset` = (flag, allowed names[, default names: all allowed]);
    `extra` = (flag, help) pairs.
    --dry on a machine without CUDA sets TRITON_INTERPRET=1 before any kernel is defined."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", help="write the full result as JSON here (rewritten as rows come in)")
    ap.add_argument("--dry", action="store_true", help="tiny sizes; on a CPU under the Triton interpreter")
    ap.add_argument("--cases", help=cases_help)
    for flag, text in extra:
        ap.add_argument(flag, help=text)
    if subset:
        ap.add_argument(subset[0], default=",".join(subset[2] if len(subset) > 2 else subset[1]),
                        help=f"subset of {','.join(subset[1])}")
    args = ap.parse_args(argv)
    import torch
    if args.dry and not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    cases = ([tuple(int(x) for x in c.split("x")) for c in args.cases.split(",")] if args.cases
             else dry_cases if args.dry else default_cases)
    chosen = None
    if subset:
        given = getattr(args, subset[0].lstrip("-").replace("-", "_"))
        chosen = tuple(p for p in given.split(",") if p)
        if set(chosen) - set(subset[1]):
            ap.error(f"{subset[0]} takes {','.join(subset[1])}; got {given}")
    return args, cases, chosen


def section_main(section: str, argv, doc: str, cases_help: str, default_cases, dry_cases, run, subset=None,
                 extra=()) -> int:
    """A section module's `main`: parse the command line, `run(args, cases, chosen subset)`, print
    the section's rows in the run schema (gpubench.core.table); exit status 0."""
    from attnlab.gpubench.core import table
    args, cases, chosen = parse(argv, doc, cases_help, default_cases, dry_cases, subset, extra)
    print(table(run(args, cases, chosen), section))
    return 0


def flashinfer_version() -> tuple[bool, str]:
    """(importable, what the result file records): FlashInfer's version, or why it is absent.
    Imported only when its rows are due, so a crash while importing it keeps the rows before."""
    try:
        import flashinfer
        return True, flashinfer.__version__
    except Exception as e:                                # noqa: BLE001
        return False, f"absent ({type(e).__name__}: {str(e)[:100]})"


def write_json(path, obj) -> None:
    """Write obj as indented JSON to path; nothing when path is None or "" (out="": write nothing).
    The harnesses call it after every row or section, so a timeout keeps what came before."""
    if path:
        with open(path, "w") as f:
            json.dump(obj, f, indent=1)
