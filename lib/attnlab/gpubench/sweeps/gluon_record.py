"""A Gluon sweep's result (`gpubench.core.measure`'s dict: the header and its rows in the run file's
schema) as data/measurements/'s step files, which notebook 03's views read
(`explore.measured.gluon_steps_summary`, `explore.measured.steps`): one row per (case, set or peer)
with its TFLOP/s, the check's verdict and the error.

    record(run, date=, commit=)          a `full` run (steps=RECORD_EARLY for a `full early_k` one)
    record_ladder(runs, date=, commit=)  `ladder` runs of one machine, their repeats pooled

The step files keep the form they were recorded in (`h200-2026-12-02-gluon-steps.json`,
`h200-2026-12-03-gluon-early-k.json`, `h200-2026-12-04-gluon-ladder*.json`); a set's name is the
row's launch (`gluon steps=split_pp` -> split_pp), the peers are named hopper, cudnn, sdpa_flash.
"""

from __future__ import annotations

from attnlab.gpubench.sweeps.gluon_sets import LADDER

__all__ = ["RECORD_STEPS", "RECORD_EARLY", "record", "record_ladder"]

#: the cumulative FA3 steps of the recorded table, as `record` labels them
RECORD_STEPS = {
    "no_ws": (
        "TMA+wgmma",
        "TMA loads into a ring of mbarrier-guarded stages, wgmma, 8 warps that load and compute",
    ),
    "ws": ("+producer warp", "a 1-warp TMA producer partition (warp specialisation), one 8-warp consumer"),
    "split": ("+2 consumers", "two independent 4-warp consumer partitions of 64 rows each"),
    "split_pp": ("+ping-pong", "ping-pong: the two consumers take turns issuing their GEMMs"),
    "split_pp_ov": (
        "+overlap",
        "intra-warpgroup overlap: QK^T(j) issued with PV(j-1), softmax(j) under PV(j-1)",
    ),
}
#: the step sets of the early_k table, as `record` labels them when asked for them
RECORD_EARLY = {
    "default": (
        "defaults then",
        "steps=None before the early_k run changed it: d = 128 two consumers + "
        "ping-pong (no mask) or two consumers (causal), 2 stages; d = 64 as now",
    ),
    "split_pp_ov_s3": ("pp + ov, 3 stages", "two consumers, ping-pong, intra-warpgroup overlap, 3 stages"),
    "split_ek": ("early K", "two consumers, each K stage freed after its QK^T, V after its PV"),
    "split_pp_ek": ("pp, early K", "the same with ping-pong"),
    "split_pp_ov_ek": ("pp + ov, early K", "ping-pong, overlap, early K release, 2 stages"),
    "split_pp_ov_ek_s3": ("pp + ov, early K, 3 st.", "the same on 3 stages"),
}
_PEERS = {"hopper": "hopper", "sdpa-cudnn": "cudnn", "sdpa-flash": "sdpa_flash", "sdpa": "sdpa"}
_CHECK = (
    "each step set's output checked against a float32 reference (gpubench.reference; the lse too, "
    "its -inf rows exactly), its first output NaN-poisoned; checked: within 2 x the smaller SDPA "
    "backend's error + 1e-3 on the same inputs"
)
_TIMER = (
    "gpubench.core.time_per_call (CUDA-graph replay, the median over replays; the host's launch "
    "left out; each row's extra says graph or events)"
)
_FLOP = "flop = 4 B H N^2 d, halved when causal; as many KV heads as query heads (no GQA), bf16"


def _rows(run, where: str = "run") -> list:
    """`run`'s rows, each of the sweep's prefill cases; a ValueError naming `where` otherwise."""
    from attnlab.runfile import COLUMNS

    if not isinstance(run, dict) or not isinstance(run.get("rows"), list) or "device" not in run:
        raise ValueError(
            f"{where} is not a Gluon sweep's result (a dict with 'device' and 'rows' in the run file's "
            "schema): `python -m attnlab.gpubench.sweeps.gluon full` or `ladder` writes one"
        )
    for i, r in enumerate(run["rows"]):
        if not isinstance(r, dict) or tuple(r) != COLUMNS or not {"batch", "N", "causal"} <= set(r["shape"]):
            raise ValueError(f"{where}: rows[{i}] is no schema row of a full or ladder case; got {r!r}"[:300])
    return run["rows"]


def _name(r: dict) -> str:
    """The name a step file gives the row's set or peer."""
    first = r["impl"].split(" ")[0]
    return r["shape"]["steps"] if first == "gluon" else _PEERS.get(first, first)


def _case(r: dict) -> tuple:
    s = r["shape"]
    return (s["batch"], s["heads"], s["N"], s["head_dim"], s["causal"])


