"""What `flash_attention_hopper` checks before it launches: its arguments, the step names, whether
TMA can address the tensors, and which errors mean "this step does not compile here".

    parse_steps(steps)          None -> DEFAULT_STEPS; a tuple / set of HOPPER_STEPS names, else refused
    check_args(q, k, v, ...)    every argument, refused by name; returns the resolved ones (a dict)
    tma_ok(*tensors)            last stride 1, other strides and the data pointer 16-byte multiples
    COMPILE_ERRORS              the exceptions a step that does not build raises

Nothing here launches a kernel; `kernels.hopper` does, and decides what to do with a step that
raises one of COMPILE_ERRORS.
"""

from __future__ import annotations

import torch

from attnlab.validate import as_bool, choice
from attnlab.kernels import interpreting
from attnlab.kernels.common import as_block, as_scale, as_stages, as_warps, check_qkv
from attnlab.kernels.hopper_kernel import DEFAULT_STEPS, HOPPER_STEPS
from attnlab.kernels.variants import variant_args

__all__ = ["parse_steps", "check_args", "tma_ok", "compile_errors", "COMPILE_ERRORS"]


def parse_steps(steps) -> frozenset:
    """The step set a `steps` argument names: None is DEFAULT_STEPS.

    >>> sorted(parse_steps(("tma", "lpt_order")))
    ['lpt_order', 'tma']
    """
    if steps is None:
        return frozenset(DEFAULT_STEPS)
    if isinstance(steps, str) or not all(isinstance(s, str) for s in steps):
        raise TypeError(
            f"steps must be None or a tuple / set of step names from {HOPPER_STEPS}, got {steps!r}"
        )
    bad = sorted(set(steps) - set(HOPPER_STEPS))
    if bad:
        raise ValueError(f"unknown steps {bad}; valid: {', '.join(HOPPER_STEPS)}")
    return frozenset(steps)


def check_args(
    q,
    k,
    v,
    causal,
    scale,
    return_lse,
    block_m,
    block_n,
    num_warps,
    num_stages,
    out,
    descriptors,
    soft_cap,
    window,
    default_descriptors,
):
    """Refuse, by name, what flash_attention_hopper cannot take (`kernels.common`'s checks: flags
    are bools, scale a finite real > 0, blocks powers of two in [16, 256], num_warps in 1-16,
    num_stages in 1-8). Returns the resolved arguments as a dict: causal (a window implies it),
    return_lse, scale (1/sqrt(d) by default), cap, window, descriptors (default_descriptors(causal)
    by default), out (a new tensor of q's shape and dtype by default) and "launch", the given
    block_m, block_n, num_warps, num_stages (None where not given)."""
    check_qkv(q, k, v)
    causal, return_lse = as_bool("causal", causal), as_bool("return_lse", return_lse)
    cap, window = variant_args(soft_cap, window, k.shape[2])
    causal = causal or window > 0
    if descriptors is None:
        descriptors = default_descriptors(causal)
    choice("descriptors", descriptors, ("device", "host"))
    scale = as_scale(scale, q.shape[3])
    launch = {
        "block_m": as_block("block_m", block_m),
        "block_n": as_block("block_n", block_n),
        "num_warps": as_warps(num_warps),
        "num_stages": as_stages(num_stages),
    }
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    elif (
        not isinstance(out, torch.Tensor)
        or out.shape != q.shape
        or out.dtype != q.dtype
        or out.device != q.device
    ):
        raise ValueError(f"out must be a {q.dtype} tensor of shape {tuple(q.shape)} on {q.device}")
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; put q, k, v on one device")
    if not interpreting() and q.device.type != "cuda":
        raise ValueError(
            f"q, k, v are on {q.device}: the compiled kernel needs CUDA tensors "
            "(set TRITON_INTERPRET=1 before importing triton to run it on a CPU)"
        )
    return {
        "causal": causal,
        "return_lse": return_lse,
        "scale": scale,
        "cap": cap,
        "window": window,
        "descriptors": descriptors,
        "out": out,
        "launch": launch,
    }


def tma_ok(*tensors) -> bool:
    """True when TMA can address every tensor: last stride 1, the other strides and the data
    pointer multiples of 16 bytes."""
    for t in tensors:
        e = t.element_size()
        if t.stride(-1) != 1 or t.data_ptr() % 16 or any((s * e) % 16 for s in t.stride()[:-1]):
            return False
    return True


def compile_errors() -> tuple:
    """What a step that does not build raises: Triton's compiler (RuntimeError "PassManager::run
    failed", CompilationError), shared memory or registers beyond the SM's (OutOfResources), and
    the interpreter's own error. Anything else (bad input) is not a reason to drop a step."""
    errs = [RuntimeError]
    for mod, name in (
        ("triton.compiler.errors", "CompilationError"),
        ("triton.runtime.errors", "OutOfResources"),
        ("triton.runtime.interpreter", "InterpreterError"),
    ):
        try:
            errs.append(getattr(__import__(mod, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return tuple(errs)


COMPILE_ERRORS = compile_errors()
