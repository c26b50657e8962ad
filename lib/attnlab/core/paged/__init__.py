"""Paged KV cache (lecture §5.2-5.3): a pool of fixed-size blocks, one block table per request,
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

from attnlab.core.paged.bsr import BSRLayout, bsr_attention, to_bsr
from attnlab.core.paged.cache import OutOfBlocks, PagedKVCache
from attnlab.core.paged.composable import composable_attention, shared_prefix

__all__ = [
    "OutOfBlocks",
    "PagedKVCache",
    "BSRLayout",
    "to_bsr",
    "bsr_attention",
    "shared_prefix",
    "composable_attention",
]
