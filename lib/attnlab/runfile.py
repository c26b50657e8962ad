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
    ours           True for this course's kernels (OURS), False for a library
    time_us        µs per call
    flop, bytes    what the call computes and moves (None where not counted)
    tflops, tbps   flop / time in TFLOP/s, bytes / time in TB/s (None where not counted)
    ratio_to_best  best_time / time_us, the best over every row of the same section and case
                   except "standard": HIGHER IS BETTER, 1.0 = the fastest, 0.5 = twice its time
    error          max |error| against the float32 reference (decode: relative error), or None
    commit         the commit the row's kernels were measured at
    extra          what only this section measures (model_us, predicted_us, utilization, ...)

`read(path)` and `write(path, run)` check a run against the schema (`check`) on the way in and
out. Older files had no "schema" and a column `x_best` that meant us/fastest in two sections and
fastest-peer/us in two others; `to_schema` rewrites such a file into this schema:

    python -m attnlab.runfile data/measurements/h200-2026-12-01.json [...]

Layer 0: imports the standard library only.
"""
from __future__ import annotations

import json
import os
import sys

__all__ = ["SCHEMA", "COLUMNS", "OURS", "CASE_KEYS", "IMPL_KEYS", "CONVERT", "case_text", "impl_text",
           "own_names", "section_rows", "own_row", "check", "read", "write", "to_schema", "main"]

SCHEMA = 2
COLUMNS = ("section", "what", "impl", "shape", "ours", "time_us", "flop", "bytes", "tflops", "tbps",
           "ratio_to_best", "error", "commit", "extra")
#: impl names that are this course's kernels, by section; every other impl is a peer
OURS = {"prefill": ("ours-fa2", "ours-hopper", "ours-gluon"), "decode": ("ours",), "paged": ("paged", "contiguous"),
        "cascade": ("cascade", "paged", "paged-unique"), "variants": ("ours", "ours-hopper", "ours-gluon"),
        "scheduled": ("per-request", "fixed", "balanced", "balanced-128", "balanced+fused", "balanced-128+fused",
                      "paged")}
#: the keys of a section's row that make its case, and those that name its launch
CASE_KEYS = {"prefill": ("batch", "N", "causal"), "decode": ("batch", "context"), "paged": ("batch", "context"),
             "cascade": ("n", "prefix", "unique"), "variants": ("batch", "N", "variant"), "scheduled": ("batch",)}
IMPL_KEYS = {"prefill": (), "decode": ("splits",), "paged": ("page_size", "splits", "auto"),
             "cascade": ("splits", "auto"), "variants": (), "scheduled": ()}
#: a section row's own name for a schema column (the harness's sections write these)
_OWN = {"time_us": "us", "flop": "flops", "bytes": "bytes", "error": "max_err"}
_OWN_BY = {"cascade": {"bytes": "kv_bytes"}, "decode": {"error": "rel_err"}}
#: derived values a section row may carry that the schema computes instead (x_best: two meanings)
_DERIVED = ("tflops", "tb_per_s", "x_best")
#: how a file recorded before the schema is rewritten into it
CONVERT = "python -m attnlab.runfile FILE"


def _known(section: str) -> None:
    if section not in CASE_KEYS:
        raise ValueError(f"section must be one of {sorted(CASE_KEYS)}; got {section!r}")


def case_text(section: str, r: dict) -> str:
    """The case of section row `r`, as text.

    >>> case_text("prefill", {"batch": 2, "N": 8, "causal": True})
    'batch 2, N 8, causal'
    """
    _known(section)
    parts = []
    for k in CASE_KEYS[section]:
        v = r.get(k)
        parts.append(("causal" if v else "") if k == "causal" else f"{k} {v}")
    return ", ".join(p for p in parts if p)


def impl_text(section: str, r: dict) -> str:
    """The implementation of section row `r` with its launch, as text.

    >>> impl_text("paged", {"impl": "paged", "page_size": 16, "splits": 4, "auto": True})
    'paged ps16 s4 auto'
    """
    _known(section)
    name = r.get("impl", "ours")
    for k in IMPL_KEYS[section]:
        v = r.get(k)
        if k == "auto":
            name += " auto" if v else ""
        elif v is not None:
            name += f" {'ps' if k == 'page_size' else 's'}{v}"
    return name


def own_names(section: str) -> dict:
    """{schema column: the section row's own key} for time_us, flop, bytes and error."""
    _known(section)
    return {**_OWN, **_OWN_BY.get(section, {})}


def own_row(row: dict) -> dict:
    """The inverse of `section_rows` for one schema row: the section's own row (its shape and
    extra keys, us, flops, bytes, tflops, tb_per_s where counted, and its error key), x_best aside.

    >>> r = section_rows("paged", [{"batch": 1, "impl": "paged", "page_size": 16, "us": 2.0, "bytes": 4e6}])[0]
    >>> own_row(r)
    {'batch': 1, 'page_size': 16, 'impl': 'paged', 'us': 2.0, 'bytes': 4000000.0, 'tb_per_s': 2.0, 'max_err': None}
    """
    if not isinstance(row, dict) or not set(COLUMNS) <= set(row):
        raise ValueError(f"row must be a schema row with the columns {COLUMNS}; got {row!r}"[:300])
    own = own_names(row["section"])
    out = {**row["shape"], **row["extra"], own["time_us"]: row["time_us"]}
    for col, name in (("flop", own["flop"]), ("bytes", own["bytes"]), ("tflops", "tflops"), ("tbps", "tb_per_s")):
        if row[col] is not None:
            out[name] = row[col]
    out[own["error"]] = row["error"]
    return out


def section_rows(section: str, rows: list, commit: str | None = None) -> list[dict]:
    """A section's own rows (dicts with its own keys: us, flops, bytes or kv_bytes, max_err or
    rel_err, its case and launch keys, the rest) as schema rows (COLUMNS), in the same order."""
    _known(section)
    if not isinstance(rows, list):
        raise TypeError(f"rows must be a list of dicts; got {type(rows).__name__}")
    out, own = [], own_names(section)
    for r in rows:
        if not isinstance(r, dict) or not isinstance(r.get("us"), (int, float)):
            raise ValueError(f"rows: each row needs a number under 'us'; got {r!r}"[:200])
        us, flop, nbytes = r["us"], r.get(own["flop"]), r.get(own["bytes"])
        shape = {k: r.get(k) for k in (*CASE_KEYS[section], *IMPL_KEYS[section]) if k in r}
        used = {*own.values(), *_DERIVED, *shape}
        extra = {k: v for k, v in r.items() if k not in used}
        impl = r.get("impl", "ours")
        out.append({"section": section, "what": case_text(section, r), "impl": impl_text(section, r),
                    "shape": shape, "ours": any(w in OURS[section] for w in impl.split(" ")),
                    "time_us": us, "flop": flop, "bytes": nbytes,
                    "tflops": flop / us * 1e-6 if flop else None, "tbps": nbytes / us * 1e-6 if nbytes else None,
                    "ratio_to_best": None, "error": r.get(own["error"]), "commit": commit, "extra": extra})
    for row in out:
        times = [x["time_us"] for x in out if x["what"] == row["what"] and x["impl"] != "standard"]
        row["ratio_to_best"] = min(times) / row["time_us"] if times and row["impl"] != "standard" else None
    return out


def check(run, where: str = "run") -> dict:
    """`run` itself if it is a run file's dict in this schema (see the module's docstring): schema
    SCHEMA, a "sections" dict and a "rows" list of dicts with exactly the columns of COLUMNS, each
    of a known section. Otherwise a ValueError naming `where` (the file) and what is wrong."""
    if not isinstance(run, dict) or run.get("schema") != SCHEMA:
        raise ValueError(f"{where} is not a run file in schema {SCHEMA}; `{CONVERT.replace('FILE', str(where))}` "
                         "rewrites an older one")
    if not isinstance(run.get("sections"), dict) or not isinstance(run.get("rows"), list):
        raise ValueError(f"{where}: a run file needs a 'sections' dict and a 'rows' list; got "
                         f"{type(run.get('sections')).__name__} and {type(run.get('rows')).__name__}")
    for i, r in enumerate(run["rows"]):
        if not isinstance(r, dict) or tuple(r) != COLUMNS or r["section"] not in CASE_KEYS:
            raise ValueError(f"{where}: rows[{i}] must have exactly the columns {COLUMNS} and a section of "
                             f"{sorted(CASE_KEYS)}; got {r!r}"[:400])
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
            raise ValueError(f"{path} is not JSON ({e}); `python -m attnlab.gpubench` writes a run file") from None
    return check(run, str(path))


def write(path, run) -> None:
    """Write `run` (checked against the schema first) as indented JSON to `path`."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise TypeError(f"path must be a file name (str or path); got {path!r}")
    check(run, "run")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(run, f, indent=1)


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
        new["rows"] += section_rows(name, sec.get("rows", []), commits.get(name, old.get("commit")))
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
        print(f"{path}: {'converted' if new is not old else 'already in the schema'}, {len(new['rows'])} rows")
    return 0

if __name__ == "__main__":
    sys.exit(main())
