"""The Triton split-KV decode kernel (split + merge) against the independent float64 reference,
under Triton's interpreter when no GPU is present (small sizes).

Every test runs with `poisoned_alloc` (tests/conftest.py): the partial states and the output the
kernel allocates (`workspace`, torch.empty) start as NaN, so an element it does not write fails.
Low-precision inputs are held to the rule of tests/refs/kernel_rule.py; fp32 to 1e-5."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.kernels.decode import split_kv_decode

from refs.kernel_rule import assert_within_rule
from refs.reference import attention as ref_attention

pytestmark = pytest.mark.usefixtures("poisoned_alloc")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize(
    "batch, hq, hkv, ctx, d, splits",
    [
        (1, 1, 1, 1, 16, 1),  # one key
        (2, 8, 2, 37, 16, 1),  # no split: the merge is skipped
        (2, 8, 2, 37, 16, 5),  # chunks of 8, the last one 5
        (1, 3, 1, 50, 24, 7),  # group of 3, d not a power of two
        (1, 4, 4, 20, 32, 20),  # one key per split
        (1, 4, 2, 33, 16, 32),  # ceil(33/32) = 2: the last split gets no key (state 0, -inf)
        (1, 4, 1, 1023, 16, 1),  # 1023 keys: the last 16-key tile is one short
        (1, 2, 1, 1025, 16, 7),  # chunks of 147, the last 143: no chunk a whole number of tiles
    ],
)
def test_matches_reference(batch, hq, hkv, ctx, d, splits):
    rng = np.random.default_rng(ctx * 31 + splits)
    q = rng.standard_normal((batch, hq, 1, d))
    k = rng.standard_normal((batch, hkv, ctx, d))
    v = rng.standard_normal((batch, hkv, ctx, d))
    ro, rl = ref_attention(q, k, v)
    t = lambda x: torch.tensor(x, dtype=torch.float32, device=DEVICE)  # noqa: E731
    o, lse = split_kv_decode(t(q[:, :, 0]), t(k), t(v), splits, return_lse=True)
    o, lse = o.double().cpu().numpy(), lse.double().cpu().numpy()
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    assert np.abs(o - ro[:, :, 0]).max() < 1e-5
    assert np.abs(lse - rl[:, :, 0]).max() < 1e-5


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize(
    "batch, hq, hkv, ctx, d, splits",
    [
        (1, 4, 2, 40, 32, 3),
        (2, 4, 1, 1023, 16, 1),
        (1, 2, 1, 1025, 16, 7),
    ],
)
def test_low_precision_within_rule(batch, hq, hkv, ctx, d, splits, dtype):
    rng = np.random.default_rng(ctx + splits)
    q, k, v = (
        torch.tensor(rng.standard_normal(s), dtype=dtype, device=DEVICE)
        for s in ((batch, hq, d), (batch, hkv, ctx, d), (batch, hkv, ctx, d))
    )
    o, lse = split_kv_decode(q, k, v, splits, return_lse=True)
    # reference on the rounded inputs; SDPA's yardstick per request over its own K/V
    ro, rl = ref_attention(
        q.double().cpu().numpy()[:, :, None], k.double().cpu().numpy(), v.double().cpu().numpy()
    )
    assert_within_rule(o, ro[:, :, 0], q, list(k), list(v), lse=lse, label=f"decode ctx={ctx}")
    assert np.abs(lse.double().cpu().numpy() - rl[:, :, 0]).max() < 1e-4  # lse: fp32 from rounded inputs


@pytest.mark.parametrize(
    "splits, err", [(0, ValueError), (41, ValueError), (2.0, TypeError), (True, TypeError)]
)
def test_bad_splits(splits, err):
    q, k, v = torch.randn(1, 2, 16), torch.randn(1, 1, 40, 16), torch.randn(1, 1, 40, 16)
    with pytest.raises(err, match="splits"):
        split_kv_decode(q, k, v, splits)


def test_bad_shapes():
    with pytest.raises(ValueError, match="q"):
        split_kv_decode(torch.randn(1, 2, 1, 16), torch.randn(1, 1, 8, 16), torch.randn(1, 1, 8, 16))
    with pytest.raises(ValueError, match="multiple of KV heads"):
        split_kv_decode(torch.randn(1, 3, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16))
    with pytest.raises(TypeError, match="dtype"):
        split_kv_decode(
            torch.randn(1, 2, 16).double(),
            torch.randn(1, 1, 8, 16).double(),
            torch.randn(1, 1, 8, 16).double(),
        )
