"""`flash_attention_hopper` against the independent float64 reference, step by step.

Without a GPU it runs under Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1) with
16 x 16 tiles (16 x 32 with big_tiles), so the sizes below divide no block; the interpreter runs the
tensor-descriptor (TMA) loads and stores too, so each cumulative step set is checked.
`python -m attnlab.gpubench.sweeps.hopper` checks it at real sizes on a GPU.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnlab.kernels import hopper
from attnlab.kernels.hopper import flash_attention_hopper
from attnlab.kernels.hopper_checks import tma_ok
from attnlab.kernels.hopper_kernel import DEFAULT_STEPS, HOPPER_STEPS, cumulative_steps
from attnlab.kernels.tuning import launch_config

from refs.reference import attention as ref_attention

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
CASES = [  # (batch, q heads, kv heads, n_q, n_k, d, causal)
    (1, 2, 2, 33, 47, 24, False),  # d not a power of two
    (1, 4, 2, 33, 47, 24, True),  # GQA 4 / 2, N_q < N_k
    (2, 2, 1, 57, 23, 32, True),  # N_q > N_k: the first 34 rows see no key
    (1, 1, 1, 113, 203, 16, True),  # sizes that divide no block
    (1, 3, 1, 1, 1, 16, False),  # one query, one key, GQA 3
]


def _inputs(seed, b, hq, hk, nq, nk, d, dtype=torch.float32, nhd=False):
    """Random q, k, v; nhd=True: stored (B, N, H, d) and viewed as (B, H, N, d) (no copy)."""
    g = torch.Generator().manual_seed(seed)
    shapes = ((b, hq, nq, d), (b, hk, nk, d), (b, hk, nk, d))
    if nhd:
        return [
            torch.randn((s[0], s[2], s[1], s[3]), generator=g).to(dtype=dtype, device=DEVICE).transpose(1, 2)
            for s in shapes
        ]
    return [torch.randn(s, generator=g).to(dtype=dtype, device=DEVICE) for s in shapes]


def _ref(q, k, v, causal, scale=None):
    return ref_attention(*(t.double().cpu().numpy() for t in (q, k, v)), causal=causal, scale=scale)


def _poisoned(q):
    return torch.full(q.shape, float("nan"), dtype=q.dtype, device=q.device)


def _assert_close(o, lse, ro, rl, tol):
    o, lse = o.double().cpu().numpy(), lse.double().cpu().numpy()
    assert not np.isnan(o).any() and not np.isnan(lse).any()  # every element written, no NaN
    assert np.array_equal(np.isinf(lse), np.isinf(rl))  # rows with no key: -inf
    assert np.all(o[np.broadcast_to(np.isinf(rl)[..., None], o.shape)] == 0)  # ... and o = 0
    fin = np.isfinite(rl)
    assert np.abs(o - ro).max() < tol
    if fin.any():
        assert np.abs(lse[fin] - rl[fin]).max() < tol


@pytest.mark.parametrize("steps", cumulative_steps(), ids=lambda s: "+".join(s) or "base")
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_fp32_each_cumulative_step(case, steps):
    b, hq, hk, nq, nk, d, causal = case
    q, k, v = _inputs(sum(case[:6]), b, hq, hk, nq, nk, d)
    assert tma_ok(q, k, v)  # the tma step really runs
    out = _poisoned(q)
    o, lse = flash_attention_hopper(q, k, v, causal=causal, steps=steps, return_lse=True, out=out)
    assert o is out
    _assert_close(o, lse, *_ref(q, k, v, causal), 1e-5)


@pytest.mark.parametrize("case", CASES[1:4], ids=lambda c: "-".join(map(str, c)))
def test_host_descriptors(case):
    b, hq, hk, nq, nk, d, causal = case
    q, k, v = _inputs(sum(case[:6]) + 1, b, hq, hk, nq, nk, d)
    o, lse = flash_attention_hopper(
        q, k, v, causal=causal, return_lse=True, out=_poisoned(q), descriptors="host"
    )
    _assert_close(o, lse, *_ref(q, k, v, causal), 1e-5)


def _ref_variant(q, k, v, soft_cap=0.0, window=0, causal=False):
    """float64 by definition: logits scale q.k (capped at c tanh(s / c)), keys visible when
    j <= i + N_k - N_q (causal or windowed) and j > i + N_k - N_q - w (windowed); natural-log lse."""
    q, k, v = (t.double().cpu().numpy() for t in (q, k, v))
    b, hq, n_q, d = q.shape
    g = hq // k.shape[1]
    i = np.arange(n_q)[:, None] + k.shape[2] - n_q
    j = np.arange(k.shape[2])[None, :]
    vis = np.ones((n_q, k.shape[2]), bool)
    if causal or window:
        vis &= j <= i
    if window:
        vis &= j > i - window
    o, lse = np.zeros(q.shape), np.full(q.shape[:3], -np.inf)
    for bi in range(b):
        for h in range(hq):
            s = q[bi, h] @ k[bi, h // g].T / np.sqrt(d)
            if soft_cap:
                s = soft_cap * np.tanh(s / soft_cap)
            s = np.where(vis, s, -np.inf)
            rows = vis.any(1)
            m = s[rows].max(1, keepdims=True)
            e = np.exp(s[rows] - m)
            o[bi, h, rows] = (e / e.sum(1, keepdims=True)) @ v[bi, h // g]
            lse[bi, h, rows] = m[:, 0] + np.log(e.sum(1))
    return o, lse


VARIANT_CASES = [  # (batch, q heads, kv heads, n_q, n_k, d, soft_cap, window, causal)
    (1, 2, 1, 77, 77, 24, 5.0, 0, False),  # soft-cap alone, GQA 2
    (1, 2, 2, 45, 71, 16, 2.0, 0, True),  # soft-cap + causal, N_q < N_k
    (2, 2, 1, 70, 70, 32, 0.0, 19, False),  # window of 19 (causal implied), odd edges
    (1, 3, 1, 40, 23, 16, 3.0, 5, False),  # both, N_q > N_k: rows that see no key
    (1, 1, 1, 93, 93, 16, 0.0, 1, False),  # window 1: each row sees only itself
]


@pytest.mark.parametrize(
    "steps", [(), ("tma", "causal_split"), HOPPER_STEPS], ids=["base", "tma+split", "all"]
)
@pytest.mark.parametrize("case", VARIANT_CASES, ids=lambda c: "-".join(map(str, c)))
def test_fp32_variants_compiled_in(case, steps):
    """soft_cap and window as compile-time switches of the Hopper kernel (the variants of
    kernels.variants, with every step): fp32 against float64 at 1e-5, unwritten output is NaN."""
    b, hq, hk, nq, nk, d, cap, w, causal = case
    q, k, v = _inputs(int(sum(case[:6]) + cap + w), b, hq, hk, nq, nk, d)
    o, lse = flash_attention_hopper(
        q,
        k,
        v,
        causal=causal,
        soft_cap=cap or None,
        window=w or None,
        steps=steps,
        return_lse=True,
        out=_poisoned(q),
    )
    ro, rl = _ref_variant(q, k, v, cap, w, causal)
    _assert_close(o, lse, ro, rl, 1e-5)


@pytest.mark.parametrize("steps", [(), DEFAULT_STEPS], ids=["base", "default"])
def test_bf16_window_within_twice_torch_sdpa_error(steps, poison_empty):
    """bf16 sliding window against float64, held to twice the error of torch's SDPA given the same
    window as a boolean mask (the soft-cap has no SDPA form; its fp32 test is above)."""
    q, k, v = _inputs(21, 1, 4, 2, 67, 67, 32, torch.bfloat16)
    o, lse = flash_attention_hopper(q, k, v, window=13, steps=steps, return_lse=True)
    ro, rl = _ref_variant(q, k, v, 0.0, 13)
    i, j = torch.arange(67)[:, None], torch.arange(67)[None, :]
    sdpa = (
        F.scaled_dot_product_attention(
            q.cpu(), k.cpu(), v.cpu(), attn_mask=(j <= i) & (j > i - 13), enable_gqa=True
        )
        .double()
        .numpy()
    )
    tol = 2 * np.abs(sdpa - ro).max()
    assert 0 < tol < 0.05
    _assert_close(o, lse, ro, rl, tol)


def test_variant_types_and_refusals_leave_the_default_steps_alone():
    q, k, v = _inputs(12, 1, 2, 1, 24, 24, 16)
    for kw in ({"soft_cap": "30"}, {"soft_cap": True}, {"window": 2.5}, {"window": True}):
        with pytest.raises(TypeError, match=next(iter(kw))):
            flash_attention_hopper(q, k, v, **kw)
    with pytest.raises(ValueError, match="batch=0"):  # refused before any launch
        flash_attention_hopper(q[:0], k[:0], v[:0], causal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no step dropped by that
        o = flash_attention_hopper(q, k, v, causal=True, window=np.int64(2**40), soft_cap=np.float32(4.0))
    assert all(st == frozenset(DEFAULT_STEPS) for st in hopper._WORKING.values())
    assert torch.equal(o, flash_attention_hopper(q, k, v, causal=True, soft_cap=4.0))  # window past N_k


def test_window_as_wide_as_the_keys_is_causal():
    q, k, v = _inputs(11, 1, 2, 1, 50, 64, 16)
    wide = flash_attention_hopper(q, k, v, window=64)
    assert torch.equal(wide, flash_attention_hopper(q, k, v, causal=True))


@pytest.fixture
def poison_empty(monkeypatch):
    """torch.empty / empty_like return NaN for float dtypes, so an element the kernel (or the
    interpreter's fp32 staging buffer) never writes shows up as NaN."""
    empty, empty_like = torch.empty, torch.empty_like

    def nan_empty(*a, **kw):
        t = empty(*a, **kw)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    def nan_empty_like(*a, **kw):
        t = empty_like(*a, **kw)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", nan_empty)
    monkeypatch.setattr(torch, "empty_like", nan_empty_like)


def _sdpa_bf16_error(q, k, v, causal, ro, rl):
    """Max error of torch's own SDPA (math) in bf16 against the float64 reference, visible rows."""
    n_q, n_k = q.shape[2], k.shape[2]
    mask = None
    if causal:  # bottom-right aligned, as the kernel
        mask = torch.arange(n_k)[None, :] <= torch.arange(n_q)[:, None] + n_k - n_q
    o = (
        F.scaled_dot_product_attention(
            q.cpu(), k.cpu(), v.cpu(), attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1]
        )
        .double()
        .numpy()
    )
    fin = np.isfinite(rl)
    return np.abs(o - ro)[fin].max()


