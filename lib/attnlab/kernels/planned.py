"""What the kernels' plan/run workspaces (`decode_paged.DecodeWorkspace`,
`paged_prefill.PrefillWorkspace`, `mla.MLAWorkspace`) check: the sizes a plan is made for, and
that a run's tensors are the planned ones."""

from __future__ import annotations

import torch

from attnlab.kernels.common import DTYPES, as_count
from attnlab.validate import as_int

__all__ = ["head_dims", "pool_dims", "check_planned"]


def check_planned(name: str, t, shape: tuple, dtype, device) -> None:
    """A planned run's tensor: `shape`, of the plan's dtype, on its device (strides are free)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != tuple(shape) or t.dtype != dtype or t.device != device:
        raise ValueError(
            f"{name} has shape {tuple(t.shape)}, {t.dtype} on {t.device}; the plan is for "
            f"{tuple(shape)} {dtype} on {device}"
        )


def head_dims(q_heads, kv_heads, head_dim) -> tuple[int, int, int]:
    """A workspace's heads and head dim checked: q_heads a multiple of kv_heads, 1 <= head_dim <= 256."""
    hq, hkv = as_int("q_heads", q_heads, 1, None), as_int("kv_heads", kv_heads, 1, None)
    if hq % hkv:
        raise ValueError(f"q_heads={q_heads} must be a multiple of kv_heads={kv_heads}")
    return hq, hkv, as_int("head_dim", head_dim, 1, 256)


def pool_dims(page_size, max_pages, dtype, device):
    """A workspace's pool: (page_size, max_pages, dtype, device) checked, dtype None: bfloat16."""
    page_size, max_pages = as_count("page_size", page_size, 1), as_count("max_pages", max_pages, 1)
    dtype = torch.bfloat16 if dtype is None else dtype
    if dtype not in DTYPES:
        raise TypeError(f"dtype={dtype} is not supported; valid: float16, bfloat16, float32")
    return page_size, max_pages, dtype, torch.device(device)
