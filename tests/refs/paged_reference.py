"""Paged-KV test helpers shared by the paged and the scheduled decode kernels' tests: a shuffled
page table, NHD pools whose unowned slots are NaN (a read of a page the request does not own shows
up), and the float64 reference attention from the definition, gathering each request's K/V through
the table. Independent of the code under test."""
from __future__ import annotations

import math

import numpy as np

NAN = float("nan")


def table(lens, page_size, num_pages, rng):
    """FlashInfer's three int32 arrays for requests of `lens` tokens, pages from a shuffled pool."""
    pages = [-(-n // page_size) for n in lens]
    indices = rng.permutation(num_pages)[:sum(pages)]
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
    cut to last[i]; each query head h attends over KV head h // g with a plain softmax."""
    n_req, hq, d = q.shape
    g = hq // k_pool.shape[2]
    o, lse = np.zeros((n_req, hq, d)), np.zeros((n_req, hq))
    for i in range(n_req):
        pages = indices[indptr[i]:indptr[i + 1]]
        n = page_size * (len(pages) - 1) + last[i]
        slots = [(p, s) for p in pages for s in range(page_size)][:n]
        k = np.stack([k_pool[p, s] for p, s in slots])
        v = np.stack([v_pool[p, s] for p, s in slots])
        for h in range(hq):
            logits = k[:, h // g] @ q[i, h] / math.sqrt(d)
            m = logits.max()
            w = np.exp(logits - m)
            o[i, h] = w @ v[:, h // g] / w.sum()
            lse[i, h] = m + math.log(w.sum())
    return o, lse
