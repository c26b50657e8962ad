"""One decode call for a paged batch: `decode_paged` reads the page table's real lengths and
chooses the decoder and its launch, the way FlashInfer's plan() does, so that a caller never picks
a kernel to be fast.

    o = decode_paged(q, k_pool, v_pool, kv_indptr, kv_indices, kv_last_page_len, page_size=16)

The two decoders it chooses between stay public:
- the split-KV kernel, `kernels.paged.paged_decode` (splits from the real lengths,
  `kernels.tuning.split_from_lengths`): best for a small batch, and for a uniform one at any size;
- the plan-driven persistent decoder, `kernels.scheduled` (FlashInfer's Algorithm 1,
  `machine.schedule.plan_balanced`, on CTAS_PER_SM programs per SM with chunks of at least
  PLAN_MIN_CHUNK tokens): best for a large batch of uneven lengths, where equal splits per
  request leave most SMs waiting for the longest.
`kernels.tuning.choose_decoder` is the rule and says which H200 run set it; `decode_choice` is
what a call would launch, for a caller (or the harness) that wants to see it.

The arrays are FlashInfer's: q (batch, q_heads, d), NHD pools (pages, page_size, kv_heads, d), the
int32 page table kv_indptr (batch + 1), kv_indices, kv_last_page_len (batch). Reading the lengths
costs one copy to the host per new table (remembered per table, as `paged_decode` does); inside a
CUDA-graph capture of a table not read before the split kernel is chosen, by shapes.
"""

from __future__ import annotations

import numpy as np

from attnlab.kernels.common import check_paged
from attnlab.kernels.paged import choose_splits, paged_decode, request_lengths
from attnlab.kernels.tuning import CTAS_PER_SM, PLAN_MIN_CHUNK, choose_decoder, sms
from attnlab.validate import as_bool, choice

__all__ = ["decode_paged", "decode_choice", "DECODERS"]

#: what `decoder=` may force (None: the rule)
DECODERS = ("split", "plan")


def decode_choice(q, k_pool, kv_indptr, kv_indices, kv_last_page_len, *, page_size: int) -> dict:
    """What `decode_paged` launches for this batch: {"decoder": "split", "splits", "min_chunk",
    "rule"} (paged_decode's choice) or {"decoder": "plan", "ctas", "min_chunk"} (the plan's)."""
    batch, kv_heads = q.shape[0], k_pool.shape[2]
    lengths = request_lengths(kv_indptr, kv_last_page_len, page_size)
    if lengths is not None and choose_decoder(lengths) == "plan":
        return {"decoder": "plan", "ctas": CTAS_PER_SM * sms(q.device), "min_chunk": PLAN_MIN_CHUNK}
    return {
        "decoder": "split",
        **choose_splits(batch, kv_heads, kv_indptr, kv_indices, kv_last_page_len, page_size, q.device),
    }


def _plan(q, k_pool, kv_indptr, kv_last_page_len, page_size: int, ctas: int, min_chunk: int):
    from attnlab.machine.schedule import plan_balanced

    lengths = request_lengths(kv_indptr, kv_last_page_len, page_size)
    pairs = np.stack([np.ones_like(lengths), lengths], axis=1)
    hq, hkv = q.shape[1], k_pool.shape[2]
    return plan_balanced(pairs, kv_heads=hkv, num_ctas=ctas, group=hq // hkv, min_chunk=min_chunk)


def decode_paged(
    q,
    k_pool,
    v_pool,
    kv_indptr,
    kv_indices,
    kv_last_page_len,
    *,
    page_size: int,
    scale: float | None = None,
    return_lse: bool = False,
    decoder: str | None = None,
):
    """Decode attention of one new query per head over a paged KV cache, with the decoder and
    launch chosen from the batch's real lengths (`decode_choice`; `decoder` "split" or "plan"
    forces one, for a comparison). Returns o (batch, q_heads, d) in q's dtype, or (o, lse) with
    lse float32 (batch, q_heads), natural log. Bad input is refused by name before any launch."""
    check_paged(q, k_pool, v_pool, kv_indptr, kv_indices, kv_last_page_len, page_size)
    return_lse = as_bool("return_lse", return_lse)
    if decoder is not None:
        choice("decoder", decoder, DECODERS)
    how = decode_choice(q, k_pool, kv_indptr, kv_indices, kv_last_page_len, page_size=page_size)
    if decoder == "plan" and how["decoder"] == "split":
        how = {"decoder": "plan", "ctas": CTAS_PER_SM * sms(q.device), "min_chunk": PLAN_MIN_CHUNK}
    if how["decoder"] == "plan" and decoder != "split":
        from attnlab.kernels.scheduled import scheduled_decode

        plan = _plan(q, k_pool, kv_indptr, kv_last_page_len, page_size, how["ctas"], how["min_chunk"])
        return scheduled_decode(
            q,
            k_pool,
            v_pool,
            kv_indptr,
            kv_indices,
            kv_last_page_len,
            plan,
            page_size=page_size,
            scale=scale,
            return_lse=return_lse,
        )
    splits = how.get("splits")  # None when the plan was forced away: paged_decode's own choice
    return paged_decode(
        q,
        k_pool,
        v_pool,
        kv_indptr,
        kv_indices,
        kv_last_page_len,
        page_size=page_size,
        splits=splits,
        scale=scale,
        return_lse=return_lse,
    )
