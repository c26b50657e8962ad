"""The one schema of a run file (`python -m attnlab.gpubench`, data/measurements/<gpu>-<date>.json).

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

(Older files had a column `x_best` that meant us/fastest in two sections and fastest-peer/us in
two others; gpubench.convert rewrote them into this schema once.)
"""
from __future__ import annotations

__all__ = ["SCHEMA", "COLUMNS", "OURS", "CASE_KEYS", "IMPL_KEYS", "case_text", "impl_text",
           "own_names", "section_rows", "own_row"]

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
