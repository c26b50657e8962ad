"""attnlab.core.kvquant, the FP8 KV cache: rounding against ml_dtypes with scales computed here,
attention against the float64 reference of tests/refs (one head at a time, GQA mapped by hand),
the error bound, the bytes and the refusals."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from attnlab.core import kvquant as kq
from attnlab.core.decode import decode_cost
from refs.reference import attention_head

SHAPES = [(37, 3, 20), (5, 1, 7), (64, 2, 33)]  # odd token counts, heads and head dims


def _ref_quantise(x, per):
    """e4m3 rounding with float32 scales, written out: amax / 448 per KV head or per (token, head)."""
    x32 = x.astype(np.float32)
    axes = (0, 2) if per == "head" else (2,)
    amax = np.abs(x32).max(axis=axes, keepdims=True)
    s = np.where(amax > 0, amax / np.float32(448), np.float32(1)).astype(np.float32)
    y = np.clip(x32 / s, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    return y * s, s


def _ref_attention(q, k, v):
    group = q.shape[1] // k.shape[1]
    return np.stack(
        [attention_head(q[:, h], k[:, h // group], v[:, h // group])[0] for h in range(q.shape[1])], axis=1
    )


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("per", kq.PER)
def test_rounding_is_e4m3_with_the_stated_scales(shape, per):
    x = (
        np.random.default_rng(sum(shape)).standard_normal(shape)
        * np.exp(np.random.default_rng(1).standard_normal(shape[:2]))[..., None]
    )
    got, scales = kq.quantise_kv(x, "fp8_e4m3", per)
    want, s = _ref_quantise(x, per)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(scales, s.reshape(scales.shape))
    assert scales.shape == ((shape[1],) if per == "head" else shape[:2])
    bound = kq.element_bound(x, "fp8_e4m3", per)
    err = np.abs(got - x)
    assert np.all(err <= bound) and (err / bound).max() > 0.5  # holds, and is nearly reached


@pytest.mark.parametrize("per", kq.PER)
def test_attention_over_the_cache_against_the_float64_reference(per):
    rng = np.random.default_rng(7)
    q = rng.standard_normal((3, 6, 20))  # 6 query heads on 3 KV heads
    k, v = rng.standard_normal((37, 3, 20)) * 2, rng.standard_normal((37, 3, 20))
    np.testing.assert_allclose(
        kq.kv_attention(q, k, v, None), _ref_attention(q, k, v), rtol=1e-12, atol=1e-14
    )
    kq_, vq_ = _ref_quantise(k, per)[0], _ref_quantise(v, per)[0]
    got = kq.kv_attention(q, k, v, "fp8_e4m3", per)
    np.testing.assert_allclose(got, _ref_attention(q, kq_, vq_), rtol=1e-12, atol=1e-14)
    err = np.abs(got - _ref_attention(q, k, v))
    assert err.max() > 0 and np.all(err <= kq.kv_error_bound(q, k, v, "fp8_e4m3", per))


def test_error_against_the_inputs_only_model_and_the_bound():
    head = kq.kv_cache_error("fp8_e4m3", "head", 30.0, n=256)
    token = kq.kv_cache_error("fp8_e4m3", "token", 30.0, n=256)
    bf16 = kq.kv_cache_error("bf16", "head", 30.0, n=256)
    assert bf16.relative < token.relative < head.relative  # finer scales, smaller error
    assert max(head.bound_ratio, token.bound_ratio, bf16.bound_ratio) <= 1
    q, k, v = kq.kv_inputs(256, 64, 2, 4, 16, 30.0, 0)
    ref = _ref_attention(q, k, v)
    o = _ref_attention(q, _ref_quantise(k, "head")[0], _ref_quantise(v, "head")[0])
    assert head.relative == pytest.approx(np.linalg.norm(o - ref) / np.linalg.norm(ref), rel=1e-9)


def test_bytes_by_hand():
    assert kq.scale_bytes_per_token(8, "token") == 2 * 8 * 4 and kq.scale_bytes_per_token(8, "head") == 0
    g, l_kv, d, b = 4, 8192, 128, 2
    assert kq.kv_decode_cost(g, l_kv, d, batch=b) == decode_cost(g, 1, l_kv, d, batch=b)
    f8 = kq.kv_decode_cost(g, l_kv, d, batch=b, fmt="fp8_e4m3")
    assert f8.flops == b * 4 * g * l_kv * d  # computes in bf16: same FLOPs
    assert f8.bytes == b * (2 * g * d * 2 + 2 * l_kv * d + 2 * 4)  # Q, O bf16; K, V 1 byte; 2 scales
    tok = kq.kv_decode_cost(g, l_kv, d, batch=b, fmt="fp8_e4m3", per="token")
    assert tok.bytes - f8.bytes == b * 2 * 4 * (l_kv - 1)


def test_refusals_by_name():
    x = np.ones((4, 2, 8))
    with pytest.raises(ValueError, match="fmt"):
        kq.quantise_kv(x, "fp4_e2m1")
    with pytest.raises(ValueError, match="per"):
        kq.quantise_kv(x, per="channel")
    with pytest.raises(ValueError, match="x"):
        kq.quantise_kv(np.ones((4, 8)))
    with pytest.raises(ValueError, match="x"):
        kq.quantise_kv(np.full((4, 2, 8), np.nan))
    with pytest.raises(ValueError, match="GQA"):
        kq.kv_attention(np.ones((1, 3, 8)), x, x)
    with pytest.raises(ValueError, match="same shape"):
        kq.kv_attention(np.ones((1, 2, 8)), x, np.ones((5, 2, 8)))
    with pytest.raises(TypeError, match="kv_heads"):
        kq.scale_bytes_per_token(2.5, "token")
    with pytest.raises(ValueError, match="n_q"):
        kq.kv_inputs(n=16, group=4, n_q=8)
