"""attnlab.core.variants.registry: one entry per variant, the source of its numpy math, the
explorer's entry and the kernels' switches (FlexAttention's mods: tests/gpubench/test_variants_section.py).

The expected values are written from the definitions here: masks from position arithmetic,
attention as a dense float64 softmax."""

from __future__ import annotations

import math

import numpy as np
import pytest

from refs import throwaway_variant

from attnlab.core.variants import (
    REGISTRY,
    Entry,
    alibi,
    causal,
    compose,
    kernel_switches,
    lookup,
    register,
    rope,
    sigmoid,
    sink_window,
    sliding_window,
    soft_cap,
    variant_attention,
)


def _dense(q, k, v, logits, mask):
    """float64 softmax attention with the definition's logits (s, q_idx, kv_idx) and mask, bottom-right."""
    n_q, n_k = len(q), len(k)
    qi, kj = np.arange(n_q)[:, None] + n_k - n_q, np.arange(n_k)[None, :]
    s = logits(q @ k.T / math.sqrt(q.shape[1]), qi, kj)
    vis = mask(qi, kj)
    s = np.where(vis, s, -np.inf)
    m = np.max(s, axis=1, keepdims=True)
    p = np.where(vis, np.exp(s - np.where(np.isfinite(m), m, 0)), 0)
    l = p.sum(axis=1, keepdims=True)
    return p @ v / np.where(l > 0, l, 1)


def test_the_ready_made_variants_are_registered_in_the_explorers_order():
    """Each entry at its default is the library factory's own variant at that parameter."""
    want = {
        "causal": causal(),
        "sliding_window": sliding_window(64),
        "sink_window": sink_window(4, 64),
        "soft_cap": soft_cap(2),
        "alibi": alibi(0.0625),
        "sigmoid": sigmoid(-4),
        "rope": rope(10000),
    }
    assert list(REGISTRY)[: len(want)] == list(want)
    for name, v in want.items():
        e = REGISTRY[name]
        assert e.variant(e.default).name == v.name
        assert lookup(name) is e
    kernels = {n: REGISTRY[n].switches(REGISTRY[n].default) for n in want}
    assert kernels == {
        "causal": {"causal": True},
        "sliding_window": {"window": 64},
        "sink_window": None,
        "soft_cap": {"soft_cap": 2},
        "alibi": None,
        "sigmoid": None,
        "rope": None,
    }


def test_compose_and_the_kernels_switches_merge_in_order():
    uses = [("soft_cap", 30.0), ("sliding_window", 7)]
    assert compose(uses).name == "soft_cap(30) & sliding_window(7)"
    assert kernel_switches(uses) == {"soft_cap": 30.0, "window": 7}
    assert kernel_switches([("soft_cap", 30.0), ("alibi", 0.5)]) is None  # no kernel has ALiBi
    with pytest.raises(ValueError, match=r"window=3.*window=7"):
        kernel_switches([("sliding_window", 7), ("sliding_window", 3)])
    with pytest.raises(ValueError, match=r"c=0.0 is out of range"):  # the factory checks first
        kernel_switches([("soft_cap", 0)])


@pytest.mark.parametrize(
    "call, err, match",
    [
        (lambda: lookup("flash"), ValueError, r"variant='flash' is not registered; valid: causal"),
        (lambda: compose([]), ValueError, "uses is empty"),
        (lambda: compose("causal"), TypeError, "uses must be a sequence"),
        (lambda: compose([("causal",)]), TypeError, r"uses\[0\]"),
        (lambda: register(causal()), TypeError, "entry must be"),
        (lambda: register(Entry("causal", causal, "causal 2")), ValueError, "'causal'.*taken"),
        (lambda: register(Entry("x", causal, "none")), ValueError, "label 'none'"),
        (lambda: Entry("x", causal, "x", "w", (1, 2), 3), ValueError, "default=3 .* no stop"),
        (lambda: Entry("x", None, "x"), TypeError, "make of entry 'x' must be callable"),
        (lambda: Entry("", causal, "x"), TypeError, "name must be a non-empty string"),
        (lambda: Entry("x", lambda: 3, "x").variant(), TypeError, "must return a Variant"),
    ],
)
def test_bad_entries_and_uses_are_refused_by_name(call, err, match):
    with pytest.raises(err, match=match):
        call()


@pytest.fixture
def capped_local():
    """A throwaway variant the kernels already support (tests/refs/throwaway_variant.py)."""
    with throwaway_variant.registered() as e:
        yield e


def test_a_new_entry_is_the_numpy_math(capped_local):
    rng = np.random.default_rng(3)
    q, k, v = (3 * rng.standard_normal((n, 8)) for n in (19, 23, 23))
    got = variant_attention(q, k, v, compose([("capped_local", 2.0)]), block_r=4, block_c=5)
    want = _dense(
        q, k, v, lambda s, qi, kj: 2.0 * np.tanh(s / 2.0), lambda qi, kj: (qi - 3 < kj) & (kj <= qi)
    )
    assert np.abs(got - want).max() < 1e-12
    assert kernel_switches([("capped_local", 2.0)]) == {"soft_cap": 2.0, "window": 3}
