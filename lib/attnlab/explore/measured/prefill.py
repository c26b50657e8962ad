"""Notebook 03's views of a run: the prefill section beside the libraries and the model, and the
recorded step sweeps of the Hopper and Gluon kernels.

It is long because it holds all three of notebook 03's measured views side by side (the prefill
section; the Hopper step sweep, with the rewriting of its one recording made before the run
file's schema; the Gluon step run), each a table and most a figure."""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps

from attnlab.explore import style
from attnlab.explore.measured import reader
from attnlab.explore.measured.reader import impl_name, provenance, section
from attnlab.runfile import COLUMNS, case_text, impl_text, rank

__all__ = [
    "PREFILL_IMPLS",
    "prefill_summary",
    "prefill_figure",
    "hopper_steps_summary",
    "gluon_steps_summary",
    "gluon_steps_figure",
]

PREFILL_IMPLS = (
    "ours-fa2",
    "ours-hopper",
    "ours-gluon",
    "sdpa-flash",
    "sdpa-cudnn",
    "flex",
    "flashinfer-fa2",
    "flashinfer-fa3",
)
PREFILL_LABELS = {
    "ours-fa2": "ours, FA2 (notebook's kernel)",
    "ours-hopper": "ours, Hopper kernel",
    "ours-gluon": "ours, Gluon FA3 kernel",
    "sdpa-flash": "SDPA flash",
    "sdpa-cudnn": "SDPA cuDNN",
    "flex": "FlexAttention",
    "flashinfer-fa2": "FlashInfer fa2",
    "flashinfer-fa3": "FlashInfer fa3",
}
PREFILL_COLORS = {
    "ours-fa2": style.COLORS["fa2"],
    "ours-hopper": "#006d2c",
    "ours-gluon": "#a1d99b",
    "sdpa-flash": style.COLORS["muted"],
    "sdpa-cudnn": style.COLORS["compute"],
    "flex": style.COLORS["memory"],
    "flashinfer-fa2": "#9ecae1",
    "flashinfer-fa3": style.COLORS["fa1"],
}


def _case(r) -> tuple:
    """(batch, N, causal) of a prefill row."""
    return r["shape"]["batch"], r["shape"]["N"], r["shape"]["causal"]


def _prefill_cases(sec):
    return sorted({_case(r) for r in sec["rows"]}, key=lambda c: (c[2], c[0], c[1]))


def prefill_summary(res: dict) -> str:
    """TFLOP/s of every implementation per (batch, N, mask), in two tables that fit 100 characters:
    our kernels, with our fastest (Hopper or Gluon) against the best library (its time over ours:
    above 1, ours is faster) and the model's time, max(FLOPs / matmul ceiling, bytes / copy
    ceiling), over ours; then the libraries."""
    sec = section(res, "prefill")
    rows = []
    for case in _prefill_cases(sec):
        at = {impl_name(r): r for r in sec["rows"] if _case(r) == case}
        peers = {k: r for k, r in at.items() if not r["ours"] and k != "standard"}
        best = min(peers, key=lambda k: peers[k]["time_us"])
        row = {"case": f"{case[0]} x {case[1] // 1024}K", "mask": "causal" if case[2] else "none"}
        row.update({k: at[k]["tflops"] if k in at else float("nan") for k in PREFILL_IMPLS})
        fast = [at[k] for k in ("ours-hopper", "ours-gluon") if k in at] or [at["ours-fa2"]]
        hop = min(fast, key=lambda r: r["time_us"])  # our fastest kernel of the case
        row.update(
            best=best,
            ratio=peers[best]["time_us"] / hop["time_us"],
            model=hop["extra"]["model_us"] / hop["time_us"],
            err=max(r["error"] for r in at.values()),
        )
        rows.append(row)
    head = (
        provenance(res, "prefill")
        + "\nLlama-3-8B layer: 32 query heads, 8 KV heads, d = 128, bf16; TFLOP/s on "
        "the visible\n(query, key) pairs, CUDA-graph replay; every output checked against fp32 first\n\n"
    )
    ours = {
        "case": "batch x N",
        "mask": "mask",
        "ours-fa2": "FA2",
        "ours-hopper": "Hopper",
        "ours-gluon": "Gluon FA3",
        "best": "best library",
        "ratio": "ours / best",
        "model": "model / ours",
        "err": "worst err",
    }
    libs = {
        "case": "batch x N",
        "mask": "mask",
        "sdpa-flash": "SDPA flash",
        "sdpa-cudnn": "cuDNN",
        "flex": "FlexAttention",
        "flashinfer-fa2": "FlashInfer fa2",
        "flashinfer-fa3": "FlashInfer fa3",
    }
    num = {k: (lambda v: "—" if np.isnan(v) else f"{v:.0f}") for k in PREFILL_IMPLS}  # not run: —
    return (
        head
        + "ours\n"
        + style.table(rows, ours, {**num, "ratio": ".2f", "model": ".2f", "err": ".1e"})
        + "\n\nthe libraries\n"
        + style.table(rows, libs, num)
    )


