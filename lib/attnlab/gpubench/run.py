"""One GPU harness for the course: every kernel beside the libraries a user would pick instead,
measured in one run on one GPU, written to one file.

    python -m attnlab.gpubench                          # every section -> data/measurements/<gpu>-<date>.json
    python -m attnlab.gpubench --sections prefill,decode --out run.json --merge
    python -m attnlab.gpubench --dry                    # tiny sizes on a CPU (Triton interpreter): the code path

Sections: every module of this package that declares `SECTION = declare.Section(...)` (today
cascade, decode, paged, prefill, prefill_fa3, scheduled, variants; each module's docstring says
what it measures, and `python -m attnlab.gpubench.<name>` runs it alone). Each runs through the one
loop, gpubench.core.measure, and keeps its settings under "sections".

The ceilings (copy bandwidth, bf16 matmul rate) are measured once, first, and every section reads
against them. Every section's rows go into the file's one table, "rows", in the one schema of
attnlab.runfile (ratio_to_best = best time / this time: higher is better, 1.0 = the fastest);
the sections keep their settings. The file is rewritten after each section, so a timeout keeps
what came before.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import traceback

from attnlab.gpubench.core import table as core_table
from attnlab.gpubench.core import measure
from attnlab.runfile import SCHEMA, read, write

__all__ = ["SECTIONS", "run", "default_path", "table", "main"]


def _declared(folder: str | None = None, package: str | None = None) -> tuple:
    """The sections: every module of this package (or of `package`, in `folder`) that declares
    a SECTION (a declare.Section), by name, so that a new section is its own file and nothing here.
    A SECTION named other than its module is refused: `run` replaces a section's rows by the
    module's name, and the rows carry the SECTION's."""
    import pkgutil

    from attnlab.gpubench.declare import Section

    names = []
    for info in pkgutil.iter_modules([folder or os.path.dirname(__file__)]):
        if info.ispkg or info.name.startswith("_") or info.name == "run":  # __main__ would run
            continue
        mod = importlib.import_module(f"{package or __package__}.{info.name}")
        sec = getattr(mod, "SECTION", None)
        if isinstance(sec, Section):
            if sec.name != info.name:
                raise ValueError(
                    f"{mod.__name__}.SECTION is named {sec.name!r}; a section's name must be its "
                    f"module's, {info.name!r} (the run file's rows of a section are found by it)"
                )
            names.append(info.name)
    return tuple(sorted(names))


SECTIONS = _declared()


def default_path(device: str, date: str) -> str:
    """data/measurements/<gpu>-<date>.json, the gpu the last word of the device's name (h200)."""
    from attnlab.catalog import data_path

    slug = re.sub(r"[^a-z0-9]+", "-", device.lower().split()[-1]).strip("-") or "gpu"
    return str(data_path("gpus.json").parent / "measurements" / f"{slug}-{date}.json")


