"""Attention of a ragged batch of queries over a paged KV cache, in one launch (lecture §5.2, §5.6):
a chunked prefill beside decode requests, or a speculative tree, is one call.

    o, lse = paged_prefill(q, k_pool, v_pool, qo_indptr, kv_indptr, kv_indices, kv_last_page_len,
                           page_size=16, causal=True, mask=None)

The arrays are FlashInfer's (`BatchPrefillWithPagedKVCacheWrapper.plan` takes the same): q
(total_q, q_heads, d), request i's query rows q[qo_indptr[i]:qo_indptr[i + 1]]; NHD pools (pages,
page_size, kv_heads, d) and the int32 page table of `kernels.paged`. A request's q_len new tokens
are the last q_len of its kv_len keys, so with `causal` query j of request i sees the keys up to
position kv_len - q_len + j (bottom-right aligned: a decode row, q_len = 1, sees its whole cache).
`mask` overrides `causal`: one boolean per (query, key) of each request, q_len x kv_len row-major,
the requests concatenated (FlashInfer's `custom_mask` layout): a speculative tree's mask is one. A
row that sees no key gives o = 0 and lse = -inf.

One program per (work item, KV head). A query tile is BLOCK_R rows of one request's q_len x g
rows (query token, then the g query heads that share the KV head; FlashInfer's packing, so a
decode row of g = 4 heads fills 4 rows of a tile, not one); a work item is one piece of a tile's
keys (`prefill_items`: with `causal` and no mask a tile's keys end at its last row's last visible
key). The pieces have one length for the whole batch, chosen by the fill rule of
`kernels.tuning` (as the split decoders' chunks are), so a long prefill chunk's tiles are cut
finer than a decode row's single tile and the batch fills the GPU; a tile cut into several pieces
leaves partial states that `kernels.common.merge_splits_kernel` merges in a fixed order. The items
are listed on the host from qo_indptr and the page table (a copy to the host). Keys are gathered
through the page table a tile of BLOCK_N at a time (`kernels.paged.paged_span`'s addressing), the
mask applied to the scores, the online softmax of `kernels.common`.

`PrefillWorkspace` is the form for a serving loop, as FlashInfer's wrapper is: `plan` once per
batch (the lengths read to the host, the items listed and uploaded, the buffers made), then `run`
at every step, launches only, so it can be captured in a CUDA graph. `paged_prefill` is one plan
and one run. This file is long because the kernel, the checks of its arguments and the
workspace that launches it must agree argument by argument, and read best side by side.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
import triton
import triton.language as tl

from attnlab.kernels import interpreting
from attnlab.kernels.common import (
    LOG2E,
    as_block,
    as_count,
    as_scale,
    as_stages,
    as_warps,
    check_paged,
    dot,
    finish,
    merge_splits_kernel,
    online_update,
)
from attnlab.kernels.planned import check_planned, head_dims, pool_dims
from attnlab.kernels.prefill_items import prefill_items, prefill_tiles, tile_ends
from attnlab.validate import as_bool

__all__ = ["paged_prefill", "PrefillWorkspace", "prefill_tiles", "prefill_items"]


@triton.jit
def _prefill_kernel(
    Q, K, V, O, LSE, IT_REQ, IT_ROW, IT_KV0, IT_KV1, IT_SLOT, QO_INDPTR, KV_INDPTR, INDICES, LAST,
    MASK, MASK_OFF, qk_scale, s_qt, s_qh, s_qd, s_kp, s_ks, s_kh, s_kd, s_vp, s_vs, s_vh, s_vd,
    KV_HEADS, GROUP, HEAD_DIM, SLOTS,
    PAGE_SIZE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, SPLIT: tl.constexpr, UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
):  # fmt: skip
    t = tl.program_id(0)
    hk = tl.program_id(1)
    req = tl.load(IT_REQ + t)
    row0 = tl.load(IT_ROW + t)
    q0 = tl.load(QO_INDPTR + req)
    q_len = tl.load(QO_INDPTR + req + 1) - q0
    first = tl.load(KV_INDPTR + req)
    kv_len = (tl.load(KV_INDPTR + req + 1) - first - 1) * PAGE_SIZE + tl.load(LAST + req)
    rows = row0 + tl.arange(0, BLOCK_R)
    tok = rows // GROUP  # the query token of each row, then its head in the group
    heads = hk * GROUP + rows % GROUP
    r_ok = tok < q_len
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    q = tl.load(
        Q + (q0 + tok).to(tl.int64)[:, None] * s_qt + heads[:, None] * s_qh + offs_d[None, :] * s_qd,
        mask=r_ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    if UPCAST:
        q = q.to(tl.float32)
    qpos = kv_len - q_len + tok  # each row's own position among the request's keys
    if HAS_MASK:
        mrow = tl.load(MASK_OFF + req) + tok.to(tl.int64) * kv_len
    m_i = tl.full([BLOCK_R], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_R], dtype=tl.float32)
    acc = tl.zeros([BLOCK_R, BLOCK_D], dtype=tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    pages = INDICES + first
    for n0 in range(tl.load(IT_KV0 + t), tl.load(IT_KV1 + t), BLOCK_N):  # this item's keys
        pos = n0 + offs_n
        ok = pos < kv_len
        page = tl.load(pages + pos // PAGE_SIZE, mask=ok, other=0).to(tl.int64)
        slot = pos % PAGE_SIZE
        kt = tl.load(
            (K + page * s_kp + slot * s_ks + hk * s_kh)[None, :] + offs_d[:, None] * s_kd,
            mask=ok[None, :] & d_ok[:, None],
            other=0.0,
        )
        if UPCAST:
            kt = kt.to(tl.float32)
        seen = r_ok[:, None] & ok[None, :]
        if HAS_MASK:
            bit = tl.load(MASK + mrow[:, None] + pos[None, :], mask=seen, other=0)
            seen = seen & (bit != 0)
        elif CAUSAL:
            seen = seen & (pos[None, :] <= qpos[:, None])
        s = tl.where(seen, dot(q, kt, IEEE) * qk_scale, float("-inf"))
        v = tl.load(
            (V + page * s_vp + slot * s_vs + hk * s_vh)[:, None] + offs_d[None, :] * s_vd,
            mask=ok[:, None] & d_ok[None, :],
            other=0.0,
        )
        if UPCAST:
            v = v.to(tl.float32)
        m_i, l_i, acc = online_update(s, v, m_i, l_i, acc, IEEE)
    o, lse = finish(acc, m_i, l_i)  # a row that saw no key: o = 0, lse = -inf
    out = (q0 + tok).to(tl.int64) * KV_HEADS * GROUP + heads
    if SPLIT:  # a partial state in the item's slot, merged by kernel 2
        out = out * SLOTS + tl.load(IT_SLOT + t)
    tl.store(O + out[:, None] * HEAD_DIM + offs_d[None, :], o, mask=r_ok[:, None] & d_ok[None, :])
    tl.store(LSE + out, lse, mask=r_ok)


def _host_qo(qo_indptr, device):
    """qo_indptr checked and read to the host (int64): 1-D int32 on `device`, contiguous, from 0,
    never decreasing."""
    if not isinstance(qo_indptr, torch.Tensor):
        raise TypeError(f"qo_indptr must be a torch.Tensor, got {type(qo_indptr).__name__}")
    if qo_indptr.dtype != torch.int32 or qo_indptr.dim() != 1 or qo_indptr.numel() < 2:
        raise ValueError(
            f"qo_indptr must be 1-D int32 with batch + 1 >= 2 entries; got {qo_indptr.dtype} "
            f"of shape {tuple(qo_indptr.shape)}"
        )
    if qo_indptr.device != device:
        raise ValueError(f"qo_indptr is on {qo_indptr.device} but q is on {device}; put them on one device")
    if not qo_indptr.is_contiguous():  # the kernel reads entry i at pointer + i
        raise ValueError(f"qo_indptr must be contiguous, got stride {qo_indptr.stride()}")
    qo = qo_indptr.to("cpu", torch.int64).numpy()
    if qo[0] != 0 or (np.diff(qo) < 0).any():
        raise ValueError(
            f"qo_indptr must start at 0 and never decrease; got {qo.tolist()[:8]}"
            f"{'...' if len(qo) > 8 else ''}"
        )
    return qo


def _check(q, k_pool, v_pool, qo, kv_indptr, kv_indices, kv_last_page_len, page_size, causal, mask):
    """The tables and the mask refused by name before a launch (q and the pools: views of the
    plan's shapes; qo: `_host_qo`'s copy); returns (q_lens, kv_lens, causal) on the host."""
    batch = qo.size - 1
    # the page table's checks, on a view of q shaped as one row per request
    rows = torch.empty(1, dtype=q.dtype, device=q.device).expand(batch, *q.shape[1:])  # q may have 0 rows
    check_paged(rows, k_pool, v_pool, kv_indptr, kv_indices, kv_last_page_len, page_size)
    kvp = kv_indptr.to("cpu", torch.int64).numpy()
    kv_lens = (np.diff(kvp) - 1) * page_size + kv_last_page_len.to("cpu", torch.int64).numpy()
    causal = as_bool("causal", causal)
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise TypeError(f"mask must be a torch.bool tensor or None, got {got}")
        want = int((np.diff(qo) * kv_lens).sum())
        if mask.dim() != 1 or mask.numel() != want or mask.device != q.device or not mask.is_contiguous():
            raise ValueError(
                f"mask must be 1-D, contiguous, on {q.device} with sum(q_len x kv_len) = {want} entries (each "
                f"request's q_len x kv_len, row-major, concatenated); got shape {tuple(mask.shape)} "
                f"on {mask.device}"
            )
    return np.diff(qo), kv_lens, causal


def _check_q_pools(q, k_pool, v_pool):
    """What a one-shot call reads its shapes from: q a 3-D tensor, the pools 4-D tensors (the rest
    is checked by the workspace)."""
    for name, t, dims, what in (
        ("q", q, 3, "(total_q, q_heads, d)"),
        ("k_pool", k_pool, 4, "NHD (pages, page_size, kv_heads, d)"),
        ("v_pool", v_pool, 4, "NHD (pages, page_size, kv_heads, d)"),
    ):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != dims:
            raise ValueError(f"{name} must be {what}, got shape {tuple(t.shape)}")


class PrefillWorkspace:
    """paged_prefill planned once for a batch's tables and run at every step (FlashInfer's
    BatchPrefillWithPagedKVCacheWrapper form: plan, then run).

    PrefillWorkspace(q_heads, kv_heads, head_dim, page_size, max_pages, dtype, device, scale=None)
    sizes nothing yet; `plan(qo_indptr, kv_indptr, kv_indices, kv_last_page_len, causal=True,
    mask=None, block_r=, block_n=, num_warps=, num_stages=, kv_chunk=)` does the host's work (reads
    the lengths, lists the work items, uploads them, makes the buffers the launches write) and
    returns what it chose; `run(q, k_pool, v_pool)` launches only, so it can be captured in a CUDA
    graph, and returns (o, lse) in the plan's buffers (the next run overwrites them)."""

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
        self.qk_scale = as_scale(scale, self.head_dim) * LOG2E
        self._p = None

    def plan(
        self,
        qo_indptr,
        kv_indptr,
        kv_indices,
        kv_last_page_len,
        *,
        causal: bool = True,
        mask=None,
        block_r: int | None = None,
        block_n: int | None = None,
        num_warps: int | None = None,
        num_stages: int | None = None,
        kv_chunk: int | None = None,
    ) -> dict:
        """The host's work for these tables (`paged_prefill`'s docstring says what each launch
        choice is); returns {"items", "tiles", "kv_chunk", "slots", "block_r", "block_n"}."""
        hq, hkv, d, dev = self.q_heads, self.kv_heads, self.head_dim, self.device
        qo = _host_qo(qo_indptr, dev)
        fake = lambda *shape: torch.empty(1, dtype=self.dtype, device=dev).expand(*shape)  # noqa: E731
        pool = fake(self.max_pages, self.page_size, hkv, d)
        q_lens, kv_lens, causal = _check(
            fake(int(qo[-1]), hq, d), pool, pool, qo, kv_indptr, kv_indices, kv_last_page_len,
            self.page_size, causal, mask,
        )  # fmt: skip
        block_r, block_n = as_block("block_r", block_r), as_block("block_n", block_n)
        num_warps, num_stages = as_warps(num_warps), as_stages(num_stages)
        g, interp = hq // hkv, interpreting()
        if block_r is None:
            block_r = 16 if interp or int(q_lens.max(initial=0)) * g < 64 else 64
        block_n = block_n or (16 if interp else 64)
        ends = dict(causal_end=causal and mask is None)
        tiles = prefill_tiles(q_lens, g, block_r)
        if kv_chunk is None:  # one chunk length for every tile, sized to fill the GPU
            from attnlab.kernels.tuning import fill_from_lengths

            keys = tile_ends(q_lens, kv_lens, g, block_r, *tiles, **ends)
            small = {"floor": block_n, "tile": block_n} if interp else {}
            kv_chunk = fill_from_lengths(keys, hkv, dev, **small)[1] if keys.size else block_n
        else:
            kv_chunk = as_count("kv_chunk", kv_chunk, 1, 2**31 - 1)
        *items, slots = prefill_items(q_lens, kv_lens, g, block_r, block_n, **ends, chunk=kv_chunk)
        total = int(qo[-1])
        p = SimpleNamespace(
            table=(qo_indptr, kv_indptr, kv_indices, kv_last_page_len), total=total, batch=len(q_lens),
            items=[torch.from_numpy(a).to(device=dev) for a in items], slots=slots, causal=causal,
            mask=mask, block_r=block_r, block_n=block_n,
            kw={} if interp else {"num_warps": num_warps or 4, "num_stages": num_stages or 2},
            o=torch.empty((total, hq, d), dtype=self.dtype, device=dev),
            lse=torch.empty((total, hq), dtype=torch.float32, device=dev),
        )  # fmt: skip
        # the interpreter truncates fp32 to bf16 (a GPU rounds): there the kernel writes fp32, torch rounds
        p.dst = torch.empty_like(p.o, dtype=torch.float32) if interp and self.dtype == torch.bfloat16 else p.o
        if mask is None:
            p.bits = p.offs = p.items[0]  # never read
        else:
            p.bits = mask.view(torch.uint8)
            p.offs = torch.from_numpy(np.concatenate([[0], np.cumsum(q_lens * kv_lens)[:-1]])).to(device=dev)
        if slots > 1:  # partial states, slot j of each row; a slot no item fills weighs nothing
            p.op = torch.zeros((total * hq * slots, d), dtype=torch.float32, device=dev)
            p.lp = torch.full((total * hq * slots,), float("-inf"), dtype=torch.float32, device=dev)
        self._p = p
        return {
            "items": int(items[0].size), "tiles": int(tiles[0].size), "kv_chunk": int(kv_chunk),
            "slots": slots, "block_r": block_r, "block_n": block_n,
        }  # fmt: skip

    @property
    def total_q(self) -> int:
        """The planned batch's query rows (qo_indptr's last entry)."""
        if self._p is None:
            raise RuntimeError(
                "nothing planned: call plan(qo_indptr, kv_indptr, kv_indices, kv_last_page_len) first"
            )
        return self._p.total

    def run(self, q, k_pool, v_pool):
        """(o, lse) of q (total_q, q_heads, head_dim) over the planned tables; launches only."""
        p = self._p
        if p is None:
            raise RuntimeError(
                "nothing planned: call plan(qo_indptr, kv_indptr, kv_indices, kv_last_page_len) first"
            )
        hq, d = self.q_heads, self.head_dim
        check_planned("q", q, (p.total, hq, d), self.dtype, self.device)
        qo_indptr, *table = p.table
        check_paged(q.new_empty(1).expand(p.batch, hq, d), k_pool, v_pool, *table, self.page_size)
        if not p.items[0].numel():  # no query rows at all
            return p.o, p.lse
        split = p.slots > 1
        block_d = max(16, triton.next_power_of_2(d))
        fp32 = interpreting() or self.dtype == torch.float32
        _prefill_kernel[(p.items[0].numel(), self.kv_heads)](
            q, k_pool, v_pool, p.op if split else p.dst, p.lp if split else p.lse, *p.items,
            qo_indptr, *table, p.bits, p.offs, self.qk_scale, *q.stride(), *k_pool.stride(),
            *v_pool.stride(), self.kv_heads, hq // self.kv_heads, d, p.slots,
            PAGE_SIZE=self.page_size, BLOCK_R=p.block_r, BLOCK_N=p.block_n, BLOCK_D=block_d,
            CAUSAL=p.causal, HAS_MASK=p.mask is not None, SPLIT=split, UPCAST=fp32, IEEE=fp32,
            **p.kw,
        )  # fmt: skip
        if split:
            merge_splits_kernel[(p.total * hq,)](
                p.op, p.lp, p.dst, p.lse, p.slots, d, BLOCK_S=triton.next_power_of_2(p.slots),
                BLOCK_D=block_d, **({} if interpreting() else {"num_warps": 4}),
            )  # fmt: skip
        if p.dst is not p.o:
            p.o.copy_(p.dst)
        return p.o, p.lse


