"""Block tables as FlashInfer's BSR arrays and attention through them.
See `attnlab.core.paged` for the arrays' meaning."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np

from attnlab.validate import as_array, as_bool, as_index, as_int, as_sequence, check_bytes, fields_equal
from attnlab.core.hbm import HBM
from attnlab.core.softmax import attention_state
from attnlab.core.paged.cache import PagedKVCache

__all__ = ["BSRLayout", "to_bsr", "bsr_attention", "id_list", "query_spans"]


_INT32_MAX = int(np.iinfo(np.int32).max)


@dataclass(frozen=True, eq=False)
class BSRLayout:
    """Block tables as FlashInfer's three int32 arrays (see the module docstring). Checked on
    construction: a layout FlashInfer would read out of bounds is refused by name, and so is one
    whose sequence lengths (page_size x (pages - 1) + last page) do not fit int32, the type of
    FlashInfer's length arrays. Two layouts are equal when their arrays and sizes are."""

    kv_indptr: np.ndarray
    kv_indices: np.ndarray
    kv_last_page_len: np.ndarray
    page_size: int
    num_blocks: int

    def __post_init__(self):
        ps = as_int("page_size", self.page_size, 1, _INT32_MAX)
        nb = as_int("num_blocks", self.num_blocks, 1, None)
        indptr = _int32("kv_indptr", self.kv_indptr)
        indices = _int32("kv_indices", self.kv_indices)
        last = _int32("kv_last_page_len", self.kv_last_page_len)
        if indptr.size < 2 or indptr[0] != 0:
            raise ValueError(
                f"kv_indptr={indptr.tolist()} must start at 0 and have n + 1 entries for "
                f"n >= 1 requests; valid: [0, ...] with at least 2 entries"
            )
        pages = np.diff(indptr)
        if (pages < 1).any():
            i = int(np.argmax(pages < 1))
            raise ValueError(
                f"kv_indptr={indptr.tolist()} must increase (every request owns >= 1 page); "
                f"kv_indptr[{i + 1}] = {indptr[i + 1]} <= kv_indptr[{i}] = {indptr[i]}"
            )
        if indices.size != indptr[-1]:
            raise ValueError(
                f"kv_indices has {indices.size} entries but kv_indptr[-1] = {indptr[-1]}; they must be equal"
            )
        bad = (indices < 0) | (indices >= nb)
        if bad.any():
            raise ValueError(
                f"kv_indices holds {int(indices[bad][0])}, outside the pool; valid: "
                f"0 <= index < num_blocks={nb}"
            )
        if last.size != pages.size:
            raise ValueError(f"kv_last_page_len has {last.size} entries for {pages.size} requests")
        bad = (last < 1) | (last > ps)
        if bad.any():
            raise ValueError(f"kv_last_page_len holds {int(last[bad][0])}; valid: 1 <= len <= page_size={ps}")
        lens = ps * (pages.astype(np.int64) - 1) + last  # exact: int64, then checked
        if lens.max() > _INT32_MAX:
            i = int(np.argmax(lens))
            raise ValueError(
                f"request {i} holds page_size={ps} x {int(pages[i]) - 1} pages + "
                f"{int(last[i])} = {int(lens[i]):,} tokens; valid: at most {_INT32_MAX:,} "
                f"(FlashInfer's length arrays are int32)"
            )
        for name, a in (("kv_indptr", indptr), ("kv_indices", indices), ("kv_last_page_len", last)):
            a.setflags(write=False)
            object.__setattr__(self, name, a)
        object.__setattr__(self, "page_size", ps)
        object.__setattr__(self, "num_blocks", nb)

    __eq__ = fields_equal  # arrays compared as wholes
    __hash__ = None

    @property
    def num_requests(self) -> int:
        return self.kv_indptr.size - 1

    def pages(self, i: int) -> np.ndarray:
        """The pages of request i, an integer 0 <= i < num_requests (a float index is refused)."""
        i = as_index("i", i, 0, self.num_requests - 1)
        return self.kv_indices[self.kv_indptr[i] : self.kv_indptr[i + 1]]

    def seq_lens(self) -> np.ndarray:
        """Tokens per request, int32 (they fit: checked on construction), computed in int64."""
        pages = np.diff(self.kv_indptr).astype(np.int64)
        return (self.page_size * (pages - 1) + self.kv_last_page_len).astype(np.int32)

    def to_scipy(self):
        """The same matrix as a `scipy.sparse.bsr_array`: rows = requests, columns = the pool's
        tokens, blocks of (1, page_size); its indptr and indices are kv_indptr and kv_indices."""
        from scipy.sparse import bsr_array

        n, ps = self.kv_indices.size, self.page_size  # blocks, the int64 arange, the last pages' mask
        check_bytes(
            f"to_scipy: {n} pages x page_size={ps} (int8 blocks, and an int64 row of page_size "
            f"for {self.num_requests} last pages)",
            n * ps + 8 * ps + self.num_requests * ps,
        )
        data = np.ones((self.kv_indices.size, 1, self.page_size), np.int8)
        data[self.kv_indptr[1:] - 1, 0, :] = np.arange(self.page_size) < self.kv_last_page_len[:, None]
        return bsr_array(
            (data, self.kv_indices.copy(), self.kv_indptr.copy()),
            shape=(self.num_requests, self.num_blocks * self.page_size),
        )


