"""attnlab.core.variants (FlashInfer's attention-variant functors) against dense float64 definitions.

Every expected value here is built from the definition, independently of the module under test:
the full (N_q, N_k) score matrix s = scale * q k^T in float64, the variant applied to it entry by
entry (mask, soft cap, ALiBi bias, RoPE rotation of q and k, sigmoid instead of softmax), then
softmax (or sigmoid) times V. Positions are bottom-right aligned: query row i sits at
q_idx = i + N_k - N_q in the key sequence, key j at kv_idx = j. A row that sees no key outputs 0
and has lse = -inf. Tile classifications and HBM counts come from the same dense masks.
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings

import numpy as np
import pytest

from attnlab.core.hbm import HBM
from attnlab.core.variants import (
    Variant,
    alibi,
    causal,
    rope,
    sigmoid,
    sink_window,
    sliding_window,
    soft_cap,
    tile_io,
    tile_mask,
    variant_attention,
)

from refs.reference import state_ref

TOL = 1e-12
NQ, NK, D, DV = 37, 101, 16, 12  # odd sizes, N_q != N_k: bottom-right alignment matters
# (block_r, block_c): the default, blocks that divide nothing, one-element tiles, larger than N
BLOCKS = [(None, 64), (5, 7), (3, 13), (1, 1), (64, 128)]


def _qkv(seed, n_q=NQ, n_k=NK, d=D, d_v=DV, q_scale=1.0):
    rng = np.random.default_rng(seed)
    return (
        q_scale * rng.standard_normal((n_q, d)),
        rng.standard_normal((n_k, d)),
        rng.standard_normal((n_k, d_v)),
    )


# --------------------------------------------------------------------------------------------
# dense definitions
# --------------------------------------------------------------------------------------------


def _pos(n_q, n_k):
    """(q_idx column (n_q, 1), kv_idx row (1, n_k)), bottom-right aligned."""
    return np.arange(n_q)[:, None] + (n_k - n_q), np.arange(n_k)[None, :]


def m_causal(n_q, n_k):
    qi, kj = _pos(n_q, n_k)
    return kj <= qi


def m_window(n_q, n_k, w):
    qi, kj = _pos(n_q, n_k)
    return (qi - w < kj) & (kj <= qi)


def m_sink(n_q, n_k, sinks, w):
    qi, kj = _pos(n_q, n_k)
    return (kj <= qi) & ((kj < sinks) | (qi - w < kj))


def l_cap(c):
    return lambda s, qi, kj: c * np.tanh(s / c)


def l_alibi(slope):
    return lambda s, qi, kj: s + slope * (kj - qi)


def rope_ref(x, pos, theta):
    """Rotate dims (2i, 2i+1) of row r by pos[r] * theta^(-2i/d) (counter-clockwise)."""
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[1]
    i = np.arange(d // 2)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * theta ** (-2.0 * i / d)
    c, s = np.cos(ang), np.sin(ang)
    x0, x1 = x[:, 0::2], x[:, 1::2]
    out = np.empty_like(x)
    out[:, 0::2] = x0 * c - x1 * s
    out[:, 1::2] = x0 * s + x1 * c
    return out


def dense(q, k, v, *, mask=None, logits=(), rope_theta=None, sigmoid_bias=None, scale=None):
    """Dense float64 attention with the variant written out: returns (o, lse) (lse None for sigmoid).

    `logits` is a sequence of s -> s' functions applied in order; `mask` a (n_q, n_k) bool array.
    """
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    n_q, d = q.shape
    n_k = k.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    qi, kj = _pos(n_q, n_k)
    if rope_theta is not None:
        q = rope_ref(q, qi[:, 0], rope_theta)
        k = rope_ref(k, kj[0], rope_theta)
    s = scale * (q @ k.T)
    for f in logits:
        s = f(s, qi, kj)
    vis = np.ones((n_q, n_k), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    if sigmoid_bias is not None:
        p = np.where(vis, 1.0 / (1.0 + np.exp(-(s + sigmoid_bias))), 0.0)
        return p @ v, None
    o = np.zeros((n_q, v.shape[1]))
    lse = np.full(n_q, -np.inf)
    for r in range(n_q):
        cols = np.flatnonzero(vis[r])
        if cols.size == 0:
            continue
        row = s[r, cols]
        mx = row.max()
        e = np.exp(row - mx)
        o[r] = (e / e.sum()) @ v[cols]
        lse[r] = mx + math.log(e.sum())
    return o, lse


def _close(got, want, tol=TOL, what="O"):
    got = np.asarray(got)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert not np.isnan(got).any(), f"NaN in {what}"
    assert np.array_equal(np.isneginf(got), np.isneginf(want)), f"{what}: -inf positions differ"
    fin = np.isfinite(want)
    err = np.max(np.abs(got[fin] - want[fin]), initial=0.0)
    assert err <= tol, f"{what}: max error {err:.3e} > {tol:.1e}"


def _run(q, k, v, *vs, block=(None, 64), **kw):
    br, bc = block
    return variant_attention(q, k, v, *vs, block_r=br, block_c=bc, **kw)


def _tiles(n, b):
    return [(a, min(a + b, n)) for a in range(0, n, b)]


def classify(mask, br, bc):
    """Dense tile classification: 'empty' / 'partial' / 'full'."""
    n_q, n_k = mask.shape
    rows, cols = _tiles(n_q, br), _tiles(n_k, bc)
    out = np.empty((len(rows), len(cols)), dtype=object)
    for a, (r0, r1) in enumerate(rows):
        for b, (c0, c1) in enumerate(cols):
            t = mask[r0:r1, c0:c1]
            out[a, b] = "full" if t.all() else ("partial" if t.any() else "empty")
    return out


# --------------------------------------------------------------------------------------------
# each factory against its definition (plus: it changes the answer)
# --------------------------------------------------------------------------------------------

# id -> (variant factory call, dense keyword arguments given n_q, n_k)
FACTORIES = {
    "causal": (lambda: causal(), lambda n_q, n_k: dict(mask=m_causal(n_q, n_k))),
    "soft_cap": (lambda: soft_cap(2.0), lambda n_q, n_k: dict(logits=[l_cap(2.0)])),
    "sliding_window": (lambda: sliding_window(8), lambda n_q, n_k: dict(mask=m_window(n_q, n_k, 8))),
    "sigmoid": (lambda: sigmoid(-1.5), lambda n_q, n_k: dict(sigmoid_bias=-1.5)),
    "alibi": (lambda: alibi(0.125), lambda n_q, n_k: dict(logits=[l_alibi(0.125)])),
    "rope": (lambda: rope(10000.0), lambda n_q, n_k: dict(rope_theta=10000.0)),
    "sink_window": (lambda: sink_window(4, 8), lambda n_q, n_k: dict(mask=m_sink(n_q, n_k, 4, 8))),
}


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b[0]}x{b[1]}")
@pytest.mark.parametrize("fid", list(FACTORIES))
def test_factory_matches_dense_definition(fid, block):
    make, kw = FACTORIES[fid]
    q, k, v = _qkv(1, q_scale=3.0)  # large logits: soft cap and sigmoid bite
    want, want_lse = dense(q, k, v, **kw(NQ, NK))
    var = make()
    assert isinstance(var, Variant)
    if want_lse is None:
        got = _run(q, k, v, var, block=block)
        _close(got, want)
    else:
        got, lse = _run(q, k, v, var, block=block, return_lse=True)
        _close(got, want)
        _close(lse, want_lse, what="lse")
        _close(_run(q, k, v, var, block=block), want, what="O without lse")
    plain, _ = state_ref(q, k, v)
    assert np.max(np.abs(np.asarray(got) - plain)) > 1e-2, f"{fid} did not change the output"


def test_no_variant_is_plain_attention():
    q, k, v = _qkv(2)
    want, want_lse = state_ref(q, k, v)
    for block in BLOCKS:
        o, lse = _run(q, k, v, block=block, return_lse=True)
        _close(o, want)
        _close(lse, want_lse, what="lse")
    _close(variant_attention(q, k, v), want, what="defaults")
    _close(variant_attention(q, k, v, Variant(name="nothing")), want, what="empty Variant")


def test_explicit_scale_is_applied_before_the_logits_transform():
    q, k, v = _qkv(3, q_scale=3.0)
    want, want_lse = dense(q, k, v, logits=[l_cap(1.5)], scale=0.7)
    o, lse = variant_attention(q, k, v, soft_cap(1.5), scale=0.7, block_r=8, block_c=16, return_lse=True)
    _close(o, want)
    _close(lse, want_lse, what="lse")


def test_non_causal_alibi_rewards_later_keys_by_definition():
    # s + slope * (j - q_idx): keys after the diagonal get a bonus (no mask in alibi alone)
    q, k, v = _qkv(4)
    want, _ = dense(q, k, v, logits=[l_alibi(0.5)])
    _close(_run(q, k, v, alibi(0.5), block=(5, 7)), want)


def test_sigmoid_masked_keys_contribute_nothing():
    q, k, v = _qkv(5)
    want, _ = dense(q, k, v, mask=m_window(NQ, NK, 10), sigmoid_bias=0.25)
    _close(_run(q, k, v, sigmoid(0.25), sliding_window(10), block=(5, 7)), want)
    _close(_run(q, k, v, sigmoid(0.25) & sliding_window(10), block=(3, 13)), want)
    # an unmasked sigmoid output is not normalised: it sums sigma over all N_k keys
    ones = np.ones((NK, 1))
    got = _run(q, k, ones, sigmoid(0.0), block=(4, 32))
    s = (q @ k.T) / math.sqrt(D)
    _close(got, (1.0 / (1.0 + np.exp(-s))).sum(axis=1, keepdims=True))


def test_rope_depends_only_on_relative_position():
    # dropping key 0 shifts every kv_idx and every q_idx down by one: same relative positions,
    # so rope attention over k[1:] equals rope attention over k with key 0 masked out
    q, k, v = _qkv(6)
    drop0 = Variant(
        name="drop0",
        logits_mask=lambda qi, kj: np.broadcast_to(
            np.asarray(kj) >= 1, np.broadcast_shapes(np.shape(qi), np.shape(kj))
        ),
    )
    full = _run(q, k, v, rope(500.0), drop0, block=(8, 16))
    short = _run(q, k[1:], v[1:], rope(500.0), block=(8, 16))
    _close(np.asarray(full), np.asarray(short), tol=1e-11)


def test_rope_rotation_at_position_zero_is_identity():
    # N_q = N_k = 1: both at position 0, no rotation: plain attention of one key is v
    q, k, v = _qkv(7, n_q=1, n_k=1)
    _close(_run(q, k, v, rope(10000.0), block=(1, 1)), v.copy())


# --------------------------------------------------------------------------------------------
# the Variant dataclass and composition
# --------------------------------------------------------------------------------------------


def test_variant_is_a_frozen_dataclass_with_defaults():
    assert dataclasses.is_dataclass(Variant)
    v = Variant(name="x")
    assert v.name == "x" and v.use_softmax is True
    for f in (
        "query_transform",
        "key_transform",
        "value_transform",
        "logits_transform",
        "logits_mask",
        "output_transform",
    ):
        assert getattr(v, f) is None, f
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.name = "y"
    assert sigmoid(0.0).use_softmax is False
    assert causal().use_softmax is True


@pytest.mark.parametrize(
    "var, base, params",
    [
        (lambda: causal(), "causal", ()),
        (lambda: soft_cap(30), "soft_cap", ("30",)),
        (lambda: sliding_window(512), "sliding_window", ("512",)),
        (lambda: sigmoid(-2.5), "sigmoid", ("-2.5",)),
        (lambda: alibi(0.0625), "alibi", ("0.0625",)),
        (lambda: rope(10000), "rope", ("10000",)),
        (lambda: sink_window(4, 256), "sink_window", ("4", "256")),
    ],
)
def test_factory_names_show_their_parameters(var, base, params):
    name = var().name
    assert isinstance(name, str) and base in name, name
    for p in params:
        assert p in name, f"{p!r} not in {name!r}"


def test_soft_cap_name_is_exact():
    assert soft_cap(30).name == "soft_cap(30)"


def test_composite_name_contains_both_names():
    comp = soft_cap(30) & sliding_window(512)
    assert isinstance(comp, Variant)
    assert "soft_cap(30)" in comp.name and "sliding_window(512)" in comp.name


COMPOSITIONS = {
    "soft_cap&sliding_window": (
        lambda: soft_cap(2.0) & sliding_window(16),
        lambda n_q, n_k: dict(logits=[l_cap(2.0)], mask=m_window(n_q, n_k, 16)),
    ),
    "causal&alibi": (
        lambda: causal() & alibi(0.25),
        lambda n_q, n_k: dict(logits=[l_alibi(0.25)], mask=m_causal(n_q, n_k)),
    ),
    "rope&causal": (
        lambda: rope(10000.0) & causal(),
        lambda n_q, n_k: dict(rope_theta=10000.0, mask=m_causal(n_q, n_k)),
    ),
    # order matters: left first
    "soft_cap&alibi": (
        lambda: soft_cap(1.0) & alibi(0.25),
        lambda n_q, n_k: dict(logits=[l_cap(1.0), l_alibi(0.25)]),
    ),
    "alibi&soft_cap": (
        lambda: alibi(0.25) & soft_cap(1.0),
        lambda n_q, n_k: dict(logits=[l_alibi(0.25), l_cap(1.0)]),
    ),
    "three": (
        lambda: rope(100.0) & soft_cap(3.0) & alibi(0.1) & sink_window(3, 12),
        lambda n_q, n_k: dict(
            rope_theta=100.0, logits=[l_cap(3.0), l_alibi(0.1)], mask=m_sink(n_q, n_k, 3, 12)
        ),
    ),
    "causal&sliding_window": (
        lambda: causal() & sliding_window(20),
        lambda n_q, n_k: dict(mask=m_causal(n_q, n_k) & m_window(n_q, n_k, 20)),
    ),
    "sigmoid&alibi&causal": (
        lambda: sigmoid(-1.0) & alibi(0.5) & causal(),
        lambda n_q, n_k: dict(logits=[l_alibi(0.5)], mask=m_causal(n_q, n_k), sigmoid_bias=-1.0),
    ),
}


@pytest.mark.parametrize("block", [(None, 64), (5, 7), (16, 1)], ids=lambda b: f"{b[0]}x{b[1]}")
@pytest.mark.parametrize("cid", list(COMPOSITIONS))
def test_composition_matches_dense_composition(cid, block):
    make, kw = COMPOSITIONS[cid]
    q, k, v = _qkv(10, q_scale=3.0)
    want, want_lse = dense(q, k, v, **kw(NQ, NK))
    if want_lse is None:
        _close(_run(q, k, v, make(), block=block), want)
    else:
        o, lse = _run(q, k, v, make(), block=block, return_lse=True)
        _close(o, want)
        _close(lse, want_lse, what="lse")


def test_order_of_composition_changes_the_answer():
    q, k, v = _qkv(11, q_scale=3.0)
    a = _run(q, k, v, soft_cap(1.0) & alibi(0.25))
    b = _run(q, k, v, alibi(0.25) & soft_cap(1.0))
    assert np.max(np.abs(np.asarray(a) - np.asarray(b))) > 1e-2


def test_several_positional_variants_compose_in_order():
    q, k, v = _qkv(12, q_scale=3.0)
    want, _ = dense(q, k, v, logits=[l_alibi(0.25), l_cap(1.0)], mask=m_window(NQ, NK, 9))
    _close(_run(q, k, v, alibi(0.25), soft_cap(1.0), sliding_window(9), block=(5, 7)), want)
    _close(_run(q, k, v, alibi(0.25) & soft_cap(1.0), sliding_window(9), block=(5, 7)), want)


# --------------------------------------------------------------------------------------------
# custom functors: the calling convention
# --------------------------------------------------------------------------------------------


def test_custom_mask_gets_column_and_row_position_vectors():
    seen_q, seen_k, shapes = set(), set(), []

    def mask(qi, kj):
        qi, kj = np.asarray(qi), np.asarray(kj)
        shapes.append((qi.shape, kj.shape))
        seen_q.update(qi.ravel().tolist())
        seen_k.update(kj.ravel().tolist())
        return (qi + kj) % 3 != 0

    q, k, v = _qkv(13)
    got = _run(q, k, v, Variant(name="mod3", logits_mask=mask), block=(8, 16))
    qi, kj = _pos(NQ, NK)
    want, _ = dense(q, k, v, mask=(qi + kj) % 3 != 0)
    _close(got, want)
    assert shapes
    for sq, sk in shapes:
        assert len(sq) == 2 and sq[1] == 1, f"q_idx shape {sq}, want (rows, 1)"
        assert len(sk) == 2 and sk[0] == 1, f"kv_idx shape {sk}, want (1, cols)"
    assert seen_q == set(range(NK - NQ, NK)), "q_idx must be i + N_k - N_q"
    assert seen_k == set(range(NK))


def test_custom_transforms_are_filled_in():
    q, k, v = _qkv(14)
    col = lambda idx: np.reshape(np.asarray(idx, dtype=np.float64), (-1, 1))
    var = Variant(
        name="custom",
        query_transform=lambda x, qi: x * (1.0 + 0.01 * col(qi)),
        key_transform=lambda x, kj: x - 0.02 * col(kj),
        value_transform=lambda x, kj: x * (1.0 + 0.005 * col(kj)),
        logits_transform=lambda s, qi, kj: s - 0.001 * (qi - kj) ** 2,
        output_transform=lambda o, qi: o * 2.0 + col(qi) * 0.0 + 1.0,
    )
    qi, kj = _pos(NQ, NK)
    qt = q * (1.0 + 0.01 * qi)
    kt = k - 0.02 * kj.T
    vt = v * (1.0 + 0.005 * kj.T)
    o, lse = dense(qt, kt, vt, logits=[lambda s, a, b: s - 0.001 * (a - b) ** 2])
    want = o * 2.0 + 1.0
    for block in [(None, 64), (5, 7)]:
        got, got_lse = _run(q, k, v, var, block=block, return_lse=True)
        _close(got, want)
        _close(got_lse, lse, what="lse")


# --------------------------------------------------------------------------------------------
# rows that see nothing: 0, lse -inf, never NaN, no warnings
# --------------------------------------------------------------------------------------------

EMPTY_ROWS = [
    # (variants, n_q, n_k, dense kwargs) with n_q > n_k so q_idx < 0 for the first rows
    ("sliding_window", lambda: (sliding_window(4),), 40, 25, lambda: dict(mask=m_window(40, 25, 4))),
    ("sink_window0", lambda: (sink_window(0, 4),), 40, 25, lambda: dict(mask=m_sink(40, 25, 0, 4))),
    ("sink_window", lambda: (sink_window(2, 3),), 33, 9, lambda: dict(mask=m_sink(33, 9, 2, 3))),
    (
        "causal&soft_cap",
        lambda: (causal(), soft_cap(1.0)),
        30,
        11,
        lambda: dict(mask=m_causal(30, 11), logits=[l_cap(1.0)]),
    ),
    (
        "causal&alibi",
        lambda: (causal() & alibi(0.3),),
        30,
        11,
        lambda: dict(mask=m_causal(30, 11), logits=[l_alibi(0.3)]),
    ),
    (
        "rope&causal",
        lambda: (rope(10.0) & causal(),),
        30,
        11,
        lambda: dict(mask=m_causal(30, 11), rope_theta=10.0),
    ),
    (
        "sigmoid&causal",
        lambda: (sigmoid(0.5), causal()),
        30,
        11,
        lambda: dict(mask=m_causal(30, 11), sigmoid_bias=0.5),
    ),
    (
        "sigmoid&window",
        lambda: (sigmoid(0.5), sliding_window(2)),
        30,
        11,
        lambda: dict(mask=m_window(30, 11, 2), sigmoid_bias=0.5),
    ),
]


@pytest.mark.parametrize("block", [(None, 64), (7, 3), (1, 1), (64, 64)], ids=lambda b: f"{b[0]}x{b[1]}")
@pytest.mark.parametrize("eid, make, n_q, n_k, kw", EMPTY_ROWS, ids=[e[0] for e in EMPTY_ROWS])
def test_rows_that_see_nothing_give_zero(eid, make, n_q, n_k, kw, block):
    q, k, v = _qkv(20, n_q=n_q, n_k=n_k, q_scale=3.0)
    want, want_lse = dense(q, k, v, **kw())
    empty = ~dense_visible_any(kw(), n_q, n_k)
    assert empty.any() and not empty.all(), "case must have some rows that see nothing"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if want_lse is None:
            got = np.asarray(_run(q, k, v, *make(), block=block))
        else:
            got, lse = _run(q, k, v, *make(), block=block, return_lse=True)
            got = np.asarray(got)
            _close(lse, want_lse, what="lse")
            assert np.all(np.isneginf(np.asarray(lse)[empty]))
    _close(got, want)
    assert np.all(got[empty] == 0.0)


def dense_visible_any(kw, n_q, n_k):
    m = kw.get("mask")
    return np.ones(n_q, bool) if m is None else m.any(axis=1)


def test_mask_that_hides_everything():
    q, k, v = _qkv(21)
    none = Variant(
        name="none",
        logits_mask=lambda qi, kj: np.zeros(np.broadcast_shapes(np.shape(qi), np.shape(kj)), dtype=bool),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        o, lse = _run(q, k, v, soft_cap(2.0) & none, block=(5, 7), return_lse=True)
        so = _run(q, k, v, sigmoid(1.0), none, block=(5, 7))
    assert np.all(np.asarray(o) == 0.0) and np.all(np.isneginf(np.asarray(lse)))
    assert np.all(np.asarray(so) == 0.0)


@pytest.mark.parametrize(
    "sinks, w, n_q, n_k",
    [
        (0, 1, 12, 12),  # window of one: the diagonal only
        (5, 1, 12, 12),  # sinks + diagonal
        (20, 3, 12, 12),  # sinks beyond N_k: plain causal
        (2, 100, 9, 30),  # window beyond N_k: plain causal
        (3, 2, 1, 17),  # decode-like single query
    ],
)
def test_sink_window_edges(sinks, w, n_q, n_k):
    q, k, v = _qkv(22, n_q=n_q, n_k=n_k)
    mask = m_sink(n_q, n_k, sinks, w)
    want, want_lse = dense(q, k, v, mask=mask)
    o, lse = _run(q, k, v, sink_window(sinks, w), block=(5, 7), return_lse=True)
    _close(o, want)
    _close(lse, want_lse, what="lse")
    if sinks >= n_k or w >= n_k:
        _close(o, dense(q, k, v, mask=m_causal(n_q, n_k))[0], what="equals causal")


def test_sliding_window_one_is_the_diagonal():
    q, k, v = _qkv(23, n_q=10, n_k=14)
    o = _run(q, k, v, sliding_window(1), block=(3, 5))
    _close(np.asarray(o), v[4:14].copy())  # row i sees only key i + N_k - N_q


# --------------------------------------------------------------------------------------------
# tile_mask and HBM traffic of skipped tiles
# --------------------------------------------------------------------------------------------

MASKS = {
    "causal": (lambda: causal(), lambda n_q, n_k: m_causal(n_q, n_k)),
    "sliding_window": (lambda: sliding_window(8), lambda n_q, n_k: m_window(n_q, n_k, 8)),
    "sink_window": (lambda: sink_window(4, 8), lambda n_q, n_k: m_sink(n_q, n_k, 4, 8)),
    "soft_cap": (lambda: soft_cap(3.0), lambda n_q, n_k: np.ones((n_q, n_k), bool)),
    "causal&window": (
        lambda: causal() & sliding_window(20),
        lambda n_q, n_k: m_causal(n_q, n_k) & m_window(n_q, n_k, 20),
    ),
    "alibi&causal": (lambda: alibi(0.5) & causal(), lambda n_q, n_k: m_causal(n_q, n_k)),
    "sigmoid&window": (lambda: sigmoid(0.0) & sliding_window(5), lambda n_q, n_k: m_window(n_q, n_k, 5)),
}
TILE_SHAPES = [(NQ, NK), (40, 25), (64, 64)]
TILE_BLOCKS = [(5, 7), (16, 16), (8, 32), (64, 64), (1, 1)]


@pytest.mark.parametrize("br, bc", TILE_BLOCKS)
@pytest.mark.parametrize("n_q, n_k", TILE_SHAPES)
@pytest.mark.parametrize("mid", list(MASKS))
def test_tile_mask_matches_dense_classification(mid, n_q, n_k, br, bc):
    make, mask = MASKS[mid]
    want = classify(mask(n_q, n_k), br, bc)
    got = np.asarray(tile_mask([make()], n_q, n_k, br, bc))
    assert got.shape == (math.ceil(n_q / br), math.ceil(n_k / bc))
    assert got.tolist() == want.tolist()


def test_tile_mask_causal_picture():
    got = np.asarray(tile_mask([causal()], 128, 128, 64, 64))
    assert got.tolist() == [["partial", "empty"], ["full", "partial"]]


def test_tile_mask_of_several_variants_ands_them():
    want = classify(m_causal(NQ, NK) & m_window(NQ, NK, 20), 5, 7)
    assert np.asarray(tile_mask([causal(), sliding_window(20)], NQ, NK, 5, 7)).tolist() == want.tolist()


@pytest.mark.parametrize("br, bc", [(5, 7), (16, 16), (8, 32), (64, 64), (1, 3)])
@pytest.mark.parametrize("n_q, n_k", TILE_SHAPES)
@pytest.mark.parametrize("mid", list(MASKS))
def test_skipped_tiles_move_nothing(mid, n_q, n_k, br, bc):
    make, mask = MASKS[mid]
    m = mask(n_q, n_k)
    k_reads = sum(
        (c1 - c0) * D for r0, r1 in _tiles(n_q, br) for c0, c1 in _tiles(n_k, bc) if m[r0:r1, c0:c1].any()
    )
    q, k, v = _qkv(30, n_q=n_q, n_k=n_k)
    hbm = HBM()
    variant_attention(q, k, v, make(), block_r=br, block_c=bc, hbm=hbm)
    io = hbm.by_tensor()
    assert io["K"][0] == k_reads
    assert io["V"][0] == k_reads // D * DV  # V_j travels with K_j, d_v columns


@pytest.mark.parametrize("br, bc", [(5, 7), (16, 16), (8, 32), (64, 64), (1, 3)])
@pytest.mark.parametrize("n_q, n_k", TILE_SHAPES)
@pytest.mark.parametrize(
    "mid, lse",
    [(m, lse) for m in [*MASKS, "plain"] for lse in (False, True) if not (m == "sigmoid&window" and lse)],
)  # sigmoid: no lse
def test_tile_io_equals_the_hbm_counter(mid, n_q, n_k, br, bc, lse):
    """tile_io predicts, from the tile classification alone, what the counter of a real run sees
    (with n_q > n_k the first query tiles see no key: their Q is never read, their O still written)."""
    vs = [] if mid == "plain" else [MASKS[mid][0]()]
    q, k, v = _qkv(31, n_q=n_q, n_k=n_k)
    hbm = HBM()
    variant_attention(q, k, v, *vs, block_r=br, block_c=bc, hbm=hbm, return_lse=lse)
    got = tile_io(vs, n_q, n_k, br, bc, d=D, d_v=DV, return_lse=lse)
    counted = hbm.by_tensor()
    assert set(counted) <= set(got)
    assert {t: counted.get(t, (0, 0)) for t in got} == got


# --------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------

Q0, K0, V0 = _qkv(40, n_q=5, n_k=7, d=4, d_v=3)
Q5, K5, V5 = _qkv(41, n_q=5, n_k=7, d=5, d_v=3)

BAD = [
    # (id, call, exception, parameter-name regex, value shown)
    ("window-0", lambda: sliding_window(0), ValueError, r"w|window", "0"),
    ("window-neg", lambda: sliding_window(-3), ValueError, r"w|window", "-3"),
    ("window-bool", lambda: sliding_window(True), TypeError, r"w|window", "True"),
    ("window-str", lambda: sliding_window("8"), TypeError, r"w|window", "8"),
    ("sink-sinks-neg", lambda: sink_window(-1, 8), ValueError, r"sinks", "-1"),
    ("sink-w-0", lambda: sink_window(4, 0), ValueError, r"w|window", "0"),
    ("sink-sinks-bool", lambda: sink_window(True, 8), TypeError, r"sinks", "True"),
    ("sink-w-str", lambda: sink_window(4, "8"), TypeError, r"w|window", "8"),
    ("cap-0", lambda: soft_cap(0), ValueError, r"c|cap", "0"),
    ("cap-neg", lambda: soft_cap(-30.0), ValueError, r"c|cap", "-30"),
    ("cap-nan", lambda: soft_cap(float("nan")), ValueError, r"c|cap", "nan"),
    ("cap-bool", lambda: soft_cap(True), TypeError, r"c|cap", "True"),
    ("cap-str", lambda: soft_cap("30"), TypeError, r"c|cap", "30"),
    ("sigmoid-bool", lambda: sigmoid(False), TypeError, r"bias", "False"),
    ("sigmoid-str", lambda: sigmoid("0"), TypeError, r"bias", "0"),
    ("alibi-bool", lambda: alibi(True), TypeError, r"slope", "True"),
    ("alibi-str", lambda: alibi("0.5"), TypeError, r"slope", "0.5"),
    ("rope-bool", lambda: rope(True), TypeError, r"theta", "True"),
    ("rope-str", lambda: rope("10000"), TypeError, r"theta", "10000"),
    ("not-a-variant-str", lambda: variant_attention(Q0, K0, V0, "causal"), TypeError, r"variants?", "causal"),
    ("not-a-variant-factory", lambda: variant_attention(Q0, K0, V0, causal), TypeError, r"variants?", None),
    ("not-a-variant-none", lambda: variant_attention(Q0, K0, V0, None), TypeError, r"variants?", "None"),
    ("rope-odd-d", lambda: variant_attention(Q5, K5, V5, rope(10000.0)), ValueError, r"d|dim|head_dim", "5"),
    (
        "sigmoid-lse",
        lambda: variant_attention(Q0, K0, V0, sigmoid(0.0), return_lse=True),
        ValueError,
        r"return_lse",
        None,
    ),
    (
        "sigmoid-composite-lse",
        lambda: variant_attention(Q0, K0, V0, causal() & sigmoid(0.0), return_lse=True),
        ValueError,
        r"return_lse",
        None,
    ),
]


@pytest.mark.parametrize("call, exc, name, value", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_refused_by_name(call, exc, name, value):
    with pytest.raises(exc) as info:
        call()
    assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
    msg = str(info.value)
    assert re.search(rf"(?<![A-Za-z0-9_])(?:{name})(?![A-Za-z0-9_])", msg), f"{name!r} not named in: {msg}"
    if value is not None:
        assert value in msg, f"value {value!r} not shown in: {msg}"


def test_return_lse_with_sigmoid_says_why():
    with pytest.raises(ValueError) as info:
        variant_attention(Q0, K0, V0, sigmoid(0.0), return_lse=True)
    assert re.search(r"softmax|sigmoid", str(info.value), re.I), str(info.value)


def test_and_with_a_non_variant_is_a_type_error():
    with pytest.raises(TypeError):
        causal() & 3
    with pytest.raises(TypeError):
        causal() & "sliding_window(8)"


# --------------------------------------------------------------------------------------------
# FlexAttention (PyTorch, eager, CPU, float64) as a second, independent reference
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def flex():
    torch = pytest.importorskip("torch")
    fa = pytest.importorskip("torch.nn.attention.flex_attention")
    return torch, fa.flex_attention, fa.create_block_mask


def _flex_run(flex, q, k, v, score_mod=None, mask_mod=None):
    torch, flex_attention, create_block_mask = flex
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))[None, None]
    n_q, n_k = q.shape[0], k.shape[0]
    bm = None if mask_mod is None else create_block_mask(mask_mod, 1, 1, n_q, n_k, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "called without torch.compile()": eager on purpose
        o = flex_attention(t(q), t(k), t(v), score_mod=score_mod, block_mask=bm)
    assert o.dtype == torch.float64
    return o[0, 0].numpy()


def test_flex_attention_agrees(flex):
    torch = flex[0]
    q, k, v = _qkv(50, q_scale=3.0)
    off = NK - NQ  # FlexAttention's q_idx is the row index

    def cap(score, b, h, qi, kj):
        return 2.0 * torch.tanh(score / 2.0)

    def slope(score, b, h, qi, kj):
        return score + 0.25 * (kj - (qi + off))

    def causal_mm(b, h, qi, kj):
        return kj <= qi + off

    def window_mm(b, h, qi, kj):
        return (kj <= qi + off) & (kj > qi + off - 8)

    cases = [
        (soft_cap(2.0), dict(score_mod=cap)),
        (causal(), dict(mask_mod=causal_mm)),
        (sliding_window(8), dict(mask_mod=window_mm)),
        (alibi(0.25), dict(score_mod=slope)),
        (causal() & alibi(0.25), dict(score_mod=slope, mask_mod=causal_mm)),
        (soft_cap(2.0) & sliding_window(8), dict(score_mod=cap, mask_mod=window_mm)),
    ]
    for var, kw in cases:
        want = _flex_run(flex, q, k, v, **kw)
        _close(np.asarray(_run(q, k, v, var, block=(5, 7))), want, tol=1e-12, what=var.name)
