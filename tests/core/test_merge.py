"""Attention states (o, lse) and the merge operator against the independent float64 reference.

Lecture §4.3: the state of a query over a key set I is (o(I), lse(I)); for disjoint I and J,
state(I) (+) state(J) = state(I u J). (+) is associative and commutative, (0, -inf) is its
identity. In float32 the merge order changes the last bits (floating-point addition is not
associative); in float64 every order agrees to ~1e-16.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from attnlab.core.softmax import attention_state, merge, merge_states

from refs import reference as ref


def _qkv(rng, n_q, n_k, d, d_v=None, dtype=np.float64):
    """q (d,) when n_q is None, else (n_q, d); k (n_k, d); v (n_k, d_v)."""
    d_v = d if d_v is None else d_v
    q = rng.standard_normal(d if n_q is None else (n_q, d))
    k = rng.standard_normal((n_k, d))
    v = rng.standard_normal((n_k, d_v))
    return q.astype(dtype), k.astype(dtype), v.astype(dtype)


def _err(got, want):
    """Max |got - want| over finite entries; -inf positions (empty rows) must agree exactly."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    assert not np.isnan(got).any(), "NaN"
    assert np.array_equal(np.isneginf(got), np.isneginf(want)), "-inf positions differ"
    fin = np.isfinite(want)
    return float(np.max(np.abs(got[fin] - want[fin]), initial=0.0))


def _state_err(got, want):
    return max(_err(got[0], want[0]), _err(got[1], want[1]))