def paged_prefill(
    q,
    k_pool,
    v_pool,
    qo_indptr,
    kv_indptr,
    kv_indices,
    kv_last_page_len,
    *,
    page_size: int,
    causal: bool = True,
    mask=None,
    scale: float | None = None,
    block_r: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    kv_chunk: int | None = None,
):
    """o (total_q, q_heads, d) in q's dtype and lse (total_q, q_heads) float32, natural log, of
    every request's query rows over its paged keys (the module's docstring says how rows, causal
    and mask are read): one PrefillWorkspace plan and run. `scale` None: 1/sqrt(d). block_r,
    block_n (powers of two, 16-256), num_warps, num_stages: launch choices (None: 64-row tiles, or
    16 where no request has 64 rows; 64-key tiles; 4 warps; 2 stages). kv_chunk: a tile's keys
    are cut into pieces of at most this many (whole block_n tiles), each a program, their states
    merged (None: the fill rule of `kernels.tuning` over the tiles' keys, so that a few long tiles
    still fill the GPU). Bad input is refused by name before any launch."""
    _check_q_pools(q, k_pool, v_pool)
    w = PrefillWorkspace(
        q.shape[1], k_pool.shape[2], q.shape[2], page_size, k_pool.shape[0], q.dtype, q.device,
        scale=scale,
    )  # fmt: skip
    w.plan(
        qo_indptr, kv_indptr, kv_indices, kv_last_page_len, causal=causal, mask=mask,
        block_r=block_r, block_n=block_n, num_warps=num_warps, num_stages=num_stages,
        kv_chunk=kv_chunk,
    )  # fmt: skip
    if w.total_q != q.shape[0]:
        raise ValueError(f"qo_indptr must end at total_q = q.shape[0] = {q.shape[0]}; it ends at {w.total_q}")
    return w.run(q, k_pool, v_pool)
