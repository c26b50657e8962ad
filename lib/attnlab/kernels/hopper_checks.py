"""What `flash_attention_hopper` checks before it launches: its arguments, the step names, whether
TMA can address the tensors, and which errors mean "this step does not compile here".

    parse_steps(steps)          None -> DEFAULT_STEPS; a tuple / set of HOPPER_STEPS names, else refused
    check_args(q, k, v, ...)    every argument, refused by name; returns the resolved ones
    tma_ok(*tensors)            last stride 1, other strides and the data pointer 16-byte multiples
    COMPILE_ERRORS              the exceptions a step that does not build raises

Nothing here launches a kernel; `kernels.hopper` does, and decides what to do with a step that
raises one of COMPILE_ERRORS.
"""
from __future__ import annotations

import math

import torch

from attnlab.kernels import interpreting
from attnlab.kernels.common import check_qkv
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
        raise TypeError(f"steps must be None or a tuple / set of step names from {HOPPER_STEPS}, "
                        f"got {steps!r}")
    bad = sorted(set(steps) - set(HOPPER_STEPS))
    if bad:
        raise ValueError(f"unknown steps {bad}; valid: {', '.join(HOPPER_STEPS)}")
    return frozenset(steps)


def _pow2(name, value, lo, hi):
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or value > hi or value & (value - 1):
        raise ValueError(f"{name} must be a power of two in [{lo}, {hi}], got {value!r}")


def check_args(q, k, v, causal, scale, return_lse, block_m, block_n, num_warps, num_stages, out,
               descriptors, soft_cap, window, default_descriptors):
    """Refuse, by name, what flash_attention_hopper cannot take. Returns (causal, scale, cap,
    window, descriptors, out): a window implies causal, scale defaults to 1/sqrt(d), descriptors
    to default_descriptors(causal), out to a new tensor of q's shape and dtype."""
    check_qkv(q, k, v)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {causal!r}")
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {return_lse!r}")
    cap, window = variant_args(soft_cap, window, k.shape[2])
    causal = causal or window > 0
    if descriptors is None:
        descriptors = default_descriptors(causal)
    if descriptors not in ("device", "host"):
        raise ValueError(f"descriptors must be 'device' or 'host', got {descriptors!r}")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[3])
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    _pow2("block_m", block_m, 16, 256)
    _pow2("block_n", block_n, 16, 256)
    _pow2("num_warps", num_warps, 1, 16)
    if num_stages is not None and (isinstance(num_stages, bool) or not isinstance(num_stages, int)
                                   or not 1 <= num_stages <= 8):
        raise ValueError(f"num_stages must be an int in [1, 8], got {num_stages!r}")
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    elif not isinstance(out, torch.Tensor) or out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
        raise ValueError(f"out must be a {q.dtype} tensor of shape {tuple(q.shape)} on {q.device}")
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; put q, k, v on one device")
    if not interpreting() and q.device.type != "cuda":
        raise ValueError(f"q, k, v are on {q.device}: the compiled kernel needs CUDA tensors "
                         "(set TRITON_INTERPRET=1 before importing triton to run it on a CPU)")
    return causal, float(scale), cap, window, descriptors, out


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
    for mod, name in (("triton.compiler.errors", "CompilationError"), ("triton.runtime.errors", "OutOfResources"),
                      ("triton.runtime.interpreter", "InterpreterError")):
        try:
            errs.append(getattr(__import__(mod, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return tuple(errs)


COMPILE_ERRORS = compile_errors()
