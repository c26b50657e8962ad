"""Notebook 03's one step table: FA3's steps added one at a time to the Gluon kernel at today's
defaults, from one recorded run (`python -m attnlab.gpubench.sweeps.gluon ladder`), each set
timed in interleaved repeats so that the run measures its own noise.

The noise band of a set is the spread of its repeats, (max - min) / median. A step's effect is
its median over the median of its base row (the file's `step_base`; the row before it where the
file names none), minus 1; it is called a gain or a loss only when it is larger than both rows'
bands, and noise otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.explore import style
from attnlab.explore.measured import reader

__all__ = [
    "LADDER_FILE",
    "OTHER_MACHINE",
    "StepRow",
    "ladder_rows",
    "ladder_summary",
    "between_machines",
    "measured_setting",
    "SETTING_OF",
    "FA3_ABLATION",
]

LADDER_FILE = "h200-2026-12-04-gluon-ladder.json"
#: the same sets timed the same way on another lent H200 earlier the same day (5 repeats)
OTHER_MACHINE = "h200-2026-12-04-gluon-ladder-first.json"
#: the pipeline explorer's switches (warp_specialize, consumers, overlap, stages) -> the set run
SETTING_OF = {
    (False, "lockstep", False, 2): "no_ws",
    (True, "lockstep", False, 2): "ws",
    (True, "independent", False, 2): "split",
    (True, "pingpong", False, 2): "split_pp",
    (True, "pingpong", False, 3): "split_pp_s3",
    (True, "pingpong", True, 3): "split_pp_ov_s3",
    (True, "pingpong", True, 2): "split_pp_ov",
}
#: FlashAttention-3's own ablation (Shah et al. 2024, Table 2): H100 SXM5, FP16, no mask,
#: batch 4, sequence 8,448, 16 heads, head dim 128; TFLOP/s
FA3_ABLATION = (
    ("FlashAttention-3", 661),
    ("no GEMM-softmax pipelining, with warp specialisation", 582),
    ("GEMM-softmax pipelining, no warp specialisation", 570),
)


@dataclass(frozen=True)
class StepRow:
    """One set of one case: TFLOP/s over the repeats and its effect over the row before."""

    batch: int
    N: int
    head_dim: int
    causal: bool
    impl: str
    label: str
    median: float
    low: float
    high: float
    change: float | None  # median / its base row's median - 1 (None: the first row, or a peer)
    verdict: str  # "gain", "loss", "noise" or "" (first row, peer)
    base: str | None = None  # the row it is measured against

    @property
    def band(self) -> float:
        """(max - min) / median of the repeats."""
        return (self.high - self.low) / self.median


def _verdict(change: float, band: float) -> str:
    if abs(change) <= band:
        return "noise"
    return "gain" if change > 0 else "loss"


def ladder_rows(name: str = LADDER_FILE) -> list:
    """Every (case, set) of the recorded ladder run as a StepRow, steps in order, cuDNN last."""
    res = reader.recorded(name)
    labels = {**res["step_labels"], "cudnn": "cuDNN (SDPA)"}
    out = []
    cases = sorted(
        {(r["batch"], r["N"], r["head_dim"], r["causal"]) for r in res["rows"]},
        key=lambda c: (-c[2], c[3], c[0]),
    )
    for case in cases:
        at = {r["impl"]: r for r in res["rows"] if (r["batch"], r["N"], r["head_dim"], r["causal"]) == case}
        done, prev = {}, None
        for impl in (*res["steps"], "cudnn"):
            r = at[impl]
            if not r["checked"]:
                raise ValueError(f"{name}: {impl} failed its check at {case}; it has no time to show")
            t = np.asarray(r["tflops"], float)
            row = dict(
                batch=case[0],
                N=case[1],
                head_dim=case[2],
                causal=case[3],
                impl=impl,
                label=labels[impl],
                median=float(np.median(t)),
                low=float(t.min()),
                high=float(t.max()),
            )
            band = (row["high"] - row["low"]) / row["median"]
            base = res.get("step_base", {}).get(impl, prev) if impl != "cudnn" else None
            if base is not None:
                change = row["median"] / done[base].median - 1
                row.update(change=change, verdict=_verdict(change, max(band, done[base].band)), base=base)
            else:
                row.update(change=None, verdict="")
            out.append(StepRow(**row))
            done[impl], prev = out[-1], impl
    return out


def _cell(r: StepRow) -> dict:
    change = "" if r.change is None else f"{r.change:+.0%} {r.verdict}"
    return {"tflops": f"{r.median:.0f}", "band": f"{r.band:.1%}", "change": change}


def ladder_summary(name: str = LADDER_FILE) -> str:
    """The step table: per shape, a row per step with its median TFLOP/s, its noise band and its
    effect over the row before, no mask beside causal; cuDNN in the same run last."""
    res = reader.recorded(name)
    rows = ladder_rows(name)
    head = (
        f"{res['device']}, {res['date']}: torch {res['torch']}, Triton {res['triton']}; 32 query and 32 KV heads,\n"
        f"bf16, seed 1; median TFLOP/s of {res['repeats']} interleaved repeats a set; band = (max - min) /\n"
        "median of the repeats; a change inside the larger band of its two rows is noise\n\n"
    )
    blocks = []
    for b, n, d in sorted({(r.batch, r.N, r.head_dim) for r in rows}, key=lambda c: (-c[2], c[0])):
        mine = [r for r in rows if (r.batch, r.N, r.head_dim) == (b, n, d)]
        table = []
        order = list(dict.fromkeys(r.impl for r in mine))
        for k, impl in enumerate(order):
            none, causal = (next(r for r in mine if r.impl == impl and r.causal == c) for c in (False, True))
            label = none.label
            if none.base is not None and none.base != order[k - 1]:  # not over the row above
                label += f" (vs {next(r.label for r in mine if r.impl == none.base)})"
            table.append(
                {
                    "step": label,
                    **{k + "0": v for k, v in _cell(none).items()},
                    **{k + "1": v for k, v in _cell(causal).items()},
                }
            )
        cols = {
            "step": f"{b} x {n // 1024}K, d = {d}",
            "tflops0": "no mask",
            "band0": "band",
            "change0": "change",
            "tflops1": "causal",
            "band1": "band",
            "change1": "change",
        }
        blocks.append(style.table(table, cols))
    return head + "\n\n".join(blocks)


def between_machines(name: str = LADDER_FILE, other: str = OTHER_MACHINE) -> str:
    """Each set both files hold, its median in `other` over its median in `name`, over the cases:
    the spread between two machines (and runs), which no single run's band contains."""
    mine = {(r.impl, r.batch, r.N, r.head_dim, r.causal): r for r in ladder_rows(name)}
    theirs = {(r.impl, r.batch, r.N, r.head_dim, r.causal): r for r in ladder_rows(other)}
    labels = reader.recorded(name)["step_labels"]
    out = []
    for impl in dict.fromkeys(k[0] for k in mine):
        q = [theirs[k].median / mine[k].median for k in mine if k[0] == impl and k in theirs]
        if q:
            out.append({"set": labels.get(impl, "cuDNN (SDPA)"), "lo": min(q), "hi": max(q), "n": len(q)})
    return style.table(
        out, {"set": "set", "lo": "lowest", "hi": "highest", "n": "cases"}, {"lo": ".2f", "hi": ".2f"}
    )


def measured_setting(
    warp_specialize: bool, consumers: str, overlap: bool, stages: int, d: int, name: str = LADDER_FILE
) -> list:
    """The recorded rows (no mask) of the set these explorer switches name at head dim d, or []
    where the run holds none (head dim 256, a setting the kernel has no set for)."""
    impl = SETTING_OF.get((warp_specialize, consumers, overlap, stages))
    if impl is None:
        return []
    return [r for r in ladder_rows(name) if r.impl == impl and r.head_dim == d and not r.causal]