def _row(case: tuple, name: str, tflops, checked, max_err) -> dict:
    B, H, N, d, causal = case
    return {
        "batch": B,
        "heads": H,
        "N": N,
        "head_dim": d,
        "causal": causal,
        "impl": name,
        "tflops": tflops,
        "checked": checked,
        "max_err": max_err,
    }


def _provenance(run: dict, date: str, commit: str) -> dict:
    for name, value in (("date", date), ("commit", commit)):
        if not isinstance(value, str) or not value:
            raise TypeError(f"{name} must be a non-empty str; got {value!r}")
    keys = ("device", "sms", "torch", "triton")
    return {**{k: run.get(k) for k in keys}, "date": date, "commit": commit}


def record(run: dict, *, date: str, commit: str, steps: dict = RECORD_STEPS) -> dict:
    """A `full` run's result as the recorded steps file: one row per (case, set or peer) in the
    run's order, the set's verdict (extra["within_rule"]) and error beside its TFLOP/s (None for
    the peers); `steps` names the step sets and what each means (RECORD_STEPS, or RECORD_EARLY
    for an early_k run)."""
    rows = []
    for r in _rows(run):
        ours = r["impl"].startswith("gluon ")
        checked = r["extra"].get("within_rule") if ours else None
        rows.append(_row(_case(r), _name(r), r["tflops"], checked, r["error"] if ours else None))
    return {
        **_provenance(run, date, commit),
        "method": f"{_CHECK}; timed by {_TIMER}; {_FLOP}",
        "steps": list(steps),
        "step_labels": {k: v[0] for k, v in steps.items()},
        "step_meaning": {k: v[1] for k, v in steps.items()},
        "peers": {
            "hopper": "kernels.hopper (Triton)",
            "cudnn": "SDPA cuDNN",
            "sdpa_flash": "SDPA flash (FA2)",
        },
        "rows": rows,
    }


def _repeats(cases: dict) -> int:
    """The repeats of one run: those of cuDNN's row (else the first row) in its first case."""
    first = next(iter(cases.values()), {})
    r = first.get("cudnn") or next(iter(first.values()), None)
    return 0 if r is None else len(r["extra"].get("repeat_us", [r["time_us"]]))


def record_ladder(runs, *, date: str, commit: str) -> dict:
    """`ladder` runs (one result, or a list of them: processes on one machine, whose repeats are
    pooled, so the band holds the spread between processes too) as the recorded ladder file: one
    row per (case, set or cuDNN) with every repeat's TFLOP/s, sorted; a set is checked only if
    every run has its row and each is within the rule."""
    runs = [runs] if isinstance(runs, dict) else list(runs)
    if not runs or any(not isinstance(r, dict) or r.get("device") != runs[0].get("device") for r in runs):
        raise ValueError("record_ladder needs one or more runs of one device")
    by_run = []
    for i, run in enumerate(runs):
        cases: dict = {}
        for r in _rows(run, f"runs[{i}]"):
            cases.setdefault(_case(r), {})[_name(r)] = r
        by_run.append(cases)
    if any(list(c) != list(by_run[0]) for c in by_run):
        raise ValueError("the runs of record_ladder must hold the same cases in the same order")
    rows = []
    for case in by_run[0]:
        got = [c[case] for c in by_run]
        for name in dict.fromkeys(n for g in got for n in g):
            mine = [g.get(name) for g in got]
            times = [t for r in mine if r for t in r["extra"].get("repeat_us", [r["time_us"]])]
            flop = next(r["flop"] for r in mine if r)
            ok = all(r is not None and r["extra"].get("within_rule") is True for r in mine)
            errors = [r["error"] for r in mine if r and r["error"] is not None]
            rows.append(
                _row(
                    case,
                    name,
                    sorted(flop / us * 1e-6 for us in times),
                    True if name == "cudnn" else ok,
                    max(errors, default=None),
                )
            )
    return {
        **_provenance(runs[0], date, commit),
        "processes": len(runs),
        "repeats": sum(_repeats(c) for c in by_run),
        "method": f"{_CHECK}; then every set and cuDNN timed round-robin by {_TIMER}, in {len(runs)} "
        f"process(es) on one machine, their repeats pooled; {_FLOP}, seed {runs[0].get('seed')}",
        "steps": list(LADDER),
        "step_labels": {k: v[0] for k, v in LADDER.items()},
        "step_meaning": {k: (", ".join(v[1]) + f"; {v[2]} stages") for k, v in LADDER.items()},
        "step_base": {k: v[3] for k, v in LADDER.items()},
        "peers": {"cudnn": "SDPA cuDNN"},
        "rows": rows,
    }