def prefill_figure(res: dict, batch: int = 1):
    """Grouped bars: TFLOP/s per N for each implementation, no mask and causal, beside the
    measured matmul ceiling (the model's time for a fused kernel at these sizes)."""
    sec = section(res, "prefill")
    fig = style.new_figure(2, height=4.4)
    peak = res.get("ceilings_by_section", {}).get("prefill", res["ceilings"])["bf16_matmul_flops"] / 1e12
    impls = [k for k in PREFILL_IMPLS if any(impl_name(r) == k for r in sec["rows"])]
    w = 0.8 / len(impls)
    for ax, causal in zip(fig.axes, (False, True)):
        Ns = sorted({n for b, n, c in map(_case, sec["rows"]) if (b, c) == (batch, causal)})
        tflops = {(*_case(r), impl_name(r)): r["tflops"] for r in sec["rows"]}
        for j, impl in enumerate(impls):
            tf = [tflops.get((batch, n, causal, impl), np.nan) for n in Ns]
            ax.bar(
                np.arange(len(Ns)) + (j - (len(impls) - 1) / 2) * w,
                tf,
                w,
                color=PREFILL_COLORS[impl],
                label=PREFILL_LABELS[impl],
                edgecolor="black" if impl.startswith("ours") else "none",
                lw=0.6,
            )
        ax.axhline(
            peak, color=style.COLORS["bound"], ls=":", label=f"model: measured matmul ceiling ({peak:.0f})"
        )
        ax.set_xticks(range(len(Ns)), [style.k_label(n) for n in Ns])
        ax.set_xlabel("sequence length N (tokens)")
        ax.set_ylabel("attention TFLOP/s (visible pairs)")
        ax.set_ylim(0, peak * 1.12)
        ax.grid(True, axis="y", alpha=0.25)
        ax.set_title(
            f"{res['device']}, batch {batch}, 32/8 heads, d=128, bf16,\n{'causal' if causal else 'no mask'}",
            fontsize=9.5,
        )
    fig.legend(
        *fig.axes[0].get_legend_handles_labels(),
        loc="outside lower center",
        ncol=4,
        fontsize=style.SMALL,
        frameon=False,
    )
    return fig


#: how a row was timed (gpubench.core.time_per_call's "how", or the recording's do_bench), in words
_TIMING = {
    "graph": "CUDA-graph replay",
    "events": "CUDA events",
    "wall": "wall clock (a dry run)",
    "do_bench": "triton.testing.do_bench",
}
#: the launch parameters of a grid row of the Hopper step sweep
_GRID = ("block_m", "block_n", "num_warps", "num_stages")


def _sweep_rows(res: dict) -> tuple[list, bool]:
    """(rows in the run file's columns, recorded before the schema?) of a Hopper step sweep. A
    file written by `python -m attnlab.gpubench.sweeps.hopper` has them; one recorded before the
    schema (times in ms by triton.testing.do_bench, each launch's label its impl, checked at
    N = 1000 only) is rewritten into them with every number as recorded: its check's error goes
    to extra["checked_at"], error stays None (not checked at the timed size)."""
    if all(tuple(r) == COLUMNS for r in res["rows"]):
        return res["rows"], False
    checks = {(c["config"], c["causal"]): c for c in res.get("checks", [])}
    rows = []
    for r in res["rows"]:
        label, launch = r["impl"], {}
        if r["peer"]:
            name = label
        elif "block_m" in r:  # "all 128x64 w8 s2": all steps (all-ws: but warp_specialize)
            name, launch = "hopper", {"steps": label.split()[0], **{k: r[k] for k in _GRID}}
        elif "steps" in r:
            name, launch = "hopper", {"steps": label}
        else:
            name = "fa2"
        case = {"batch": res["shape"]["batch"], "N": r["N"], "causal": r["causal"]}
        check = checks.get((label, r["causal"]))
        extra = {"timing": "do_bench"}
        if check:
            extra["checked_at"] = {"N": check["n"], "error": check["max_err"]}
        rows.append(
            {
                "section": "hopper-steps",
                "what": case_text(case),
                "impl": impl_text(name, launch),
                "shape": {**case, **launch},
                "ours": not r["peer"],
                "time_us": r["ms"] * 1e3,
                "flop": None,
                "bytes": None,
                "tflops": r["tflops"],
                "tbps": None,
                "ratio_to_best": None,
                "error": None,
                "commit": None,
                "extra": extra,
            }
        )
    return rank(rows), True


