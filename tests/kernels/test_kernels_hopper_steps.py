"""`flash_attention_hopper` says which steps it ran: a step planted to fail its compile is dropped by
steps=None with a warning and a record (`report=`, `steps_run()`, `dropped_steps()`), later calls
that reuse the fallback still report it, and fallback=False refuses to drop. Under the interpreter
(tests/conftest.py sets TRITON_INTERPRET=1)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from attnlab.kernels import hopper
from attnlab.kernels.hopper import flash_attention_hopper, steps_run
from attnlab.kernels.hopper_kernel import DEFAULT_STEPS, HOPPER_STEPS
from attnlab.kernels.tuning import launch_config

from refs.reference import attention as ref_attention

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _inputs(seed, n, d, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, 2, n, d, generator=g).to(dtype).to(DEVICE) for _ in range(3))


def _ref(q, k, v, causal):
    o, lse = ref_attention(
        q.double().cpu().numpy(), k.double().cpu().numpy(), v.double().cpu().numpy(), causal=causal
    )
    return o, lse


@pytest.fixture
def planted(monkeypatch):
    """A fresh fallback table, and a lpt_order that does not compile (as warp_specialize's 4-warp
    launches do not on Triton 3.6): every launch with it raises what Triton's compiler raises."""
    monkeypatch.setattr(hopper, "_WORKING", {})
    monkeypatch.setattr(hopper, "_DROPPED", {})
    real, tried = hopper._launch, []

    def launch(q, k, v, o, lse, causal, scale, st, *a, **kw):
        tried.append(frozenset(st))
        if "lpt_order" in st:
            raise RuntimeError("PassManager::run failed (planted)")
        return real(q, k, v, o, lse, causal, scale, st, *a, **kw)

    monkeypatch.setattr(hopper, "_launch", launch)
    return tried


def test_a_step_that_fails_is_dropped_with_a_record(planted):
    q, k, v = _inputs(1, 40, 16)
    rep = {}
    with pytest.warns(RuntimeWarning, match="trying without lpt_order"):
        o, lse = flash_attention_hopper(q, k, v, causal=True, return_lse=True, report=rep)
    ro, rl = _ref(q, k, v, True)
    assert np.abs(o.cpu().numpy() - ro).max() < 1e-5  # the fallback computes the same
    assert rep["requested"] == DEFAULT_STEPS
    assert rep["ran"] == tuple(s for s in DEFAULT_STEPS if s != "lpt_order")
    assert list(rep["dropped"]) == ["lpt_order"] and "planted" in rep["dropped"]["lpt_order"]
    assert steps_run() == rep
    assert planted == [frozenset(DEFAULT_STEPS), frozenset(rep["ran"])]
    key = (torch.float32, 16, True, "host", False, False)
    assert hopper.dropped_steps() == {key: rep["dropped"]}

    # the fallback is reused (no second compile of the failing step, no second warning), never silently
    planted.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        o2 = flash_attention_hopper(q, k, v, causal=True)
    assert torch.equal(o2, o) and planted == [frozenset(rep["ran"])]
    again = steps_run()
    assert again["ran"] == rep["ran"] and again["dropped"] == rep["dropped"]

    # the caller who wants all or nothing: a RuntimeError that names the step, no new fallback
    with pytest.raises(RuntimeError, match="lpt_order"):
        flash_attention_hopper(q, k, v, causal=True, fallback=False)
    # and once the fallbacks are forgotten, steps=None tries every default step again
    hopper.forget_dropped()
    planted.clear()
    with pytest.warns(RuntimeWarning, match="lpt_order"):
        flash_attention_hopper(q, k, v, causal=True)
    assert planted[0] == frozenset(DEFAULT_STEPS)


def test_explicit_steps_are_refused_not_dropped(planted):
    q, k, v = _inputs(2, 24, 16)
    with pytest.raises(RuntimeError, match="do not compile here"):
        flash_attention_hopper(q, k, v, causal=True, steps=HOPPER_STEPS)
    assert hopper.dropped_steps() == {}
    rep = {}
    flash_attention_hopper(q, k, v, causal=True, steps=("tma",), report=rep)
    assert rep["requested"] == rep["ran"] == ("tma",) and rep["dropped"] == {} and rep["inactive"] == ()
    assert rep["descriptors"] == "host" and rep["config"] == launch_config(16, True, ("tma",))


def test_steps_that_ran_but_changed_nothing_are_named():
    # d = 20 in bf16: rows of 40 bytes, not TMA-addressable; not causal: lpt_order has no order to change
    # (on a GPU without warp_specialize: Triton 3.6 does not compile it for this 4-warp launch)
    q, k, v = _inputs(3, 29, 20, torch.bfloat16)
    steps = HOPPER_STEPS if hopper.interpreting() else DEFAULT_STEPS
    rep = {}
    flash_attention_hopper(q, k, v, steps=steps, report=rep)
    assert rep["ran"] == steps and rep["dropped"] == {}
    assert "tma" in rep["inactive"] and "lpt_order" in rep["inactive"] and rep["descriptors"] is None
    assert ("warp_specialize" in rep["inactive"]) == hopper.interpreting()
    assert "big_tiles" not in rep["inactive"]  # 32 (GPU: 128) keys a tile, not 16 (64)
    flash_attention_hopper(q, k, v, steps=("big_tiles",), block_n=16, report=rep)
    assert rep["inactive"] == ("big_tiles",)  # an explicit block_n wins


@pytest.mark.parametrize(
    "kw, err, match",
    [
        ({"report": []}, TypeError, "report must be a dict"),
        ({"fallback": "no"}, TypeError, r"fallback must be True or False \(a bool\)"),
    ],
)
def test_report_and_fallback_refusals(kw, err, match):
    q, k, v = _inputs(4, 8, 16)
    with pytest.raises(err, match=match):
        flash_attention_hopper(q, k, v, **kw)
