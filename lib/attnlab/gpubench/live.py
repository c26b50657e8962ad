"""The notebooks' optional GPU cells (03 prefill, 04 decode, 05 paged and cascade): a run of the
harness made here, handed to explore.measured's views, or why there is none.

    from attnlab.explore import measured
    from attnlab.gpubench import live
    here = live.live_run(("paged",))                    # None without a CUDA GPU
    print(measured.paged_summary(measured.section(measured.view(here), "paged")) if here
          else live.not_live())
"""

from __future__ import annotations

from attnlab.validate import choice

__all__ = ["live_run", "not_live"]


def live_run(sections=("prefill", "decode", "paged", "cascade", "scheduled")) -> dict | None:
    """The run file's dict (attnlab.runfile's schema) of those sections of `python -m
    attnlab.gpubench`, measured here when a CUDA GPU is visible (minutes: FlashInfer's columns
    need `pip install flashinfer-python`, and its first calls compile); None otherwise. Nothing is
    written to disk."""
    from attnlab.gpubench.run import SECTIONS

    if not isinstance(sections, tuple):
        raise TypeError(f"sections must be a tuple of section names; got {sections!r}")
    if not sections:
        raise ValueError(f"sections must name at least one of {SECTIONS}; got ()")
    for name in sections:
        choice("sections", name, SECTIONS)
    from attnlab import kernels as gpu

    if not gpu.available():
        return None
    from attnlab.gpubench import run as bench

    return bench.run(sections, out="")


def not_live() -> str:
    """What the optional GPU cell prints when it cannot measure here, and why."""
    from attnlab import kernels as gpu

    return f"{gpu.unavailable_reason()}: the recorded H200 measurements above stand."