def run(sections=SECTIONS, *, dry: bool = False, out: str | None = None, merge: bool = False) -> dict:
    """Measure `sections` (names of SECTIONS, in this order) into one run file: the ceilings
    first, then each section through core.measure, its rows replacing the file's rows of that
    section; the file (`out`; default data/measurements/<gpu>-<date>.json, none on a dry run,
    "": none) rewritten after each section through runfile.write, so a crash keeps the sections
    before it. A section that fails is printed and left out. `merge`: keep the sections of the
    run file already at `out` that this run does not measure."""
    import torch

    from attnlab.gpubench.core import ceilings, header
    from attnlab.validate import as_bool, choice

    if isinstance(sections, str) or not isinstance(sections, (tuple, list)) or not sections:
        raise TypeError(f"sections must be a non-empty tuple of names of {SECTIONS}; got {sections!r}")
    for name in sections:
        choice("sections", name, SECTIONS)
    if len(set(sections)) != len(sections):
        raise ValueError(f"sections name a section twice; got {sections!r}")
    dry, merge = as_bool("dry", dry), as_bool("merge", merge)
    if out is not None and not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"out must be a file name, '' (write nothing) or None; got {out!r}")
    if merge and (out == "" or (out is None and dry)):
        raise ValueError("merge=True keeps the other sections of out: give out (a dry run writes none)")
    cuda = torch.cuda.is_available()
    res = header(torch, {})
    res.pop("shape")
    res.pop("rows")
    res.pop("copy_bytes_per_s", None)
    res["ceilings"] = ceilings(torch) if cuda else {"copy_bytes_per_s": 1e9, "bf16_matmul_flops": 1e10}
    if out is None and not dry:  # out="": write nothing
        out = default_path(res["device"], res["date"])
    res["schema"], res["rows"] = SCHEMA, []
    if merge and out and os.path.exists(out):
        old = read(out)  # a ValueError names the file and how to convert it
        res["sections"], res["rows"] = old.get("sections", {}), old.get("rows", [])
        res["ceilings_by_section"] = old.get("ceilings_by_section", {})
        res["commits_by_section"] = old.get("commits_by_section", {})
        if not res.get("flashinfer"):  # a section kept from the old run used it
            res["flashinfer"] = old.get("flashinfer")
        # a note on a section this run measures again described the old rows: it goes with them
        res["notes"] = [n for n in old.get("notes", []) if n.split(": ", 1)[0] not in sections]
    for key in ("sections", "ceilings_by_section", "commits_by_section"):
        res.setdefault(key, {})
    c = res["ceilings"]
    print(
        f"{res['device']}: torch {res['torch']}, triton {res['triton']}; copy "
        f"{c['copy_bytes_per_s'] / 1e12:.2f} TB/s, bf16 matmul {c['bf16_matmul_flops'] / 1e12:.0f} TFLOP/s",
        flush=True,
    )

    for name in sections:
        print(f"=== {name}", flush=True)
        try:
            mod = importlib.import_module(f".{name}", __package__)
            sec = measure(mod.SECTION, dry=dry, ceil=c)
        except Exception:  # noqa: BLE001 - keep the other sections
            print(f"{name}: failed\n" + traceback.format_exc(limit=6), flush=True)
            continue
        if sec.get("flashinfer") and not res.get("flashinfer"):
            res["flashinfer"] = sec["flashinfer"]
        res["rows"] = [r for r in res["rows"] if r["section"] != name] + sec.pop("rows")
        res["sections"][name] = sec
        res["ceilings_by_section"][name] = c
        res["commits_by_section"][name] = res.get("commit")
        if out:
            write(out, res)
    if out:
        write(out, res)
    return res


def table(res: dict) -> str:
    """The run's rows as text under its provenance (gpubench.core.table)."""
    return core_table(res)


def main(argv=None) -> int:
    """`python -m attnlab.gpubench`: the command line checked before anything runs (a bad argument,
    an --out in a missing folder, --merge onto a file that is no run file in the schema, no GPU
    without --dry: exit status 2, one line), then `run` and its table."""
    import datetime

    from attnlab.gpubench.cli import Parser, describe, name_list, need_gpu, out_path

    ap = Parser(prog="python -m attnlab.gpubench", description=describe(__doc__))
    ap.add_argument(
        "--sections",
        type=name_list(SECTIONS, "section"),
        default=SECTIONS,
        help=f"subset of {','.join(SECTIONS)}",
    )
    ap.add_argument(
        "--out",
        type=out_path,
        help="result file (default data/measurements/<gpu>-<date>.json; none on --dry)",
    )
    ap.add_argument("--merge", action="store_true", help="keep the other sections already in --out")
    ap.add_argument("--dry", action="store_true", help="tiny sizes; on a CPU under the Triton interpreter")
    args = ap.parse_args(argv)
    need_gpu(ap, args.dry)
    out = args.out
    if out is None and not args.dry:
        import torch

        out = default_path(torch.cuda.get_device_name(0), datetime.date.today().isoformat())
    if args.merge and not out:
        ap.error("argument --merge: keeps the other sections of --out; a --dry run writes none, give --out")
    if args.merge and os.path.exists(out):
        try:
            read(out)
        except (ValueError, OSError) as e:
            ap.error(f"argument --merge: {e}")
    res = run(args.sections, dry=args.dry, out=out, merge=args.merge)
    print(table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
