"""Paged decode attention in Triton: split-KV decode over FlashInfer's page table (lecture §5.2-5.3).

The KV cache is a pool of pages, NHD `[pages, page_size, kv_heads, d]`; request i owns the pages
`kv_indices[kv_indptr[i]:kv_indptr[i+1]]`, its last page filled to `kv_last_page_len[i]` tokens
(`attnlab.core.paged`'s arrays, exactly what FlashInfer's `BatchDecodeWithPagedKVCacheWrapper.plan` takes).

Stage 1, `_paged_split_kernel`: one program per (request, KV head, split), the work block of
`kernels.decode._split_kernel`; the g query heads that share the KV head are one tile of rows (GQA),
so each K/V tile is read once for all g of them. What changes is the address of a key: token `pos`
of request i sits in page kv_indices[kv_indptr[i] + pos // page_size], slot pos % page_size. A tile
of BLOCK_N tokens may cross pages (page_size 1 or 3) or cover part of one (BLOCK_N < page_size), so
the page id is looked up for every token of the tile and the K/V rows are loaded through gathered
pointers. Each program reads its request's length from the page table and cuts that request into
min(splits, ceil(length / min_chunk)) chunks (rounded up to whole tiles); a program past the last
chunk writes the identity state (o = 0, lse = -inf), so short and long requests share one launch.
Stage 2: `kernels.common.merge_splits_kernel`, decode's fixed-order merge ⊕ (deterministic).

The kernel reads the lengths from the page table itself, so any `splits` gives the same answer;
only the speed depends on it. With `splits=None` the host reads the requests' lengths once
(`request_lengths`: kv_indptr and kv_last_page_len, 2 x batch + 1 integers; a synchronising copy
when they are on the GPU) and cuts them: an uneven batch by `kernels.tuning.fill_from_lengths`
(one chunk length for every request, sized so the blocks fill the GPU in one resident wave), a
single request or equal lengths by `split_from_lengths`; the blocks of the longest requests are
launched first (`longest_first`, the requests sorted once with the read), so a long request does
not start last and finish alone. With an explicit `splits` nothing is read and the blocks go in
batch order; with `min_chunk` beside it (a cut planned before, `DecodeWorkspace`'s) the
remembered order is used where there is one.
The read is remembered per page table (the two tensors' storage and torch's version
counter, which an in-place write bumps), so a later call on the same table, e.g. inside a CUDA
graph capture, reads nothing; a capture that finds nothing remembered falls back to the rule from
shapes alone (`auto_splits` with the longest request the pool can hold, page_size x (pages -
batch + 1)). A stale memory can only cost speed, never correctness. A host check of the arrays'
contents (`attnlab.core.paged.BSRLayout`) is made only when they are on the CPU
(`kernels.common.check_paged`, which the scheduled and cascade launchers share).

Under TRITON_INTERPRET=1 the dot products run in float32 (the interpreter's bf16 dot is wrong) and
a bf16 output is rounded by torch (the interpreter truncates fp32 to bf16; a GPU rounds).

What it leaves out on purpose: FlashInfer's plan-time load balancing (one persistent schedule for
the whole batch), the HND layout (pass a permuted view: any strides are taken), fp8 KV, RoPE.

`paged_decode` does three things in turn: it checks every argument (`_check`, with the page-table
checks of `kernels.common`), chooses the launch (`launch_choices`, from the rules the H200 sweeps
chose in `kernels.tuning`: `split_from_lengths`, `auto_splits`, `auto_launch`), and launches.
`paged_span`, the gather loop, is shared with `kernels.scheduled`.

This file is long because checking, choosing the launch and launching hand on what each resolved
(the checked table, the lengths read once per table and remembered, the split that sizes the
workspace), and `paged_span`, the gather loop, is the one `kernels.scheduled_kernels` runs too; each
part is a short function.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from attnlab.validate import as_bool
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
    split_range,
    online_update,
)
from attnlab.kernels.decode import check_workspace, workspace
from attnlab.kernels.tuning import (
    FILL_SKEW,
    MIN_CHUNK,
    auto_launch,
    auto_splits,
    fill_from_lengths,
    split_from_lengths,
)

__all__ = [
    "paged_decode",
    "paged_span",
    "launch_choices",
    "choose_splits",
    "request_lengths",
    "longest_first",
]

_LENGTHS: dict = {}  # page table (storage, version) -> its lengths; a few recent tables


def _read(kv_indptr, kv_last_page_len, page_size: int):
    key = (
        kv_indptr.device,
        kv_indptr.data_ptr(),
        kv_indptr._version,
        kv_indptr.numel(),
        kv_last_page_len.data_ptr(),
        kv_last_page_len._version,
        page_size,
    )
    if key in _LENGTHS:
        return _LENGTHS[key]
    if kv_indptr.is_cuda and torch.cuda.is_current_stream_capturing():
        return None, None
    indptr = kv_indptr.to("cpu", torch.int64).numpy()
    lengths = (indptr[1:] - indptr[:-1] - 1) * page_size + kv_last_page_len.to("cpu", torch.int64).numpy()
    lengths = lengths.clip(0)  # a request of no pages has no tokens
    order = np.argsort(-lengths, kind="stable").astype(np.int32)
    order = None if (np.diff(lengths) <= 0).all() else torch.from_numpy(order).to(kv_indptr.device)
    if len(_LENGTHS) >= 64:
        _LENGTHS.pop(next(iter(_LENGTHS)))
    _LENGTHS[key] = lengths, order
    return lengths, order


def request_lengths(kv_indptr, kv_last_page_len, page_size: int):
    """The requests' token counts (an int64 numpy array) read from the page table, remembered per
    table (storage and version of both tensors); None while a CUDA graph is being captured and
    this table was not read before (a capture cannot wait for a copy to the host)."""
    return _read(kv_indptr, kv_last_page_len, page_size)[0]


def longest_first(kv_indptr, kv_last_page_len, page_size: int):
    """The requests longest first (stable: ties in batch order), an int32 tensor on the table's
    device, remembered with `request_lengths`; None where that is None or where the batch is in
    that order already (equal lengths, say)."""
    return _read(kv_indptr, kv_last_page_len, page_size)[1]


def choose_splits(
    batch: int,
    kv_heads: int,
    kv_indptr,
    kv_indices,
    kv_last_page_len,
    page_size: int,
    device,
    *,
    block_n: int | None = None,
) -> dict:
    """What `paged_decode(splits=None)` launches with: {"splits", "min_chunk", "rule"}, rule
    "fill" (`fill_from_lengths` over `request_lengths`, where the longest request is more than
    FILL_SKEW times the mean), "lengths" (`split_from_lengths`, the other batches) or "shapes"
    (`auto_splits` with the longest request the pool can hold: inside a capture of a table not
    read before)."""
    small = (block_n or 16) if interpreting() else None
    lengths = request_lengths(kv_indptr, kv_last_page_len, page_size)
    if lengths is None:
        longest = page_size * (kv_indices.numel() - batch + 1)
        min_chunk = small or MIN_CHUNK
        return {
            "splits": auto_splits(batch, kv_heads, longest, device, min_chunk=min_chunk),
            "min_chunk": min_chunk,
            "rule": "shapes",
        }
    if lengths.max() > FILL_SKEW * lengths.mean():
        kw = {"floor": small, "tile": small} if small else {}
        splits, chunk = fill_from_lengths(lengths, kv_heads, device, **kw)
        return {"splits": splits, "min_chunk": chunk, "rule": "fill"}
    kw = {"min_chunk": small, "small_chunk": small} if small else {}
    splits, chunk = split_from_lengths(lengths, kv_heads, device, **kw)
    return {"splits": splits, "min_chunk": chunk, "rule": "lengths"}


@triton.jit
def _page_ids(pages, pos, end, PAGE_SIZE: tl.constexpr):
    """The page id of each token `pos` (0 past the end)."""
    return tl.load(pages + pos // PAGE_SIZE, mask=pos < end, other=0).to(tl.int64)


@triton.jit
def _kv_tile(k_head, v_head, page, pos, end, s_kp, s_ks, s_vp, s_vs, dk, dv, d_ok, PAGE_SIZE: tl.constexpr):
    """K (transposed) and V of the tokens `pos` in pages `page`, 0 past the end."""
    ok = pos < end
    slot = pos % PAGE_SIZE
    kt = tl.load(
        (k_head + page * s_kp + slot * s_ks)[None, :] + dk[:, None],
        mask=ok[None, :] & d_ok[:, None],
        other=0.0,
    )
    v = tl.load(
        (v_head + page * s_vp + slot * s_vs)[:, None] + dv[None, :],
        mask=ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    return kt, v


@triton.jit
def paged_span(
    q,
    m_i,
    l_i,
    acc,
    k_head,
    v_head,
    pages,
    start,
    end,
    qk_scale,
    s_kp,
    s_ks,
    s_vp,
    s_vs,
    dk,
    dv,
    d_ok,
    PAGE_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
    PREFETCH: tl.constexpr,
    AHEAD: tl.constexpr = False,
):
    """Fold keys start:end of one request into the running state (m_i, l_i, acc) of the query
    rows q, reading K and V of one KV head (k_head, v_head) through the request's page list
    `pages` (its slice of kv_indices). Token pos sits in page pages[pos // PAGE_SIZE], slot
    pos % PAGE_SIZE: one page id per token, so a tile may span pages or cover part of one.
    PREFETCH loads the next tile's page ids while this tile's K and V are in flight, so the
    lookup's latency leaves the loop's critical path. AHEAD pipelines by hand, in registers: each
    step first issues the next tile's K and V (from page ids loaded a step before) and the page
    ids of the tile after it, then runs this tile's products on the K and V loaded a step before,
    so no load waits on another in the step (Triton's pipeliner issues the next tile's page ids
    and copies after this tile's products, in one dependent chain; it is meant to be off here:
    num_stages=1).
    Shared by the paged and scheduled kernels."""
    offs_n = tl.arange(0, BLOCK_N)
    if AHEAD:  # K, V of tile 0 and the page ids of tile 1 before the loop
        pos = start + offs_n
        kt, v = _kv_tile(
            k_head, v_head, _page_ids(pages, pos, end, PAGE_SIZE), pos, end, s_kp, s_ks, s_vp, s_vs, dk, dv,
            d_ok, PAGE_SIZE,
        )  # fmt: skip
        page = _page_ids(pages, pos + BLOCK_N, end, PAGE_SIZE)
        for n0 in range(start, end, BLOCK_N):
            pos = n0 + offs_n
            # tile i + 1's K and V from ids that came a step ago, tile i + 2's ids: none waits
            kt_next, v_next = _kv_tile(
                k_head, v_head, page, pos + BLOCK_N, end, s_kp, s_ks, s_vp, s_vs, dk, dv, d_ok, PAGE_SIZE
            )
            page = _page_ids(pages, pos + 2 * BLOCK_N, end, PAGE_SIZE)
            k_use, v_use = kt, v
            if UPCAST:
                k_use, v_use = kt.to(tl.float32), v.to(tl.float32)
            s = tl.where((pos < end)[None, :], dot(q, k_use, IEEE) * qk_scale, float("-inf"))
            m_i, l_i, acc = online_update(s, v_use, m_i, l_i, acc, IEEE)
            kt, v = kt_next, v_next
        return m_i, l_i, acc
    if PREFETCH:
        pos = start + offs_n
        page = tl.load(pages + pos // PAGE_SIZE, mask=pos < end, other=0).to(tl.int64)
    for n0 in range(start, end, BLOCK_N):
        pos = n0 + offs_n
        ok = pos < end
        if not PREFETCH:
            page = tl.load(pages + pos // PAGE_SIZE, mask=ok, other=0).to(tl.int64)
        slot = pos % PAGE_SIZE
        kt = tl.load(
            (k_head + page * s_kp + slot * s_ks)[None, :] + dk[:, None],
            mask=ok[None, :] & d_ok[:, None],
            other=0.0,
        )
        if UPCAST:
            kt = kt.to(tl.float32)
        s = tl.where(ok[None, :], dot(q, kt, IEEE) * qk_scale, float("-inf"))
        v = tl.load(
            (v_head + page * s_vp + slot * s_vs)[:, None] + dv[None, :],
            mask=ok[:, None] & d_ok[None, :],
            other=0.0,
        )
        if PREFETCH:
            nxt = pos + BLOCK_N
            page = tl.load(pages + nxt // PAGE_SIZE, mask=nxt < end, other=0).to(tl.int64)
        if UPCAST:
            v = v.to(tl.float32)
        m_i, l_i, acc = online_update(s, v, m_i, l_i, acc, IEEE)
    return m_i, l_i, acc


@triton.jit
def _paged_split_kernel(
    Q,
    K,
    V,
    OP,
    LP,
    INDPTR,
    INDICES,
    LAST,
    ORDER,
    qk_scale,
    s_qb,
    s_qh,
    s_qd,
    s_kp,
    s_ks,
    s_kh,
    s_kd,
    s_vp,
    s_vs,
    s_vh,
    s_vd,
    SPLITS,
    MIN_CHUNK,
    KV_HEADS,
    GROUP,
    HEAD_DIM,
    PAGE_SIZE: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    D_CONTIG: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
    PREFETCH: tl.constexpr,
    ORDERED: tl.constexpr,
    AHEAD: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    pid_s = tl.program_id(1)
    b = pid_bh // KV_HEADS
    if ORDERED:  # the longest requests' blocks start first
        b = tl.load(ORDER + b)
    b = b.to(tl.int64)
    hk = pid_bh % KV_HEADS
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    g_ok = offs_g < GROUP
    d_ok = offs_d < HEAD_DIM
    if D_CONTIG:  # unit stride along d: vector loads
        dq, dk, dv = offs_d, offs_d, offs_d
    else:
        dq, dk, dv = offs_d * s_qd, offs_d * s_kd, offs_d * s_vd
    heads = hk * GROUP + offs_g
    q = tl.load(
        Q + b * s_qb + heads[:, None] * s_qh + dq[None, :], mask=g_ok[:, None] & d_ok[None, :], other=0.0
    )
    if UPCAST:
        q = q.to(tl.float32)
    # this request's pages and length, read from the page table on the GPU
    first = tl.load(INDPTR + b)
    n_pages = tl.load(INDPTR + b + 1) - first
    length = (n_pages - 1) * PAGE_SIZE + tl.load(LAST + b)
    start, end = split_range(length, pid_s, SPLITS, MIN_CHUNK, BLOCK_N)  # start >= end: empty
    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    m_i, l_i, acc = paged_span(
        q,
        m_i,
        l_i,
        acc,
        K + hk * s_kh,
        V + hk * s_vh,
        INDICES + first,
        start,
        end,
        qk_scale,
        s_kp,
        s_ks,
        s_vp,
        s_vs,
        dk,
        dv,
        d_ok,
        PAGE_SIZE,
        BLOCK_N,
        UPCAST,
        IEEE,
        PREFETCH,
        AHEAD,
    )
    o, lse = finish(acc, m_i, l_i)  # an empty split: o = 0, lse = -inf
    row = (b * KV_HEADS * GROUP + heads) * SPLITS + pid_s  # partial state index
    tl.store(OP + row[:, None] * HEAD_DIM + offs_d[None, :], o, mask=g_ok[:, None] & d_ok[None, :])
    tl.store(LP + row, lse, mask=g_ok)


def paged_decode(
    q,
    k_pool,
    v_pool,
    kv_indptr,
    kv_indices,
    kv_last_page_len,
    *,
    page_size: int,
    splits: int | None = None,
    scale: float | None = None,
    out=None,
    return_lse: bool = False,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    ws: dict | None = None,
    prefetch: bool | None = None,
    min_chunk: int | None = None,
    ahead: bool | None = None,
):
    """Decode attention of one new query per head over a paged KV cache.

    q (batch, q_heads, d); k_pool, v_pool NHD (pages, page_size, kv_heads, d), any strides; the
    int32 page table kv_indptr (batch + 1), kv_indices, kv_last_page_len (batch), as FlashInfer's
    decode plan takes it. `splits` per request (None: `choose_splits`, from the real lengths);
    with an explicit `splits`, `min_chunk` (None: 1) cuts request i into min(splits,
    ceil(length_i / min_chunk)) chunks, as a choice of `choose_splits` does; `out` an optional contiguous
    (batch, q_heads, d) tensor of q's dtype to write into; `ws` an optional
    `kernels.decode.workspace(batch, q_heads, d, splits, device)` for the partial states.
    block_n (a power of two in [16, 256]), num_warps (1, 2, 4, 8, 16), num_stages (1 to 8) and
    prefetch (a bool), each None: `launch_choices`, are launch choices; `ahead` (a bool, None:
    False) pipelines the loop by hand in registers (`paged_span`), with one stage unless
    num_stages says otherwise.

    Returns o (batch, q_heads, d) in q's dtype, or (o, lse) with lse float32 (batch, q_heads),
    natural log.
    """
    a = _check(
        q,
        k_pool,
        v_pool,
        kv_indptr,
        kv_indices,
        kv_last_page_len,
        page_size,
        splits,
        scale,
        out,
        return_lse,
        block_n,
        num_warps,
        num_stages,
        ws,
        prefetch,
        min_chunk,
        ahead,
    )
    B, hq, d, hkv, page_size = a["B"], a["hq"], a["d"], a["hkv"], a["page_size"]
    go = launch_choices(
        B,
        hkv,
        kv_indptr,
        kv_indices,
        kv_last_page_len,
        page_size,
        q.device,
        splits=a["splits"],
        min_chunk=a["min_chunk"],
        block_n=a["block_n"],
        num_warps=a["num_warps"],
        num_stages=a["num_stages"],
        prefetch=a["prefetch"],
        ahead=a["ahead"],
    )
    splits = go["splits"]
    ws = (
        workspace(B, hq, d, splits, q.device)
        if ws is None
        else check_workspace(ws, B, hq, d, splits, q.device)
    )
    out = torch.empty((B, hq, d), dtype=q.dtype, device=q.device) if out is None else out
    interp = interpreting()
    block_d = max(16, triton.next_power_of_2(d))
    kw = {} if interp else {"num_warps": go["num_warps"], "num_stages": go["num_stages"]}
    one = splits == 1  # the first stage writes the answer itself
    lse = ws["lp"] if one else ws["lse"]
    # the interpreter casts fp32 to bf16 by truncation (a GPU rounds to nearest): there the kernels
    # write fp32 and torch rounds
    dst = (
        torch.empty(out.shape, dtype=torch.float32, device=q.device)
        if interp and q.dtype == torch.bfloat16
        else out
    )
    fp32 = q.dtype == torch.float32
    order = go["order"]
    _paged_split_kernel[(B * hkv, splits)](
        q,
        k_pool,
        v_pool,
        dst if one else ws["op"],
        ws["lp"],
        kv_indptr,
        kv_indices,
        kv_last_page_len,
        kv_indptr if order is None else order,
        a["scale"] * LOG2E,
        *q.stride(),
        *k_pool.stride(),
        *v_pool.stride(),
        splits,
        go["min_chunk"],
        hkv,
        hq // hkv,
        d,
        PAGE_SIZE=page_size,
        BLOCK_G=max(16, triton.next_power_of_2(hq // hkv)),
        BLOCK_N=go["block_n"],
        BLOCK_D=block_d,
        D_CONTIG=q.stride(2) == k_pool.stride(3) == v_pool.stride(3) == 1,
        UPCAST=interp or fp32,
        IEEE=interp or fp32,
        PREFETCH=go["prefetch"],
        ORDERED=order is not None,
        AHEAD=go["ahead"],
        **kw,
    )
    if not one:
        merge_splits_kernel[(B * hq,)](
            ws["op"],
            ws["lp"],
            dst,
            lse,
            splits,
            d,
            BLOCK_S=triton.next_power_of_2(splits),
            BLOCK_D=block_d,
            **({} if interp else {"num_warps": 4}),
        )
    if dst is not out:
        out.copy_(dst)
    return (out, lse.view(B, hq)) if a["return_lse"] else out


def _check(
    q,
    k_pool,
    v_pool,
    kv_indptr,
    kv_indices,
    kv_last_page_len,
    page_size,
    splits,
    scale,
    out,
    return_lse,
    block_n,
    num_warps,
    num_stages,
    ws,
    prefetch,
    min_chunk,
    ahead=None,
) -> dict:
    """paged_decode's arguments, each refused by name (`kernels.common`'s checks) before anything is
    read from the table or launched; the resolved ones as a dict. The workspace's shapes depend on
    the split chosen, so `check_workspace` checks them once it is."""
    B, hq, d, hkv, page_size = check_paged(
        q, k_pool, v_pool, kv_indptr, kv_indices, kv_last_page_len, page_size
    )
    if splits is not None:
        longest = page_size * (kv_indices.numel() - B + 1)  # no request of this table is longer
        splits = as_count("splits", splits)
        if not 1 <= splits <= longest:
            raise ValueError(
                f"splits={splits} is out of range; valid: 1 <= splits <= {longest} (the "
                f"longest request {kv_indices.numel()} pages can hold), or None"
            )
    if out is not None and (
        not isinstance(out, torch.Tensor)
        or out.shape != (B, hq, d)
        or out.dtype != q.dtype
        or out.device != q.device
        or not out.is_contiguous()
    ):
        raise ValueError(f"out must be a contiguous {q.dtype} tensor of shape {(B, hq, d)} on {q.device}")
    if ws is not None and not isinstance(ws, dict):
        raise TypeError(
            f"ws must be a dict from kernels.decode.workspace(batch, q_heads, d, splits, device), "
            f"got {type(ws).__name__}"
        )
    return {
        "B": B,
        "hq": hq,
        "d": d,
        "hkv": hkv,
        "page_size": page_size,
        "splits": splits,
        "scale": as_scale(scale, d),
        "return_lse": as_bool("return_lse", return_lse),
        "block_n": as_block("block_n", block_n),
        "num_warps": as_warps(num_warps),
        "num_stages": as_stages(num_stages),
        "prefetch": None if prefetch is None else as_bool("prefetch", prefetch),
        "min_chunk": _min_chunk(min_chunk, splits),
        "ahead": None if ahead is None else as_bool("ahead", ahead),
    }


def _min_chunk(min_chunk, splits):
    """`min_chunk` checked: None, or an integer >= 1 beside an explicit `splits`."""
    if min_chunk is None:
        return None
    if splits is None:
        raise ValueError(f"min_chunk={min_chunk!r} needs an explicit splits (splits=None chooses both)")
    return as_count("min_chunk", min_chunk, 1, 2**31 - 1)


def launch_choices(
    batch: int,
    kv_heads: int,
    kv_indptr,
    kv_indices,
    kv_last_page_len,
    page_size: int,
    device,
    *,
    splits=None,
    min_chunk=None,
    block_n=None,
    num_warps=None,
    num_stages=None,
    prefetch=None,
    ahead=None,
) -> dict:
    """What `paged_decode` launches with, for checked arguments: {"splits", "min_chunk", "order",
    "block_n", "num_warps", "num_stages", "prefetch", "ahead"} (ahead: one stage unless asked).
    splits=None: `choose_splits` (the read
    that chose the split also sorted the requests, longest first, when the lengths rule chose);
    an explicit `splits` cuts every request into that many chunks, launched in batch order. The
    rest, where None, from `kernels.tuning.auto_launch` (num_warps 4)."""
    order = None
    if splits is None:
        auto = choose_splits(
            batch, kv_heads, kv_indptr, kv_indices, kv_last_page_len, page_size, device, block_n=block_n
        )
        splits, min_chunk = auto["splits"], auto["min_chunk"]
        if auto["rule"] != "shapes":
            order = longest_first(kv_indptr, kv_last_page_len, page_size)
    else:
        if min_chunk is None:
            min_chunk = 1  # as asked: `splits` chunks per request
        else:  # a choice made before (DecodeWorkspace.plan): its launch order too, if remembered
            order = longest_first(kv_indptr, kv_last_page_len, page_size)
    auto = auto_launch(batch * kv_heads * splits, page_size, device)
    return {
        "splits": splits,
        "min_chunk": min_chunk,
        "order": order,
        "block_n": auto["block_n"] if block_n is None else block_n,
        "num_warps": 4 if num_warps is None else num_warps,
        "num_stages": (1 if ahead else auto["num_stages"]) if num_stages is None else num_stages,
        "prefetch": auto["prefetch"] if prefetch is None else prefetch,
        "ahead": bool(ahead),
    }
