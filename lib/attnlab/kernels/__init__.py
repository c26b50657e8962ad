"""The Triton kernels of the GPU path (torch and triton imported lazily, in each module).

    fa2.flash_attention_triton        FlashAttention-2 forward (prefill), the readable one
    hopper.flash_attention_hopper     prefill with the Hopper steps (TMA, ...), soft-cap / window compiled in
    decode.split_kv_decode            split-KV decode, contiguous KV
    paged.paged_decode                split-KV decode over a paged KV cache
    cascade.cascade_decode            shared prefix read once + paged decode
    variants.variant_prefill          prefill, soft-cap / window compiled in
    scheduled.scheduled_decode        persistent decode driven by a schedule
      (.ScheduledDecoder: static buffers, one CUDA graph replayed across batches)
    decode_paged.decode_paged         the one decode call for a paged batch: the split kernel or
                                      the plan-driven decoder, chosen from the real lengths
    paged_prefill.paged_prefill       a ragged batch of queries over a paged KV cache in one
                                      launch: prefill chunks beside decode rows, custom (tree) masks
      (.PrefillWorkspace: plan once per batch, run launches only, for a CUDA graph)
    mla.mla_decode                    MLA decode in the absorbed form over a paged latent cache
      (.MLAWorkspace: the same plan and run)

What they share is in `kernels.common` (online_update, finish, dot, the merge of split states, the
launchers' checks); their automatic launch choices, each beside the sweep that set it, in
`kernels.tuning`. hopper's kernel and checks are in hopper_kernel and hopper_checks, scheduled's
kernels in scheduled_kernels, paged_prefill's work items in prefill_items, what the plan/run
workspaces check in planned.

Their benchmarks beside FlashInfer, cuDNN and FlexAttention are in attnlab.gpubench. Nothing in
layers 0-3 imports this package at import time (explore's live GPU cells import it when run). On
a machine without a GPU the kernels run under Triton's interpreter (set TRITON_INTERPRET=1 before
importing a kernel module): slow, for small correctness checks only.

    from attnlab import kernels
    kernels.available()      # True when torch sees a CUDA device and triton imports
"""

from __future__ import annotations

import os

__all__ = ["available", "unavailable_reason", "interpreting"]


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
        return (
            "torch and Triton are not installed here (the notebooks do not need them); "
            "on a Linux machine with a CUDA GPU, `pip install -e '.[gpu]'` adds them"
        )
    if not torch.cuda.is_available():
        return "No CUDA GPU here"
    return None
