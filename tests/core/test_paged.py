"""Paged KV cache, its BSR layout and paged attention (FlashInfer's conventions) against
independent references.

- the cache: every live request's tokens are kept in a plain-numpy model here; after each add,
  append, fork and free the cache's gather, seq_len, block tables and free-block count must agree
  with the model, the number of blocks each call takes being predicted here from the copy-on-write
  rules (full blocks shared by reference, a shared partial last block copied on the first write);
- the layout: kv_indptr / kv_indices / kv_last_page_len and the scipy BSR matrix are rebuilt here
  from the block tables, token by token;
- attention: a float64 reference written from the definition below (one query row at a time,
  math.fsum dot products, bottom-right causal), plus exact equality with
  attnlab.core.softmax.attention_state over gather(rid) where the specification says "exactly";
- HBM: K and V reads enumerated page by page here (page_size d per page, last_page_len d for the
  last) and compared with the traced counter.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import scipy.sparse

from attnlab.core.hbm import HBM
from attnlab.core.paged import (
    BSRLayout,
    PagedKVCache,
    bsr_attention,
    composable_attention,
    shared_prefix,
    to_bsr,
)
from attnlab.core.softmax import attention_state

from refs.reference import state_ref

F64_TOL = 1e-12
F32_TOL = 2e-6
PAGE_SIZES = [1, 3, 16]


# --- independent reference ---------------------------------------------------------------------


def ref_attn(q, k, v, *, causal=False, scale=None):
    """float64 attention by definition (tests/refs/reference.py). q (n_q, d), k (n_k, d), v (n_k, d_v).
    Query i sees key j iff not causal or j <= i + n_k - n_q. Returns (o, lse), natural log."""
    n_q, n_k = len(q), len(k)
    mask = None if not causal else np.arange(n_k)[None, :] <= np.arange(n_q)[:, None] + n_k - n_q
    return state_ref(np.asarray(q, dtype=np.float64).reshape(n_q, -1), k, v, mask=mask, scale=scale)


def pages_of(n, bs):
    """(number of pages, tokens on the last page) of a request of n >= 1 tokens."""
    p = -(-n // bs)
    return p, n - bs * (p - 1)


def nfree(cache):
    return cache.num_free()


def maxdiff(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def kv(rng, n, d):
    return rng.standard_normal((n, d)), rng.standard_normal((n, d))


def snapshot(cache, rids):
    """Everything observable about the cache, request by request in the order of `rids`:
    tables, lengths, contents, the free count, the pools."""
    return (
        [cache.block_table(r) for r in rids],
        [cache.seq_len(r) for r in rids],
        [tuple(a.copy() for a in cache.gather(r)) for r in rids],
        nfree(cache),
        cache.k_pool.copy(),
        cache.v_pool.copy(),
    )


def assert_same_snapshot(a, b):
    assert a[0] == b[0] and a[1] == b[1] and a[3] == b[3]
    for (ka, va), (kb, vb) in zip(a[2], b[2], strict=True):
        assert np.array_equal(ka, kb) and np.array_equal(va, vb)
    assert np.array_equal(a[4], b[4]) and np.array_equal(a[5], b[5])


class Model:
    """The tokens each live request must hold, and checks of the cache against them."""

    def __init__(self, cache):
        self.cache = cache
        self.tokens: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def cast(self, a):
        return np.asarray(a).astype(self.cache.k_pool.dtype)

    def add(self, k, v):
        rid = self.cache.add(k, v)
        assert isinstance(rid, int) and not isinstance(rid, bool)
        assert rid not in self.tokens
        self.tokens[rid] = (self.cast(k), self.cast(v))
        return rid

    def append(self, rid, k, v):
        self.cache.append(rid, k, v)
        ok, ov = self.tokens[rid]
        self.tokens[rid] = (np.concatenate([ok, self.cast(k)]), np.concatenate([ov, self.cast(v)]))

    def fork(self, rid):
        new = self.cache.fork(rid)
        assert isinstance(new, int) and not isinstance(new, bool)
        assert new not in self.tokens
        self.tokens[new] = tuple(a.copy() for a in self.tokens[rid])
        return new

    def free(self, rid):
        self.cache.free(rid)
        del self.tokens[rid]

    def tables(self):
        return {r: self.cache.block_table(r) for r in self.tokens}

    def used(self):
        return {b for t in self.tables().values() for b in t}

    def blocks_for_add(self, n):
        return pages_of(n, self.cache.block_size)[0]

    def blocks_for_append(self, rid, n):
        """New blocks an append of n tokens takes: the overflow past the last block's room, plus
        one copy when the partial last block is shared with another request."""
        bs = self.cache.block_size
        length = self.tokens[rid][0].shape[0]
        fill = length % bs
        if fill == 0:
            return -(-n // bs)
        room = bs - fill
        extra = -(-max(0, n - room) // bs)
        last = self.cache.block_table(rid)[-1]
        shared = any(last in t for r, t in self.tables().items() if r != rid)
        return extra + int(shared)

    def check(self):
        c = self.cache
        bs, d = c.block_size, c.head_dim
        for rid, (k, v) in self.tokens.items():
            n = k.shape[0]
            table = c.block_table(rid)
            assert isinstance(table, list)
            assert all(isinstance(b, int) and not isinstance(b, bool) for b in table)
            assert len(table) == pages_of(n, bs)[0]
            assert len(set(table)) == len(table)
            assert all(0 <= b < c.num_blocks for b in table)
            sl = c.seq_len(rid)
            assert isinstance(sl, int) and sl == n
            gk, gv = c.gather(rid)
            assert gk.shape == (n, d) and gv.shape == (n, d)
            assert gk.flags.c_contiguous and gv.flags.c_contiguous
            assert gk.dtype == c.k_pool.dtype and gv.dtype == c.v_pool.dtype
            assert np.array_equal(gk, k) and np.array_equal(gv, v)
            # the pool itself holds them at the table's blocks
            assert np.array_equal(c.k_pool[table].reshape(-1, d)[:n], k)
            assert np.array_equal(c.v_pool[table].reshape(-1, d)[:n], v)
        assert nfree(c) == c.num_blocks - len(self.used())


# --- the cache ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_pool_attributes(dtype):
    c = PagedKVCache(11, 3, 5, dtype=dtype)
    assert (c.num_blocks, c.block_size, c.head_dim) == (11, 3, 5)
    assert c.k_pool.shape == (11, 3, 5) and c.v_pool.shape == (11, 3, 5)
    assert c.k_pool.dtype == np.dtype(dtype) and c.v_pool.dtype == np.dtype(dtype)
    assert nfree(c) == 11
    assert PagedKVCache(4, 2, 3).k_pool.dtype == np.float64  # default float64


@pytest.mark.parametrize("bs", PAGE_SIZES)
def test_add_and_gather(bs):
    rng = np.random.default_rng(100 + bs)
    d = int(rng.integers(1, 10)) * 2 + 1  # odd head dim
    # last page of length 1 and exactly bs, single tokens, one page, several pages
    lengths = [
        1,
        bs,
        bs + 1,
        2 * bs,
        3 * bs - 1 if bs > 1 else 3,
        5 * bs + 1,
        *rng.integers(1, 4 * bs + 2, size=6).tolist(),
    ]
    total = sum(pages_of(n, bs)[0] for n in lengths)
    c = PagedKVCache(total + 7, bs, d, seed=3)
    m = Model(c)
    for n in lengths:
        before = nfree(c)
        k, v = kv(rng, int(n), d)
        rid = m.add(k, v)
        assert nfree(c) == before - pages_of(int(n), bs)[0]
        k[...] = 0.0  # the cache holds a copy
        v[...] = 0.0
        m.check()
        assert c.seq_len(rid) == n
    assert nfree(c) == 7
    assert len(m.used()) == total  # no block in two requests


@pytest.mark.parametrize("bs", PAGE_SIZES)
def test_append_fills_last_block_first(bs):
    rng = np.random.default_rng(200 + bs)
    d = 7
    c = PagedKVCache(60, bs, d, seed=1)
    m = Model(c)
    rid = m.add(*kv(rng, 1, d))
    other = m.add(*kv(rng, bs + 2, d))
    for n in [1, bs - 1 if bs > 1 else 1, bs, 1, 2 * bs + 1, *rng.integers(1, 2 * bs + 3, size=8).tolist()]:
        n = int(n)
        old = c.block_table(rid)
        length = c.seq_len(rid)
        before, other_table = nfree(c), c.block_table(other)
        want_new = m.blocks_for_append(rid, n)
        m.append(rid, *kv(rng, n, d))
        new = c.block_table(rid)
        assert new[: len(old)] == old  # filled in place, then grown
        assert len(new) == pages_of(length + n, bs)[0]
        assert nfree(c) == before - want_new == before - (len(new) - len(old))
        assert c.block_table(other) == other_table
        m.check()


def test_append_exact_block_counts():
    rng = np.random.default_rng(5)
    c = PagedKVCache(20, 4, 3, seed=2)
    m = Model(c)
    rid = m.add(*kv(rng, 5, 3))  # 2 blocks, the last holding 1
    assert nfree(c) == 18 and len(c.block_table(rid)) == 2
    m.append(rid, *kv(rng, 3, 3))  # fills the last block: 8 tokens, no new block
    assert nfree(c) == 18 and len(c.block_table(rid)) == 2
    m.append(rid, *kv(rng, 1, 3))  # 9 tokens: a third block
    assert nfree(c) == 17 and len(c.block_table(rid)) == 3
    m.append(rid, *kv(rng, 11, 3))  # 20 tokens: 5 blocks
    assert nfree(c) == 15 and len(c.block_table(rid)) == 5 and c.seq_len(rid) == 20
    m.check()


def test_blocks_are_shuffled_and_seeded():
    rng = np.random.default_rng(6)
    data = [kv(rng, n, 4) for n in (7, 1, 30, 88)]

    def tables(seed):
        c = PagedKVCache(64, 2, 4, seed=seed)
        return [c.block_table(c.add(*x)) for x in data]

    t0 = tables(0)
    whole = [b for t in t0 for b in t]
    assert len(whole) == 4 + 1 + 15 + 44 == 64 and len(set(whole)) == len(whole)
    assert whole != sorted(whole)  # not 0, 1, 2, ...
    assert t0[0] != [0, 1, 2, 3]
    assert tables(0) == t0  # same seed, same tables
    assert any(tables(s) != t0 for s in (1, 2, 3))  # the seed matters
    # the whole pool is one permutation of range(num_blocks)
    c = PagedKVCache(64, 2, 4, seed=9)
    t = c.block_table(c.add(*kv(rng, 128, 4)))
    assert sorted(t) == list(range(64)) and t != list(range(64))
    assert nfree(c) == 0


@pytest.mark.parametrize("writer", ["parent", "child"])
@pytest.mark.parametrize("bs", [3, 4, 16])
def test_fork_copy_on_write(bs, writer):
    rng = np.random.default_rng(300 + bs)
    d = 5
    c = PagedKVCache(40, bs, d, seed=4)
    m = Model(c)
    n0 = 2 * bs + (bs // 2 or 1)  # two full blocks, a partial third
    parent = m.add(*kv(rng, n0, d))
    table = c.block_table(parent)
    before = nfree(c)
    child = m.fork(parent)
    assert c.block_table(child) == table  # everything shared until a write
    assert nfree(c) == before  # fork takes no block
    assert c.seq_len(child) == n0
    m.check()
    w, o = (parent, child) if writer == "parent" else (child, parent)
    o_k, o_v = (a.copy() for a in c.gather(o))
    m.append(w, *kv(rng, 1, d))  # first write: the partial block is copied
    assert nfree(c) == before - 1
    wt = c.block_table(w)
    assert wt[:2] == table[:2]  # full blocks still shared by reference
    assert wt[2] != table[2]  # the writer's last block is a fresh copy
    assert len(wt) == 3
    assert c.block_table(o) == table  # the other side keeps the original block
    assert np.array_equal(c.gather(o)[0], o_k) and np.array_equal(c.gather(o)[1], o_v)
    m.check()
    # the other side is now the only user of its partial block: it writes in place
    room = bs - n0 % bs
    m.append(o, *kv(rng, room, d))
    assert c.block_table(o) == table and nfree(c) == before - 1
    m.check()


def test_fork_with_full_last_block():
    rng = np.random.default_rng(7)
    c = PagedKVCache(10, 4, 3, seed=5)
    m = Model(c)
    parent = m.add(*kv(rng, 8, 3))
    table = c.block_table(parent)
    child = m.fork(parent)
    assert nfree(c) == 8
    m.append(child, *kv(rng, 1, 3))  # nothing to copy: one new block
    assert nfree(c) == 7
    assert c.block_table(child)[:2] == table and len(c.block_table(child)) == 3
    assert c.block_table(parent) == table
    m.append(parent, *kv(rng, 5, 3))
    assert nfree(c) == 5
    assert c.block_table(parent)[:2] == table
    assert not set(c.block_table(parent)[2:]) & set(c.block_table(child)[2:])
    m.check()


def test_three_way_fork_copies_until_one_owner_is_left():
    rng = np.random.default_rng(8)
    c = PagedKVCache(30, 4, 6, seed=6)
    m = Model(c)
    base = m.add(*kv(rng, 10, 6))  # blocks a, b, c (c holds 2)
    forks = [m.fork(base) for _ in range(3)]
    last = c.block_table(base)[2]
    assert nfree(c) == 27
    for i, r in enumerate(forks):  # each fork still shares c when it writes: a copy
        m.append(r, *kv(rng, 1, 6))
        assert nfree(c) == 27 - (i + 1)
        assert c.block_table(r)[2] != last
    m.append(base, *kv(rng, 2, 6))  # base is the last user of c: in place
    assert c.block_table(base)[2] == last and nfree(c) == 24
    m.check()


def test_free_releases_only_unshared_blocks():
    rng = np.random.default_rng(9)
    c = PagedKVCache(20, 4, 3, seed=7)
    m = Model(c)
    parent = m.add(*kv(rng, 9, 3))  # 3 blocks, last holds 1
    child = m.fork(parent)
    m.append(child, *kv(rng, 4, 3))  # child: copy of block 3 + one more block
    assert nfree(c) == 15
    m.free(parent)  # only parent's own (original) last block returns
    assert nfree(c) == 16
    m.check()
    m.free(child)
    assert nfree(c) == 20
    for fn, args in [
        (c.block_table, ()),
        (c.seq_len, ()),
        (c.gather, ()),
        (c.fork, ()),
        (c.free, ()),
        (c.append, kv(rng, 1, 3)),
    ]:
        with pytest.raises(ValueError) as e:
            fn(parent, *args)
        assert re.search(rf"\b{parent}\b", str(e.value)), str(e.value)


def test_freed_blocks_are_reused():
    rng = np.random.default_rng(10)
    c = PagedKVCache(12, 3, 4, seed=8)
    m = Model(c)
    a = m.add(*kv(rng, 10, 4))  # 4 blocks
    b = m.add(*kv(rng, 13, 4))  # 5 blocks
    m.add(*kv(rng, 9, 4))  # 3 blocks: the pool is full
    assert nfree(c) == 0
    freed = set(c.block_table(b))
    m.free(b)
    assert nfree(c) == 5
    d = m.add(*kv(rng, 15, 4))  # exactly the 5 freed blocks
    assert set(c.block_table(d)) == freed and nfree(c) == 0
    m.check()
    with pytest.raises(ValueError, match=r"\b12\b"):
        c.add(*kv(rng, 1, 4))
    freed = set(c.block_table(a))
    m.free(a)
    e = m.fork(d)
    m.append(e, *kv(rng, 1, 4))  # d's last block is full: one new block
    assert set(c.block_table(e)) - set(c.block_table(d)) <= freed
    m.check()


# --- running out of blocks ---------------------------------------------------------------------


def _build(seed):
    rng = np.random.default_rng(seed)
    c = PagedKVCache(13, 4, 3, seed=11)
    m = Model(c)
    r1 = m.add(*kv(rng, 10, 3))  # 3 blocks, last holds 2
    r2 = m.fork(r1)  # shares all 3
    r3 = m.add(*kv(rng, 21, 3))  # 6 blocks, last holds 1
    return c, m, (r1, r2, r3)


OOM_CALLS = {
    "add": lambda c, r, rng: c.add(*kv(rng, 17, 3)),  # 5 blocks, 4 free
    "append-in-place": lambda c, r, rng: c.append(r[2], *kv(rng, 3 + 17, 3)),  # 3 fit + 5 blocks
    "append-cow": lambda c, r, rng: c.append(r[1], *kv(rng, 2 + 13, 3)),  # copy + 4 blocks
    "add-huge": lambda c, r, rng: c.add(*kv(rng, 1000, 3)),
}


@pytest.mark.parametrize("name", list(OOM_CALLS))
def test_out_of_blocks_is_atomic(name):
    c, m, rids = _build(12)
    twin, twin_m, twin_rids = _build(12)
    assert rids == twin_rids and nfree(c) == 4
    before = snapshot(c, rids)
    with pytest.raises(ValueError) as e:
        OOM_CALLS[name](c, rids, np.random.default_rng(13))
    assert re.search(r"\b13\b", str(e.value)), str(e.value)  # names the pool size
    assert_same_snapshot(snapshot(c, rids), before)
    m.check()
    # the next calls behave exactly as on a cache that never saw the failed one
    rng_a, rng_b = np.random.default_rng(14), np.random.default_rng(14)
    m.append(rids[1], *kv(rng_a, 3, 3))
    twin_m.append(twin_rids[1], *kv(rng_b, 3, 3))
    m.add(*kv(rng_a, 8, 3))
    twin_m.add(*kv(rng_b, 8, 3))
    assert_same_snapshot(snapshot(c, list(m.tokens)), snapshot(twin, list(twin_m.tokens)))
    assert nfree(c) == 0
    m.check()


def test_pool_exactly_full_then_one_more():
    rng = np.random.default_rng(15)
    c = PagedKVCache(5, 3, 2, seed=3)
    m = Model(c)
    r = m.add(*kv(rng, 13, 2))  # 5 blocks, last holds 1
    assert nfree(c) == 0
    m.append(r, *kv(rng, 2, 2))  # fits the last block
    assert c.seq_len(r) == 15
    before = snapshot(c, [r])
    with pytest.raises(ValueError, match=r"\b5\b"):
        c.append(r, *kv(rng, 1, 2))
    assert_same_snapshot(snapshot(c, [r]), before)
    f = m.fork(r)  # a fork needs no block
    with pytest.raises(ValueError, match=r"\b5\b"):
        c.append(f, *kv(rng, 1, 2))
    m.check()


# --- random layouts ----------------------------------------------------------------------------


def _check_attention(cache, model, rng):
    rids = list(model.tokens)
    if not rids:
        return
    rids = [rids[i] for i in rng.permutation(len(rids))]
    layout = to_bsr(cache, rids)
    _check_layout(layout, cache, rids)
    d = cache.head_dim
    q = rng.standard_normal((len(rids), d))
    out, lse = bsr_attention(q, cache, layout, return_lse=True)
    assert out.shape == (len(rids), d) and lse.shape == (len(rids),)
    for i, rid in enumerate(rids):
        o_e, l_e = attention_state(q[i], *cache.gather(rid))
        assert maxdiff(out[i], o_e) == 0.0 and maxdiff(lse[i], l_e) == 0.0
        o_r, l_r = ref_attn(q[i : i + 1], *model.tokens[rid])
        assert maxdiff(out[i], o_r[0]) <= F64_TOL and abs(lse[i] - l_r[0]) <= F64_TOL


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("bs", PAGE_SIZES)
def test_random_layouts(bs, seed):
    rng = np.random.default_rng(1000 * bs + seed)
    d = int(rng.integers(1, 12))
    nb = int(rng.integers(15, 45))
    c = PagedKVCache(nb, bs, d, seed=seed)
    m = Model(c)
    ooms = counts = 0
    for step in range(90):
        live = list(m.tokens)
        crowded = nfree(c) < nb // 3  # free more when the pool fills
        p_ops = [0.2, 0.25, 0.15, 0.4] if crowded else [0.3, 0.35, 0.2, 0.15]
        op = rng.choice(["add", "append", "fork", "free"], p=p_ops) if live else "add"
        n = int(rng.integers(1, 3 * bs + 2))
        if rng.random() < 0.08:
            n = int(rng.integers(nb * bs // 2, nb * bs + 2))  # sometimes too big
        tables, before = m.tables(), nfree(c)
        snap = snapshot(c, live)
        if op == "add":
            need = m.blocks_for_add(n)
            if need > before:
                with pytest.raises(ValueError, match=rf"\b{nb}\b"):
                    c.add(*kv(rng, n, d))
                assert_same_snapshot(snapshot(c, live), snap)
                ooms += 1
                continue
            rid = m.add(*kv(rng, n, d))
            assert nfree(c) == before - need
            changed = {rid}
        elif op == "append":
            rid = live[int(rng.integers(len(live)))]
            need = m.blocks_for_append(rid, n)
            if need > before:
                with pytest.raises(ValueError, match=rf"\b{nb}\b"):
                    c.append(rid, *kv(rng, n, d))
                assert_same_snapshot(snapshot(c, live), snap)
                ooms += 1
                continue
            old = tables[rid]
            p_old = len(old)
            shared_last = c.seq_len(rid) % bs != 0 and any(
                old[-1] in t for r, t in tables.items() if r != rid
            )
            m.append(rid, *kv(rng, n, d))
            new = c.block_table(rid)
            assert nfree(c) == before - need
            if shared_last:
                assert new[: p_old - 1] == old[:-1] and new[p_old - 1] != old[-1]
            else:
                assert new[:p_old] == old
            changed = {rid}
        elif op == "fork":
            parent = live[int(rng.integers(len(live)))]
            rid = m.fork(parent)
            assert c.block_table(rid) == tables[parent] and nfree(c) == before
            changed = {rid}
        else:
            rid = live[int(rng.integers(len(live)))]
            others = {b for r, t in tables.items() if r != rid for b in t}
            released = len(set(tables[rid]) - others)
            m.free(rid)
            assert nfree(c) == before + released
            changed = {rid}
        counts += 1
        for r, t in tables.items():  # nobody else moved
            if r not in changed and r in m.tokens:
                assert c.block_table(r) == t
        m.check()
        if step % 10 == 9:
            _check_attention(c, m, rng)
    _check_attention(c, m, rng)
    assert counts > 50 and ooms >= 1


# --- the BSR layout ----------------------------------------------------------------------------


def _check_layout(layout, cache, rids):
    ps = cache.block_size
    tables = [cache.block_table(r) for r in rids]
    lens = [cache.seq_len(r) for r in rids]
    for name in ("kv_indptr", "kv_indices", "kv_last_page_len"):
        assert getattr(layout, name).dtype == np.int32, name
    indptr = np.cumsum([0] + [len(t) for t in tables])
    assert np.array_equal(layout.kv_indptr, indptr)
    assert np.array_equal(layout.kv_indices, [b for t in tables for b in t])
    assert np.array_equal(layout.kv_last_page_len, [pages_of(n, ps)[1] for n in lens])
    assert layout.page_size == ps and layout.num_blocks == cache.num_blocks
    pages = np.diff(layout.kv_indptr)
    assert np.array_equal(ps * (pages - 1) + layout.kv_last_page_len, lens)
    assert np.all((layout.kv_last_page_len >= 1) & (layout.kv_last_page_len <= ps))
    # the scipy matrix: a 1 at (i, block * ps + t) for every token t of request i
    a = layout.to_scipy()
    assert isinstance(a, scipy.sparse.bsr_array)
    assert a.shape == (len(rids), cache.num_blocks * ps) and a.blocksize == (1, ps)
    assert np.array_equal(a.indptr, layout.kv_indptr) and np.array_equal(a.indices, layout.kv_indices)
    want = np.zeros(a.shape)
    for i, (t, n) in enumerate(zip(tables, lens)):
        for tok in range(n):
            want[i, t[tok // ps] * ps + tok % ps] = 1.0
    assert np.array_equal(a.toarray(), want)


def _lecture_cache(dtype=np.float64):
    rng = np.random.default_rng(42)
    c = PagedKVCache(40, 4, 8, dtype=dtype, seed=0)
    m = Model(c)
    rids = [m.add(*kv(rng, n, 8)) for n in (19, 10, 29)]
    return c, m, rids


def test_bsr_lecture_numbers():
    c, m, rids = _lecture_cache()
    assert [len(c.block_table(r)) for r in rids] == [5, 3, 8]
    layout = to_bsr(c, rids)
    assert layout.kv_indptr.tolist() == [0, 5, 8, 16]
    assert layout.kv_indices.tolist() == [b for r in rids for b in c.block_table(r)]
    assert layout.kv_last_page_len.tolist() == [3, 2, 1]
    assert layout.page_size == 4 and layout.num_blocks == 40
    _check_layout(layout, c, rids)
    q = np.random.default_rng(43).standard_normal((3, 8))
    out = bsr_attention(q, c, layout)
    assert isinstance(out, np.ndarray) and out.shape == (3, 8) and out.dtype == np.float64
    for i, r in enumerate(rids):
        assert maxdiff(out[i], attention_state(q[i], *c.gather(r))[0]) == 0.0  # contiguous
        assert maxdiff(out[i], ref_attn(q[i : i + 1], *m.tokens[r])[0][0]) <= F64_TOL


@pytest.mark.parametrize("bs", PAGE_SIZES)
def test_to_bsr_with_forks_and_subsets(bs):
    rng = np.random.default_rng(400 + bs)
    c = PagedKVCache(80, bs, 3, seed=2)
    m = Model(c)
    a = m.add(*kv(rng, 2 * bs + 1, 3))
    b = m.fork(a)
    m.append(b, *kv(rng, bs, 3))
    e = m.add(*kv(rng, bs, 3))  # last page exactly full
    f = m.add(*kv(rng, 1, 3))  # one token
    for rids in ([a, b, e, f], [f, b], [e], [b, a, b]):
        _check_layout(to_bsr(c, rids), c, rids)


def test_bsr_layout_is_frozen():
    c, _, rids = _lecture_cache()
    layout = to_bsr(c, rids)
    assert dataclasses.is_dataclass(layout) and isinstance(layout, BSRLayout)
    with pytest.raises(dataclasses.FrozenInstanceError):
        layout.page_size = 8


def _layout(**kw):
    args = dict(
        kv_indptr=np.array([0, 2, 5], dtype=np.int32),
        kv_indices=np.array([3, 0, 10, 4, 1], dtype=np.int32),
        kv_last_page_len=np.array([7, 1], dtype=np.int32),
        page_size=7,
        num_blocks=11,
    )
    args.update({k: (np.array(v, dtype=np.int32) if isinstance(v, list) else v) for k, v in kw.items()})
    return BSRLayout(**args)


def test_bsr_layout_direct_construction():
    lay = _layout()
    a = lay.to_scipy()
    assert a.shape == (2, 77) and a.blocksize == (1, 7)
    dense = a.toarray()
    assert dense.sum() == 14 + 15  # 2 full pages; 7 + 7 + 1
    assert dense[0, 21:28].sum() == 7 and dense[0, 0:7].sum() == 7
    assert dense[1, 70:77].sum() == 7 and dense[1, 28:35].sum() == 7
    assert dense[1, 7] == 1 and dense[1, 8:14].sum() == 0  # the tail of the last page


@pytest.mark.parametrize(
    "kw, name, shows",
    [
        (dict(kv_indptr=[1, 2, 5]), "kv_indptr", []),  # not starting at 0
        (dict(kv_indptr=[0, 4, 3], kv_indices=[3, 0, 10]), "kv_indptr", []),  # decreasing
        (dict(kv_indices=[3, 0, 99, 4, 1]), "kv_indices", ["99", "11"]),  # outside [0, 11)
        (dict(kv_indices=[3, 0, 11, 4, 1]), "kv_indices", ["11"]),
        (dict(kv_indices=[3, -1, 10, 4, 1]), "kv_indices", ["-1", "11"]),
        (dict(kv_last_page_len=[7, 0]), "kv_last_page_len", ["0", "7"]),  # outside [1, 7]
        (dict(kv_last_page_len=[12, 1]), "kv_last_page_len", ["12", "7"]),
        (dict(page_size=0, kv_last_page_len=[1, 1]), "page_size", ["0"]),
        (dict(page_size=-3, kv_last_page_len=[1, 1]), "page_size", ["-3"]),
        (dict(kv_last_page_len=[7]), "kv_last_page_len|kv_indptr", []),  # mismatched lengths
        (dict(kv_indices=[3, 0, 10, 4]), "kv_indices|kv_indptr", []),
    ],
)
def test_bsr_layout_validation(kw, name, shows):
    with pytest.raises(ValueError, match=name) as e:
        _layout(**kw)
    for s in shows:
        assert re.search(rf"(?<![\d-]){re.escape(s)}(?!\d)", str(e.value)), (s, str(e.value))


# --- paged attention ---------------------------------------------------------------------------


def _random_cache(rng, bs, d, n_req, dtype=np.float64):
    lengths = [1, bs, *rng.integers(1, 5 * bs + 3, size=max(0, n_req - 2)).tolist()][:n_req]
    c = PagedKVCache(
        sum(pages_of(int(n), bs)[0] for n in lengths) * 2 + 3, bs, d, dtype=dtype, seed=int(rng.integers(100))
    )
    m = Model(c)
    rids = [m.add(*kv(rng, int(n), d)) for n in lengths]
    f = m.fork(rids[-1])  # a shared prefix as well
    m.append(f, *kv(rng, int(rng.integers(1, 2 * bs + 2)), d))
    rids.append(f)
    return c, m, [rids[i] for i in rng.permutation(len(rids))]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("bs", PAGE_SIZES)
def test_bsr_decode(bs, seed):
    rng = np.random.default_rng(500 + 10 * bs + seed)
    d = int(rng.integers(1, 9)) * 2 + 1
    c, m, rids = _random_cache(rng, bs, d, int(rng.integers(2, 7)))
    layout = to_bsr(c, rids)
    n = len(rids)
    scale = float(rng.uniform(0.1, 1.0))
    for kwargs in ({}, {"scale": scale}, {"causal": True}):
        q = rng.standard_normal((n, d))
        out, lse = bsr_attention(q, c, layout, return_lse=True, **kwargs)
        assert out.shape == (n, d) and lse.shape == (n,)
        alone = bsr_attention(q, c, layout, **kwargs)
        assert isinstance(alone, np.ndarray) and maxdiff(alone, out) == 0.0
        for i, r in enumerate(rids):
            o_e, l_e = attention_state(q[i], *c.gather(r), scale=kwargs.get("scale"))
            assert maxdiff(out[i], o_e) == 0.0 and maxdiff(lse[i], l_e) == 0.0
            o_r, l_r = ref_attn(q[i : i + 1], *m.tokens[r], scale=kwargs.get("scale"))
            assert maxdiff(out[i], o_r[0]) <= F64_TOL and abs(lse[i] - l_r[0]) <= F64_TOL


@pytest.mark.parametrize("bs", PAGE_SIZES)
def test_bsr_decode_gqa(bs):
    rng = np.random.default_rng(600 + bs)
    d, h = 6, 5
    c, m, rids = _random_cache(rng, bs, d, 4)
    layout = to_bsr(c, rids)
    q = rng.standard_normal((len(rids), h, d))
    out, lse = bsr_attention(q, c, layout, return_lse=True)
    assert out.shape == (len(rids), h, d) and lse.shape == (len(rids), h)
    for i, r in enumerate(rids):
        o_e, l_e = attention_state(q[i], *c.gather(r))
        assert maxdiff(out[i], o_e) == 0.0 and maxdiff(lse[i], l_e) == 0.0
        o_r, l_r = ref_attn(q[i], *m.tokens[r])
        assert maxdiff(out[i], o_r) <= F64_TOL and maxdiff(lse[i], l_r) <= F64_TOL


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bs", PAGE_SIZES)
def test_bsr_prefill(bs, causal):
    rng = np.random.default_rng(700 + bs + causal)
    d = 7
    c, m, rids = _random_cache(rng, bs, d, 5)
    layout = to_bsr(c, rids)
    lens = [c.seq_len(r) for r in rids]
    n_q = [int(rng.integers(1, n + 1)) for n in lens]  # 1 <= n_q <= n_k
    n_q[0] = lens[0]  # one full-prompt prefill
    qo = [0, *np.cumsum(n_q).tolist()]
    q = rng.standard_normal((qo[-1], d))
    out, lse = bsr_attention(q, c, layout, qo_indptr=qo, causal=causal, return_lse=True)
    assert out.shape == (qo[-1], d) and lse.shape == (qo[-1],)
    for i, r in enumerate(rids):
        o_r, l_r = ref_attn(q[qo[i] : qo[i + 1]], *m.tokens[r], causal=causal)
        assert maxdiff(out[qo[i] : qo[i + 1]], o_r) <= F64_TOL, i
        assert maxdiff(lse[qo[i] : qo[i + 1]], l_r) <= F64_TOL, i
    # as an array, and one query per request: the decode answer
    out2 = bsr_attention(q, c, layout, qo_indptr=np.array(qo), causal=causal)
    assert maxdiff(out2, out) == 0.0
    q1 = q[: len(rids)]
    one = bsr_attention(q1, c, layout, qo_indptr=list(range(len(rids) + 1)), causal=causal)
    dec = bsr_attention(q1, c, layout)
    assert maxdiff(one, dec) <= F64_TOL


def test_bsr_prefill_causal_masks_in_the_middle_of_a_page():
    # 11 keys, page size 4, 5 queries: query j sees keys <= j + 6, so the cut falls inside pages
    rng = np.random.default_rng(17)
    c = PagedKVCache(9, 4, 3, seed=1)
    k, v = kv(rng, 11, 3)
    rid = c.add(k, v)
    q = rng.standard_normal((5, 3))
    out, lse = bsr_attention(q, c, to_bsr(c, [rid]), qo_indptr=[0, 5], causal=True, return_lse=True)
    for j in range(5):
        o_r, l_r = ref_attn(q[j : j + 1], k[: j + 7], v[: j + 7])
        assert maxdiff(out[j], o_r[0]) <= F64_TOL and abs(lse[j] - l_r[0]) <= F64_TOL


def _page_reads(cache, rids, d):
    """K (and V) elements read per page, request by request."""
    sizes = []
    for r in rids:
        p, last = pages_of(cache.seq_len(r), cache.block_size)
        sizes += [cache.block_size * d] * (p - 1) + [last * d]
    return sizes


@pytest.mark.parametrize("mode", ["decode", "gqa", "prefill"])
@pytest.mark.parametrize("bs", PAGE_SIZES)
def test_bsr_hbm_counts_page_by_page(bs, mode):
    rng = np.random.default_rng(800 + bs)
    d = 5
    c, m, rids = _random_cache(rng, bs, d, 4)
    layout = to_bsr(c, rids)
    hbm = HBM(trace=True)
    n = len(rids)
    if mode == "decode":
        out = bsr_attention(rng.standard_normal((n, d)), c, layout, hbm=hbm)
    elif mode == "gqa":
        out = bsr_attention(rng.standard_normal((n, 3, d)), c, layout, hbm=hbm)
    else:
        qo = [0, *np.cumsum([min(2, c.seq_len(r)) for r in rids]).tolist()]
        out = bsr_attention(rng.standard_normal((qo[-1], d)), c, layout, qo_indptr=qo, causal=True, hbm=hbm)
    assert np.all(np.isfinite(out))
    want = _page_reads(c, rids, d)
    assert sum(want) == d * sum(c.seq_len(r) for r in rids)
    io = hbm.by_tensor()
    assert io["K"][0] == sum(want) and io["V"][0] == sum(want)
    for name in ("K", "V"):
        got = [e.elements for e in hbm.events if e.kind == "read" and e.tensor == name]
        assert sorted(got) == sorted(want), name


def test_bsr_float32_pool():
    rng = np.random.default_rng(18)
    d = 9
    c, m, rids = _random_cache(rng, 3, d, 5, dtype=np.float32)
    assert c.k_pool.dtype == np.float32 and c.gather(rids[0])[0].dtype == np.float32
    layout = to_bsr(c, rids)
    q = rng.standard_normal((len(rids), d)).astype(np.float32)
    out = bsr_attention(q, c, layout)
    for i, r in enumerate(rids):
        o_r, _ = ref_attn(q[i : i + 1].astype(np.float64), *m.tokens[r])
        assert maxdiff(out[i], o_r[0]) <= F32_TOL


# --- composable formats (shared prefix once, the rest per request) -----------------------------


def _reads_by_table(cache, rids):
    tables = [cache.block_table(r) for r in rids]
    common = 0
    while all(len(t) > common for t in tables) and len({t[common] for t in tables}) == 1:
        common += 1
    return {
        "single": sum(len(t) for t in tables),
        "composable": common + sum(len(t) - common for t in tables),
        "shared": common,
    }, common


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-13), (np.float32, F32_TOL)])
def test_composable_lecture_numbers(dtype, tol):
    rng = np.random.default_rng(19)
    bs, d = 16, 32
    c = PagedKVCache(48, bs, d, dtype=dtype, seed=0)
    m = Model(c)
    base = m.add(*kv(rng, 15 * bs, d))  # 15 full blocks
    rids = [m.fork(base) for _ in range(4)]
    for r in rids:
        m.append(r, *kv(rng, 3 * bs + 13, d))  # 4 blocks of their own
    m.check()
    tables = [c.block_table(r) for r in rids]
    assert all(t[:15] == c.block_table(base) for t in tables)
    assert len({b for t in tables for b in t[15:]}) == 16
    q = rng.standard_normal((4, d)).astype(dtype)
    out, reads = composable_attention(q, c, rids)
    assert reads == {"single": 76, "composable": 31, "shared": 15}
    assert out.shape == (4, d)
    for i, r in enumerate(rids):
        o_r, _ = ref_attn(q[i : i + 1].astype(np.float64), *m.tokens[r])
        assert maxdiff(out[i], o_r[0]) <= tol


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("bs", PAGE_SIZES)
def test_composable_random(bs, seed):
    rng = np.random.default_rng(900 + 10 * bs + seed)
    d = int(rng.integers(2, 10))
    c = PagedKVCache(300, bs, d, seed=seed)
    m = Model(c)
    base = m.add(*kv(rng, int(rng.integers(1, 6)) * bs, d))  # a prefix of full blocks
    mid = m.fork(base)
    m.append(mid, *kv(rng, int(rng.integers(1, 3)) * bs, d))  # a deeper full prefix
    group = [m.fork(mid) for _ in range(int(rng.integers(2, 4)))] + [m.fork(base)]
    for r in group:
        m.append(r, *kv(rng, int(rng.integers(1, 3 * bs + 2)), d))
    stranger = m.add(*kv(rng, int(rng.integers(1, 3 * bs)), d))
    m.check()
    for rids, common in (
        (group[:-1], len(c.block_table(mid))),
        (group, len(c.block_table(base))),
        (group + [stranger], 0),
        ([group[0]], len(c.block_table(group[0]))),
    ):
        want, got_common = _reads_by_table(c, rids)
        assert got_common == common
        q = rng.standard_normal((len(rids), d))
        out, reads = composable_attention(q, c, rids)
        assert reads == want
        for i, r in enumerate(rids):
            o_r, _ = ref_attn(q[i : i + 1], *m.tokens[r])
            assert maxdiff(out[i], o_r[0]) <= 1e-13


def test_composable_shares_only_full_blocks_after_copy_on_write():
    rng = np.random.default_rng(20)
    c = PagedKVCache(30, 4, 5, seed=3)
    m = Model(c)
    base = m.add(*kv(rng, 10, 5))  # a, b, c (holds 2)
    forks = [m.fork(base) for _ in range(3)]
    for r in forks + [base]:
        m.append(r, *kv(rng, 5, 5))  # forks copy c; base in place
    rids = [base, *forks]
    tables = [c.block_table(r) for r in rids]
    assert all(t[:2] == tables[0][:2] for t in tables) and len({t[2] for t in tables}) == 4
    q = rng.standard_normal((4, 5))
    out, reads = composable_attention(q, c, rids)
    assert reads == {"single": 16, "composable": 2 + 4 * 2, "shared": 2}
    for i, r in enumerate(rids):
        assert maxdiff(out[i], ref_attn(q[i : i + 1], *m.tokens[r])[0][0]) <= 1e-13


def _check_group(c, m, rids, q, reads, tol=1e-15, **kw):
    """composable_attention's reads equal `reads` and each request's output equals the float64
    reference over the tokens the model holds for it (K and V read: counted by hand in `kw`)."""
    hbm = HBM()
    out, got = composable_attention(q, c, rids, hbm=hbm)
    assert got == reads
    for i, r in enumerate(rids):
        assert maxdiff(out[i], ref_attn(q[i : i + 1], *m.tokens[r])[0][0]) <= tol
        assert maxdiff(out[i], attention_state(q[i], *c.gather(r))[0]) <= tol
    if "kv_tokens" in kw:
        assert hbm.by_tensor()["K"][0] == hbm.by_tensor()["V"][0] == kw["kv_tokens"] * c.head_dim


@pytest.mark.parametrize("with_base", [False, True])
def test_composable_reads_a_shared_partial_page_once(with_base):
    """Forked mid-page and nobody has written: the partial last page is still one physical page
    in every table (copy-on-write copies it on the first write), so the group reads it once."""
    rng = np.random.default_rng(24)
    d = 6
    c = PagedKVCache(30, 4, d, seed=5)
    m = Model(c)
    base = m.add(*kv(rng, 10, d))  # a, b full; c holds 2
    forks = [m.fork(base) for _ in range(3)]
    rids = [base, *forks] if with_base else forks
    n = len(rids)
    assert shared_prefix(c, rids) == (3, 10)
    q = rng.standard_normal((n, d))
    _check_group(c, m, rids, q, {"single": 3 * n, "composable": 3, "shared": 3}, kv_tokens=10)
    old = c.block_table(base)
    m.append(forks[1], *kv(rng, 1, d))  # copies c for forks[1] only
    assert c.block_table(forks[1])[:2] == old[:2] and c.block_table(forks[1])[2] != old[2]
    assert all(c.block_table(r) == old for r in rids if r != forks[1])
    assert shared_prefix(c, rids) == (2, 8)
    # 2 shared pages once, then page 3 for each request: its own copy, or the old shared c
    _check_group(
        c, m, rids, q, {"single": 3 * n, "composable": 2 + n, "shared": 2}, kv_tokens=8 + 2 * (n - 1) + 3
    )


def test_composable_zero_length_own_parts():
    """A request that is exactly the prefix has no pages of its own: its output is the shared
    state alone, in a group where the others do have their own pages, or where nobody has."""
    rng = np.random.default_rng(25)
    d = 5
    c = PagedKVCache(40, 4, d, seed=6)
    m = Model(c)
    base = m.add(*kv(rng, 8, d))  # 2 full pages
    twins = [m.fork(base) for _ in range(2)]  # nothing appended
    grown = [m.fork(base) for _ in range(2)]
    for r, extra in zip(grown, (3, 6)):
        m.append(r, *kv(rng, extra, d))  # 1 and 2 pages of their own
    q = rng.standard_normal((5, d))
    _check_group(c, m, [base, *twins], q[:3], {"single": 6, "composable": 2, "shared": 2}, kv_tokens=8)
    _check_group(
        c,
        m,
        [twins[0], *grown, base],
        q[:4],
        {"single": 2 + 3 + 4 + 2, "composable": 2 + 3, "shared": 2},
        kv_tokens=8 + 3 + 6,
    )


@pytest.mark.parametrize("bs", PAGE_SIZES)
def test_composable_ragged_queries(bs):
    """qo_indptr: q is (total_q, d), request i's queries q[qo[i]:qo[i+1]] (some requests have
    none); no causal mask, so each query sees all of its request's keys."""
    rng = np.random.default_rng(26 + bs)
    d = 7
    c = PagedKVCache(120, bs, d, seed=2)
    m = Model(c)
    base = m.add(*kv(rng, 3 * bs + (bs // 2), d))  # ends mid-page when bs > 1
    rids = [m.fork(base) for _ in range(4)]
    for r, extra in zip(rids[1:], (1, bs + 2, 2 * bs)):
        m.append(r, *kv(rng, extra, d))
    counts = [3, 0, 1, 5]
    qo = np.cumsum([0, *counts])
    q = rng.standard_normal((qo[-1], d))
    out, reads = composable_attention(q, c, rids, qo_indptr=qo)
    assert out.shape == q.shape
    shared = shared_prefix(c, rids)[0]
    assert reads == {
        "single": sum(len(c.block_table(r)) for r in rids),
        "shared": shared,
        "composable": shared + sum(len(c.block_table(r)) - shared for r in rids),
    }
    for i, r in enumerate(rids):
        if counts[i]:
            o_r, _ = ref_attn(q[qo[i] : qo[i + 1]], *m.tokens[r])
            assert maxdiff(out[qo[i] : qo[i + 1]], o_r) <= 1e-13
    # with one query per request it is decode; a GQA group of 3 query heads per request too
    q1 = rng.standard_normal((4, d))
    assert (
        maxdiff(
            composable_attention(q1, c, rids, qo_indptr=np.arange(5))[0], composable_attention(q1, c, rids)[0]
        )
        == 0.0
    )
    qh = rng.standard_normal((4, 3, d))
    out_h, _ = composable_attention(qh, c, rids)
    for i, r in enumerate(rids):
        assert maxdiff(out_h[i], ref_attn(qh[i], *m.tokens[r])[0]) <= 1e-13


def test_composable_bad_input():
    rng = np.random.default_rng(27)
    c = PagedKVCache(20, 4, 3, seed=1)
    base = c.add(*kv(rng, 6, 3))
    rids = [c.fork(base) for _ in range(2)]
    q = rng.standard_normal((2, 3))
    cases = [
        (lambda: composable_attention(q, "cache", rids), TypeError, "cache"),
        (lambda: composable_attention(q, c, []), ValueError, "rids"),
        (lambda: composable_attention(q, c, "01"), TypeError, "rids"),
        (lambda: composable_attention(q[:1], c, rids), ValueError, r"\bq\b"),
        (lambda: composable_attention(rng.standard_normal((2, 4)), c, rids), ValueError, r"\bq\b"),
        (lambda: composable_attention(q, c, rids, qo_indptr=[0, 1]), ValueError, "qo_indptr"),
        (lambda: composable_attention(q, c, rids, qo_indptr=[0, 2, 1]), ValueError, "qo_indptr"),
        (lambda: composable_attention(q, c, rids, qo_indptr=[0, 1.5, 2]), TypeError, "qo_indptr"),
        (lambda: composable_attention(q[:, None], c, rids, qo_indptr=[0, 1, 2]), ValueError, "qo_indptr"),
        (lambda: composable_attention(q, c, rids, hbm="yes"), TypeError, "hbm"),
        (lambda: shared_prefix(c, [rids[0], 999]), ValueError, "999"),
    ]
    for call, exc, pat in cases:
        with pytest.raises(exc, match=pat):
            call()


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["num_blocks", "block_size", "head_dim"])
@pytest.mark.parametrize(
    "value, exc",
    [
        (True, TypeError),
        (False, TypeError),
        ("4", TypeError),
        (1.5, TypeError),
        (None, TypeError),
        (0, ValueError),
        (-2, ValueError),
    ],
)
def test_cache_bad_sizes(name, value, exc):
    args = {"num_blocks": 6, "block_size": 4, "head_dim": 3}
    args[name] = value
    with pytest.raises(exc, match=name):
        PagedKVCache(args["num_blocks"], args["block_size"], args["head_dim"])


def _bad_kv(rng, d):
    k, v = kv(rng, 5, d)
    nan_k = k.copy()
    nan_k[2, 1] = np.nan
    nan_v = v.copy()
    nan_v[4, 0] = np.nan
    return [
        ("k-head-dim", (rng.standard_normal((5, d + 1)), v), ValueError, r"\bk\b"),
        ("v-head-dim", (k, rng.standard_normal((5, d + 2))), ValueError, r"\bv\b"),
        ("v-rows", (k, v[:4]), ValueError, r"\bk\b|\bv\b"),
        ("k-1d", (k[0], v[0]), ValueError, r"\bk\b"),
        ("k-3d", (k[None], v), ValueError, r"\bk\b"),
        ("k-empty", (k[:0], v[:0]), ValueError, r"\bk\b"),
        ("k-str", ("abc", v), TypeError, r"\bk\b"),
        ("v-str", (k, "abc"), TypeError, r"\bv\b"),
        ("k-nan", (nan_k, v), ValueError, r"\bk\b"),
        ("v-nan", (k, nan_v), ValueError, r"\bv\b"),
    ]


@pytest.mark.parametrize("idx", range(10))
@pytest.mark.parametrize("where", ["add", "append"])
def test_bad_k_v(where, idx):
    rng = np.random.default_rng(21)
    d = 4
    c = PagedKVCache(10, 3, d, seed=1)
    rid = c.add(*kv(rng, 4, d))
    before = snapshot(c, [rid])
    _, (k, v), exc, pat = _bad_kv(rng, d)[idx]
    with pytest.raises(exc, match=pat):
        if where == "add":
            c.add(k, v)
        else:
            c.append(rid, k, v)
    assert_same_snapshot(snapshot(c, [rid]), before)


def test_unknown_rid():
    rng = np.random.default_rng(22)
    c = PagedKVCache(10, 3, 4, seed=1)
    rid = c.add(*kv(rng, 4, 4))
    bad = 12345
    assert bad != rid
    for fn, args in [
        (c.block_table, ()),
        (c.seq_len, ()),
        (c.gather, ()),
        (c.fork, ()),
        (c.free, ()),
        (c.append, kv(rng, 1, 4)),
    ]:
        with pytest.raises(ValueError, match="12345"):
            fn(bad, *args)
    with pytest.raises(ValueError, match="12345"):
        to_bsr(c, [rid, bad])
    with pytest.raises(ValueError, match="12345"):
        composable_attention(rng.standard_normal((2, 4)), c, [rid, bad])
    assert nfree(c) == 8 and c.seq_len(rid) == 4


def test_bsr_attention_bad_input():
    c, _, rids = _lecture_cache()
    layout = to_bsr(c, rids)
    rng = np.random.default_rng(23)
    q = rng.standard_normal((3, 8))
    with pytest.raises(ValueError, match=r"\bq\b"):
        bsr_attention(rng.standard_normal((3, 7)), c, layout)  # wrong head dim
    with pytest.raises(ValueError, match=r"\bq\b"):
        bsr_attention(rng.standard_normal((2, 8)), c, layout)  # one row per request
    nan_q = q.copy()
    nan_q[1, 3] = np.nan
    with pytest.raises(ValueError, match=r"\bq\b"):
        bsr_attention(nan_q, c, layout)
    with pytest.raises(ValueError, match="qo_indptr"):
        bsr_attention(rng.standard_normal((6, 8)), c, layout, qo_indptr=[0, 2, 6])  # n + 1
    with pytest.raises(ValueError, match="qo_indptr"):
        bsr_attention(rng.standard_normal((6, 8)), c, layout, qo_indptr=[0, 2, 4, 5])  # != 6
    with pytest.raises(TypeError, match="causal"):
        bsr_attention(q, c, layout, causal="yes")
    with pytest.raises(TypeError, match="return_lse"):
        bsr_attention(q, c, layout, return_lse=1)
    with pytest.raises(ValueError, match="scale"):
        bsr_attention(q, c, layout, scale=-1.0)
