"""The composable format (lecture §5.3). Requests forked from one prefix hold the same physical
pages at the start of their block tables, so the sub-matrix "these requests x those pages" is
dense: read it once, as ONE block row of all the group's queries, read each request's own pages
with (1, page_size) blocks, and merge the two attention states with ⊕ (cascade attention, §4.4,
on a paged cache). No data moves: it is a second set of indices over the same pool."""

from __future__ import annotations

import numpy as np

from attnlab.validate import check_bytes
from attnlab.core.hbm import HBM
from attnlab.core.softmax import attention_state, merge
from attnlab.core.paged.bsr import id_list, query_spans
from attnlab.core.paged.cache import PagedKVCache

__all__ = ["shared_prefix", "composable_attention"]


def _group(cache, rids) -> list[int]:
    if not isinstance(cache, PagedKVCache):
        raise TypeError(f"cache must be a PagedKVCache, got {type(cache).__name__}")
    return [cache._rid(r) for r in id_list("rids", rids)]


def shared_prefix(cache: PagedKVCache, rids) -> tuple[int, int]:
    """(pages, tokens) that every request of `rids` shares at the start of its block table: the
    same physical page at the same position in every table, holding the same number of valid
    tokens there. Full pages qualify, and so does a partial last page that forked requests still
    share: copy-on-write copies it only on a request's first write to it. The shared tokens then
    end mid-page, and every request of the group ends there too (its own part is empty).

    >>> cache = PagedKVCache(16, 4, 2, seed=0)
    >>> base = cache.add(np.ones((10, 2)), np.ones((10, 2)))          # 2.5 pages
    >>> group = [cache.fork(base) for _ in range(3)]
    >>> shared_prefix(cache, group)
    (3, 10)
    >>> cache.append(group[0], np.ones((1, 2)), np.ones((1, 2)))       # copies the partial page
    >>> shared_prefix(cache, group)
    (2, 8)
    """
    rids = _group(cache, rids)
    bs = cache.block_size
    tables = [cache.block_table(r) for r in rids]
    lens = [cache.seq_len(r) for r in rids]
    pages = tokens = 0
    while all(len(t) > pages for t in tables) and len({t[pages] for t in tables}) == 1:
        valid = {min(bs, n - bs * pages) for n in lens}  # tokens each request uses there
        if len(valid) != 1:
            break
        pages, tokens = pages + 1, tokens + valid.pop()
    return pages, tokens


def composable_attention(q, cache: PagedKVCache, rids, *, qo_indptr=None, hbm: HBM | None = None):
    """Attention for a group of requests in two formats at once: the pages they share
    (`shared_prefix`) as one block row of all their queries, read once; then each request's own
    pages with (1, page_size) blocks; the two states merged with ⊕. Equals attention of each
    request's queries over `cache.gather(rid)` (to rounding).

    Decode (`qo_indptr=None`): q is (n, d) or (n, h, d), one row per request of `rids`. Batched
    prefill / append: q is (total_q, d) and request i's queries are q[qo_indptr[i]:qo_indptr[i+1]]
    (qo_indptr int, n + 1 entries); every query sees all of its request's keys, with no causal
    mask (for a causal prefill use `bsr_attention(..., causal=True)`). The shared block row then
    takes all the group's rows at once.

    Returns (o, reads): o shaped like q; reads = {"single": KV pages read when every request reads
    all of its pages, "composable": the shared pages once plus each request's own pages,
    "shared": the shared pages}. The shared block row's scores (all the group's query rows x the
    shared keys) and each request's own are at most 2 GiB each, checked before any is built.

    >>> cache = PagedKVCache(32, 4, 2, seed=0)
    >>> base = cache.add(np.ones((8, 2)), np.ones((8, 2)))             # 2 full pages
    >>> rids = [cache.fork(base) for _ in range(3)]
    >>> for r in rids:
    ...     cache.append(r, np.ones((5, 2)), np.ones((5, 2)))           # 2 pages of its own
    >>> composable_attention(np.zeros((3, 2)), cache, rids)[1]
    {'single': 12, 'composable': 8, 'shared': 2}
    """
    rids = _group(cache, rids)
    if hbm is not None and not isinstance(hbm, HBM):
        raise TypeError(f"hbm must be an HBM counter or None, got {type(hbm).__name__}")
    d = cache.head_dim
    q, spans = query_spans(q, len(rids), d, qo_indptr)
    pages, tokens = shared_prefix(cache, rids)
    rows = q.size // d  # every query row of the group
    check_bytes(
        f"composable_attention: {rows} query rows x {tokens} shared keys of scores", rows * tokens * 8
    )
    for r, (a, b) in zip(rids, spans):
        own = (q[a:b].size // d) * (cache.seq_len(r) - tokens)
        check_bytes(f"composable_attention: request {r}'s query rows x its own keys of scores", own * 8)
    tables = [cache.block_table(r) for r in rids]
    o = np.zeros(q.shape, np.result_type(q.dtype, cache.dtype, np.float32))
    lse = np.full(q.shape[:-1], -np.inf, o.dtype)  # (0, -inf): the identity of ⊕
    if pages and q.size:  # the shared block row, read once
        k = cache.k_pool[tables[0][:pages]].reshape(-1, d)[:tokens]
        v = cache.v_pool[tables[0][:pages]].reshape(-1, d)[:tokens]
        if hbm is not None:
            hbm.read("K", k)
            hbm.read("V", v)
        o_s, lse_s = attention_state(q.reshape(-1, d), k, v)  # every query of the group
        o, lse = o_s.reshape(o.shape), lse_s.reshape(lse.shape)
    for r, t, (a, b) in zip(rids, tables, spans):  # each request's own pages
        qi = q[a:b].reshape(-1, d)
        n_own = cache.seq_len(r) - tokens
        if qi.shape[0] == 0 or n_own == 0:
            continue
        k = cache.k_pool[t[pages:]].reshape(-1, d)[:n_own]
        v = cache.v_pool[t[pages:]].reshape(-1, d)[:n_own]
        if hbm is not None:
            hbm.read("K", k)
            hbm.read("V", v)
        shape = o[a:b].shape
        o_m, lse_m = merge((o[a:b].reshape(-1, d), lse[a:b].reshape(-1)), attention_state(qi, k, v))
        o[a:b], lse[a:b] = o_m.reshape(shape), lse_m.reshape(shape[:-1])
    if hbm is not None:
        hbm.write("O", o)
    single = sum(len(t) for t in tables)
    return o, {"single": single, "composable": pages + single - len(tables) * pages, "shared": pages}
