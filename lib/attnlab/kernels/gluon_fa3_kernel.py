"""The Gluon kernel behind `kernels.gluon_fa3` (torch-free: it imports only Triton, so it can be
compiled for sm_90 on a machine without a GPU or torch).

One program owns BLOCK_M = 128 query rows of one (batch, head) and walks the key tiles of its KV
head. Compile-time switches, each one of FlashAttention-3's ideas:

    WS        warp specialisation: a 1-warp producer partition (24 registers) issues every TMA load
              (Q once, then K and V tiles into a ring of STAGES shared-memory stages guarded by
              ready / empty mbarriers); the 8-warp default partition (two warpgroups, 64 rows
              each, the registers the producer gave up) only computes. Off: the computing warps
              issue the loads themselves, STAGES - 1 tiles ahead (software pipelining).
    OVERLAP   intra-warpgroup overlap: tile j's QK^T and tile j-1's PV are issued together as
              asynchronous wgmma, and tile j's softmax runs on the CUDA cores while PV(j-1) is
              still on the tensor cores; O is rescaled after PV(j-1) retires.
    CAUSAL    causal masking on the tiles that need it only (the diagonal ones and a last
              partial tile); tiles above the diagonal are never loaded.
    LPT       longest-processing-time-first order of the query blocks (causal: the last block,
              which sees the most keys, is launched first, across all heads).
    TMA_STORE O leaves through shared memory (Q's buffer, dead by then) and a TMA store; off
              (N_q not a multiple of BLOCK_M): a masked store from registers.

Softmax is online, in registers, in the log2 domain (exp2, with scale * log2(e) folded into one
multiply-add per logit); QK^T and PV are `warpgroup_mma` (Q and K, V from shared memory, P from
registers, converted from the accumulator layout without a shared-memory round trip).

Left out: FA3's explicit ping-pong of two consumer warpgroups (named-barrier ordering of one
warpgroup's softmax under the other's GEMMs; here the two warpgroups of the default partition run
in lockstep and the warp scheduler overlaps whatever it can), FP8, persistent scheduling, the
backward pass, varlen / paged KV.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

__all__ = ["fa3_fwd_kernel"]

LN2 = gl.constexpr(0.6931471805599453)


@gluon.jit
def _coords(n_q, n_k, H, GROUP, num_m, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr,
            LPT: gl.constexpr):
    """This program's query block m, its (batch, head) bh, the first rows of its Q and KV head in
    the flattened (rows, d) views, how many key tiles it visits and how many of those need no mask."""
    if LPT:
        bh = gl.program_id(0)
        m = num_m - 1 - gl.program_id(1)
    else:
        m = gl.program_id(0)
        bh = gl.program_id(1)
    kvh = (bh // H) * (H // GROUP) + (bh % H) // GROUP
    q_row = bh * n_q + m * BLOCK_M
    kv_row = kvh * n_k
    if CAUSAL:
        off = n_k - n_q                                          # bottom-right: row i sees keys <= i + off
        hi = gl.maximum(gl.minimum(n_k, (m + 1) * BLOCK_M + off), 0)
        n_full = gl.minimum(gl.maximum(m * BLOCK_M + off + 1, 0) // BLOCK_N, n_k // BLOCK_N)
    else:
        hi = n_k
        n_full = n_k // BLOCK_N
    n_tiles = gl.cdiv(hi, BLOCK_N)
    n_full = gl.minimum(n_full, n_tiles)
    return m, bh, q_row, kv_row, n_tiles, n_full


@gluon.jit
def _softmax(s, m_i, l_i, qk_scale, row0, col0, n_k, off, MASK: gl.constexpr, CAUSAL: gl.constexpr,
             BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
    """One online-softmax step on raw logits s: masked entries -inf (MASK only), running max m_i
    in log2 units; returns p = 2^(s*qk_scale - m), the rescale factor alpha, the new m and l.
    A row that has seen no key keeps m = -inf, l = 0 and gives p = 0 (no NaN)."""
    if MASK:
        cols = col0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        ok = gl.expand_dims(cols < n_k, 0)
        if CAUSAL:
            rows = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
            ok = ok & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows + off, 1))
        s = gl.where(ok, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    if MASK:
        m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_use, 1))
    alpha = gl.exp2(m_i - m_use)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_new, l_i


@gluon.jit
def _load_kv(k_desc, v_desc, row, k_buf, v_buf, k_bar, v_bar, pred):
    mbarrier.expect(k_bar, k_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(k_desc, [row, 0], k_bar, k_buf, pred=pred)
    mbarrier.expect(v_bar, v_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(v_desc, [row, 0], v_bar, v_buf, pred=pred)


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, k_ready, v_ready, empty, q_bar,
              n_q, n_k, H, GROUP, num_m, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              CAUSAL: gl.constexpr, LPT: gl.constexpr):
    """The 1-warp producer partition: Q once, then each K / V tile into the next free stage."""
    m, bh, q_row, kv_row, n_tiles, n_full = _coords(n_q, n_k, H, GROUP, num_m, BLOCK_M, BLOCK_N, CAUSAL, LPT)
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem)
    for j in range(n_tiles):
        st = j % STAGES
        mbarrier.wait(empty.index(st), ((j // STAGES) & 1) ^ 1)   # a fresh barrier passes phase 1
        _load_kv(k_desc, v_desc, kv_row + j * BLOCK_N, k_bufs.index(st), v_bufs.index(st),
                 k_ready.index(st), v_ready.index(st), True)


@gluon.jit
def _consumer(q_desc, k_desc, v_desc, o_desc, o_ptr, lse_ptr, q_smem, k_bufs, v_bufs, k_ready, v_ready, empty,
              q_bar, qk_scale, n_q, n_k, H, GROUP, num_m, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
              HEAD_D: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr, LPT: gl.constexpr,
              WS: gl.constexpr, OVERLAP: gl.constexpr, TMA_STORE: gl.constexpr, num_warps: gl.constexpr):
    """The computing warps (two warpgroups of 64 rows): QK^T, softmax, PV, and the epilogue."""
    m, bh, q_row, kv_row, n_tiles, n_full = _coords(n_q, n_k, H, GROUP, num_m, BLOCK_M, BLOCK_N, CAUSAL, LPT)
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, HEAD_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    off = n_k - n_q
    row0 = m * BLOCK_M
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BLOCK_M, HEAD_D], gl.float32, o_layout)
    s0 = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)

    if not WS:                                                   # the computing warps load, STAGES-1 ahead
        mbarrier.expect(q_bar, q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem)
        for t in gl.static_range(STAGES - 1):
            _load_kv(k_desc, v_desc, kv_row + t * BLOCK_N, k_bufs.index(t), v_bufs.index(t),
                     k_ready.index(t), v_ready.index(t), t < n_tiles)
    mbarrier.wait(q_bar, 0)

    if OVERLAP:
        if n_tiles > 0:
            mbarrier.wait(k_ready.index(0), 0)
            s = warpgroup_mma(q_smem, k_bufs.index(0).permute((1, 0)), s0, use_acc=False, is_async=True)
            s = warpgroup_mma_wait(0, deps=(s,))
            if n_full > 0:
                p, alpha, m_i, l_i = _softmax(s, m_i, l_i, qk_scale, row0, 0, n_k, off, False, CAUSAL,
                                              BLOCK_M, BLOCK_N, s_layout)
            else:
                p, alpha, m_i, l_i = _softmax(s, m_i, l_i, qk_scale, row0, 0, n_k, off, True, CAUSAL,
                                              BLOCK_M, BLOCK_N, s_layout)
            p16 = gl.convert_layout(p.to(dtype), p_layout)
            for j in range(1, n_tiles):
                st = j % STAGES
                pst = (j - 1) % STAGES
                if not WS:                                       # stage of tile j-2 (or a fresh one) is free
                    nt = j + STAGES - 2
                    gl.thread_barrier()
                    _load_kv(k_desc, v_desc, kv_row + nt * BLOCK_N, k_bufs.index(nt % STAGES),
                             v_bufs.index(nt % STAGES), k_ready.index(nt % STAGES), v_ready.index(nt % STAGES),
                             nt < n_tiles)
                mbarrier.wait(k_ready.index(st), (j // STAGES) & 1)
                s = warpgroup_mma(q_smem, k_bufs.index(st).permute((1, 0)), s0, use_acc=False, is_async=True)
                mbarrier.wait(v_ready.index(pst), ((j - 1) // STAGES) & 1)
                acc = warpgroup_mma(p16, v_bufs.index(pst), acc, is_async=True)
                s = warpgroup_mma_wait(1, deps=(s,))            # QK^T(j) done, PV(j-1) may still run
                if j >= n_full:
                    p, alpha, m_i, l_i = _softmax(s, m_i, l_i, qk_scale, row0, j * BLOCK_N, n_k, off, True, CAUSAL,
                                                  BLOCK_M, BLOCK_N, s_layout)
                else:
                    p, alpha, m_i, l_i = _softmax(s, m_i, l_i, qk_scale, row0, j * BLOCK_N, n_k, off, False, CAUSAL,
                                                  BLOCK_M, BLOCK_N, s_layout)
                acc, p16 = warpgroup_mma_wait(0, deps=(acc, p16))
                if WS:
                    mbarrier.arrive(empty.index(pst), count=1)
                acc = acc * gl.expand_dims(gl.convert_layout(alpha, o_rows), 1)
                p16 = gl.convert_layout(p.to(dtype), p_layout)
            lst = (n_tiles - 1) % STAGES
            mbarrier.wait(v_ready.index(lst), ((n_tiles - 1) // STAGES) & 1)
            acc = warpgroup_mma(p16, v_bufs.index(lst), acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=(acc,))
            if WS:
                mbarrier.arrive(empty.index(lst), count=1)
    else:
        for j in range(n_tiles):
            st = j % STAGES
            ph = (j // STAGES) & 1
            if not WS:                                           # stage of tile j-1 is free: refill it
                nt = j + STAGES - 1
                gl.thread_barrier()
                _load_kv(k_desc, v_desc, kv_row + nt * BLOCK_N, k_bufs.index(nt % STAGES), v_bufs.index(nt % STAGES),
                         k_ready.index(nt % STAGES), v_ready.index(nt % STAGES), nt < n_tiles)
            mbarrier.wait(k_ready.index(st), ph)
            s = warpgroup_mma(q_smem, k_bufs.index(st).permute((1, 0)), s0, use_acc=False, is_async=True)
            s = warpgroup_mma_wait(0, deps=(s,))
            if j >= n_full:
                p, alpha, m_i, l_i = _softmax(s, m_i, l_i, qk_scale, row0, j * BLOCK_N, n_k, off, True, CAUSAL,
                                              BLOCK_M, BLOCK_N, s_layout)
            else:
                p, alpha, m_i, l_i = _softmax(s, m_i, l_i, qk_scale, row0, j * BLOCK_N, n_k, off, False, CAUSAL,
                                              BLOCK_M, BLOCK_N, s_layout)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, o_rows), 1)
            p16 = gl.convert_layout(p.to(dtype), p_layout)
            mbarrier.wait(v_ready.index(st), ph)
            acc = warpgroup_mma(p16, v_bufs.index(st), acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=(acc,))
            if WS:
                mbarrier.arrive(empty.index(st), count=1)

    # epilogue: o = acc / l (0 for a row that saw no key), lse in natural log (-inf there)
    l_o = gl.convert_layout(l_i, o_rows)
    o = acc / gl.expand_dims(gl.where(l_o > 0, l_o, 1.0), 1)
    lse = gl.where(l_i > 0, (m_i + gl.log2(gl.where(l_i > 0, l_i, 1.0))) * LN2, float("-inf"))
    rows_s = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    gl.store(lse_ptr + bh.to(gl.int64) * n_q + rows_s, lse, mask=rows_s < n_q)
    if TMA_STORE:
        q_smem.store(o.to(dtype))                                # Q is dead: its buffer stages O
        fence_async_shared()
        tma.async_copy_shared_to_global(o_desc, [q_row, 0], q_smem)
        tma.store_wait(0)
    else:
        rows = row0 + gl.arange(0, BLOCK_M, layout=o_rows)
        cols = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, o_layout))
        ptrs = o_ptr + (bh.to(gl.int64) * n_q + gl.expand_dims(rows, 1)) * HEAD_D + gl.expand_dims(cols, 0)
        gl.store(ptrs, o.to(dtype), mask=gl.expand_dims(rows < n_q, 1))


@gluon.jit
def fa3_fwd_kernel(q_desc, k_desc, v_desc, o_desc, o_ptr, lse_ptr, qk_scale, n_q, n_k, H, GROUP, num_m,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, STAGES: gl.constexpr,
                   CAUSAL: gl.constexpr, LPT: gl.constexpr, WS: gl.constexpr, OVERLAP: gl.constexpr,
                   TMA_STORE: gl.constexpr, num_warps: gl.constexpr):
    """Shared memory (Q, STAGES K and V stages, their barriers), then the partitions."""
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_D], q_desc.layout)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], k_desc.layout)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], v_desc.layout)
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    mbarrier.init(q_bar, count=1)
    if WS:
        gl.warp_specialize([
            (_consumer, (q_desc, k_desc, v_desc, o_desc, o_ptr, lse_ptr, q_smem, k_bufs, v_bufs, k_ready, v_ready,
                         empty, q_bar, qk_scale, n_q, n_k, H, GROUP, num_m, BLOCK_M, BLOCK_N, HEAD_D, STAGES,
                         CAUSAL, LPT, WS, OVERLAP, TMA_STORE, num_warps)),
            (_producer, (q_desc, k_desc, v_desc, q_smem, k_bufs, v_bufs, k_ready, v_ready, empty, q_bar,
                         n_q, n_k, H, GROUP, num_m, BLOCK_M, BLOCK_N, STAGES, CAUSAL, LPT)),
        ], [1], [24])
    else:
        _consumer(q_desc, k_desc, v_desc, o_desc, o_ptr, lse_ptr, q_smem, k_bufs, v_bufs, k_ready, v_ready,
                  empty, q_bar, qk_scale, n_q, n_k, H, GROUP, num_m, BLOCK_M, BLOCK_N, HEAD_D, STAGES,
                  CAUSAL, LPT, WS, OVERLAP, TMA_STORE, num_warps)