def hopper_steps_summary(name: str = "h200-2026-12-01-hopper-steps.json") -> str:
    """A Hopper step sweep (`python -m attnlab.gpubench.sweeps.hopper`, recorded in
    data/measurements/): each cumulative step of the Hopper kernel at its default launch (TFLOP/s
    and its gain over the step before), then the grid's best launch, against the best library."""
    res = reader.recorded(name)
    rows, old = _sweep_rows(res)
    cases = sorted({(r["shape"]["N"], r["shape"]["causal"]) for r in rows}, key=lambda c: (c[1], c[0]))
    names = ["base", *["+".join(res["steps"][: i + 1]) for i in range(len(res["steps"]))]]
    out = []
    for case in cases:
        at = [r for r in rows if (r["shape"]["N"], r["shape"]["causal"]) == case]
        peer = max(r["tflops"] for r in at if not r["ours"])
        steps = {
            r["shape"]["steps"]: r["tflops"]
            for r in at
            if impl_name(r) == "hopper" and "block_m" not in r["shape"]
        }
        prev = None
        for n in names:
            if n in steps:
                out.append(
                    {
                        "case": f"{case[0] // 1024}K{' causal' if case[1] else ''}",
                        "step": n.split("+")[-1] if n != "base" else "base (FA2 loop)",
                        "tflops": steps[n],
                        "gain": steps[n] / prev if prev else float("nan"),
                        "vs": steps[n] / peer,
                    }
                )
                prev = steps[n]
        grid = [r for r in at if "block_m" in r["shape"]]
        if grid:
            best = max(grid, key=lambda r: r["tflops"])
            s = best["shape"]
            out.append(
                {
                    "case": out[-1]["case"],
                    "step": f"best launch: {s['steps']} {s['block_m']}x{s['block_n']} "
                    f"w{s['num_warps']} s{s['num_stages']}",
                    "tflops": best["tflops"],
                    "gain": float("nan"),
                    "vs": best["tflops"] / peer,
                }
            )
    sh = res["shape"]
    timing = ", ".join(sorted({_TIMING[r["extra"]["timing"].split()[0]] for r in rows}))
    head = (
        f"{res['device']} ({res['sms']} SMs), {res['date']}: torch {res['torch']}, Triton {res['triton']}, "
        f"FlashInfer {res.get('flashinfer')}; batch 1, {sh['heads']}/{sh['kv_heads']} heads, "
        f"d = {sh['head_dim']}, bf16; {timing}\n"
        "each step adds one change to the one above; steps at their default launch"
        + (
            " of that day (big_tiles then ran 2 stages: the 'best launch' row is 128 x 128 tiles, 3 stages)\n"
            if old
            else "\n"
        )
    )
    return head + style.table(
        out,
        {"case": "N", "step": "step", "tflops": "TFLOP/s", "gain": "x previous", "vs": "/ best library"},
        {"tflops": ".0f", "gain": ".2f", "vs": ".2f"},
    )