# bf16 takes the default steps: on a GPU, Triton 3.6 does not compile warp_specialize for these
# 4-warp bf16 launches (d <= 64), and explicit steps that fail are refused with a RuntimeError;
# the fp32 tests above and below run every step, warp_specialize included
@pytest.mark.parametrize("steps", [(), DEFAULT_STEPS], ids=["base", "default"])
@pytest.mark.parametrize("case", CASES[:4], ids=lambda c: "-".join(map(str, c)))
def test_bf16_within_twice_torch_sdpa_error(case, steps, poison_empty):
    b, hq, hk, nq, nk, d, causal = case
    q, k, v = _inputs(sum(case[:6]) + 2, b, hq, hk, nq, nk, d, torch.bfloat16)
    o, lse = flash_attention_hopper(q, k, v, causal=causal, steps=steps, return_lse=True)
    assert o.dtype == torch.bfloat16 and lse.dtype == torch.float32
    ro, rl = _ref(q, k, v, causal)  # on the rounded inputs
    tol = 2 * _sdpa_bf16_error(q, k, v, causal, ro, rl)
    assert 0 < tol < 0.05
    _assert_close(o, lse, ro, rl, tol)


@pytest.mark.parametrize("steps", [(), HOPPER_STEPS], ids=["base", "all"])
def test_transposed_nhd_inputs_without_copies(steps):
    q, k, v = _inputs(5, 2, 4, 2, 37, 45, 32, nhd=True)
    assert not q.is_contiguous() and tma_ok(q, k, v)
    o, lse = flash_attention_hopper(q, k, v, causal=True, steps=steps, return_lse=True, out=_poisoned(q))
    _assert_close(o, lse, *_ref(q, k, v, True), 1e-5)


