"""The run file: one GPU run's measurements (`python -m attnlab.gpubench` writes it,
attnlab.explore.measured reads it; data/measurements/<gpu>-<date>.json), its one schema, reading
and writing it, and the conversion of files recorded before the schema.

A run file is a dict: the provenance (device, sms, l2_bytes, torch, triton, flashinfer, commit,
date), "schema" (SCHEMA, this version), "ceilings" (copy_bytes_per_s, bf16_matmul_flops, measured
once per run), "sections" (each section's own settings: shape, page_size, ...; no rows),
"ceilings_by_section" and "commits_by_section", and "rows": every section's rows, each with
exactly the columns of COLUMNS:

    section        the section that measured it (prefill, decode, paged, cascade, variants, scheduled)
    what           the case, as text ("batch 1, N 4096, causal"); all rows of a case are compared
    impl           the implementation and its launch ("paged ps16 s4 auto", "flashinfer-tc ps16")
    shape          the case's and the launch's parameters, a dict (batch, N, causal, page_size, ...)
    ours           True for this course's kernels, False for a library (the section declares it)
    time_us        µs per call
    flop, bytes    what the call computes and moves (None where not counted)
    tflops, tbps   flop / time in TFLOP/s, bytes / time in TB/s (None where not counted)
    ratio_to_best  best_time / time_us, the best over every ranked row of the same section and
                   case (`rank`; Algorithm 0 is not ranked): HIGHER IS BETTER, 1.0 = the fastest
    error          max |error| against the float32 reference (decode: relative error), or None
    commit         the commit the row's kernels were measured at
    extra          what only this section measures (model_us, predicted_us, utilization, ...)

`row(...)` makes one row in these columns (the harness's loop, gpubench.core.measure, makes every
row with it) and `rank(rows)` fills ratio_to_best. `read(path)` and `write(path, run)` check a run against the schema (`check`) on the way in and
out. Older files had no "schema" and a column `x_best` that meant us/fastest in two sections and
fastest-peer/us in two others; `to_schema` rewrites such a file into this schema:

    python -m attnlab.runfile data/measurements/h200-2026-12-01.json [...]

Layer 0: imports the standard library only. This module is long because the schema, the one function that
makes its rows and the frozen tables that convert files recorded before it belong together: a
change to a column is read in one place.
"""

from __future__ import annotations

import json
import os
import sys

__all__ = [
    "SCHEMA",
    "COLUMNS",
    "CONVERT",
    "case_text",
    "impl_text",
    "row",
    "rank",
    "check",
    "read",
    "write",
    "to_schema",
    "main",
]

SCHEMA = 2
COLUMNS = (
    "section",
    "what",
    "impl",
    "shape",
    "ours",
    "time_us",
    "flop",
    "bytes",
    "tflops",
    "tbps",
    "ratio_to_best",
    "error",
    "commit",
    "extra",
)
#: how a file recorded before the schema is rewritten into it
CONVERT = "python -m attnlab.runfile FILE"
#: the short names of launch parameters in an impl's text ("paged ps16 s4 auto")
_SHORT = {"page_size": "ps", "splits": "s"}


def case_text(case: dict) -> str:
    """A case's parameters as the text of its rows' "what": "key value" each, a True flag by its
    name, a False or None one left out.

    >>> case_text({"batch": 2, "N": 8, "causal": True})
    'batch 2, N 8, causal'
    """
    if not isinstance(case, dict):
        raise TypeError(f"case must be a dict of the case's parameters; got {type(case).__name__}")
    return ", ".join(
        k if v is True else f"{k} {v}" for k, v in case.items() if v is not False and v is not None
    )


def impl_text(name: str, launch: dict) -> str:
    """An implementation's name with its launch parameters, as its rows' "impl": a page size as
    ps, a split count as s, a True flag by its name, None left out.

    >>> impl_text("paged", {"page_size": 16, "splits": 4, "auto": True})
    'paged ps16 s4 auto'
    """
    if not isinstance(name, str) or not name or not isinstance(launch, dict):
        raise TypeError(f"name must be a non-empty str and launch a dict; got {name!r}, {launch!r}")
    words = [name]
    for k, v in launch.items():
        if v is True:
            words.append(k)
        elif v is not None and v is not False:
            words.append(f"{_SHORT.get(k, k + '=')}{v}")
    return " ".join(words)


