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

`DecodeWorkspace` is the form for a decode loop, as FlashInfer's wrapper is: `plan(page table)`
once per batch (the host's work: the lengths, the choice, the plan and its buffers), then
`run(q, k_pool, v_pool)` every step, launches only, so it can be captured in a CUDA graph.
`decode_paged` is one plan and one run.

The arrays are FlashInfer's: q (batch, q_heads, d), NHD pools (pages, page_size, kv_heads, d), the
int32 page table kv_indptr (batch + 1), kv_indices, kv_last_page_len (batch). Reading the lengths
costs one copy to the host per new table (remembered per table, as `paged_decode` does); inside a
CUDA-graph capture of a table not read before the split kernel is chosen, by shapes.
"""

from __future__ import annotations

import numpy as np

from attnlab.kernels.common import check_paged
from attnlab.kernels.planned import head_dims, pool_dims
from attnlab.kernels.decode import workspace
from attnlab.kernels.paged import choose_splits, paged_decode, request_lengths
from attnlab.kernels.tuning import CTAS_PER_SM, PLAN_MIN_CHUNK, choose_decoder, sms
from attnlab.validate import as_bool, choice

__all__ = ["decode_paged", "decode_choice", "DecodeWorkspace", "DECODERS"]

#: what `decoder=` may force (None: the rule)
DECODERS = ("split", "plan")


def decode_choice(q, k_pool, kv_indptr, kv_indices, kv_last_page_len, *, page_size: int) -> dict:
    """What `decode_paged` launches for this batch: {"decoder": "split", "splits", "min_chunk",
    "rule"} (paged_decode's choice) or {"decoder": "plan", "ctas", "min_chunk"} (the plan's)."""
    lengths = request_lengths(kv_indptr, kv_last_page_len, page_size)
    if lengths is not None and choose_decoder(lengths) == "plan":
        return _plan_choice(q.device)
    return _split_choice(
        q.shape[0], k_pool.shape[2], kv_indptr, kv_indices, kv_last_page_len, page_size, q.device
    )


def _plan_choice(device) -> dict:
    return {"decoder": "plan", "ctas": CTAS_PER_SM * sms(device), "min_chunk": PLAN_MIN_CHUNK}


def _split_choice(batch, kv_heads, kv_indptr, kv_indices, kv_last_page_len, page_size, device) -> dict:
    return {
        "decoder": "split",
        **choose_splits(batch, kv_heads, kv_indptr, kv_indices, kv_last_page_len, page_size, device),
    }


class DecodeWorkspace:
    """decode_paged planned once for a batch's page table and run at every step.

    DecodeWorkspace(q_heads, kv_heads, head_dim, page_size, max_pages, dtype, device, scale=None)
    sizes nothing yet; `plan(kv_indptr, kv_indices, kv_last_page_len, decoder=None)` reads the
    real lengths, chooses (`decode_choice`; decoder "split" or "plan" forces one), makes the
    plan and the buffers the launches write, and returns the choice; `run(q, k_pool, v_pool)`
    launches on the planned table (pools of at least max_pages pages) and returns o, and `lse`
    the last run's (batch, q_heads) float32 natural log. A plan's buffers are kept while the
    next batch fits them, so a captured graph stays valid across plans that fit."""

    def __init__(
        self,
        q_heads: int,
        kv_heads: int,
        head_dim: int,
        page_size: int,
        max_pages: int,
        dtype=None,
        device="cuda",
        *,
        scale: float | None = None,
    ):
        self.q_heads, self.kv_heads, self.head_dim = head_dims(q_heads, kv_heads, head_dim)
        self.page_size, self.max_pages, self.dtype, self.device = pool_dims(
            page_size, max_pages, dtype, device
        )
        self.scale = scale
        self.choice, self._table, self._dec, self._split, self._lse = None, None, None, None, None

    def plan(self, kv_indptr, kv_indices, kv_last_page_len, *, decoder: str | None = None) -> dict:
        import torch

        if decoder is not None:
            choice("decoder", decoder, DECODERS)
        batch = kv_last_page_len.numel() if isinstance(kv_last_page_len, torch.Tensor) else 0
        q = torch.empty(1, dtype=self.dtype, device=self.device).expand(
            max(batch, 1), self.q_heads, self.head_dim
        )
        pool = torch.empty(1, dtype=self.dtype, device=self.device).expand(
            self.max_pages, self.page_size, self.kv_heads, self.head_dim
        )
        check_paged(q, pool, pool, kv_indptr, kv_indices, kv_last_page_len, self.page_size)
        if decoder is None:
            how = decode_choice(q, pool, kv_indptr, kv_indices, kv_last_page_len, page_size=self.page_size)
        elif decoder == "plan":
            how = _plan_choice(self.device)
        else:
            how = _split_choice(
                batch, self.kv_heads, kv_indptr, kv_indices, kv_last_page_len, self.page_size, self.device
            )
        self._table = (kv_indptr, kv_indices, kv_last_page_len)
        if how["decoder"] == "plan":
            self._plan_decoder(batch, how)
        else:
            self._split = {
                "splits": how["splits"],
                "ws": workspace(batch, self.q_heads, self.head_dim, how["splits"], self.device),
                "out": torch.empty(batch, self.q_heads, self.head_dim, dtype=self.dtype, device=self.device),
            }
        self.choice = how
        return dict(how)

    def _plan_decoder(self, batch: int, how: dict) -> None:
        from attnlab.kernels.scheduled import ScheduledDecoder
        from attnlab.machine.schedule import plan_balanced

        kv_indptr, kv_indices, kv_last_page_len = self._table
        lengths = request_lengths(kv_indptr, kv_last_page_len, self.page_size)
        pairs = np.stack([np.ones_like(lengths), lengths], axis=1)
        plan = plan_balanced(
            pairs,
            kv_heads=self.kv_heads,
            num_ctas=how["ctas"],
            group=self.q_heads // self.kv_heads,
            min_chunk=how["min_chunk"],
        )
        items, outputs = int(np.bincount(plan.cta).max()), plan.num_outputs
        d = self._dec
        if (
            d is None
            or d.max_batch < batch
            or d.max_ctas != how["ctas"]
            or d.max_items < items
            or d.max_outputs < outputs
        ):
            d = self._dec = ScheduledDecoder(
                batch,
                self.q_heads,
                self.kv_heads,
                self.head_dim,
                how["ctas"],
                items,
                self.max_pages,
                self.page_size,
                self.dtype,
                self.device,
                max_outputs=outputs,
                scale=self.scale,
            )
        d.load(plan, d.q[:batch], kv_indptr, kv_indices, kv_last_page_len)  # q comes at run()
        how.update(items=len(plan.cta), max_items=d.max_items)  # plan.work builds every item: ms

    def run(self, q, k_pool, v_pool):
        """o (batch, q_heads, head_dim) in q's dtype for the planned table; launches only."""
        if self.choice is None:
            raise RuntimeError("nothing planned: call plan(kv_indptr, kv_indices, kv_last_page_len) first")
        kv_indptr, kv_indices, kv_last_page_len = self._table
        if self.choice["decoder"] == "plan":
            d = self._dec
            if tuple(q.shape) != (d.batch, self.q_heads, self.head_dim) or q.dtype != self.dtype:
                raise ValueError(
                    f"q has shape {tuple(q.shape)} and dtype {q.dtype}; the plan is for "
                    f"({d.batch}, {self.q_heads}, {self.head_dim}) {self.dtype}"
                )
            d.q[: d.batch].copy_(q)  # the decoder's static query buffer: a device copy, capturable
            o = d.run(k_pool, v_pool)
            self._lse = d.lse
            return o
        sp = self._split
        o, self._lse = paged_decode(
            q,
            k_pool,
            v_pool,
            kv_indptr,
            kv_indices,
            kv_last_page_len,
            page_size=self.page_size,
            splits=sp["splits"],
            min_chunk=self.choice["min_chunk"],  # the planned cut, not `splits` chunks each
            scale=self.scale,
            out=sp["out"],
            ws=sp["ws"],
            return_lse=True,
        )
        return o

    @property
    def lse(self):
        """(batch, q_heads) float32, natural log, of the last run."""
        if self._lse is None:
            raise RuntimeError("no run yet: call run(q, k_pool, v_pool) after plan(...)")
        return self._lse


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
    forces one, for a comparison): one DecodeWorkspace plan and run. Returns o (batch, q_heads,
    d) in q's dtype, or (o, lse) with lse float32 (batch, q_heads), natural log. Bad input is
    refused by name before any launch."""
    _, hq, d, hkv, page_size = check_paged(
        q, k_pool, v_pool, kv_indptr, kv_indices, kv_last_page_len, page_size
    )
    return_lse = as_bool("return_lse", return_lse)
    w = DecodeWorkspace(hq, hkv, d, page_size, k_pool.shape[0], q.dtype, q.device, scale=scale)
    w.plan(kv_indptr, kv_indices, kv_last_page_len, decoder=decoder)
    o = w.run(q, k_pool, v_pool)
    return (o, w.lse) if return_lse else o
