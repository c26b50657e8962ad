"""Batch invariance (notebook 05, §5.6): the same decode request in two batches. Its KV chunks are
read from the plans here; its output is recomputed with a float32 chunk-and-merge written here,
and compared in float64 against attention by definition."""

from __future__ import annotations

import re

import numpy as np
import pytest

from attnlab.explore.flashinfer.checks import batch_invariance_check
from attnlab.machine.schedule import plan_balanced, plan_fixed_split, plan_per_request


def _cuts(plan):
    return sorted((w.kv_start, w.kv_end) for w in plan.work if w.request == 0 and w.kv_head == 0)


def test_the_balanced_chunks_follow_the_batch_and_a_fixed_split_does_not():
    rng = np.random.default_rng(0)
    others = [int(n) for n in rng.integers(500, 8000, 15)]
    kw = dict(kv_heads=2, num_ctas=64, group=4)
    small, large = [(1, 6000), (1, others[0])], [(1, 6000)] + [(1, n) for n in others]
    assert _cuts(plan_balanced(small, **kw)) != _cuts(plan_balanced(large, **kw))
    assert _cuts(plan_fixed_split(small, chunk=1024, **kw)) == _cuts(
        plan_fixed_split(large, chunk=1024, **kw)
    )
    assert _cuts(plan_per_request(small, **kw)) == [(0, 6000)] == _cuts(plan_per_request(large, **kw))


def _merged32(q, k, v, cuts):
    """float32 partial states over the cuts, merged left to right (o, lse as in any split-KV merge)."""
    o = lse = None
    for a, b in cuts:
        s = (q @ k[a:b].T) * np.float32(1 / np.sqrt(q.shape[1]))
        m = s.max(axis=1)
        p = np.exp(s - m[:, None])
        ob, lb = (p @ v[a:b]) / p.sum(axis=1)[:, None], m + np.log(p.sum(axis=1))
        if o is None:
            o, lse = ob, lb
        else:
            mm = np.maximum(lse, lb)
            wa, wb = np.exp(lse - mm), np.exp(lb - mm)
            o = (o * wa[:, None] + ob * wb[:, None]) / (wa + wb)[:, None]
            lse = mm + np.log(wa + wb)
    return o


def test_the_check_says_what_an_independent_chunk_and_merge_says():
    r = batch_invariance_check()
    assert r.ok
    lines = r.splitlines()
    assert re.search(r"balanced\s+chunks of \d+ vs chunks of \d+\s+differ, within", lines[3])
    assert lines[4].split()[:2] == ["fixed", "1024"] and lines[4].endswith("bitwise equal")
    assert lines[5].startswith("no split") and lines[5].endswith("bitwise equal")
    rng = np.random.default_rng(1)
    q = rng.standard_normal((4, 32)).astype(np.float32)
    k, v = (rng.standard_normal((3000, 32)).astype(np.float32) for _ in range(2))
    a, b = (
        _merged32(q, k, v, [(0, 1500), (1500, 3000)]),
        _merged32(q, k, v, [(0, 1000), (1000, 2000), (2000, 3000)]),
    )
    s = q.astype(np.float64) @ k.T.astype(np.float64) / np.sqrt(32)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    exact = (w / w.sum(axis=1, keepdims=True)) @ v.astype(np.float64)
    assert not np.array_equal(a, b)  # another cut, other bits
    assert max(np.abs(a - exact).max(), np.abs(b - exact).max()) < 1e-5
    assert np.array_equal(a, _merged32(q, k, v, [(0, 1500), (1500, 3000)]))  # the same cut: the same bits


@pytest.mark.parametrize(
    "kw, exc, word",
    [
        (dict(small=3, large=3), ValueError, "large"),
        (dict(l_kv=0), ValueError, "l_kv"),
        (dict(chunk=0), ValueError, "chunk"),
        (dict(group=1.5), TypeError, "group"),
        (dict(seed=-1), ValueError, "seed"),
    ],
)
def test_bad_input_is_refused_by_name(kw, exc, word):
    with pytest.raises(exc, match=re.escape(word)):
        batch_invariance_check(**kw)