def row(
    section: str,
    case: dict,
    impl: str,
    launch: dict,
    *,
    ours: bool,
    time_us: float,
    flop=None,
    nbytes=None,
    error=None,
    commit=None,
    extra=None,
) -> dict:
    """One schema row (COLUMNS, in order): `case` and `launch` make its shape and its what and
    impl texts; TFLOP/s and TB/s follow from flop and bytes where counted; ratio_to_best is left
    for `rank`, which sees every row of the case.

    >>> r = row("paged", {"batch": 1}, "paged", {"page_size": 16}, ours=True, time_us=2.0, nbytes=4e6)
    >>> r["what"], r["impl"], r["tbps"], r["shape"]
    ('batch 1', 'paged ps16', 2.0, {'batch': 1, 'page_size': 16})
    """
    if not isinstance(section, str) or not section:
        raise TypeError(f"section must be a non-empty str; got {section!r}")
    if not isinstance(time_us, (int, float)) or isinstance(time_us, bool) or not time_us > 0:
        raise ValueError(f"time_us must be a positive number of µs; got {time_us!r}")
    if not isinstance(ours, bool):
        raise TypeError(f"ours must be True or False; got {ours!r}")
    return {
        "section": section,
        "what": case_text(case),
        "impl": impl_text(impl, launch),
        "shape": {**case, **launch},
        "ours": ours,
        "time_us": time_us,
        "flop": flop,
        "bytes": nbytes,
        "tflops": flop / time_us * 1e-6 if flop else None,
        "tbps": nbytes / time_us * 1e-6 if nbytes else None,
        "ratio_to_best": None,
        "error": error,
        "commit": commit,
        "extra": dict(extra or {}),
    }


def rank(rows: list, unranked=()) -> list:
    """Set each row's ratio_to_best (best time / its time, HIGHER IS BETTER) over the rows of its
    section and case, in place, leaving out rows whose impl's first word is in `unranked` (they
    get None). Returns `rows`.

    >>> rs = [row("s", {"n": 1}, a, {}, ours=True, time_us=t) for a, t in (("a", 2.0), ("b", 4.0))]
    >>> [r["ratio_to_best"] for r in rank(rs)]
    [1.0, 0.5]
    """

    def counted(r):
        return r["impl"].split(" ")[0] not in unranked

    best: dict = {}
    for r in rows:
        if counted(r):
            key = (r["section"], r["what"])
            best[key] = min(best.get(key, r["time_us"]), r["time_us"])
    for r in rows:
        r["ratio_to_best"] = best[(r["section"], r["what"])] / r["time_us"] if counted(r) else None
    return rows


def check(run, where: str = "run") -> dict:
    """`run` itself if it is a run file's dict in this schema (see the module's docstring): schema
    SCHEMA, a "sections" dict and a "rows" list of dicts with exactly the columns of COLUMNS, each
    of a known section. Otherwise a ValueError naming `where` (the file) and what is wrong."""
    if not isinstance(run, dict) or run.get("schema") != SCHEMA:
        raise ValueError(
            f"{where} is not a run file in schema {SCHEMA}; `{CONVERT.replace('FILE', str(where))}` "
            "rewrites an older one"
        )
    if not isinstance(run.get("sections"), dict) or not isinstance(run.get("rows"), list):
        raise ValueError(
            f"{where}: a run file needs a 'sections' dict and a 'rows' list; got "
            f"{type(run.get('sections')).__name__} and {type(run.get('rows')).__name__}"
        )
    for i, r in enumerate(run["rows"]):
        if not isinstance(r, dict) or tuple(r) != COLUMNS or not isinstance(r["section"], str):
            raise ValueError(f"{where}: rows[{i}] must have exactly the columns {COLUMNS}; got {r!r}"[:400])
    return run


def read(path) -> dict:
    """The run file at `path` (a str or path), checked against the schema; a ValueError names the
    file when it is not JSON or not in the schema."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise TypeError(f"path must be a file name (str or path); got {path!r}")
    with open(path, encoding="utf-8") as f:
        try:
            run = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"{path} is not JSON ({e}); `python -m attnlab.gpubench` writes a run file"
            ) from None
    return check(run, str(path))


def write(path, run) -> None:
    """Write `run` (checked against the schema first) as indented JSON to `path`."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise TypeError(f"path must be a file name (str or path); got {path!r}")
    check(run, "run")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(run, f, indent=1)


