"""The one reader of run files (`python -m attnlab.gpubench`, data/measurements/<gpu>-<date>.json),
read through attnlab.runfile and its schema; a file in no schema (recorded before it) is refused:
`python -m attnlab.runfile FILE` rewrites it once.

`newest_run()` loads the newest file; `view(run)` takes a run made here (the optional GPU cells:
`attnlab.gpubench.live.live_run`); both give the file's dict with its schema rows under "rows",
and each section under "sections" as `section(run, name)` gives it: its settings with its own
rows, in the schema as recorded (the views read their columns: time_us, error, tbps, and the
case's and launch's parameters under "shape", what only the section measures under "extra").
"""

from __future__ import annotations

import json
import re

from attnlab.catalog import data_path
from attnlab.runfile import check, read

__all__ = [
    "measurements_dir",
    "run_files",
    "load",
    "recorded",
    "newest_run",
    "view",
    "provenance",
    "section",
    "impl_name",
    "profile_summary",
]

_RUN = re.compile(r"^([a-z0-9]+)-(\d{4}-\d{2}-\d{2})\.json$")


def measurements_dir():
    return data_path("gpus.json").parent / "measurements"


def run_files() -> list:
    """The run files, oldest first (by the date in the name, then the name)."""
    found = [(m.group(2), p.name, p) for p in measurements_dir().glob("*.json") if (m := _RUN.match(p.name))]
    return [p for _, _, p in sorted(found)]


def view(res: dict, file: str = "(live run, not saved)") -> dict:
    """Run `res` (a run file's dict, checked against the schema; `file` names it) as the views
    read it: its rows, and each section as `section` gives it (see the module's docstring)."""
    check(res, file)
    return {
        **res,
        "rows": list(res["rows"]),
        "file": file,
        "sections": {name: section(res, name) for name in res["sections"]},
    }


def load(path) -> dict:
    """The run file at `path` (see the module's docstring)."""
    return view(read(path), getattr(path, "name", str(path)))


def recorded(name: str) -> dict:
    """A recorded file of data/measurements/ that is not a run (a sweep, a profile), as stored."""
    with open(measurements_dir() / name) as f:
        return json.load(f)


def newest_run() -> dict:
    """The newest run file's contents (see the module's docstring)."""
    files = run_files()
    if not files:
        raise FileNotFoundError(f"no run file <gpu>-<date>.json in {measurements_dir()}")
    return load(files[-1])


def provenance(res: dict, name: str | None = None) -> str:
    """Device, date, versions and measured ceilings of section `name` (or the run's), in two lines
    that fit 100 characters; refuses an unknown name. The commits and the run file's notes (how
    each section was re-run) stay in the file and in docs/gpu-notes.md: a lesson shows what was
    measured, not its history."""
    sec = {} if name is None else section(res, name)
    by = res.get("ceilings_by_section", {})
    c = by[name] if name in by else res["ceilings"]
    return (
        f"{res['device']} ({res['sms']} SMs), {sec.get('date', res['date'])}: torch {res['torch']}, "
        f"Triton {res['triton']}, FlashInfer {res.get('flashinfer')};\nmeasured ceilings: copy "
        f"{c['copy_bytes_per_s'] / 1e12:.2f} TB/s, bf16 matmul {c['bf16_matmul_flops'] / 1e12:.0f} TFLOP/s "
        f"[{res.get('file', '')}]"
    )


def impl_name(row: dict) -> str:
    """A schema row's implementation without its launch ("paged" of "paged ps16 s4 auto").

    >>> impl_name({"impl": "flashinfer-tc ps16"})
    'flashinfer-tc'
    """
    return row["impl"].split(" ")[0]


def section(res: dict, name: str) -> dict:
    """Section `name` of run `res`: its settings and its schema rows."""
    if name not in res.get("sections", {}):
        raise KeyError(f"this run has no '{name}' section; it has {sorted(res.get('sections', {}))}")
    return {**res["sections"][name], "rows": [r for r in res["rows"] if r["section"] == name]}


#: the warp-stall reasons a profile table shows, as shares of all warp cycles
PROFILE_STALLS = ("barrier", "wait", "long_scoreboard", "mio_throttle", "short_scoreboard")
STALL_HEADS = {
    "barrier": "barrier",
    "wait": "wait",
    "long_scoreboard": "long sb",
    "mio_throttle": "mio",
    "short_scoreboard": "short sb",
}


def profile_summary(prefix, name: str = "h200-2026-12-02-ncu.json", memory: bool = False) -> str:
    """A recorded Nsight Compute profile (`gpubench.ncu --summarize`), the kernels of the calls
    whose names start with `prefix` (a string or a tuple of them), in two tables that fit 100
    characters: duration, tensor pipe busy, threads and registers; then the share of all warp
    cycles each PROFILE_STALLS reason takes (CTA barrier, fixed-latency wait, memory, the
    shared-memory queue, a short dependency). memory: the first table gives the L2 hit rate and
    the HBM read rate instead of the threads. A kernel without stall counters is refused by name."""
    from attnlab.explore import style

    res = recorded(name)
    rows = []
    if not isinstance(prefix, (str, tuple)) or not prefix:
        raise TypeError(f"prefix must be a call-name prefix or a tuple of them, got {prefix!r}")
    for k in res["kernels"]:
        if not k["call"].startswith(prefix):
            continue
        if "stalls" not in k:
            raise ValueError(f"{name}: kernel {k['kernel']!r} of call {k['call']!r} has no stall counters")
        cpi = k["cycles_per_issue"]
        rows.append(
            {
                "call": k["call"],
                "kernel": k["kernel"][:24],
                "us": k["duration_us"],
                "tensor": k.get("tensor_pipe_active_pct", float("nan")),
                "cpi": cpi,
                "threads": int(k["block"].strip("()").split(",")[0]),
                "regs": k["registers"],
                "l2": k.get("l2_hit_pct", float("nan")),
                "dram": k.get("dram_read_tb_per_s", float("nan")),
                **{s: k["stalls"].get(s, 0.0) / cpi for s in PROFILE_STALLS},
            }
        )
    if not rows:
        raise ValueError(f"{name} has no call starting with {prefix!r}")
    head = (
        f"{res['device']}, {res['date']}:\n{res['tool']};\ntorch {res['torch']}, Triton {res['triton']}, "
        f"FlashInfer {res['flashinfer']}\n\n"
    )
    for r in rows:
        r["call"] = r["call"].replace("non-causal", "no mask")
    for r in rows:
        r["short"] = r["kernel"][:18]
    cols = {
        "call": "call",
        "short": "kernel",
        "us": "µs",
        "tensor": "tensor pipe %",
        **({} if memory else {"threads": "threads"}),
        "regs": "regs",
        **({"l2": "L2 hit %", "dram": "HBM TB/s"} if memory else {}),
    }
    stalls = {"call": "call", "short": "kernel", **{s: STALL_HEADS[s] for s in PROFILE_STALLS}}
    return (
        head
        + style.table(rows, cols, {"us": ".1f", "tensor": ".0f", "regs": ".0f", "l2": ".0f", "dram": ".2f"})
        + "\n\nwhere the warps wait: each reason's share of all warp cycles (its cycles per issued "
        "instruction\nover all cycles per issued instruction); sb: scoreboard, mio: the MIO throttle\n"
        + style.table(rows, stalls, {s: ".0%" for s in PROFILE_STALLS})
    )
