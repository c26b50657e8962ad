"""`variant_prefill` (soft-cap, sliding window, causal compiled into one Triton kernel) against a
float64 reference written from the definition and against `attnlab.core.variants.variant_attention`.

Under Triton's interpreter (no GPU) with 16 x 16 blocks, so the sizes below divide no block.
Every test runs with `poisoned_alloc` (tests/conftest.py), and `out=` is NaN-filled where passed:
an element the kernel does not write is NaN. bf16 / fp16 outputs are held to the rule of
tests/refs/kernel_rule.py (at most 2x torch SDPA's own max-abs error, same inputs and mask); fp32 to 2e-5.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlab.kernels.variants import blocks, kv_block_range, variant_prefill
from attnlab.core.variants import causal as causal_v, sliding_window, soft_cap, variant_attention

from refs.kernel_rule import assert_within_rule, visible_mask

pytestmark = pytest.mark.usefixtures("poisoned_alloc")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def dense_reference(q, k, v, *, causal=False, cap=None, window=None, scale=None):
    """float64 by definition: s = scale q k^T, cap, mask (bottom-right), softmax, times v; 0 for a
    row with no visible key. Returns (o, visible mask (N_q, N_k))."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    n_q, n_k = q.shape[2], k.shape[2]
    s = np.einsum("bhid,bhjd->bhij", q, k) * (1 / math.sqrt(q.shape[3]) if scale is None else scale)
    if cap:
        s = cap * np.tanh(s / cap)
    vis = visible_mask(n_q, n_k, causal=causal, window=window)
    s = np.where(vis, s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.where(vis, np.exp(s - np.where(np.isfinite(m), m, 0)), 0.0)
    l = p.sum(-1, keepdims=True)
    return np.einsum("bhij,bhjd->bhid", p / np.where(l > 0, l, 1), v), vis


def _variants(causal, cap, window):
    vs = [soft_cap(cap)] if cap else []
    if window:
        vs.append(sliding_window(window))
    elif causal:
        vs.append(causal_v())
    return vs


def _inputs(seed, b, hq, hk, nq, nk, d, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(s, generator=g).to(dtype=dtype, device=DEVICE)
        for s in ((b, hq, nq, d), (b, hk, nk, d), (b, hk, nk, d))
    ]


CASES = [  # (batch, q heads, kv heads, n_q, n_k, d, causal, soft_cap, window)
    (1, 2, 1, 37, 53, 16, False, None, None),
    (1, 2, 2, 37, 53, 16, True, None, None),
    (1, 2, 1, 45, 45, 16, False, 30.0, None),
    (1, 2, 1, 45, 45, 24, True, 1.0, None),  # causal with a cap, d not a power of two
    (1, 2, 1, 37, 53, 16, True, 30.0, None),
    (1, 2, 2, 37, 53, 16, False, None, 1),  # window 1: the diagonal only
    (1, 2, 1, 45, 45, 32, False, None, 7),
    (2, 2, 1, 53, 37, 16, False, 30.0, 7),  # N_q > N_k: the first 16 rows see nothing
    (1, 2, 1, 37, 53, 16, True, 1.0, 100),  # window larger than N: plain causal
    (1, 1, 1, 1, 1, 16, False, 30.0, 1),
    (1, 1, 1, 113, 203, 16, False, 30.0, None),
    (1, 1, 1, 203, 113, 16, True, None, None),  # 90 rows see nothing
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_fp32_matches_definition_and_variant_attention(case):
    b, hq, hk, nq, nk, d, causal, cap, window = case
    q, k, v = _inputs(sum(case[:6]), b, hq, hk, nq, nk, d)
    out = torch.full_like(q, float("nan"))  # the kernel must write every element
    variant_prefill(q, k, v, causal=causal, soft_cap=cap, window=window, out=out)
    o = out.double().cpu().numpy()
    ref, vis = dense_reference(*(t.cpu().numpy() for t in (q, k, v)), causal=causal, cap=cap, window=window)
    assert not np.isnan(o).any()
    assert np.abs(o - ref).max() < 2e-5
    alt = variant_attention(
        *(t.double().cpu().numpy() for t in (q, k, v)), *_variants(causal, cap, window), block_c=16
    )
    assert np.abs(o - alt).max() < 2e-5
    blind = ~vis.any(1)  # rows that see no key: exactly 0
    assert np.all(o[:, :, blind] == 0)
    assert blind.any() == (nq > nk and bool(causal or window))


def test_any_strides_no_copy():
    """q in (B, N, H, d) memory, k with a head-dim stride of 2, out a transposed view."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 37, 2, 16, generator=g).to(DEVICE).transpose(1, 2)
    k = torch.randn(1, 1, 53, 32, generator=g).to(DEVICE)[..., ::2]
    v = torch.randn(1, 53, 1, 16, generator=g).to(DEVICE).transpose(1, 2)
    ref, _ = dense_reference(*(t.cpu().numpy() for t in (q, k, v)), cap=30.0, window=7)
    out = torch.full((1, 37, 2, 16), float("nan"), device=DEVICE).transpose(1, 2)
    variant_prefill(q, k, v, soft_cap=30.0, window=7, out=out)
    assert np.abs(out.double().cpu().numpy() - ref).max() < 2e-5


LOW = [  # (batch, q heads, kv heads, n_q, n_k, d, causal, soft_cap, window, block_m, block_n)
    (1, 4, 2, 45, 53, 32, True, None, None, None, None),
    (1, 4, 2, 45, 53, 32, False, None, 7, None, None),
    (1, 4, 2, 45, 53, 32, True, 30.0, None, None, None),
    (1, 4, 2, 45, 53, 32, False, 1.0, 16, None, None),
    (1, 2, 1, 37, 45, 16, True, 30.0, None, None, None),
    (1, 1, 1, 113, 203, 16, False, None, None, None, None),
    (1, 1, 1, 203, 113, 16, False, 30.0, 7, None, None),  # 90 rows see nothing: exactly 0
    # 1023 rows divide no block; the GPU's 128 x 64 blocks keep the interpreter fast
    (1, 1, 1, 1023, 1024, 16, True, None, None, 128, 64),
    (1, 1, 1, 1023, 1024, 16, False, None, 64, 128, 64),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("case", LOW, ids=lambda c: "-".join(map(str, c[:9])))
def test_low_precision_within_rule(case, dtype):
    b, hq, hk, nq, nk, d, causal, cap, window, bm, bn = case
    q, k, v = _inputs(11 + nq, b, hq, hk, nq, nk, d, dtype)
    out = torch.full_like(q, float("nan"))
    variant_prefill(q, k, v, causal=causal, soft_cap=cap, window=window, out=out, block_m=bm, block_n=bn)
    assert out.dtype == dtype
    x = [t.double().cpu().numpy() for t in (q, k, v)]  # the rounded inputs: only kernel rounding
    ref, vis = dense_reference(*x, causal=causal, cap=cap, window=window)
    # SDPA has no soft-cap: its error on the same inputs and mask without the cap is the yardstick
    plain = dense_reference(*x, causal=causal, window=window)[0] if cap else None
    assert_within_rule(out, ref, q, k, v, mask=vis, sdpa_ref=plain, label=f"variant {case}")


def test_fp16_output_dtype():
    q, k, v = _inputs(2, 1, 2, 1, 37, 45, 16, torch.float16)
    assert variant_prefill(q, k, v, soft_cap=30.0, causal=True).dtype == torch.float16


@pytest.mark.parametrize(
    "nq, nk, causal, window, bm, bn",
    [
        (45, 45, False, 0, 16, 16),
        (37, 53, True, 0, 16, 16),
        (53, 37, True, 7, 16, 16),
        (256, 256, False, 16, 16, 16),
        (200, 300, False, 40, 32, 16),
        (100, 100, False, 1, 16, 32),
    ],
)
def test_kernel_loop_bounds(nq, nk, causal, window, bm, bn):
    """The blocks the kernel's loops ran over (recorded by the kernel) are kv_block_range's; they
    cover every block with a visible pair, and the unmasked ones have every pair visible."""
    q, k, v = _inputs(3, 1, 1, 1, nq, nk, 16)
    o, rec = variant_prefill(
        q, k, v, causal=causal, window=window, block_m=bm, block_n=bn, return_ranges=True
    )
    _, vis = dense_reference(q.cpu().numpy(), k.cpu().numpy(), v.cpu().numpy(), causal=causal, window=window)
    for i, (lo, flo, fhi, hi) in enumerate(rec.tolist()):
        assert (lo, flo, fhi, hi) == kv_block_range(i, nq, nk, bm, bn, causal, window)
        assert lo <= flo <= fhi <= hi
        rows = vis[i * bm : (i + 1) * bm]
        used = [j for j in range(-(-nk // bn)) if rows[:, j * bn : (j + 1) * bn].any()]
        assert not used or (lo <= used[0] and used[-1] < hi)
        for j in range(flo, fhi):
            assert rows[:, j * bn : (j + 1) * bn].all() and (j + 1) * bn <= nk


def test_window_work_is_n_times_w():
    """Past the first w rows each query block visits (w + BLOCK_M) / BLOCK_N tiles, whatever N is
    (O(N w)); causal alone visits about four times as many when N doubles."""
    w = {n: blocks(n, n, window=1024, block_m=128, block_n=64)["visited"] for n in (8192, 16384)}
    c = {n: blocks(n, n, causal=True, block_m=128, block_n=64)["visited"] for n in (8192, 16384)}
    assert w[16384] - w[8192] == (16384 - 8192) // 128 * (1024 + 128) // 64
    assert w[8192] < 8192 // 128 * (1024 + 128) // 64
    assert abs(c[16384] / c[8192] - 4) < 0.1
    full = blocks(4096, 4096, causal=True, block_m=128, block_n=64)
    assert full["masked"] == 4096 // 128 * 2  # only the two diagonal tiles per row block


@pytest.mark.parametrize(
    "kw, err, match",
    [
        ({"soft_cap": -1.0}, ValueError, r"soft_cap=-1.0 is out of range"),
        ({"soft_cap": float("inf")}, ValueError, "soft_cap"),
        ({"soft_cap": float("nan")}, ValueError, "soft_cap"),
        ({"soft_cap": 1e5}, ValueError, r"soft_cap=100000.0 is out of range; valid: .*10000"),
        ({"soft_cap": "30"}, TypeError, "soft_cap must be a real number"),
        ({"soft_cap": True}, TypeError, "soft_cap"),
        ({"window": -3}, ValueError, "window=-3 is out of range"),
        ({"window": 2.5}, TypeError, "window must be an integer"),
        ({"window": True}, TypeError, "window"),
    ],
)
def test_bad_parameters(kw, err, match):
    q, k, v = (torch.randn(1, 1, 8, 16) for _ in range(3))
    with pytest.raises(err, match=match):
        variant_prefill(q, k, v, **kw)


def test_numpy_scalars_and_a_window_past_every_key():
    """numpy scalars are numbers; a window of 2^40 keys (more than 32 bits hold) sees what causal
    sees, so it is clamped to N_k and gives the causal answer; an empty batch is refused."""
    q, k, v = (torch.randn(1, 2, 20, 16).to(DEVICE) for _ in range(3))
    assert torch.equal(
        variant_prefill(q, k, v, window=np.int64(2**40)), variant_prefill(q, k, v, causal=True)
    )
    assert torch.equal(
        variant_prefill(q, k, v, soft_cap=np.float32(5.0)), variant_prefill(q, k, v, soft_cap=5.0)
    )
    with pytest.raises(ValueError, match="batch=0 and query heads=2 must be >= 1"):
        variant_prefill(q[:0], k[:0], v[:0])
