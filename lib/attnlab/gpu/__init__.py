"""Optional GPU path: a Triton FlashAttention-2 forward kernel and a benchmark harness.

Nothing in the rest of attnlab imports this package; it imports torch and triton lazily. On a
machine without a GPU the kernel still runs under Triton's interpreter (set TRITON_INTERPRET=1
before importing `attnlab.gpu.flash_triton`): slow, for small correctness checks only.

    from attnlab import gpu
    gpu.available()          # True when torch sees a CUDA device and triton imports
"""
from __future__ import annotations

import os

__all__ = ["available", "unavailable_reason", "interpreting", "bench_cli"]


def interpreting() -> bool:
    """True when Triton kernels run on the CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def available() -> bool:
    """True when a CUDA GPU is visible to torch and triton is importable."""
    return unavailable_reason() is None


def unavailable_reason() -> str | None:
    """Why the GPU path cannot run here, in a sentence a learner can act on; None if it can."""
    try:
        import torch
        import triton  # noqa: F401  (only whether it imports)
    except ImportError:
        return ("torch and Triton are not installed here (the notebooks do not need them); "
                "on a Linux machine with a CUDA GPU, `pip install -e '.[gpu]'` adds them")
    if not torch.cuda.is_available():
        return "No CUDA GPU here"
    return None


def bench_cli(run, table, description: str, argv=None) -> int:
    """The command line shared by the benchmark harnesses: run, optionally save JSON, print the table."""
    import argparse
    import json

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", help="write the full result as JSON here")
    args = ap.parse_args(argv)
    res = run()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    print(table(res))
    return 0
