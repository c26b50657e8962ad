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
row with it; a value no column can hold is refused by name) and `rank(rows)` fills ratio_to_best
(a case's impl measured twice is refused: its rows could not be told apart). `read(path)` and
`write(path, run)` check a run against the schema (`check`: the columns and what each holds) on
the way in and out. Older files had no "schema" and a column `x_best` that meant us/fastest in two sections and
fastest-peer/us in two others; `to_schema` rewrites such a file into this schema:

    python -m attnlab.runfile data/measurements/h200-2026-12-01.json [...]

Layer 0: imports the standard library only. This module is long because the schema, the one
function that makes its rows, the checks of what each column holds and the frozen tables that
convert files recorded before it belong together: a change to a column is read in one place.
"""

from __future__ import annotations

import json
import math
import numbers
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
    "replace_with",
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
#: the columns that are None or a finite number >= 0
_COUNTED = ("flop", "bytes", "tflops", "tbps", "ratio_to_best", "error")
#: how a file recorded before the schema is rewritten into it
CONVERT = "python -m attnlab.runfile FILE"
#: the short names of launch parameters in an impl's text ("paged ps16 s4 auto")
_SHORT = {"page_size": "ps", "splits": "s"}


def _params(name: str, value) -> dict:
    """`value` if it is a dict whose keys are str (a case's or a launch's parameters), else a
    TypeError naming `name`."""
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict of parameters by name; got {type(value).__name__}")
    bad = [k for k in value if not isinstance(k, str) or not k]
    if bad:
        raise TypeError(
            f"{name}'s keys must be non-empty str (parameter names); got {bad[0]!r} in {value!r}"[:300]
        )
    return value


def _real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _count(name: str, value, positive: bool = False):
    """`value` if it is None or a finite real number >= 0 (> 0 with `positive`): a TypeError for
    another type (a bool, a str), a ValueError for NaN, inf or a number out of range."""
    if value is None and not positive:
        return value
    want = "a finite number > 0" if positive else "None or a finite number >= 0"
    if not _real(value):
        raise TypeError(f"{name} must be {want}; got {value!r} ({type(value).__name__})")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{name}={value!r} is out of range; valid: {want}")
    return value


def case_text(case: dict) -> str:
    """A case's parameters as the text of its rows' "what": "key value" each, a True flag by its
    name, a False or None one left out.

    >>> case_text({"batch": 2, "N": 8, "causal": True})
    'batch 2, N 8, causal'
    """
    _params("case", case)
    return ", ".join(
        k if v is True else f"{k} {v}" for k, v in case.items() if v is not False and v is not None
    )


def impl_text(name: str, launch: dict) -> str:
    """An implementation's name with its launch parameters, as its rows' "impl": a page size as
    ps, a split count as s, a True flag by its name, None left out.

    >>> impl_text("paged", {"page_size": 16, "splits": 4, "auto": True})
    'paged ps16 s4 auto'
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str; got {name!r}")
    _params("launch", launch)
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
    if not _real(time_us):
        raise TypeError(
            f"time_us must be a positive number of µs; got {time_us!r} ({type(time_us).__name__})"
        )
    if not (math.isfinite(time_us) and time_us > 0):
        raise ValueError(f"time_us must be a positive number of µs; got {time_us!r}")
    if not isinstance(ours, bool):
        raise TypeError(f"ours must be True or False; got {ours!r}")
    for name, value in (("flop", flop), ("nbytes", nbytes), ("error", error)):
        _count(name, value)
    if commit is not None and not isinstance(commit, str):
        raise TypeError(f"commit must be None or a commit's hash (str); got {commit!r}")
    if extra is not None:
        _params("extra", extra)
    shared = sorted(set(_params("case", case)) & set(_params("launch", launch)))
    if shared:
        raise ValueError(
            f"launch {launch!r} names {shared[0]!r}, a parameter of the case {case!r}: a row's shape "
            "holds both, so a launch's parameters need names of their own"
        )
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

    if not isinstance(unranked, (tuple, list, set, frozenset)) or not all(
        isinstance(u, str) for u in unranked
    ):
        raise TypeError(f"unranked must be a tuple of implementation names (str); got {unranked!r}")
    if not isinstance(rows, list):
        raise TypeError(f"rows must be a list of schema rows; got {type(rows).__name__}")
    seen = set()
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or not {"section", "what", "impl", "time_us"} <= set(r):
            raise TypeError(f"rows[{i}] must be a schema row (runfile.row); got {r!r}"[:300])
        key = (r["section"], r["what"], r["impl"])
        if key in seen:
            raise ValueError(
                f"rows[{i}] repeats section {key[0]!r}, case {key[1]!r}, impl {key[2]!r}: two launches "
                "measured under one name cannot be told apart; give them different launch parameters"
            )
        seen.add(key)

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
    holding what the module's docstring says (a str, a dict, a bool, a finite number or None).
    Otherwise a ValueError naming `where` (the file), the row and column, and what is wrong."""
    if not isinstance(run, dict):
        raise ValueError(
            f"{where} is not a run file: a run file is a JSON object (a dict) with 'schema', 'sections' "
            f"and 'rows'; got a {type(run).__name__}"
        )
    if run.get("schema") != SCHEMA:
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
        if not isinstance(r, dict) or tuple(r) != COLUMNS:
            raise ValueError(f"{where}: rows[{i}] must have exactly the columns {COLUMNS}; got {r!r}"[:400])
        for col, ok, want in _COLUMN_TYPES:
            if not ok(r[col]):
                raise ValueError(f"{where}: rows[{i}][{col!r}] must be {want}; got {r[col]!r}"[:400])
    return run


def _number_or_none(v) -> bool:
    return v is None or (_real(v) and math.isfinite(v) and v >= 0)


#: what each column of a row holds: (column, test, the words of a refusal)
_COLUMN_TYPES = (
    ("section", lambda v: isinstance(v, str) and bool(v), "a non-empty str"),
    ("what", lambda v: isinstance(v, str), "a str (the case's text)"),
    ("impl", lambda v: isinstance(v, str) and bool(v), "a non-empty str"),
    ("shape", lambda v: isinstance(v, dict), "a dict of the case's and the launch's parameters"),
    ("ours", lambda v: isinstance(v, bool), "True or False"),
    ("time_us", lambda v: _real(v) and math.isfinite(v) and v > 0, "a finite number of µs > 0"),
    *((c, _number_or_none, "None or a finite number >= 0") for c in _COUNTED),
    ("commit", lambda v: v is None or isinstance(v, str), "None or a commit's hash (str)"),
    ("extra", lambda v: isinstance(v, dict), "a dict"),
)


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
    """Write `run` (checked against the schema first) as indented JSON to `path`, replacing the
    file whole (`replace_with`)."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise TypeError(f"path must be a file name (str or path); got {path!r}")
    check(run, "run")
    replace_with(path, lambda f: json.dump(run, f, indent=1))


def replace_with(path, write) -> None:
    """Call `write(f)` on a new file beside `path`, then put it in path's place (os.replace): a
    crash or a kill while writing leaves the file before whole, never half of the new one."""
    tmp = f"{os.fspath(path)}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            write(f)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


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
            done.append((path, old, check(to_schema(old), path)))
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
