"""Paged KV cache (lecture §5.1-5.2): a pool of fixed-size blocks, one block table per request,
the tables read as a block-sparse (BSR) matrix, attention that gathers K/V through it, and the
composable format that reads a shared prefix once for a whole group of requests.

The arrays are FlashInfer's, with its names, so what a learner reads here is what its kernels
take (`BatchDecodeWithPagedKVCacheWrapper.plan(indptr, indices, last_page_len, ...)`):

    kv_indptr          int32, n + 1 entries: request i owns kv_indices[kv_indptr[i]:kv_indptr[i+1]]
    kv_indices         int32, the block (page) tables of all requests, concatenated
    kv_last_page_len   int32, in [1, page_size]: tokens used in each request's last page, so
                       request i holds page_size * (pages_i - 1) + kv_last_page_len[i] tokens

    three requests of 19, 10, 29 tokens, page_size 4 (pages drawn from a shuffled pool):
        kv_indptr        = [0, 5, 8, 16]
        kv_indices       = [p p p p p | p p p | p p p p p p p p]    (5, 3 and 8 pages)
        kv_last_page_len = [3, 2, 1]                                (19 = 4*4+3, 10 = 4*2+2, 29 = 4*7+1)

As a matrix, rows are requests and columns the pool's tokens: request i has a 1 where one of its
tokens sits. Cut the columns into blocks of page_size and every nonzero block is one page: that is
a BSR matrix with (1, page_size) blocks, and the three arrays are its indptr, indices and (for the
last block of a row) how much of the block is used. `BSRLayout.to_scipy()` builds it with scipy.

FlashInfer's pool is `[pages, page_size, kv_heads, d]` (NHD) or `[pages, kv_heads, page_size, d]`
(HND); here a pool holds one KV head, `[pages, page_size, d]`, which is either layout for one head.

What this leaves out on purpose: several KV heads per pool (a GQA group of query heads is
supported: q may be (n, h, d)), eviction, and the page-size / fragmentation trade-off.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._check import as_array, as_bool, as_int
from .hbm import HBM
from .softmax import attention_state, merge_states

__all__ = ["OutOfBlocks", "PagedKVCache", "BSRLayout", "to_bsr", "bsr_attention", "composable_attention"]


class OutOfBlocks(ValueError):
    """The pool has too few free blocks for the request (a size that cannot be met)."""


class PagedKVCache:
    """A pool of `num_blocks` blocks of `block_size` tokens, one KV head of `head_dim`.

    Blocks are handed out in an order shuffled by a seeded generator, so block tables look like
    a real allocator's (not 0, 1, 2, ...). Full blocks can be shared between requests (`fork`);
    a shared partial last block is copied on the first write to it (copy-on-write).

    >>> cache = PagedKVCache(64, 4, 8, seed=0)
    >>> rng = np.random.default_rng(1)
    >>> a = cache.add(rng.standard_normal((10, 8)), rng.standard_normal((10, 8)))
    >>> cache.seq_len(a), len(cache.block_table(a)), cache.num_free()
    (10, 3, 61)
    """

    def __init__(self, num_blocks: int, block_size: int, head_dim: int, *, dtype=np.float64,
                 seed: int = 0):
        self.num_blocks = as_int("num_blocks", num_blocks, 1, 1 << 24)
        self.block_size = as_int("block_size", block_size, 1, 1 << 16)
        self.head_dim = as_int("head_dim", head_dim, 1, 1 << 16)
        self.dtype = np.dtype(dtype)
        if self.dtype.kind != "f":
            raise TypeError(f"dtype must be a float dtype, got {self.dtype}")
        self.k_pool = np.zeros((self.num_blocks, self.block_size, self.head_dim), self.dtype)
        self.v_pool = np.zeros_like(self.k_pool)
        order = np.random.default_rng(as_int("seed", seed, 0, None)).permutation(self.num_blocks)
        self._free = [int(b) for b in order[::-1]]       # pop() hands out order[0], order[1], ...
        self._refs = np.zeros(self.num_blocks, np.int64)  # requests using each block
        self._tables: dict[int, list[int]] = {}
        self._lens: dict[int, int] = {}
        self._next = 0

    # --- queries -------------------------------------------------------------------------
    def num_free(self) -> int:
        return len(self._free)

    def requests(self) -> list[int]:
        return list(self._tables)

    def _rid(self, rid) -> int:
        if isinstance(rid, bool) or not isinstance(rid, (int, np.integer)) or int(rid) not in self._tables:
            raise ValueError(f"rid={rid!r} is not a request of this cache; valid: {sorted(self._tables)}")
        return int(rid)

    def block_table(self, rid) -> list[int]:
        return list(self._tables[self._rid(rid)])

    def seq_len(self, rid) -> int:
        return self._lens[self._rid(rid)]

    def gather(self, rid) -> tuple[np.ndarray, np.ndarray]:
        """The request's K and V as contiguous (seq_len, head_dim) copies."""
        rid = self._rid(rid)
        n, table = self._lens[rid], self._tables[rid]
        k = self.k_pool[table].reshape(-1, self.head_dim)[:n]
        v = self.v_pool[table].reshape(-1, self.head_dim)[:n]
        return k.copy(), v.copy()

    # --- changes -------------------------------------------------------------------------
    def _kv(self, k, v) -> tuple[np.ndarray, np.ndarray]:
        k = as_array("k", k, ndim=2, shape="(n_tokens, head_dim)")
        v = as_array("v", v, ndim=2, shape="(n_tokens, head_dim)")
        if k.shape[1] != self.head_dim or v.shape != k.shape or k.shape[0] < 1:
            raise ValueError(f"k and v must both be (n_tokens >= 1, head_dim={self.head_dim}); "
                             f"got k {k.shape}, v {v.shape}")
        return k, v

    def _take(self, n: int, what: str) -> list[int]:
        if n > len(self._free):
            raise OutOfBlocks(f"{what} needs {n} free block(s) but the pool of num_blocks="
                              f"{self.num_blocks} has {len(self._free)} free; free requests or "
                              f"make a larger cache")
        blocks = [self._free.pop() for _ in range(n)]
        self._refs[blocks] = 1
        return blocks

    def _write(self, rid: int, k, v) -> None:
        """Append tokens, filling the last block first (copied first if another request shares it)."""
        table, n, bs = self._tables[rid], self._lens[rid], self.block_size
        used = n - bs * (len(table) - 1) if table else bs       # tokens in the last block
        room = bs - used
        shared_partial = table and room > 0 and self._refs[table[-1]] > 1
        new = -(-max(len(k) - room, 0) // bs)
        fresh = self._take(new + (1 if shared_partial else 0), f"request {rid}")   # all or nothing
        if shared_partial:                                      # copy-on-write of the last block
            old, copy = table[-1], fresh.pop(0)
            self.k_pool[copy], self.v_pool[copy] = self.k_pool[old], self.v_pool[old]
            self._refs[old] -= 1
            table[-1] = copy
        for i in range(len(k)):
            pos = n + i
            if pos // bs == len(table):
                table.append(fresh.pop(0))
            self.k_pool[table[pos // bs], pos % bs] = k[i]
            self.v_pool[table[pos // bs], pos % bs] = v[i]
        self._lens[rid] = n + len(k)

    def add(self, k, v) -> int:
        """A new request holding tokens k, v (each (n_tokens, head_dim)); returns its id."""
        k, v = self._kv(k, v)
        rid = self._next
        self._tables[rid], self._lens[rid] = [], 0
        try:
            self._write(rid, k, v)
        except OutOfBlocks:
            del self._tables[rid], self._lens[rid]
            raise
        self._next += 1
        return rid

    def append(self, rid, k, v) -> None:
        """More tokens at the end of request `rid`."""
        rid = self._rid(rid)
        k, v = self._kv(k, v)
        self._write(rid, k, v)

    def fork(self, rid) -> int:
        """A new request sharing every block of `rid` by reference (no copy until a write)."""
        rid = self._rid(rid)
        new = self._next
        self._tables[new] = list(self._tables[rid])
        self._lens[new] = self._lens[rid]
        self._refs[self._tables[new]] += 1
        self._next += 1
        return new

    def free(self, rid) -> None:
        """Release a request; a block returns to the pool when no request uses it any more."""
        rid = self._rid(rid)
        for b in self._tables.pop(rid):
            self._refs[b] -= 1
            if self._refs[b] == 0:
                self._free.append(b)
        del self._lens[rid]


@dataclass(frozen=True)
class BSRLayout:
    """Block tables as FlashInfer's three int32 arrays (see the module docstring). Checked on
    construction: a layout FlashInfer would read out of bounds is refused by name."""
    kv_indptr: np.ndarray
    kv_indices: np.ndarray
    kv_last_page_len: np.ndarray
    page_size: int
    num_blocks: int

    def __post_init__(self):
        ps = as_int("page_size", self.page_size, 1, None)
        nb = as_int("num_blocks", self.num_blocks, 1, None)
        indptr = _int32("kv_indptr", self.kv_indptr)
        indices = _int32("kv_indices", self.kv_indices)
        last = _int32("kv_last_page_len", self.kv_last_page_len)
        if indptr.size < 1 or indptr[0] != 0:
            raise ValueError(f"kv_indptr={indptr.tolist()} must start at 0; valid: [0, ...] with n + 1 entries")
        pages = np.diff(indptr)
        if (pages < 1).any():
            i = int(np.argmax(pages < 1))
            raise ValueError(f"kv_indptr={indptr.tolist()} must increase (every request owns >= 1 page); "
                             f"kv_indptr[{i + 1}] = {indptr[i + 1]} <= kv_indptr[{i}] = {indptr[i]}")
        if indices.size != indptr[-1]:
            raise ValueError(f"kv_indices has {indices.size} entries but kv_indptr[-1] = {indptr[-1]}; "
                             f"they must be equal")
        bad = (indices < 0) | (indices >= nb)
        if bad.any():
            raise ValueError(f"kv_indices holds {int(indices[bad][0])}, outside the pool; valid: "
                             f"0 <= index < num_blocks={nb}")
        if last.size != pages.size:
            raise ValueError(f"kv_last_page_len has {last.size} entries for {pages.size} requests")
        bad = (last < 1) | (last > ps)
        if bad.any():
            raise ValueError(f"kv_last_page_len holds {int(last[bad][0])}; valid: 1 <= len <= "
                             f"page_size={ps}")
        for name, a in (("kv_indptr", indptr), ("kv_indices", indices), ("kv_last_page_len", last)):
            a.setflags(write=False)
            object.__setattr__(self, name, a)
        object.__setattr__(self, "page_size", ps)
        object.__setattr__(self, "num_blocks", nb)

    @property
    def num_requests(self) -> int:
        return self.kv_indptr.size - 1

    def pages(self, i: int) -> np.ndarray:
        return self.kv_indices[self.kv_indptr[i]:self.kv_indptr[i + 1]]

    def seq_lens(self) -> np.ndarray:
        return self.page_size * (np.diff(self.kv_indptr) - 1) + self.kv_last_page_len

    def to_scipy(self):
        """The same matrix as a `scipy.sparse.bsr_array`: rows = requests, columns = the pool's
        tokens, blocks of (1, page_size); its indptr and indices are kv_indptr and kv_indices."""
        from scipy.sparse import bsr_array
        data = np.ones((self.kv_indices.size, 1, self.page_size), np.int8)
        data[self.kv_indptr[1:] - 1, 0, :] = np.arange(self.page_size) < self.kv_last_page_len[:, None]
        return bsr_array((data, self.kv_indices.copy(), self.kv_indptr.copy()),
                         shape=(self.num_requests, self.num_blocks * self.page_size))


def _int32(name, a) -> np.ndarray:
    a = as_array(name, a, ndim=1, kinds="iu")
    if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
        raise ValueError(f"{name} does not fit in int32")
    return a.astype(np.int32)


def to_bsr(cache: PagedKVCache, rids) -> BSRLayout:
    """The block tables of requests `rids` (in that order) as a BSRLayout.

    >>> cache = PagedKVCache(32, 4, 2, seed=0)
    >>> rids = [cache.add(np.ones((n, 2)), np.ones((n, 2))) for n in (19, 10, 29)]
    >>> lay = to_bsr(cache, rids)
    >>> lay.kv_indptr.tolist(), lay.kv_last_page_len.tolist()
    ([0, 5, 8, 16], [3, 2, 1])
    """
    if not isinstance(cache, PagedKVCache):
        raise TypeError(f"cache must be a PagedKVCache, got {type(cache).__name__}")
    rids = [cache._rid(r) for r in _list("rids", rids)]
    tables = [cache.block_table(r) for r in rids]
    indptr = np.cumsum([0] + [len(t) for t in tables])
    last = [cache.seq_len(r) - cache.block_size * (len(t) - 1) for r, t in zip(rids, tables)]
    return BSRLayout(indptr, np.array(sum(tables, []), dtype=np.int64), np.array(last),
                     cache.block_size, cache.num_blocks)


def _list(name, xs) -> list:
    if isinstance(xs, (str, bytes)) or not hasattr(xs, "__iter__"):
        raise TypeError(f"{name} must be a list of request ids, got {xs!r}")
    xs = list(xs)
    if not xs:
        raise ValueError(f"{name} is empty; valid: at least one request")
    return xs


def _gather_pages(cache, layout, i, hbm):
    """Request i's K and V, loaded page by page through kv_indices (the last page cut to its
    length): page_size x d elements of K and of V per page, counted where they are read."""
    pages, ks, vs = layout.pages(i), [], []
    for j, p in enumerate(pages):
        n = layout.kv_last_page_len[i] if j == len(pages) - 1 else layout.page_size
        ks.append(cache.k_pool[p, :n])                 # one page of K: n x d elements
        vs.append(cache.v_pool[p, :n])
        if hbm is not None:
            hbm.read("K", ks[-1]); hbm.read("V", vs[-1])
    return np.concatenate(ks), np.concatenate(vs)


def bsr_attention(q, cache: PagedKVCache, layout: BSRLayout, *, qo_indptr=None, causal: bool = False,
                  scale=None, return_lse: bool = False, hbm: HBM | None = None):
    """Attention of each request's queries over its pages. Decode (`qo_indptr=None`): q has one
    row per request, (n, d), or (n, h, d) for h query heads sharing the KV head. Prefill: q is
    (total_q, d) and request i's queries are q[qo_indptr[i]:qo_indptr[i+1]], causal bottom-right
    within the request when `causal`. Equals attention over `cache.gather(rid)` exactly.
    Returns o (shaped like q), or (o, lse) with return_lse (natural log)."""
    if not isinstance(cache, PagedKVCache):
        raise TypeError(f"cache must be a PagedKVCache, got {type(cache).__name__}")
    if not isinstance(layout, BSRLayout):
        raise TypeError(f"layout must be a BSRLayout, got {type(layout).__name__}")
    if layout.page_size != cache.block_size or layout.num_blocks != cache.num_blocks:
        raise ValueError(f"layout (page_size={layout.page_size}, num_blocks={layout.num_blocks}) does "
                         f"not describe this cache ({cache.block_size}, {cache.num_blocks})")
    causal, return_lse = as_bool("causal", causal), as_bool("return_lse", return_lse)
    if hbm is not None and not isinstance(hbm, HBM):
        raise TypeError(f"hbm must be an HBM counter or None, got {type(hbm).__name__}")
    n = layout.num_requests
    q = as_array("q", q, ndim=(2, 3), shape="(n, d), (n, h, d) or (total_q, d)")
    if q.shape[-1] != cache.head_dim:
        raise ValueError(f"q's head dim {q.shape[-1]} must equal the cache's head_dim={cache.head_dim}")
    if qo_indptr is None:
        if q.shape[0] != n:
            raise ValueError(f"q has {q.shape[0]} rows for {n} requests; decode takes one row per request")
        spans = [(i, i + 1) for i in range(n)]
    else:
        qo = _int32("qo_indptr", qo_indptr)
        if q.ndim != 2 or qo.size != n + 1 or qo[0] != 0 or (np.diff(qo) < 0).any() or qo[-1] != q.shape[0]:
            raise ValueError(f"qo_indptr={qo.tolist()} must have {n + 1} non-decreasing entries from 0 "
                             f"to q's {q.shape[0]} rows (q (total_q, d))")
        spans = [(int(a), int(b)) for a, b in zip(qo[:-1], qo[1:])]
    o = np.zeros(q.shape, np.result_type(q.dtype, cache.dtype, np.float32))
    lse = np.full(q.shape[:-1], -np.inf, o.dtype)
    for i, (a, b) in enumerate(spans):
        k, v = _gather_pages(cache, layout, i, hbm)
        qi = q[a:b] if qo_indptr is not None else q[i]          # (n_q, d), (h, d) or (d,)
        if hbm is not None:
            hbm.read("Q", qi)
        mask = None
        if causal and qo_indptr is not None:                    # bottom-right, per request
            mask = np.arange(len(k))[None, :] <= np.arange(b - a)[:, None] + len(k) - (b - a)
        if qi.shape[0] == 0:
            continue
        oi, li = attention_state(qi, k, v, scale=scale, mask=mask)
        if qo_indptr is not None:
            o[a:b], lse[a:b] = oi, li
        else:
            o[i], lse[i] = oi, li
        if hbm is not None:
            hbm.write("O", oi)
    return (o, lse) if return_lse else o


def composable_attention(q, cache: PagedKVCache, rids, *, hbm: HBM | None = None):
    """Decode for a group of requests that share a forked prefix, in two formats at once:
    the shared pages as one block row of n queries (read once for all of them), then each
    request's own pages with (1, page_size) blocks, and the two states merged with ⊕.

    q is (n, d) (or (n, h, d)), one row per request in `rids`. Returns (o, reads) where reads =
    {"single": KV pages read if every request reads all its own pages, "composable": the shared
    pages once plus each request's own pages}.
    """
    if not isinstance(cache, PagedKVCache):
        raise TypeError(f"cache must be a PagedKVCache, got {type(cache).__name__}")
    rids = [cache._rid(r) for r in _list("rids", rids)]
    q = as_array("q", q, ndim=(2, 3), shape="(n, d) or (n, h, d)")
    if q.shape[0] != len(rids) or q.shape[-1] != cache.head_dim:
        raise ValueError(f"q has shape {q.shape}; valid: ({len(rids)}, [h,] {cache.head_dim}), one row "
                         f"per request")
    tables = [cache.block_table(r) for r in rids]
    shared = 0                                       # leading pages every table holds, all full
    while (all(len(t) > shared for t in tables) and len({t[shared] for t in tables}) == 1
           and all(cache.seq_len(r) >= cache.block_size * (shared + 1) for r in rids)):
        shared += 1
    bs = cache.block_size
    outs = []
    if shared:                                       # the shared block row: n queries, pages once
        pages = tables[0][:shared]
        k = cache.k_pool[pages].reshape(-1, cache.head_dim)
        v = cache.v_pool[pages].reshape(-1, cache.head_dim)
        if hbm is not None:
            hbm.read("K", k); hbm.read("V", v)
        flat = q.reshape(-1, q.shape[-1])            # every query of the group against one KV
        op, lp = attention_state(flat, k, v)
        shared_state = (op.reshape(q.shape), lp.reshape(q.shape[:-1]))
    for i, (r, t) in enumerate(zip(rids, tables)):
        own = t[shared:]
        n_own = cache.seq_len(r) - bs * shared
        k = cache.k_pool[own].reshape(-1, cache.head_dim)[:n_own]
        v = cache.v_pool[own].reshape(-1, cache.head_dim)[:n_own]
        if hbm is not None:
            hbm.read("K", k); hbm.read("V", v)
        state = attention_state(q[i], k, v)          # (o, lse); the identity if no own tokens
        if shared:
            state = merge_states([(shared_state[0][i], shared_state[1][i]), state])
        outs.append(state[0])
    reads = {"single": sum(len(t) for t in tables),
             "composable": shared + sum(len(t) - shared for t in tables)}
    o = np.stack(outs)
    if hbm is not None:
        hbm.write("O", o)
    return o, reads
