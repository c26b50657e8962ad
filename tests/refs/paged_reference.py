"""Paged-KV test helpers shared by the paged and the scheduled decode kernels' tests: a shuffled
page table, NHD pools whose unowned slots are NaN (a read of a page the request does not own shows
up), and the float64 reference attention from the definition, gathering each request's K/V through
the table. Independent of the code under test."""

from __future__ import annotations

import numpy as np

from refs.reference import decode_attention

NAN = float("nan")


def table(lens, page_size, num_pages, rng):
    """FlashInfer's three int32 arrays for requests of `lens` tokens, pages from a shuffled pool."""
    pages = [-(-n // page_size) for n in lens]
    indices = rng.permutation(num_pages)[: sum(pages)]
    indptr = np.concatenate([[0], np.cumsum(pages)])
    last = np.array([n - page_size * (p - 1) for n, p in zip(lens, pages)])
    return indptr, indices, last


def pools(lens, page_size, kv_heads, d, rng, spare=4, num_pages=None):
    """NHD pools (float64) with only the requests' slots filled, the rest NaN, and the table."""
    num_pages = num_pages or sum(-(-n // page_size) for n in lens) + spare
    indptr, indices, last = table(lens, page_size, num_pages, rng)
    k = np.full((num_pages, page_size, kv_heads, d), NAN)
    v = np.full_like(k, NAN)
    for i, n in enumerate(lens):
        for t in range(n):
            p, s = indices[indptr[i] + t // page_size], t % page_size
            k[p, s], v[p, s] = rng.standard_normal((2, kv_heads, d))
    return k, v, (indptr, indices, last)


def attention(q, k_pool, v_pool, indptr, indices, last, page_size):
    """float64, from the definition: request i's tokens are its pages in table order, the last page
    cut to last[i] (`refs.reference.decode_attention` over them)."""
    keys, values = [], []
    for i in range(q.shape[0]):
        pages = indices[indptr[i] : indptr[i + 1]]
        n = page_size * (len(pages) - 1) + last[i]
        slots = [(p, s) for p in pages for s in range(page_size)][:n]
        keys.append(np.stack([k_pool[p, s] for p, s in slots]))
        values.append(np.stack([v_pool[p, s] for p, s in slots]))
    return decode_attention(q, keys, values)
