"""Pluggable attention backends (notebook 06, §6): what serving engines choose between, and which
of the course's measured peers was fastest in each case of the recorded GPU run.

Pure part: `fastest_per_case(run)` -> one row per (section, case) of the run file's flat table,
with the fastest peer library, its time, the runner-up and the margin; `ENGINE_CHOICES` is the
engines' documented choice, with the pages it comes from.
"""

from __future__ import annotations

import textwrap

from attnlab.explore import style
from attnlab.explore.decode.measured_tables import run_header

__all__ = [
    "PEERS",
    "SHORT",
    "FA2",
    "PHASES",
    "ENGINE_CHOICES",
    "fastest_per_case",
    "fastest_table",
    "engine_table",
]

#: impl name in the run file (page size suffixes dropped) -> what it is, as an engine would name it
PEERS = {
    "sdpa-cudnn": "cuDNN (PyTorch SDPA)",
    "sdpa-flash": "FlashAttention-2 (PyTorch SDPA)",
    "flex": "FlexAttention (Triton)",
    "flashinfer-fa2": "FlashInfer, FA2 template",
    "flashinfer-fa3": "FlashInfer, FA3 template",
    "flashinfer-tc": "FlashInfer, tensor-core decode",
    "flashinfer": "FlashInfer, CUDA-core decode",
    "flashinfer-cascade": "FlashInfer, cascade",
}
#: the same libraries in a table's column (`SHORT_KEY` says what each stands for)
SHORT = {
    "sdpa-cudnn": "cuDNN",
    "sdpa-flash": "SDPA FA2",
    "flex": "FlexAttention",
    "flashinfer-fa2": "FI FA2",
    "flashinfer-fa3": "FI FA3",
    "flashinfer-tc": "FI TC decode",
    "flashinfer": "FI CUDA-core decode",
    "flashinfer-cascade": "FI cascade",
}
SHORT_KEY = (
    "cuDNN and SDPA FA2: PyTorch SDPA's cuDNN and FlashAttention-2 backends; FlexAttention: "
    "compiled by Triton; FI: FlashInfer (its FA2 and FA3 prefill templates, its tensor-core (TC), "
    "CUDA-core and cascade decode)"
)
#: run-file section -> the phase it measures
PHASES = {
    "prefill": "prefill",
    "paged": "decode",
    "cascade": "decode, shared prefix",
    "scheduled": "decode, long-tailed batch",
}

#: (engine, what it picks by, its documented defaults, source)
ENGINE_CHOICES = (
    (
        "vLLM",
        "GPU generation (compute capability), head size, dtype and KV-cache dtype, MLA or not; "
        "each backend validates the configuration and the first that accepts it in a priority list wins",
        "FLASH_ATTN (FlashAttention 2/3), FLASHINFER, TRITON_ATTN, FLEX_ATTENTION; MLA backends "
        "(FlashMLA, CUTLASS MLA, FlashInfer MLA, Triton MLA) for DeepSeek models; override with --attention-backend",
        "https://docs.vllm.ai/en/latest/design/attention_backends/",
    ),
    (
        "SGLang",
        "GPU generation and model architecture (MHA or MLA), page size, speculative decoding; "
        "prefill and decode may use different backends",
        "MHA: fa3 on Hopper, trtllm_mha on Blackwell, flashinfer (else triton) on Ampere/Ada; "
        "MLA: fa3 on Hopper, trtllm_mla on Blackwell, triton elsewhere; override with --attention-backend",
        "https://docs.sglang.io/advanced_features/attention_backend.html",
    ),
)


#: the FlashAttention-2 path every table compares against (PyTorch SDPA's flash backend)
FA2 = "sdpa-flash"


def _peer(impl: str) -> str | None:
    base = impl.split(" ps")[0]
    return base if base in PEERS else None


def fastest_per_case(run: dict) -> list[dict]:
    """One row per (section, case) with at least one peer library: phase, case, the fastest peer
    and its µs, the runner-up (another library) and how much slower it was, how many peers ran,
    and `fa2_ratio`: PyTorch SDPA's FlashAttention-2 time over the fastest (NaN where it did not
    run; 1.0 where it was the fastest). A library measured at several page sizes counts with its
    fastest."""
    best: dict = {}
    order = []
    for r in run["rows"]:
        peer = _peer(r["impl"])
        if peer is None or r["section"] not in PHASES or r.get("time_us") is None:
            continue
        key = (r["section"], r["what"])
        if key not in best:
            best[key] = {}
            order.append(key)
        best[key][peer] = min(r["time_us"], best[key].get(peer, float("inf")))
    rows = []
    phases = list(PHASES)
    for key in sorted(order, key=lambda k: phases.index(k[0])):  # stable: run order within a phase
        ranked = sorted(best[key].items(), key=lambda kv: kv[1])
        first, us = ranked[0]
        second, us2 = ranked[1] if len(ranked) > 1 else ("-", float("nan"))
        rows.append(
            {
                "phase": PHASES[key[0]],
                "section": key[0],
                "case": key[1],
                "fastest": PEERS[first],
                "impl": first,
                "us": us,
                "runner_up": PEERS.get(second, second),
                "runner_up_impl": second,
                "margin": us2 / us - 1,
                "fa2_ratio": best[key].get(FA2, float("nan")) / us,
                "peers": len(ranked),
            }
        )
    return rows


def fastest_table(run: dict) -> str:
    """`fastest_per_case` as text under the run's header, one table per phase, at most 100
    characters wide (the libraries by their `SHORT` names, with the key above); a phase where
    SDPA's FlashAttention-2 path ran gets its time over the fastest as a column, "SDPA FA2"."""
    rows = fastest_per_case(run)
    out = [
        run_header(run),
        textwrap.fill(
            "fastest peer library per measured case (our own kernels left out); margin = how much "
            "slower the runner-up was; SDPA FA2 = its time over the fastest; " + SHORT_KEY,
            100,
        ),
    ]
    for phase in dict.fromkeys(r["phase"] for r in rows):
        at = [
            dict(r, fastest=SHORT[r["impl"]], runner_up=SHORT.get(r["runner_up_impl"], "-"))
            for r in rows
            if r["phase"] == phase
        ]
        cols = {
            "case": "case",
            "fastest": "fastest library",
            "us": "µs",
            "runner_up": "runner-up",
            "margin": "margin",
            "peers": "peers",
        }
        if any(r["fa2_ratio"] == r["fa2_ratio"] for r in at):
            cols["fa2_ratio"] = "SDPA FA2"
        out.append(
            "\n"
            + phase
            + "\n"
            + style.table(
                at,
                cols,
                {
                    "us": ".1f",
                    "margin": lambda m: "-" if m != m else f"{m:.0%}",
                    "fa2_ratio": lambda x: "-" if x != x else f"{x:.2f}x",
                },
            )
        )
    return "\n".join(out)


def engine_table() -> str:
    """ENGINE_CHOICES as text."""
    out = []
    for eng, by, what, url in ENGINE_CHOICES:
        fill = lambda head, text: textwrap.fill(
            text, 100, initial_indent=head, subsequent_indent=" " * len(head)
        )  # noqa: E731
        out.append(
            "\n".join([eng, fill("  chooses by: ", by), fill("  offers:     ", what), f"  source:     {url}"])
        )
    return "\n".join(out)