def _int32(name, a) -> np.ndarray:
    a = as_array(name, a, ndim=1, kinds="iu")
    if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
        raise ValueError(
            f"{name} holds {int(a.max()) if a.max() > 0 else int(a.min())}, which does not "
            f"fit int32 (FlashInfer's index arrays); valid: {np.iinfo(np.int32).min} .. "
            f"{_INT32_MAX}"
        )
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
    rids = [cache._rid(r) for r in id_list("rids", rids)]
    tables = [cache.block_table(r) for r in rids]
    indptr = np.cumsum([0] + [len(t) for t in tables])
    last = [cache.seq_len(r) - cache.block_size * (len(t) - 1) for r, t in zip(rids, tables)]
    indices = np.fromiter(chain.from_iterable(tables), np.int64, int(indptr[-1]))  # linear
    return BSRLayout(indptr, indices, np.array(last), cache.block_size, cache.num_blocks)


def id_list(name, xs) -> list:
    """xs as a non-empty list of request ids, in order (checked by name; a set has no order)."""
    xs = as_sequence(name, xs, "a list of request ids")
    if not xs:
        raise ValueError(f"{name} is empty; valid: at least one request")
    return xs


def query_spans(q, n: int, head_dim: int, qo_indptr):
    """q checked, and the rows of each of the n requests as (start, stop) spans: one row each
    for decode (q (n, d) or (n, h, d)), q[qo_indptr[i]:qo_indptr[i+1]] with qo_indptr."""
    q = as_array("q", q, ndim=(2, 3), shape="(n, d), (n, h, d) or (total_q, d)")
    if q.shape[-1] != head_dim:
        raise ValueError(f"q's head dim {q.shape[-1]} must equal the cache's head_dim={head_dim}")
    if qo_indptr is None:
        if q.shape[0] != n:
            raise ValueError(f"q has {q.shape[0]} rows for {n} requests; decode takes one row per request")
        return q, [(i, i + 1) for i in range(n)]
    qo = _int32("qo_indptr", qo_indptr)
    if q.ndim != 2 or qo.size != n + 1 or qo[0] != 0 or (np.diff(qo) < 0).any() or qo[-1] != q.shape[0]:
        raise ValueError(
            f"qo_indptr={qo.tolist()} must have {n + 1} non-decreasing entries from 0 "
            f"to q's {q.shape[0]} rows (q (total_q, d))"
        )
    return q, [(int(a), int(b)) for a, b in zip(qo[:-1], qo[1:])]