def test_strides_tma_cannot_take_fall_back_to_pointer_loads(poison_empty):
    # d = 20 in bf16: rows of 40 bytes, not a multiple of 16
    q, k, v = _inputs(6, 1, 2, 1, 29, 31, 20, torch.bfloat16)
    assert not tma_ok(q, k, v)
    o, lse = flash_attention_hopper(q, k, v, causal=True, return_lse=True)
    ro, rl = _ref(q, k, v, True)
    _assert_close(o, lse, ro, rl, 2 * _sdpa_bf16_error(q, k, v, True, ro, rl))
    # a transposed last dimension (stride(-1) != 1): the pointer loads take the d stride too
    g = torch.Generator().manual_seed(7)
    qt, kt, vt = (torch.randn(1, 2, 16, n, generator=g).to(DEVICE).transpose(-1, -2) for n in (21, 34, 34))
    assert qt.stride(-1) != 1 and not tma_ok(qt)
    o, lse = flash_attention_hopper(qt, kt, vt, return_lse=True, out=_poisoned(qt))
    _assert_close(o, lse, *_ref(qt, kt, vt, False), 1e-5)


def test_scale_blocks_and_default_steps_without_warnings():
    q, k, v = _inputs(8, 1, 2, 1, 48, 70, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no step dropped here
        o, lse = flash_attention_hopper(
            q, k, v, causal=True, scale=0.3, block_m=32, block_n=16, return_lse=True
        )
    _assert_close(o, lse, *_ref(q, k, v, True, scale=0.3), 1e-5)
    assert launch_config(128, True)["block_n"] == (32 if hopper.interpreting() else 128)
    assert launch_config(128, True, (), block_m=64)["block_m"] == 64
    assert cumulative_steps()[0] == () and cumulative_steps()[-1] == HOPPER_STEPS


@pytest.mark.parametrize(
    "bad, match",
    [
        (lambda q, k, v: ((q[0], k, v), {}), "q must be"),
        (lambda q, k, v: ((q, k[..., :8], v[..., :8]), {}), "head dim"),
        (lambda q, k, v: ((q, k, v[:, :, :5]), {}), "same shape"),
        (
            lambda q, k, v: ((q.repeat(1, 3, 1, 1), k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1)), {}),
            "multiple of KV heads",
        ),
        (lambda q, k, v: ((q.double(), k.double(), v.double()), {}), "dtype"),
        (lambda q, k, v: ((q.numpy(), k, v), {}), "torch.Tensor"),
        (
            lambda q, k, v: ((q, k, v), {"steps": ("tma", "fp8")}),
            r"unknown steps \['fp8'\]; valid: tma, causal_split",
        ),
        (lambda q, k, v: ((q, k, v), {"steps": "tma"}), "steps must be None or a tuple"),
        (
            lambda q, k, v: ((q, k, v), {"causal": "False"}),
            r"causal must be True or False \(a bool\), got 'False'",
        ),
        (
            lambda q, k, v: ((q, k, v), {"scale": -1.0}),
            r"scale=-1.0 is out of range; valid: finite, in \(0.0, inf\)",
        ),
        (lambda q, k, v: ((q, k, v), {"scale": float("nan")}), "scale=nan is out of range"),
        (
            lambda q, k, v: ((q, k, v), {"block_m": 24}),
            r"block_m=24 is out of range; valid: a power of two in \[16,",
        ),
        (lambda q, k, v: ((q, k, v), {"block_n": 8}), "block_n=8 is out of range"),
        (lambda q, k, v: ((q, k, v), {"num_warps": 3}), "num_warps=3 is out of range; valid: 1, 2, 4, 8, 16"),
        (
            lambda q, k, v: ((q, k, v), {"num_stages": 0}),
            "num_stages=0 is out of range; valid: 1 <= num_stages <= 8",
        ),
        (lambda q, k, v: ((q, k, v), {"out": torch.empty(1, 1, 8, 8)}), "out must be"),
        (
            lambda q, k, v: ((q, k, v), {"descriptors": "global"}),
            "descriptors='global' is not allowed; valid: 'dev",
        ),
        (lambda q, k, v: ((q, k.to("meta"), v), {}), "k is on meta but q is on"),
        (lambda q, k, v: ((q, k, v), {"soft_cap": -1.0}), "soft_cap=-1.0 is out of range"),
        (lambda q, k, v: ((q, k, v), {"soft_cap": float("inf")}), "soft_cap"),
        (lambda q, k, v: ((q, k, v), {"soft_cap": 2.0**70}), r"soft_cap=.* is out of range; valid: .*10000"),
        (lambda q, k, v: ((q, k, v), {"window": -3}), "window=-3 is out of range"),
        (lambda q, k, v: ((q[:0], k[:0], v[:0]), {"causal": True}), "batch=0 and query heads=1 must be >= 1"),
    ],
)
def test_bad_input(bad, match):
    q, k, v = (torch.randn(1, 1, 8, 16) for _ in range(3))
    args, kw = bad(q, k, v)
    with pytest.raises((ValueError, TypeError), match=match):
        flash_attention_hopper(*args, **kw)