#: files recorded before the schema: each section's own row keys, frozen as they were
_OLD_CASE = {
    "prefill": ("batch", "N", "causal"),
    "decode": ("batch", "context"),
    "paged": ("batch", "context"),
    "cascade": ("n", "prefix", "unique"),
    "variants": ("batch", "N", "variant"),
    "scheduled": ("batch",),
}
_OLD_LAUNCH = {"decode": ("splits",), "paged": ("page_size", "splits", "auto"), "cascade": ("splits", "auto")}
_OLD_OURS = {
    "prefill": ("ours-fa2", "ours-hopper", "ours-gluon"),
    "decode": ("ours",),
    "paged": ("paged", "contiguous"),
    "cascade": ("cascade", "paged", "paged-unique"),
    "variants": ("ours", "ours-hopper", "ours-gluon"),
    "scheduled": (
        "per-request",
        "fixed",
        "balanced",
        "balanced-128",
        "balanced+fused",
        "balanced-128+fused",
        "paged",
    ),
}
_OLD_NAMES = {"time_us": "us", "flop": "flops", "bytes": "bytes", "error": "max_err"}
_OLD_NAMES_BY = {"cascade": {"bytes": "kv_bytes"}, "decode": {"error": "rel_err"}}


def _old_rows(section: str, rows: list, commit) -> list:
    """A section's rows as recorded before the schema (its own keys), as schema rows."""
    if section not in _OLD_CASE:
        raise ValueError(
            f"{section!r} is no section of a file recorded before the schema {sorted(_OLD_CASE)}"
        )
    names = {**_OLD_NAMES, **_OLD_NAMES_BY.get(section, {})}
    out = []
    for r in rows:
        if not isinstance(r, dict) or not isinstance(r.get("us"), (int, float)):
            raise ValueError(f"rows: each row needs a number under 'us'; got {r!r}"[:200])
        case = {k: r.get(k) for k in _OLD_CASE[section] if k in r}
        launch = {k: r.get(k) for k in _OLD_LAUNCH.get(section, ()) if k in r}
        used = {*names.values(), "tflops", "tb_per_s", "x_best", *case, *launch}
        impl = r.get("impl", "ours")
        out.append(
            row(
                section,
                case,
                impl,
                launch,
                ours=any(w in _OLD_OURS[section] for w in impl.split(" ")),
                time_us=r["us"],
                flop=r.get(names["flop"]),
                nbytes=r.get(names["bytes"]),
                error=r.get(names["error"]),
                commit=commit,
                extra={k: v for k, v in r.items() if k not in used},
            )
        )
    return rank(out, unranked=("standard",))


def to_schema(old: dict) -> dict:
    """The run file `old` (a dict with "sections", each with its own "rows") in the schema."""
    if not isinstance(old, dict) or not isinstance(old.get("sections"), dict):
        raise ValueError("old must be a run file's dict with a 'sections' dict")
    if old.get("schema") == SCHEMA:
        return old
    new = {k: v for k, v in old.items() if k not in ("rows", "sections")}
    new["schema"], new["sections"], new["rows"] = SCHEMA, {}, []
    commits = old.get("commits_by_section", {})
    for name, sec in old["sections"].items():
        new["sections"][name] = {k: v for k, v in sec.items() if k != "rows"}
        new["rows"] += _old_rows(name, sec.get("rows", []), commits.get(name, old.get("commit")))
    return new


def main(argv=None) -> int:
    """`python -m attnlab.runfile FILE...`: rewrite each file recorded before the schema into it;
    every file is read and converted before any is rewritten, and a bad one is one usage line."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m attnlab.runfile", description=main.__doc__)
    ap.add_argument("files", nargs="+", help="run files recorded before the schema")
    args = ap.parse_args(argv)
    done = []
    for path in args.files:
        try:
            with open(path, encoding="utf-8") as f:
                old = json.load(f)
            done.append((path, old, to_schema(old)))
        except (OSError, ValueError) as e:
            ap.error(f"{path}: {e}")
    for path, old, new in done:
        if new is not old:
            write(path, new)
        print(
            f"{path}: {'converted' if new is not old else 'already in the schema'}, {len(new['rows'])} rows"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
