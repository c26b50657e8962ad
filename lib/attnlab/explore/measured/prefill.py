"""Notebook 03's views of a run: the prefill section beside the libraries and the model, and the
recorded step sweeps of the Hopper and Gluon kernels."""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps

from attnlab.explore import style
from attnlab.explore.measured import reader
from attnlab.explore.measured.reader import provenance, section

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


def _prefill_cases(sec):
    return sorted({(r["batch"], r["N"], r["causal"]) for r in sec["rows"]}, key=lambda c: (c[2], c[0], c[1]))


def prefill_summary(res: dict) -> str:
    """TFLOP/s of every implementation per (batch, N, mask), in two tables that fit 100 characters:
    our kernels, with our fastest (Hopper or Gluon) against the best library (its time over ours:
    above 1, ours is faster) and the model's time, max(FLOPs / matmul ceiling, bytes / copy
    ceiling), over ours; then the libraries."""
    sec = section(res, "prefill")
    rows = []
    for case in _prefill_cases(sec):
        at = {r["impl"]: r for r in sec["rows"] if (r["batch"], r["N"], r["causal"]) == case}
        peers = {k: r for k, r in at.items() if not k.startswith("ours") and k != "standard"}
        best = min(peers, key=lambda k: peers[k]["us"])
        row = {"case": f"{case[0]} x {case[1] // 1024}K", "mask": "causal" if case[2] else "none"}
        row.update({k: at[k]["tflops"] if k in at else float("nan") for k in PREFILL_IMPLS})
        fast = [at[k] for k in ("ours-hopper", "ours-gluon") if k in at] or [at["ours-fa2"]]
        hop = min(fast, key=lambda r: r["us"])  # our fastest kernel of the case
        row.update(
            best=best,
            ratio=peers[best]["us"] / hop["us"],
            model=hop["model_us"] / hop["us"],
            err=max(r["max_err"] for r in at.values()),
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
    impls = [k for k in PREFILL_IMPLS if any(r["impl"] == k for r in sec["rows"])]
    w = 0.8 / len(impls)
    for ax, causal in zip(fig.axes, (False, True)):
        Ns = sorted({r["N"] for r in sec["rows"] if r["batch"] == batch and r["causal"] == causal})
        for j, impl in enumerate(impls):
            tf = [
                next(
                    (
                        r["tflops"]
                        for r in sec["rows"]
                        if (r["batch"], r["N"], r["causal"], r["impl"]) == (batch, n, causal, impl)
                    ),
                    np.nan,
                )
                for n in Ns
            ]
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


def hopper_steps_summary(name: str = "h200-2026-12-01-hopper-steps.json") -> str:
    """A recorded `python -m attnlab.gpubench.sweeps.hopper` run: each cumulative step of the Hopper kernel
    (TFLOP/s and its gain over the step before), then the best launch, against the best library."""
    res = reader.recorded(name)
    cases = sorted({(r["N"], r["causal"]) for r in res["rows"]}, key=lambda c: (c[1], c[0]))
    names = ["base", *["+".join(res["steps"][: i + 1]) for i in range(len(res["steps"]))]]
    rows = []
    for case in cases:
        at = {r["impl"]: r for r in res["rows"] if (r["N"], r["causal"]) == case}
        peer = max(r["tflops"] for r in at.values() if r.get("peer"))
        prev = None
        for n in names:
            if n in at:
                t = at[n]["tflops"]
                rows.append(
                    {
                        "case": f"{case[0] // 1024}K{' causal' if case[1] else ''}",
                        "step": n.split("+")[-1] if n != "base" else "base (FA2 loop)",
                        "tflops": t,
                        "gain": t / prev if prev else float("nan"),
                        "vs": t / peer,
                    }
                )
                prev = t
        ours = {k: r for k, r in at.items() if k.startswith("all")}
        if ours:
            best = max(ours, key=lambda k: ours[k]["tflops"])
            rows.append(
                {
                    "case": rows[-1]["case"],
                    "step": f"best launch: {best}",
                    "tflops": ours[best]["tflops"],
                    "gain": float("nan"),
                    "vs": ours[best]["tflops"] / peer,
                }
            )
    head = (
        f"{res['device']} ({res['sms']} SMs), {res['date']}: torch {res['torch']}, Triton {res['triton']}, "
        f"FlashInfer {res.get('flashinfer')}; batch 1, 32/8 heads, d = 128, bf16; triton.testing.do_bench\n"
        "each step adds one change to the one above; steps at their default launch of that day "
        "(big_tiles then ran 2 stages: the 'best launch' row is 128 x 128 tiles, 3 stages)\n"
    )
    return head + style.table(
        rows,
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
