"""The one reader of run files (`python -m attnlab.gpubench`, data/measurements/<gpu>-<date>.json),
which are in the one schema of attnlab.gpubench.schema; a file in no schema (recorded before it)
is refused: `python -m attnlab.gpubench.convert FILE` rewrites it once.

`newest_run()` loads the newest file; `live_run()` makes a new run when a CUDA GPU is here; both
give the file's dict with its schema rows under "rows", and each section under "sections" as
`section(run, name)` gives it: its settings with its rows back in the section's own keys
(gpubench.schema.own_row), which the formatters print.
"""
from __future__ import annotations

import json
import re

from attnlab.gpubench.schema import SCHEMA, own_row
from attnlab.machine.hardware import data_path

__all__ = ["measurements_dir", "run_files", "load", "newest_run", "live_run", "provenance", "section"]

_RUN = re.compile(r"^([a-z0-9]+)-(\d{4}-\d{2}-\d{2})\.json$")


def measurements_dir():
    return data_path("gpus.json").parent / "measurements"


def run_files() -> list:
    """The run files, oldest first (by the date in the name, then the name)."""
    found = [(m.group(2), p.name, p) for p in measurements_dir().glob("*.json") if (m := _RUN.match(p.name))]
    return [p for _, _, p in sorted(found)]


def _view(res: dict, file: str) -> dict:
    if not isinstance(res, dict) or res.get("schema") != SCHEMA:
        raise ValueError(f"{file} is not a run file in schema {SCHEMA}; "
                         "`python -m attnlab.gpubench.convert` rewrites an older one")
    rows = res.get("rows", [])
    return {**res, "rows": list(rows), "file": file,
            "sections": {name: section(res, name) for name in res.get("sections", {})}}


def load(path) -> dict:
    """The run file at `path` (see the module's docstring)."""
    with open(path) as f:
        return _view(json.load(f), getattr(path, "name", str(path)))


def newest_run() -> dict:
    """The newest run file's contents (see the module's docstring)."""
    files = run_files()
    if not files:
        raise FileNotFoundError(f"no run file <gpu>-<date>.json in {measurements_dir()}")
    return load(files[-1])


def live_run(sections=("prefill", "decode", "paged", "cascade", "scheduled")) -> dict | None:
    """Run those sections of `python -m attnlab.gpubench` here if a CUDA GPU is visible (minutes:
    FlashInfer's columns need `pip install flashinfer-python`, and its first calls compile);
    None otherwise. Nothing is written to disk."""
    from attnlab import kernels as gpu
    if not gpu.available():
        return None
    from attnlab.gpubench import run as bench
    res = bench.run(sections, out="")
    return _view(res, "(live run, not saved)")


def provenance(res: dict, name: str | None = None) -> str:
    """Device, date, versions, commit and ceilings of section `name` (or the run's), and the run
    file's notes on that section; refuses an unknown name."""
    sec = {} if name is None else section(res, name)
    by, commits = res.get("ceilings_by_section", {}), res.get("commits_by_section", {})
    c = by[name] if name in by else res["ceilings"]
    commit = commits.get(name) or res.get("commit") or "unknown"
    notes = "".join(f"\nnote: {n[len(name) + 2:]}" for n in res.get("notes", []) if name and n.startswith(f"{name}: "))
    return (f"{res['device']} ({res['sms']} SMs), {sec.get('date', res['date'])}: torch {res['torch']}, "
            f"Triton {res['triton']}, FlashInfer {res.get('flashinfer')}; kernels at commit {str(commit)[:7]}; "
            f"measured ceilings: copy {c['copy_bytes_per_s'] / 1e12:.2f} TB/s, bf16 matmul "
            f"{c['bf16_matmul_flops'] / 1e12:.0f} TFLOP/s [{res.get('file', '')}]{notes}")


def section(res: dict, name: str) -> dict:
    """Section `name` of run `res`: its settings and its rows in the section's own keys."""
    if name not in res.get("sections", {}):
        raise KeyError(f"this run has no '{name}' section; it has {sorted(res.get('sections', {}))}")
    return {**res["sections"][name], "rows": [own_row(r) for r in res["rows"] if r["section"] == name]}