def _gather_pages(cache, layout, i, hbm):
    """Request i's K and V, loaded page by page through kv_indices (the last page cut to its
    length): page_size x d elements of K and of V per page, counted where they are read."""
    pages, ks, vs = layout.pages(i), [], []
    if hbm is None:  # nothing to count: one gather, not a loop
        n = layout.page_size * (len(pages) - 1) + int(layout.kv_last_page_len[i])
        d = cache.head_dim
        return cache.k_pool[pages].reshape(-1, d)[:n], cache.v_pool[pages].reshape(-1, d)[:n]
    for j, p in enumerate(pages):
        n = layout.kv_last_page_len[i] if j == len(pages) - 1 else layout.page_size
        ks.append(cache.k_pool[p, :n])  # one page of K: n x d elements
        vs.append(cache.v_pool[p, :n])
        if hbm is not None:
            hbm.read("K", ks[-1])
            hbm.read("V", vs[-1])
    return np.concatenate(ks), np.concatenate(vs)


def bsr_attention(
    q,
    cache: PagedKVCache,
    layout: BSRLayout,
    *,
    qo_indptr=None,
    causal: bool = False,
    scale=None,
    return_lse: bool = False,
    hbm: HBM | None = None,
):
    """Attention of each request's queries over its pages. Decode (`qo_indptr=None`): q has one
    row per request, (n, d), or (n, h, d) for h query heads sharing the KV head. Prefill: q is
    (total_q, d) and request i's queries are q[qo_indptr[i]:qo_indptr[i+1]], causal bottom-right
    within the request when `causal`. Equals attention over `cache.gather(rid)` exactly.
    Returns o (shaped like q), or (o, lse) with return_lse (natural log). One request's scores
    (its query rows x its keys) are built at once: at most 2 GiB, checked before any is."""
    if not isinstance(cache, PagedKVCache):
        raise TypeError(f"cache must be a PagedKVCache, got {type(cache).__name__}")
    if not isinstance(layout, BSRLayout):
        raise TypeError(f"layout must be a BSRLayout, got {type(layout).__name__}")
    if layout.page_size != cache.block_size or layout.num_blocks != cache.num_blocks:
        raise ValueError(
            f"layout (page_size={layout.page_size}, num_blocks={layout.num_blocks}) does "
            f"not describe this cache ({cache.block_size}, {cache.num_blocks})"
        )
    idle = np.flatnonzero(cache._refs[layout.kv_indices] == 0)
    if idle.size:  # a layout older than a free() reads stale pages
        raise ValueError(
            f"layout reads block {int(layout.kv_indices[idle[0]])}, which no request of "
            f"this cache holds ({idle.size} such page(s)); valid: a layout of live "
            f"requests (make it again with to_bsr after free)"
        )
    causal, return_lse = as_bool("causal", causal), as_bool("return_lse", return_lse)
    if hbm is not None and not isinstance(hbm, HBM):
        raise TypeError(f"hbm must be an HBM counter or None, got {type(hbm).__name__}")
    n = layout.num_requests
    q, spans = query_spans(q, n, cache.head_dim, qo_indptr)
    o = np.zeros(q.shape, np.result_type(q.dtype, cache.dtype, np.float32))
    lse = np.full(q.shape[:-1], -np.inf, o.dtype)
    lens = layout.seq_lens()
    for i, (a, b) in enumerate(spans):  # scores (and mask) of one request at once
        rows = (b - a) * (q.shape[1] if q.ndim == 3 else 1) if qo_indptr is None else b - a
        check_bytes(
            f"bsr_attention: request {i}'s {rows} query rows x {int(lens[i])} keys of scores",
            rows * int(lens[i]) * 9,
        )
    for i, (a, b) in enumerate(spans):
        k, v = _gather_pages(cache, layout, i, hbm)
        qi = q[a:b] if qo_indptr is not None else q[i]  # (n_q, d), (h, d) or (d,)
        if hbm is not None:
            hbm.read("Q", qi)
        mask = None
        if causal and qo_indptr is not None:  # bottom-right, per request
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