def gluon_steps_summary(name: str = "h200-2026-12-02-gluon-steps.json") -> str:
    """The recorded step run of the Gluon kernel (`kernels.gluon_fa3`): TFLOP/s of each FA3 step,
    each on top of the one before, per case, beside the Triton Hopper kernel and cuDNN, and the
    best step over cuDNN (above 1: faster than cuDNN)."""
    res = reader.recorded(name)
    cases = sorted(
        {(r["batch"], r["N"], r["head_dim"], r["causal"]) for r in res["rows"]},
        key=lambda c: (c[2], c[3], c[0], c[1]),
    )
    cols = {
        "case": "B x N, d",
        "mask": "mask",
        **{s: res["step_labels"][s] for s in res["steps"]},
        "hopper": "Triton Hopper",
        "cudnn": "cuDNN",
        "best": "best step / cuDNN",
    }
    rows = []
    for b, n, d, causal in cases:
        at = {
            r["impl"]: r
            for r in res["rows"]
            if (r["batch"], r["N"], r["head_dim"], r["causal"]) == (b, n, d, causal)
        }
        if not all(at[s]["checked"] for s in res["steps"] if s in at):
            raise ValueError(
                f"{name}: a step of case {(b, n, d, causal)} failed its check; it has no time to show"
            )
        row = {"case": f"{b} x {n // 1024}K, {d}", "mask": "causal" if causal else "none"}
        row.update(
            {k: at[k]["tflops"] if k in at else float("nan") for k in (*res["steps"], "hopper", "cudnn")}
        )
        row["best"] = max(at[s]["tflops"] for s in res["steps"] if s in at) / at["cudnn"]["tflops"]
        rows.append(row)
    head = (
        f"{res['device']} ({res['sms']} SMs), {res['date']}: torch {res['torch']}, Triton {res['triton']}; kernels "
        f"at commit {res['commit'][:7]}; {res['method']}\n"
    )
    return head + style.table(
        rows, cols, {**{k: ".0f" for k in (*res["steps"], "hopper", "cudnn")}, "best": ".2f"}
    )


def gluon_steps_figure(name: str = "h200-2026-12-02-gluon-steps.json", head_dim: int = 128):
    """The recorded Gluon step run as bars: per case (batch x N), the TFLOP/s of each step on top
    of the one before, light to dark, with cuDNN's rate in the same run as a black tick; no mask
    and causal side by side, at one head dim. A step whose check failed is refused by name."""
    res = reader.recorded(name)
    rows = [r for r in res["rows"] if r["head_dim"] == head_dim]
    if not rows:
        raise ValueError(
            f"{name} has no case at head_dim={head_dim}; it has "
            f"{sorted({r['head_dim'] for r in res['rows']})}"
        )
    bad = [
        (r["batch"], r["N"], r["causal"], r["impl"])
        for r in rows
        if r["impl"] in res["steps"] and not r["checked"]
    ]
    if bad:
        raise ValueError(f"{name}: steps failed their check, so they have no time to show: {bad}")
    steps = res["steps"]
    shades = [colormaps["Greens"](0.3 + 0.65 * i / max(1, len(steps) - 1)) for i in range(len(steps))]
    fig = style.new_figure(2, height=4.4)
    w = 0.8 / len(steps)
    for ax, causal in zip(fig.axes, (False, True)):
        cases = sorted(
            {(r["batch"], r["N"]) for r in rows if r["causal"] == causal}, key=lambda c: (c[1], c[0])
        )
        at = {(r["batch"], r["N"], r["impl"]): r["tflops"] for r in rows if r["causal"] == causal}
        for j, step in enumerate(steps):
            ax.bar(
                np.arange(len(cases)) + (j - (len(steps) - 1) / 2) * w,
                [at.get((b, n, step), np.nan) for b, n in cases],
                w,
                color=shades[j],
                label=res["step_labels"][step],
            )
        ax.plot(
            range(len(cases)),
            [at.get((b, n, "cudnn"), np.nan) for b, n in cases],
            "_",
            color="black",
            ms=26,
            mew=2,
            label="cuDNN, same run",
        )
        ax.set_xticks(range(len(cases)), [f"{b} x {style.k_label(n)}" for b, n in cases])
        ax.set_xlabel("batch x sequence length N (tokens)")
        ax.set_ylabel("attention TFLOP/s (visible pairs)")
        ax.set_ylim(0, 1.15 * max(v for v in at.values() if v == v))
        ax.grid(True, axis="y", alpha=0.25)
        ax.set_title(
            f"{res['device']}, {res['date']}: Gluon FA3 steps, d={head_dim}, bf16,\n"
            f"{'causal' if causal else 'no mask'}, eager do_bench",
            fontsize=9.5,
        )
    fig.legend(
        *fig.axes[0].get_legend_handles_labels(),
        loc="outside lower center",
        ncol=min(6, len(steps) + 1),
        fontsize=style.SMALL,
        frameon=False,
    )
    return fig
