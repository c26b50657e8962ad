"""The Triton FlashAttention-2 kernel against the independent float64 reference.

Without a GPU it runs under Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1), so
sizes stay small; `python -m attnlab.gpu.bench` checks it at real sizes on a GPU.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.gpu.flash_triton import flash_attention_triton

try:
    from tests.reference import attention as ref_attention
except ImportError:  # tests/ on sys.path (rootdir-less run)
    from reference import attention as ref_attention

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
CASES = [  # (batch, q heads, kv heads, n_q, n_k, d, causal)
    (1, 1, 1, 1, 1, 16, False),
    (1, 2, 1, 33, 33, 16, True),
    (1, 4, 2, 40, 57, 24, True),      # N_q < N_k, d not a power of two
    (2, 2, 2, 57, 40, 32, True),      # N_q > N_k: the first rows see no key
    (1, 3, 1, 17, 65, 64, False),     # GQA group 3
    (1, 2, 2, 50, 50, 20, False),
]


def _inputs(rng, b, hq, hk, nq, nk, d, dtype):
    q, k, v = (rng.standard_normal(s) for s in ((b, hq, nq, d), (b, hk, nk, d), (b, hk, nk, d)))
    t = [torch.tensor(x, dtype=dtype, device=DEVICE) for x in (q, k, v)]
    return (q, k, v), t


@pytest.mark.parametrize("case", CASES)
def test_matches_reference_fp32(case):
    b, hq, hk, nq, nk, d, causal = case
    rng = np.random.default_rng(sum(case[:6]))
    (q, k, v), (tq, tk, tv) = _inputs(rng, b, hq, hk, nq, nk, d, torch.float32)
    o, lse = flash_attention_triton(tq, tk, tv, causal=causal, return_lse=True)
    ro, rl = ref_attention(q, k, v, causal=causal)
    o, lse = o.double().cpu().numpy(), lse.double().cpu().numpy()
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    assert np.abs(o - ro).max() < 1e-5
    assert np.array_equal(np.isinf(lse), np.isinf(rl))           # fully masked rows: -inf
    fin = np.isfinite(rl)
    assert np.abs(lse[fin] - rl[fin]).max() < 1e-5
    assert np.all(o[np.broadcast_to(np.isinf(rl)[..., None], o.shape)] == 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs(dtype):
    rng = np.random.default_rng(7)
    (q, k, v), (tq, tk, tv) = _inputs(rng, 1, 2, 1, 37, 45, 32, dtype)
    o = flash_attention_triton(tq, tk, tv, causal=True)
    assert o.dtype == dtype
    # reference on the rounded inputs, so only the kernel's own rounding is measured
    rq, rk, rv = (t.double().cpu().numpy() for t in (tq, tk, tv))
    ro, _ = ref_attention(rq, rk, rv, causal=True)
    rel = np.linalg.norm(o.double().cpu().numpy() - ro) / np.linalg.norm(ro)
    assert rel < 1e-2


def test_explicit_blocks_and_scale():
    rng = np.random.default_rng(3)
    (q, k, v), (tq, tk, tv) = _inputs(rng, 1, 1, 1, 48, 48, 16, torch.float32)
    o = flash_attention_triton(tq, tk, tv, scale=0.3, block_m=32, block_n=16)
    ro, _ = ref_attention(q, k, v, scale=0.3)
    assert np.abs(o.double().cpu().numpy() - ro).max() < 1e-5


@pytest.mark.parametrize("bad, match", [
    (lambda q, k, v: (q[0], k, v), "q must be"),
    (lambda q, k, v: (q, k[..., :8], v[..., :8]), "head dim"),
    (lambda q, k, v: (q, k, v[:, :, :5]), "same shape"),
    (lambda q, k, v: (q.repeat(1, 3, 1, 1), k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1)), "multiple of KV heads"),
    (lambda q, k, v: (q.double(), k.double(), v.double()), "dtype"),
    (lambda q, k, v: (q.numpy(), k, v), "torch.Tensor"),
])
def test_bad_input(bad, match):
    q, k, v = (torch.randn(1, 1, 8, 16) for _ in range(3))
    with pytest.raises((ValueError, TypeError), match=match):
        flash_attention_triton(*bad(q, k, v))
