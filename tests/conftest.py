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


import pytest  # noqa: E402

# Without torch and Triton (the conda route's base install) the kernel tests cannot import: leave
# them out and say so in the header. Under CI (make test installs both) that is an error instead.
try:
    import torch as _torch  # noqa: F401
    import triton as _triton  # noqa: F401

    _kernels = True
except ImportError:
    _kernels = False
if not _kernels and os.environ.get("CI"):
    raise pytest.UsageError("CI is set but torch or triton does not import: install the test extra")
collect_ignore_glob = (
    [] if _kernels else ["kernels/*.py", "gpubench/test_ncu_profile.py", "refs/kernel_rule.py"]
)


def pytest_report_header(config):
    if not _kernels:
        return (
            "torch or triton not installed: the Triton kernel tests (tests/kernels/, "
            "test_ncu_profile.py) are left out; `make test` installs both and runs them"
        )


@pytest.fixture
def poisoned_alloc(monkeypatch):
    """Every float tensor from torch.empty, torch.empty_like or Tensor.new_empty comes back filled
    with NaN (integer and bool tensors untouched), so an element a kernel must write but does not
    shows up as NaN in its output. The Triton kernels allocate their outputs, lse and partial-state
    workspaces with torch.empty / torch.empty_like. Yields a dict: how many tensors were poisoned."""
    import torch

    count = {"poisoned": 0}

    def poison(t):
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and t.numel():
            t.fill_(float("nan"))
            count["poisoned"] += 1
        return t

    empty, empty_like, new_empty = torch.empty, torch.empty_like, torch.Tensor.new_empty
    monkeypatch.setattr(torch, "empty", lambda *a, **kw: poison(empty(*a, **kw)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **kw: poison(empty_like(*a, **kw)))
    monkeypatch.setattr(torch.Tensor, "new_empty", lambda self, *a, **kw: poison(new_empty(self, *a, **kw)))
    yield count
