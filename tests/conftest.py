"""Test-session setup. Triton kernels run on the CPU interpreter when no GPU is present; the
variable must be set before any Triton kernel is defined, so it is set here, first."""
import os

os.environ.setdefault("MPLBACKEND", "Agg")
try:
    import torch
    _cuda = torch.cuda.is_available()
except ImportError:  # torch is a test dependency; without it the GPU tests cannot import
    _cuda = False
if not _cuda:
    os.environ.setdefault("TRITON_INTERPRET", "1")
