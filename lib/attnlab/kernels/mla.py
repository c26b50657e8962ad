"""MLA decode in the absorbed form over a paged latent cache (lecture §6, DeepSeek's multi-head
latent attention; notebook 06 computes its intensity).

    o, lse = mla_decode(q_nope, q_pe, ckv_pool, kpe_pool, kv_indptr, kv_indices, kv_last_page_len,
                        page_size=64, scale=1 / 192 ** 0.5)

Every token of the cache is one latent row ckv (latent wide, 512 in DeepSeek-V3) and one rotary
key kpe (rope wide, 64), shared by all H query heads: there are no per-head keys or values. With
W_UK and W_UV absorbed into the query and the output projection, head h's score for token t is
q_nope[h] . ckv[t] + q_pe[h] . kpe[t], scaled, and its output is the softmax-weighted sum of the
same ckv rows: o (batch, H, latent). So the heads are the rows (the M dimension) of one matrix
product against each tile of latent rows, which is why the form is compute-bound where the KV
cache's bytes would otherwise bound it.

`scale` has no default: the latent's width is not the query's head dim (DeepSeek-V3 scales by
1/sqrt(192), its 128 non-rotary plus 64 rotary dims before absorption), so the caller says it.

The arrays: q_nope (batch, H, latent), q_pe (batch, H, rope); ckv_pool (pages, page_size, latent),
kpe_pool (pages, page_size, rope); FlashInfer's int32 page table. H 1-128, latent and rope
multiples of 16 (up to 512 and 128), one dtype of float16, bfloat16, float32.

One program per (request, tile of BLOCK_H heads, KV split): it folds its chunk of the request's
tokens, a tile of BLOCK_N latent rows at a time gathered through the page table, into the tile's
running state; with more than one split, `kernels.common.merge_splits_kernel` merges the states in
a fixed order. The splits come from the real lengths by the fill rule (`tuning.fill_from_lengths`,
the head tiles in place of KV heads), so a small batch still fills the GPU. lse is the natural log.
A request's head tiles are neighbours in the grid, so they read its latent rows while L2 holds them.

`MLAWorkspace` plans once per batch (the lengths, the splits, the buffers) and runs launches only,
so a CUDA graph can capture it; `mla_decode` is one plan and one run. This file is long because
the kernel, the checks of its arguments and the workspace that launches it must agree argument by
argument, and read best side by side.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch
import triton
import triton.language as tl

from attnlab.kernels import interpreting
from attnlab.kernels.common import (
    DTYPES,
    LOG2E,
    as_block,
    as_count,
    as_stages,
    as_warps,
    dot,
    finish,
    merge_splits_kernel,
    split_range,
    online_update,
)
from attnlab.kernels.planned import check_planned, pool_dims

__all__ = ["mla_decode", "MLAWorkspace", "MAX_HEADS", "MAX_LATENT", "MAX_ROPE"]

MAX_HEADS, MAX_LATENT, MAX_ROPE = 128, 512, 128


@triton.jit
def _mla_kernel(
    QN, QP, CKV, KPE, OP, LP, INDPTR, INDICES, LAST, qk_scale,
    s_nb, s_nh, s_pb, s_ph, s_cp, s_cs, s_kp, s_ks,
    HEADS, SPLITS, MIN_CHUNK,
    LATENT, ROPE,
    PAGE_SIZE: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr, UPCAST: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    h0 = tl.program_id(0) * BLOCK_H  # a request's head tiles side by side: they share its latent rows in L2
    b = tl.program_id(1).to(tl.int64)
    pid_s = tl.program_id(2)
    offs_h = h0 + tl.arange(0, BLOCK_H)
    h_ok = offs_h < HEADS
    offs_l = tl.arange(0, BLOCK_L)
    offs_r = tl.arange(0, BLOCK_R)
    l_ok = offs_l < LATENT
    r_ok = offs_r < ROPE
    qn = tl.load(
        QN + b * s_nb + offs_h[:, None] * s_nh + offs_l[None, :],
        mask=h_ok[:, None] & l_ok[None, :],
        other=0.0,
    )
    qp = tl.load(
        QP + b * s_pb + offs_h[:, None] * s_ph + offs_r[None, :],
        mask=h_ok[:, None] & r_ok[None, :],
        other=0.0,
    )
    if UPCAST:
        qn = qn.to(tl.float32)
        qp = qp.to(tl.float32)
    first = tl.load(INDPTR + b)
    length = (tl.load(INDPTR + b + 1) - first - 1) * PAGE_SIZE + tl.load(LAST + b)
    start, end = split_range(length, pid_s, SPLITS, MIN_CHUNK, BLOCK_N)  # start >= end: empty
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_L], dtype=tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    pages = INDICES + first
    for n0 in range(start, end, BLOCK_N):
        pos = n0 + offs_n
        ok = pos < end
        page = tl.load(pages + pos // PAGE_SIZE, mask=ok, other=0).to(tl.int64)
        slot = pos % PAGE_SIZE
        c = tl.load(
            CKV + (page * s_cp + slot * s_cs)[:, None] + offs_l[None, :],
            mask=ok[:, None] & l_ok[None, :],
            other=0.0,
        )
        k = tl.load(
            KPE + (page * s_kp + slot * s_ks)[:, None] + offs_r[None, :],
            mask=ok[:, None] & r_ok[None, :],
            other=0.0,
        )
        if UPCAST:
            c = c.to(tl.float32)
            k = k.to(tl.float32)
        s = dot(qn, tl.trans(c), IEEE) + dot(qp, tl.trans(k), IEEE)
        s = tl.where(ok[None, :], s * qk_scale, float("-inf"))
        m_i, l_i, acc = online_update(s, c, m_i, l_i, acc, IEEE)  # the latent rows are the values
    o, lse = finish(acc, m_i, l_i)  # an empty split: o = 0, lse = -inf
    row = (b * HEADS + offs_h) * SPLITS + pid_s
    tl.store(OP + row[:, None] * LATENT + offs_l[None, :], o, mask=h_ok[:, None] & l_ok[None, :])
    tl.store(LP + row, lse, mask=h_ok)


def _check(q_nope, q_pe, ckv_pool, kpe_pool, kv_indptr, kv_indices, kv_last_page_len, page_size, scale):
    """Every argument refused by name before anything is read or launched; returns (batch, heads,
    latent, rope, page_size, scale)."""
    from attnlab.kernels.common import check_paged

    names = ("q_nope", "q_pe", "ckv_pool", "kpe_pool")
    for name, t in zip(names, (q_nope, q_pe, ckv_pool, kpe_pool)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 3:
            raise ValueError(f"{name} must have 3 dimensions, got shape {tuple(t.shape)}")
        if t.dtype not in DTYPES or t.dtype != q_nope.dtype:
            raise TypeError(
                f"{', '.join(names)} must share one dtype of float16, bfloat16, float32; "
                f"got {q_nope.dtype}, {q_pe.dtype}, {ckv_pool.dtype}, {kpe_pool.dtype}"
            )
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dimension, got strides {t.stride()}")
    B, H, L = q_nope.shape
    R = q_pe.shape[2]
    if q_pe.shape[:2] != (B, H):
        raise ValueError(
            f"q_pe {tuple(q_pe.shape)} must be (batch, heads, rope) = ({B}, {H}, rope) as q_nope"
        )
    if not 1 <= H <= MAX_HEADS:
        raise ValueError(f"heads={H} is out of range; valid: 1 to {MAX_HEADS}")
    for name, n, hi in (("latent", L, MAX_LATENT), ("rope", R, MAX_ROPE)):
        if n % 16 or not 16 <= n <= hi:
            raise ValueError(f"{name}={n} must be a multiple of 16 from 16 to {hi}")
    if ckv_pool.shape[2] != L or kpe_pool.shape[2] != R or ckv_pool.shape[:2] != kpe_pool.shape[:2]:
        raise ValueError(
            f"ckv_pool {tuple(ckv_pool.shape)} and kpe_pool {tuple(kpe_pool.shape)} must be (pages, "
            f"page_size, {L}) and (pages, page_size, {R}) with the same pages and page_size"
        )
    # the page table's checks (kernels.common.check_paged) on one-head views of the latent cache
    check_paged(
        q_pe[:, :1],
        kpe_pool[:, :, None],
        kpe_pool[:, :, None],
        kv_indptr,
        kv_indices,
        kv_last_page_len,
        page_size,
    )
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(
            f"scale must be a real number (DeepSeek-V3: 1 / sqrt(192)), got {type(scale).__name__}"
        )
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale={scale} must be finite and > 0 (DeepSeek-V3: 1 / sqrt(192))")
    return B, H, L, R, as_count("page_size", page_size, 1), float(scale)


class MLAWorkspace:
    """mla_decode planned once for a batch's page table and run at every step (FlashInfer's
    BatchMLAPagedAttentionWrapper form: plan, then run).

    MLAWorkspace(heads, latent, rope, page_size, max_pages, dtype, device, scale=) sizes nothing
    yet; `plan(kv_indptr, kv_indices, kv_last_page_len, splits=, block_h=, block_n=, num_warps=,
    num_stages=)` reads the real lengths, chooses the splits (`mla_decode`'s docstring) and makes
    the buffers the launches write, and returns what it chose; `run(q_nope, q_pe, ckv_pool,
    kpe_pool)` launches only, so it can be captured in a CUDA graph, and returns (o, lse)."""

    def __init__(self, heads, latent, rope, page_size, max_pages, dtype=None, device="cuda", *, scale):
        self.heads, self.latent, self.rope = heads, latent, rope
        self.page_size, self.max_pages, self.dtype, self.device = pool_dims(
            page_size, max_pages, dtype, device
        )
        self.scale, self._p = scale, None
        self.scale = self._fakes(1)[-1]  # heads, latent, rope and scale refused by name now

    def _fakes(self, batch):
        """Views of the planned shapes (no memory), checked as a call's tensors are."""
        fake = lambda *shape: torch.empty(shape[-1], dtype=self.dtype, device=self.device).expand(*shape)  # noqa: E731
        qn, qp = fake(batch, self.heads, self.latent), fake(batch, self.heads, self.rope)
        ckv, kpe = (
            fake(self.max_pages, self.page_size, self.latent),
            fake(self.max_pages, self.page_size, self.rope),
        )
        i32 = dict(dtype=torch.int32, device=self.device)
        table = (torch.arange(batch + 1, **i32), torch.zeros(batch, **i32), torch.ones(batch, **i32))
        scale = _check(qn, qp, ckv, kpe, *table, self.page_size, self.scale)[-1]
        return qn, qp, ckv, kpe, scale

    def plan(
        self,
        kv_indptr,
        kv_indices,
        kv_last_page_len,
        *,
        splits: int | None = None,
        block_h: int | None = None,
        block_n: int | None = None,
        num_warps: int | None = None,
        num_stages: int | None = None,
    ) -> dict:
        """The host's work for this page table; returns {"splits", "min_chunk", "block_h",
        "block_n"}."""
        from attnlab.kernels.paged import request_lengths
        from attnlab.kernels.tuning import fill_from_lengths

        if not isinstance(kv_last_page_len, torch.Tensor):
            raise TypeError(f"kv_last_page_len must be a torch.Tensor, got {type(kv_last_page_len).__name__}")
        B, H, L = kv_last_page_len.numel(), self.heads, self.latent
        qn, qp, ckv, kpe, _ = self._fakes(max(B, 1))
        _check(qn[:B], qp[:B], ckv, kpe, kv_indptr, kv_indices, kv_last_page_len, self.page_size, self.scale)
        interp = interpreting()
        # 64 heads a tile where there are 64: the tile's products become wgmma (one warpgroup's 64
        # rows; 32 stay on Ampere's mma), 223 registers and no spill at 32 keys and 8 warps when
        # compiled for sm_90 by the H200's Triton (gpubench.compiled mla); not yet timed there
        block_h = as_block("block_h", block_h) or (16 if interp or H <= 16 else (64 if H >= 64 else 32))
        block_n = as_block("block_n", block_n) or (16 if interp else 32)
        num_warps, num_stages = as_warps(num_warps), as_stages(num_stages)
        tiles = -(-H // block_h)
        if splits is None:
            lengths = request_lengths(kv_indptr, kv_last_page_len, self.page_size)
            small = {"floor": block_n, "tile": block_n} if interp else {}
            splits, min_chunk = fill_from_lengths(lengths, tiles, self.device, **small)
        else:
            splits, min_chunk = as_count("splits", splits, 1, 1024), 1
        f32 = dict(dtype=torch.float32, device=self.device)
        p = SimpleNamespace(
            table=(kv_indptr, kv_indices, kv_last_page_len), batch=B, splits=splits,
            min_chunk=min_chunk, block_h=block_h, block_n=block_n, tiles=tiles,
            kw={} if interp else {"num_warps": num_warps or 8, "num_stages": num_stages or 2},
            op=torch.empty((B * H * splits, L), **f32), lp=torch.empty((B * H * splits,), **f32),
            o=torch.empty((B, H, L), dtype=self.dtype, device=self.device),
        )  # fmt: skip
        if splits > 1:
            p.o32, p.lse = torch.empty((B * H, L), **f32), torch.empty((B * H,), **f32)
        else:  # one split: its state is the answer
            p.o32, p.lse = p.op, p.lp
        self._p = p
        return {"splits": splits, "min_chunk": min_chunk, "block_h": block_h, "block_n": block_n}

    def run(self, q_nope, q_pe, ckv_pool, kpe_pool):
        """(o, lse) for the planned table: o (batch, heads, latent) in the plan's dtype, lse
        (batch, heads) float32, natural log; launches only."""
        p = self._p
        if p is None:
            raise RuntimeError("nothing planned: call plan(kv_indptr, kv_indices, kv_last_page_len) first")
        B, H, L, R = p.batch, self.heads, self.latent, self.rope
        check_planned("q_nope", q_nope, (B, H, L), self.dtype, self.device)
        check_planned("q_pe", q_pe, (B, H, R), self.dtype, self.device)
        _check(q_nope, q_pe, ckv_pool, kpe_pool, *p.table, self.page_size, self.scale)
        interp, fp32 = interpreting(), self.dtype == torch.float32
        _mla_kernel[(p.tiles, B, p.splits)](
            q_nope, q_pe, ckv_pool, kpe_pool, p.op, p.lp, *p.table, self.scale * LOG2E,
            q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1), ckv_pool.stride(0),
            ckv_pool.stride(1), kpe_pool.stride(0), kpe_pool.stride(1), H, p.splits, p.min_chunk,
            L, R, PAGE_SIZE=self.page_size, BLOCK_L=triton.next_power_of_2(L),
            BLOCK_R=triton.next_power_of_2(R), BLOCK_H=p.block_h, BLOCK_N=p.block_n,
            UPCAST=interp or fp32, IEEE=interp or fp32, **p.kw,
        )  # fmt: skip
        if p.splits > 1:
            merge_splits_kernel[(B * H,)](
                p.op, p.lp, p.o32, p.lse, p.splits, L, BLOCK_S=triton.next_power_of_2(p.splits),
                BLOCK_D=triton.next_power_of_2(L), **({} if interp else {"num_warps": 4}),
            )  # fmt: skip
        p.o.copy_(p.o32.view(B, H, L))
        return p.o, p.lse.view(B, H)


def mla_decode(
    q_nope,
    q_pe,
    ckv_pool,
    kpe_pool,
    kv_indptr,
    kv_indices,
    kv_last_page_len,
    *,
    page_size: int,
    scale: float,
    splits: int | None = None,
    block_h: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
):
    """o (batch, heads, latent) in q's dtype and lse (batch, heads) float32, natural log (the
    module's docstring gives the arrays): one MLAWorkspace plan and run. `splits` per request
    (None: the fill rule over the real lengths, a copy of 2 x batch + 1 integers to the host);
    block_h, block_n (powers of two, 16-256), num_warps, num_stages: launch choices. Bad input is
    refused by name before a launch."""
    B, H, L, R, page_size, scale = _check(
        q_nope, q_pe, ckv_pool, kpe_pool, kv_indptr, kv_indices, kv_last_page_len, page_size, scale
    )
    w = MLAWorkspace(H, L, R, page_size, ckv_pool.shape[0], q_nope.dtype, q_nope.device, scale=scale)
    w.plan(
        kv_indptr, kv_indices, kv_last_page_len, splits=splits, block_h=block_h, block_n=block_n,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return w.run(q_nope, q_pe, ckv_pool, kpe_pool)
