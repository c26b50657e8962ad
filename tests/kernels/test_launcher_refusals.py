"""Every launcher of `attnlab.kernels` checks its arguments the way the numpy layers do, before
anything reaches Triton: a flag is a bool (the string "False" is not False), the scale a finite
real > 0, a block size a power of two in range, num_warps one of 1, 2, 4, 8, 16, num_stages in
range, a workspace what `kernels.decode.workspace` makes, a count an integer (numpy integers are
integers, 2.0 and True are not). Wrong type: TypeError; wrong value: ValueError; each naming the
parameter and its value.

No case launches a kernel: `no_launch` makes any launch fail the test, so a refusal that came
from inside Triton (or an answer computed from a bad argument) fails too. The Gluon launcher
cannot run here at all (Gluon kernels do not run under the interpreter), so its cases show that
the launch arguments are refused by name before the device is looked at.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.kernels.cascade import cascade_decode
from attnlab.kernels.common import check_paged
from attnlab.kernels.decode import split_kv_decode, workspace
from attnlab.kernels.fa2 import flash_attention_triton
from attnlab.kernels.gluon_fa3 import config_for, flash_attention_gluon
from attnlab.kernels.hopper import flash_attention_hopper
from attnlab.kernels.paged import paged_decode
from attnlab.kernels.scheduled import ScheduledDecoder
from attnlab.kernels.tuning import launch_config
from attnlab.kernels.variants import blocks, variant_prefill

from refs.paged_reference import attention as paged_reference, pools as paged_pools

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def no_launch(monkeypatch):
    """Any `kernel[grid](...)` fails the test: the refusal must come before the launch."""
    from triton.runtime.jit import KernelInterface

    def launched(self, grid):
        raise AssertionError(f"a kernel was launched ({getattr(self, '__name__', self)}) before the refusal")

    monkeypatch.setattr(KernelInterface, "__getitem__", launched)


def _prefill(d=16, dtype=torch.float32):
    return tuple(torch.zeros(1, 2, 8, d, dtype=dtype, device=DEVICE) for _ in range(3))


def _decode(d=16):
    return (
        torch.zeros(1, 2, d, device=DEVICE),
        torch.zeros(1, 1, 40, d, device=DEVICE),
        torch.zeros(1, 1, 40, d, device=DEVICE),
    )


def _paged():
    """A batch of 2 over 6 pages of 3 tokens: (q, k_pool, v_pool, indptr, indices, last)."""
    i32 = lambda *x: torch.tensor(x, dtype=torch.int32, device=DEVICE)  # noqa: E731
    k = torch.zeros(6, 3, 2, 16, device=DEVICE)
    return (torch.zeros(2, 4, 16, device=DEVICE), k, k.clone(), i32(0, 2, 3), i32(4, 0, 2), i32(3, 1))


def _cascade(**kw):
    q, k, v, indptr, indices, last = _paged()
    prefix = torch.zeros(5, 2, 16, device=DEVICE)
    return cascade_decode(q, prefix, prefix.clone(), k, v, indptr, indices, last, page_size=3, **kw)


def _ws_with(**change):
    """workspace(1, 2, 16, 1) with some entries replaced."""
    return {**workspace(1, 2, 16, 1, DEVICE), **change}


_DECODER = dict(
    max_batch=2,
    q_heads=4,
    kv_heads=2,
    head_dim=16,
    max_ctas=2,
    max_items=8,
    max_pages=5,
    page_size=3,
    dtype=torch.float32,
    device=DEVICE,
)

CASES = {  # id: (call, error, message)
    # flash_attention_triton (kernels.fa2)
    "fa2-causal-str": (
        lambda: flash_attention_triton(*_prefill(), causal="False"),
        TypeError,
        r"causal must be True or False \(a bool\), got 'False'",
    ),
    "fa2-return_lse-str": (
        lambda: flash_attention_triton(*_prefill(), return_lse="x"),
        TypeError,
        "return_lse must be True or False",
    ),
    "fa2-scale-nan": (
        lambda: flash_attention_triton(*_prefill(), scale=float("nan")),
        ValueError,
        r"scale=nan is out of range; valid: finite, in \(0.0, inf\)",
    ),
    "fa2-scale-negative": (
        lambda: flash_attention_triton(*_prefill(), scale=-1.0),
        ValueError,
        "scale=-1.0 is out of range",
    ),
    "fa2-scale-str": (
        lambda: flash_attention_triton(*_prefill(), scale="0.1"),
        TypeError,
        "scale must be a real number, got '0.1'",
    ),
    "fa2-block_m-3": (
        lambda: flash_attention_triton(*_prefill(), block_m=3),
        ValueError,
        r"block_m=3 is out of range; valid: a power of two in \[16, 256\]",
    ),
    "fa2-block_m-0": (lambda: flash_attention_triton(*_prefill(), block_m=0), ValueError, "block_m=0"),
    "fa2-block_n-float": (
        lambda: flash_attention_triton(*_prefill(), block_n=16.0),
        TypeError,
        "block_n must be an integer, got 16.0",
    ),
    "fa2-num_warps-3": (
        lambda: flash_attention_triton(*_prefill(), num_warps=3),
        ValueError,
        "num_warps=3 is out of range; valid: 1, 2, 4, 8, 16",
    ),
    "fa2-num_warps-str": (
        lambda: flash_attention_triton(*_prefill(), num_warps="4"),
        TypeError,
        "num_warps must be an integer",
    ),
    "fa2-num_stages-0": (
        lambda: flash_attention_triton(*_prefill(), num_stages=0),
        ValueError,
        "num_stages=0 is out of range; valid: 1 <= num_stages <= 8",
    ),
    # variant_prefill (kernels.variants)
    "variants-causal-str": (
        lambda: variant_prefill(*_prefill(), causal="False"),
        TypeError,
        "causal must be True or False",
    ),
    "variants-return_ranges-str": (
        lambda: variant_prefill(*_prefill(), return_ranges="x"),
        TypeError,
        "return_ranges must be True or False",
    ),
    "variants-scale-nan": (lambda: variant_prefill(*_prefill(), scale=float("nan")), ValueError, "scale=nan"),
    "variants-scale-negative": (lambda: variant_prefill(*_prefill(), scale=-1.0), ValueError, "scale=-1.0"),
    "variants-block_m-0": (lambda: variant_prefill(*_prefill(), block_m=0), ValueError, "block_m=0"),
    "variants-block_n-3": (lambda: variant_prefill(*_prefill(), block_n=3), ValueError, "block_n=3"),
    "variants-num_warps-3": (lambda: variant_prefill(*_prefill(), num_warps=3), ValueError, "num_warps=3"),
    "variants-num_stages-0": (lambda: variant_prefill(*_prefill(), num_stages=0), ValueError, "num_stages=0"),
    "variants-blocks-block_m-0": (lambda: blocks(64, 64, block_m=0), ValueError, "block_m=0"),
    # flash_attention_hopper (kernels.hopper)
    "hopper-scale-str": (
        lambda: flash_attention_hopper(*_prefill(), scale="0.1"),
        TypeError,
        "scale must be a real number, got '0.1'",
    ),
    "hopper-block_m-str": (
        lambda: flash_attention_hopper(*_prefill(), block_m="64"),
        TypeError,
        "block_m must be an integer",
    ),
    "hopper-num_stages-bool": (
        lambda: flash_attention_hopper(*_prefill(), num_stages=True),
        TypeError,
        "num_stages must be an integer, got True",
    ),
    "hopper-launch_config-block_m-0": (lambda: launch_config(64, False, block_m=0), ValueError, "block_m=0"),
    # split_kv_decode and workspace (kernels.decode)
    "decode-ws-keys": (
        lambda: split_kv_decode(*_decode(), ws={"x": 1}),
        TypeError,
        r"ws must be a dict from kernels.decode.workspace.*got dict with keys \['x'\]",
    ),
    "decode-ws-int": (lambda: split_kv_decode(*_decode(), ws=5), TypeError, "ws must be a dict"),
    "decode-ws-shape": (
        lambda: split_kv_decode(*_decode(), ws=_ws_with(op=torch.zeros(3, 16))),
        ValueError,
        "ws was made for splits=1 and shapes",
    ),
    "decode-ws-dtype": (
        lambda: split_kv_decode(*_decode(), ws=_ws_with(lse=torch.zeros(2).half())),
        TypeError,
        r"ws\['lse'\] must be a float32 torch.Tensor",
    ),
    "decode-d-0": (
        lambda: split_kv_decode(*_decode(d=0)),
        ValueError,
        "head dim d=0 is out of range; valid: 1 <= d <= 256",
    ),
    "decode-scale-nan": (lambda: split_kv_decode(*_decode(), scale=float("nan")), ValueError, "scale=nan"),
    "decode-scale-negative": (lambda: split_kv_decode(*_decode(), scale=-1.0), ValueError, "scale=-1.0"),
    "decode-return_lse-str": (
        lambda: split_kv_decode(*_decode(), return_lse="x"),
        TypeError,
        "return_lse must be True or False",
    ),
    "decode-block_n-0": (lambda: split_kv_decode(*_decode(), block_n=0), ValueError, "block_n=0"),
    "decode-block_n-3": (lambda: split_kv_decode(*_decode(), block_n=3), ValueError, "block_n=3"),
    "decode-num_warps-3": (lambda: split_kv_decode(*_decode(), num_warps=3), ValueError, "num_warps=3"),
    "decode-splits-bool": (lambda: split_kv_decode(*_decode(), True), TypeError, "splits must be an integer"),
    "workspace-head_dim-0": (lambda: workspace(1, 2, 0, 1, DEVICE), ValueError, "head_dim=0 is out of range"),
    "workspace-splits-bool": (
        lambda: workspace(1, 2, 16, True, DEVICE),
        TypeError,
        "splits must be an integer",
    ),
    # paged_decode (kernels.paged)
    "paged-ws-contents": (
        lambda: paged_decode(
            *_paged(), page_size=3, splits=1, ws={"op": 0, "lp": 0, "o": 0, "lse": 0, "splits": 1}
        ),
        TypeError,
        r"ws\['op'\] must be a float32 torch.Tensor .* got int",
    ),
    "paged-ws-device": (
        lambda: paged_decode(*_paged(), page_size=3, splits=1, ws=workspace(2, 4, 16, 1, "meta")),
        ValueError,
        r"ws\['op'\] is on meta",
    ),
    "paged-num_warps-3": (
        lambda: paged_decode(*_paged(), page_size=3, num_warps=3),
        ValueError,
        "num_warps=3",
    ),
    "paged-num_stages-0": (
        lambda: paged_decode(*_paged(), page_size=3, num_stages=0),
        ValueError,
        "num_stages=0",
    ),
    "paged-page_size-float": (
        lambda: paged_decode(*_paged(), page_size=3.0),
        TypeError,
        "page_size must be an integer, got 3.0",
    ),
    # cascade_decode (kernels.cascade)
    "cascade-scale-nan": (lambda: _cascade(scale=float("nan")), ValueError, "scale=nan"),
    "cascade-scale-negative": (lambda: _cascade(scale=-1.0), ValueError, "scale=-1.0"),
    "cascade-return_lse-str": (
        lambda: _cascade(return_lse="x"),
        TypeError,
        "return_lse must be True or False",
    ),
    "cascade-unique_splits-bool": (
        lambda: _cascade(unique_splits=True),
        TypeError,
        "unique_splits must be an integer, got True",
    ),
    # ScheduledDecoder (kernels.scheduled)
    "scheduled-num_warps-3": (lambda: ScheduledDecoder(**_DECODER, num_warps=3), ValueError, "num_warps=3"),
    "scheduled-num_stages-0": (
        lambda: ScheduledDecoder(**_DECODER, num_stages=0),
        ValueError,
        "num_stages=0",
    ),
    "scheduled-block_n-float": (
        lambda: ScheduledDecoder(**_DECODER, block_n=16.0),
        TypeError,
        "block_n must be an integer",
    ),
    # flash_attention_gluon (kernels.gluon_fa3): refused by name before the device check
    "gluon-scale-str": (
        lambda: flash_attention_gluon(*_prefill(64, torch.bfloat16), scale="0.1"),
        TypeError,
        "scale must be a real number, got '0.1'",
    ),
    "gluon-num_stages-0": (
        lambda: flash_attention_gluon(*_prefill(64, torch.bfloat16), num_stages=0),
        ValueError,
        r"num_stages=0 is out of range; valid: 2 <= num_stages",
    ),
    "gluon-num_stages-float": (
        lambda: flash_attention_gluon(*_prefill(64, torch.bfloat16), num_stages=2.0),
        TypeError,
        "num_stages must be an integer, got 2.0",
    ),
    "gluon-block_n-96": (
        lambda: flash_attention_gluon(*_prefill(64, torch.bfloat16), block_n=96),
        ValueError,
        "block_n=96 is out of range; valid: 64, 128 or 256",
    ),
    "gluon-config_for-num_stages-0": (lambda: config_for(64, frozenset(), 0), ValueError, "num_stages=0"),
}


@pytest.mark.usefixtures("no_launch")
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_refused_by_name_before_any_launch(case):
    call, err, match = case
    with pytest.raises(err, match=match):
        call()


def test_numpy_integers_are_integers():
    """page_size=np.int64(3) is the pool's page size of 3, and a numpy bool is a flag: the Gluon
    launcher takes causal=np.bool_ and goes on to the device check."""
    q, k, v, indptr, indices, last = _paged()
    got = check_paged(q, k, v, indptr, indices, last, np.int64(3))
    assert got == (2, 4, 16, 2, 3) and type(got[-1]) is int
    with pytest.raises((ValueError, RuntimeError), match=r"q is on cpu|sm_90|TRITON_INTERPRET"):
        flash_attention_gluon(*_prefill(64, torch.bfloat16), causal=np.bool_(True))


@pytest.mark.usefixtures("poisoned_alloc")
def test_paged_decode_with_a_numpy_page_size_matches_the_reference():
    """One small launch: a numpy page size runs the kernel as the int would (float64 reference)."""
    rng = np.random.default_rng(7)
    k, v, table = paged_pools([5, 7], 3, 1, 16, rng)
    q = rng.standard_normal((2, 2, 16))
    t = lambda x: torch.tensor(x, dtype=torch.float32, device=DEVICE)  # noqa: E731
    i32 = [torch.tensor(a, dtype=torch.int32, device=DEVICE) for a in table]
    o = paged_decode(t(q), t(k), t(v), *i32, page_size=np.int64(3), splits=2)
    ro, _ = paged_reference(q, k, v, *table, 3)
    assert np.abs(o.double().cpu().numpy() - ro).max() < 1e-5