def _no_warnings(fn, *args, **kw):
    """Call fn with every warning turned into an error (overflow, divide by zero, invalid)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            return fn(*args, **kw)


def _random_sizes(rng, extra: int, odd: bool = True) -> list[int]:
    """Chunk sizes with at least two empty chunks and two one-key chunks, shuffled; odd total."""
    sizes = [0, 0, 1, 1] + rng.integers(0, 12, size=extra).tolist()
    if odd and sum(sizes) % 2 == 0:
        sizes.append(1)
    return [int(s) for s in rng.permutation(sizes)]


def _bounds(sizes):
    edges = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    return list(zip(edges[:-1].tolist(), edges[1:].tolist()))


# --- attention_state against the reference ----------------------------------------------------


@pytest.mark.parametrize(
    "n_q, n_k, d, d_v",
    [
        (None, 1, 1, 1),
        (None, 7, 5, 3),
        (None, 33, 16, 16),
        (1, 1, 4, 4),
        (3, 9, 8, 5),
        (6, 31, 16, 16),
        (5, 2, 3, 7),
    ],
)
def test_state_matches_reference(n_q, n_k, d, d_v):
    rng = np.random.default_rng(100 + n_k * 7 + d)
    q, k, v = _qkv(rng, n_q, n_k, d, d_v)
    o, lse = attention_state(q, k, v)
    want_o, want_lse = ref.state_ref(q, k, v)
    assert np.shape(o) == np.shape(want_o) and np.shape(lse) == np.shape(want_lse)
    assert o.dtype == np.float64 and np.asarray(lse).dtype == np.float64
    assert _err(o, want_o) <= 1e-13
    assert _err(lse, want_lse) <= 1e-13


@pytest.mark.parametrize("scale", [0.05, 1.0, 3.0])
def test_state_explicit_scale(scale):
    rng = np.random.default_rng(5)
    q, k, v = _qkv(rng, 4, 11, 6)
    got = attention_state(q, k, v, scale=scale)
    assert _state_err(got, ref.state_ref(q, k, v, scale=scale)) <= 1e-13


def test_state_with_mask_including_fully_masked_rows():
    rng = np.random.default_rng(11)
    q, k, v = _qkv(rng, 6, 13, 8)
    mask = rng.random((6, 13)) < 0.5
    mask[2] = False  # a row that sees nothing
    mask[4] = False
    mask[4, 7] = True  # a row that sees exactly one key
    o, lse = _no_warnings(attention_state, q, k, v, mask=mask)
    want = ref.state_ref(q, k, v, mask=mask)
    assert _state_err((o, lse), want) <= 1e-13
    assert np.all(o[2] == 0.0) and lse[2] == -np.inf
    # one visible key: output is that key's value exactly-ish, lse is its logit
    assert np.allclose(o[4], v[7], rtol=0, atol=1e-15)
    assert lse[4] == pytest.approx(float(q[4] @ k[7]) / math.sqrt(8), abs=1e-14)


def test_state_broadcast_mask_1d_query():
    rng = np.random.default_rng(12)
    q, k, v = _qkv(rng, None, 10, 4)
    mask = np.arange(10) % 3 == 0  # (n_k,) broadcast to the single row
    got = attention_state(q, k, v, mask=mask)
    assert _state_err(got, ref.state_ref(q, k, v, mask=mask)) <= 1e-13
    # equals the state over the visible keys only
    assert _state_err(got, ref.state_ref(q, k[mask], v[mask])) <= 1e-13


def test_state_one_key():
    rng = np.random.default_rng(13)
    q, k, v = _qkv(rng, 3, 1, 5, 2)
    o, lse = attention_state(q, k, v)
    assert np.array_equal(o, np.broadcast_to(v[0], (3, 2)))
    assert _err(lse, (q @ k[0]) / math.sqrt(5)) <= 1e-15


@pytest.mark.parametrize("n_q", [None, 1, 4])
def test_state_zero_keys_is_identity(n_q):
    rng = np.random.default_rng(14)
    q, _, _ = _qkv(rng, n_q, 1, 6)
    k = np.empty((0, 6))
    v = np.empty((0, 3))
    o, lse = _no_warnings(attention_state, q, k, v)
    lead = () if n_q is None else (n_q,)
    assert np.shape(o) == lead + (3,) and np.shape(lse) == lead
    assert np.all(np.asarray(o) == 0.0) and not np.isnan(o).any()
    assert np.all(np.asarray(lse) == -np.inf)


def test_state_all_masked_no_warnings():
    rng = np.random.default_rng(15)
    q, k, v = _qkv(rng, 3, 5, 4)
    o, lse = _no_warnings(attention_state, q, k, v, mask=np.zeros((3, 5), dtype=bool))
    assert np.all(o == 0.0) and np.all(lse == -np.inf)


def test_lse_is_natural_log():
    # all logits 0 (zero keys): lse = ln(n_k), not log2 or log10
    q = np.ones((2, 4))
    k = np.zeros((10, 4))
    v = np.arange(40, dtype=np.float64).reshape(10, 4)
    o, lse = attention_state(q, k, v)
    assert lse == pytest.approx([math.log(10)] * 2, rel=1e-15)
    assert not np.allclose(lse, math.log2(10)) and not np.allclose(lse, math.log10(10))
    assert np.allclose(o, v.mean(axis=0), atol=1e-14)
    # random logits: exp(lse) is the softmax denominator, summed by hand
    rng = np.random.default_rng(16)
    q, k, v = _qkv(rng, None, 9, 3)
    _, lse = attention_state(q, k, v)
    den = math.fsum(math.exp(float(q @ k[j]) / math.sqrt(3)) for j in range(9))
    assert float(lse) == pytest.approx(math.log(den), abs=1e-14)


# --- merge over random partitions ---------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_merge_of_random_partition_equals_one_pass(seed):
    rng = np.random.default_rng(1000 + seed)
    sizes = _random_sizes(rng, extra=int(rng.integers(2, 10)))
    n_k = sum(sizes)
    assert n_k % 2 == 1 and 0 in sizes and 1 in sizes
    d = int(rng.integers(1, 17))
    n_q = None if seed % 2 else int(rng.integers(1, 5))
    q, k, v = _qkv(rng, n_q, n_k, d, int(rng.integers(1, 9)))
    bounds = _bounds(sizes)
    assert bounds[0][0] == 0 and bounds[-1][1] == n_k
    states = [attention_state(q, k[a:b], v[a:b]) for a, b in bounds]
    want = ref.state_ref(q, k, v)
    # folded pairwise, left to right
    acc = (np.zeros_like(want[0]), np.full_like(want[1], -np.inf))
    for s in states:
        acc = merge(acc, s)
    assert _state_err(acc, want) <= 1e-14
    assert _state_err(merge_states(states), want) <= 1e-14


def _random_states(rng, n_states, n_q=3, d=5, d_v=4, n_k_max=9):
    """States over disjoint random key sets (some empty); shared q."""
    q = rng.standard_normal((n_q, d))
    out = []
    for _ in range(n_states):
        n_k = int(rng.integers(0, n_k_max + 1))
        k = rng.standard_normal((n_k, d)) * rng.uniform(0.5, 3)
        v = rng.standard_normal((n_k, d_v))
        out.append(attention_state(q, k, v))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_merge_commutative_exactly(seed):
    rng = np.random.default_rng(2000 + seed)
    a, b = _random_states(rng, 2)
    ab, ba = merge(a, b), merge(b, a)
    assert np.array_equal(ab[0], ba[0]) and np.array_equal(ab[1], ba[1])
    # also in float32
    a32 = (a[0].astype(np.float32), a[1].astype(np.float32))
    b32 = (b[0].astype(np.float32), b[1].astype(np.float32))
    ab, ba = merge(a32, b32), merge(b32, a32)
    assert ab[0].dtype == np.float32
    assert np.array_equal(ab[0], ba[0]) and np.array_equal(ab[1], ba[1])


@pytest.mark.parametrize("seed", range(6))
def test_merge_associative_fp64(seed):
    rng = np.random.default_rng(3000 + seed)
    a, b, c = _random_states(rng, 3, n_k_max=20)
    left = merge(merge(a, b), c)
    right = merge(a, merge(b, c))
    assert _state_err(left, right) <= 1e-15 * max(
        1.0, float(np.max(np.abs(left[1][np.isfinite(left[1])]), initial=1.0))
    )
    assert _err(left[0], right[0]) <= 1e-15


def test_identity_and_empty_states():
    rng = np.random.default_rng(4000)
    (s,) = _random_states(rng, 1, n_k_max=8)
    ident = (np.zeros_like(s[0]), np.full_like(s[1], -np.inf))
    for got in (merge(ident, s), merge(s, ident)):
        assert np.array_equal(got[0], s[0]) and np.array_equal(got[1], s[1])
    empty = _no_warnings(merge, ident, ident)
    assert np.all(empty[0] == 0.0) and np.all(empty[1] == -np.inf)
    assert not np.isnan(empty[0]).any() and not np.isnan(empty[1]).any()
    # a single query (1-D o, 0-D lse) works too
    one = _no_warnings(merge, (np.zeros(3), -np.inf), (np.zeros(3), -np.inf))
    assert np.all(one[0] == 0.0) and one[1] == -np.inf


def test_merge_matches_formula_from_lecture():
    # lse = log(e^la + e^lb), o = e^(la - lse) o_a + e^(lb - lse) o_b, written with math
    oa, la = np.array([1.0, -2.0]), 0.3
    ob, lb = np.array([0.5, 4.0]), -1.7
    lse = math.log(math.exp(la) + math.exp(lb))
    o = math.exp(la - lse) * oa + math.exp(lb - lse) * ob
    got = merge((oa, la), (ob, lb))
    assert float(got[1]) == pytest.approx(lse, abs=1e-15)
    assert np.allclose(got[0], o, rtol=0, atol=1e-15)
    # huge lse values do not overflow (only differences are exponentiated)
    got = _no_warnings(merge, (oa, 1000.0), (ob, 1000.0 + math.log(3)))
    assert float(got[1]) == pytest.approx(1000.0 + math.log(4), abs=1e-12)
    assert np.allclose(got[0], 0.25 * oa + 0.75 * ob, atol=1e-14)


@pytest.mark.parametrize("seed", range(4))
def test_merge_states_orders_agree_fp64(seed):
    rng = np.random.default_rng(5000 + seed)
    states = _random_states(rng, int(rng.integers(2, 30)), n_k_max=15)
    n = len(states)
    fwd = merge_states(states, "forward")
    assert _state_err(merge_states(states), fwd) == 0.0  # None means forward
    orders = ["reverse"] + [rng.permutation(n) for _ in range(5)] + [list(rng.permutation(n))]
    scale = max(1.0, float(np.max(np.abs(fwd[1][np.isfinite(fwd[1])]), initial=1.0)))
    for order in orders:
        got = merge_states(states, order)
        assert _err(got[0], fwd[0]) <= 2e-15, order
        assert _err(got[1], fwd[1]) <= 2e-15 * scale, order


def test_merge_states_explicit_order_is_that_fold():
    rng = np.random.default_rng(5100)
    states = _random_states(rng, 5)
    order = [3, 0, 4, 1, 2]
    acc = states[3]
    for i in order[1:]:
        acc = merge(acc, states[i])
    got = merge_states(states, order)
    assert np.array_equal(got[0], acc[0]) and np.array_equal(got[1], acc[1])
    rev = merge_states(states, "reverse")
    acc = states[4]
    for i in (3, 2, 1, 0):
        acc = merge(acc, states[i])
    assert np.array_equal(rev[0], acc[0]) and np.array_equal(rev[1], acc[1])


# --- the lecture's demo (code 02, demo 3): one query, 10,000 keys, d = 64 -------------------------


@pytest.fixture(scope="module")
def demo():
    rng = np.random.default_rng(2024)
    q, k, v = _qkv(rng, None, 10_000, 64)
    return q, k, v, ref.state_ref(q, k, v)


def _chunk_states(q, k, v, splits):
    edges = np.linspace(0, k.shape[0], splits + 1).astype(int)
    return [attention_state(q, k[a:b], v[a:b]) for a, b in zip(edges[:-1], edges[1:])]


@pytest.mark.parametrize("splits", [2, 8, 64])
def test_demo_fp64_matches_one_pass(demo, splits):
    q, k, v, want = demo
    states = _chunk_states(q, k, v, splits)
    for order in ("forward", "reverse"):
        assert _state_err(merge_states(states, order), want) < 1e-14


@pytest.mark.parametrize("splits", [2, 8, 64])
def test_demo_fp32_order_dependence(demo, splits):
    q, k, v, want = demo
    q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
    states = _chunk_states(q32, k32, v32, splits)
    assert states[0][0].dtype == np.float32
    fwd = merge_states(states, "forward")
    rev = merge_states(states, "reverse")
    assert fwd[0].dtype == np.float32
    # determinism: the same order twice gives the same bits
    again = merge_states(states, "forward")
    assert np.array_equal(fwd[0], again[0]) and np.array_equal(fwd[1], again[1])
    diff = float(np.max(np.abs(fwd[0].astype(np.float64) - rev[0].astype(np.float64))))
    if splits == 2:
        # a merge of two states is commutative, so forward and reverse are the same computation
        assert diff == 0.0 and np.array_equal(fwd[1], rev[1])
    else:
        assert 0.0 < diff < 1e-5, diff
    # both are still close to the float64 answer
    assert _err(fwd[0], want[0]) < 1e-5 and _err(rev[0], want[0]) < 1e-5


# --- bad input ----------------------------------------------------------------------------------


def _s(n=3, d=4):
    return np.zeros((n, d)), np.zeros(n)


def test_merge_different_shapes():
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(2, 4\)"):
        merge(_s(3, 4), _s(2, 4))
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(3, 5\)"):
        merge(_s(3, 4), _s(3, 5))
    with pytest.raises(ValueError):
        merge_states([_s(3, 4), _s(2, 4)])


def test_merge_o_lse_shape_mismatch():
    with pytest.raises(ValueError, match=r"state a.*\(2,\)"):
        merge((np.zeros((3, 4)), np.zeros(2)), _s())
    with pytest.raises(ValueError, match=r"state b.*\(3, 1\)"):
        merge(_s(), (np.zeros((3, 4)), np.zeros((3, 1))))
    with pytest.raises(ValueError, match=r"states\[1\]"):
        merge_states([_s(), (np.zeros((3, 4)), np.zeros(4))], order=[1, 0])


@pytest.mark.parametrize("order", [[0, 0, 1], [0, 1], [0, 1, 2, 3], [0, 1, 3], [-1, 0, 1], [0.5, 1.5, 2.5]])
def test_merge_states_order_not_a_permutation(order):
    with pytest.raises(ValueError, match=r"order.*permutation of range\(3\)"):
        merge_states([_s(), _s(), _s()], order=order)


def test_merge_states_order_bad_string():
    with pytest.raises(ValueError, match="sideways") as info:
        merge_states([_s(), _s()], order="sideways")
    assert "order" in str(info.value) and "forward" in str(info.value)


def test_merge_states_empty_list():
    with pytest.raises(ValueError, match="states"):
        merge_states([])
    with pytest.raises(ValueError, match="states"):
        merge_states(iter(()))


@pytest.mark.parametrize(
    "bad", [np.zeros(3), 5.0, None, (np.zeros((3, 4)),), (np.zeros((3, 4)), np.zeros(3), np.zeros(3))]
)
def test_non_pair_state_is_type_error(bad):
    with pytest.raises(TypeError, match="pair"):
        merge(bad, _s())
    with pytest.raises(TypeError, match="pair"):
        merge(_s(), bad)
    with pytest.raises(TypeError, match="pair"):
        merge_states([_s(), bad])
