"""The Gluon kernel behind `kernels.gluon_fa3` (torch-free, so it compiles for sm_90 without a GPU).
A program owns BLOCK_M = 128 query rows of one (batch, head). Compile-time switches, FA3's ideas:

    WS        a 1-warp producer partition (24 registers) issues every TMA load: Q once, K and V
              into a ring of STAGES shared-memory stages with ready / empty mbarriers; the
              computing warps get 240 registers (off: they load, ahead of use, themselves)
    SPLIT     two 4-warp consumer partitions of 64 rows each, independent (off: one 8-warp
              consumer, its warpgroups kept in step by the per-tile sync)
    PINGPONG  the two consumers take turns issuing their GEMMs (an mbarrier pair hands over)
    OVERLAP   QK^T(j) and PV(j-1) issued together as async wgmma, softmax(j) under PV(j-1)
    EARLY_K   (with WS) K and V stages freed apart: a K stage as soon as its QK^T is done, a V
              stage after its PV (FA3's two pipelines), so the producer loads the next K tiles
              while this tile's PV still reads V (off: one barrier frees K and V after PV)
    CAUSAL    masks only the tiles that need it, never loads those above the diagonal; LPT:
              the longest query blocks launch first. TMA_STORE: O leaves by a TMA store.
    PERSIST   (with WS) one program per SM walks its list of work tiles (the host's
              `machine.schedule.persistent_tiles`: longest first, heads in L2-sized sections,
              each to the least-loaded program); the ring's stages and phases run on from tile
              to tile, and the producer loads a tile's first K / V stages, then its Q (once the
              consumers free Q's buffer: the q_empty barrier), while the last one's epilogue runs

Variants (lecture §5.4), compile-time switches as in `kernels.variants`, off at no cost:

    SOFT_CAP  logits c tanh(scale s / c), capped in the base-2 domain by exp2 and one division
              (the Hopper kernel's formula; the launcher passes qk_scale = 1 then)
    WINDOW    with CAUSAL, keys q_idx - window < kv_idx <= q_idx: every partition starts at the
              first key tile the window of the block's first row reaches (tiles wholly outside it
              are never loaded), and a masked loop takes the window's lower edge

The loop over key tiles runs in three parts per consumer: the window's lower edge (masked), the
tiles every one of its rows sees (no mask), the diagonal band and the ragged end (masked); where
they start is `kernels.gluon_fa3_parts.tile_coords`, the masks and the soft-cap `softmax_tile` there,
and so are the stage ring's loads (`load_tile`, `load_kv`) and releases (`release_stage`).

Softmax: online, in registers, log2 domain (exp2, scale * log2(e) folded into one multiply-add);
P feeds the PV wgmma from registers (accumulator layout converted, no shared-memory round trip).
Left out: FP8, a dynamic (atomic counter) scheduler, the backward pass, varlen / paged KV.
The file is long because notebook 03 prints its partitions and loops together, as one kernel.
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from attnlab.kernels.gluon_fa3_parts import (load_kv, load_tile, release_stage, softmax_tile, tile_coords, work_range,
                                             work_tile)

__all__ = ["fa3_fwd_kernel"]

LN2 = gl.constexpr(0.6931471805599453)


@gluon.jit
def _produce(lo, hi, it, kv_row, descs, bufs, bars, STAGES: gl.constexpr, BLOCK_N: gl.constexpr,
             EARLY_K: gl.constexpr):
    """Key tiles lo..hi-1 of a work tile into the ring, the program's it-th key tile being its
    first (the stage and phase run on across the program's work tiles); EARLY_K: the K and the V
    tile each as soon as its own stage is free."""
    for j in range(lo, hi):
        g = it + j
        st = g % STAGES
        free = ((g // STAGES) & 1) ^ 1                          # a fresh barrier passes phase 1
        mbarrier.wait(bars[2].index(st), free)
        if EARLY_K:
            load_tile(descs, bufs, bars, 1, kv_row + j * BLOCK_N, st, True)
            mbarrier.wait(bars[5].index(st), free)
            load_tile(descs, bufs, bars, 2, kv_row + j * BLOCK_N, st, True)
        else:
            load_kv(descs, bufs, bars, kv_row + j * BLOCK_N, st, True)


@gluon.jit
def _producer(descs, bufs, bars, dims, sched, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              CAUSAL: gl.constexpr, WINDOW: gl.constexpr, LPT: gl.constexpr, EARLY_K: gl.constexpr,
              PERSIST: gl.constexpr):
    """The 1-warp producer partition, for each of the program's work tiles: Q, then each K / V
    tile the block visits (WINDOW: from the first its window reaches, as the consumers count
    them) into the next free stage. PERSIST: a tile's first STAGES - 1 key tiles load before its
    Q, whose buffer waits until the consumers are done with the previous tile's (q_empty)."""
    NQ: gl.constexpr = bufs[0].shape[0]
    start, end = work_range(sched, PERSIST)
    it = 0
    for w in range(start, end):
        m, bh = work_tile(sched, w, dims[4], LPT, PERSIST)
        q_row, kv_row, key0, n_tiles, full_lo, n_full = tile_coords(dims, m, bh, 0, BLOCK_M, BLOCK_M, BLOCK_N,
                                                                    CAUSAL, WINDOW)
        pre = 0
        if PERSIST:                                             # under the last tile's epilogue
            pre = gl.minimum(n_tiles, STAGES - 1)
            _produce(0, pre, it, kv_row, descs, bufs, bars, STAGES, BLOCK_N, EARLY_K)
            mbarrier.wait(bars[6], ((w - start) & 1) ^ 1)
        mbarrier.expect(bars[3], NQ * descs[0].block_type.nbytes)
        for i in gl.static_range(NQ):
            tma.async_copy_global_to_shared(descs[0], [q_row + i * (BLOCK_M // NQ), 0], bars[3], bufs[0].index(i))
        _produce(pre, n_tiles, it, kv_row, descs, bufs, bars, STAGES, BLOCK_N, EARLY_K)
        it += n_tiles


@gluon.jit
def _pingpong(turn, j, WG: gl.constexpr, PINGPONG: gl.constexpr, HAND_OVER: gl.constexpr):
    """Ping-pong: wait for this consumer's turn to issue tile j's wgmma (consumer 0 goes first), or
    (HAND_OVER) pass the tensor cores to the other one, whose softmax ran under these GEMMs."""
    if PINGPONG:
        if HAND_OVER:
            mbarrier.arrive(turn.index(1 - WG), count=1)
        else:
            mbarrier.wait(turn.index(WG), (j & 1) ^ (1 - WG))


@gluon.jit
def _plain_loop(lo, hi, it, m_i, l_i, acc, s0, q_tile, descs, bufs, bars, sc, pos, kv_row, n_tiles,
                MASK: gl.constexpr, CAUSAL: gl.constexpr, WINDOW: gl.constexpr, SOFT_CAP: gl.constexpr,
                WS: gl.constexpr, WG: gl.constexpr, PINGPONG: gl.constexpr, STAGES: gl.constexpr,
                BLOCK_N: gl.constexpr, p_layout: gl.constexpr, EARLY_K: gl.constexpr):
    """Key tiles lo..hi-1 one after the other: QK^T, softmax, rescale, PV (the program's it-th key
    tile is this work tile's first: stages and phases run on)."""
    q_smem, k_bufs, v_bufs = bufs
    k_ready, v_ready, empty, q_bar, turn, empty_v, q_empty = bars
    for j in range(lo, hi):
        st = (it + j) % STAGES
        ph = ((it + j) // STAGES) & 1
        if not WS:                                               # stage of tile j-1 is free: refill it
            nt = j + STAGES - 1
            gl.thread_barrier()
            load_kv(descs, bufs, bars, kv_row + nt * BLOCK_N, (it + nt) % STAGES, nt < n_tiles)
        mbarrier.wait(k_ready.index(st), ph)
        _pingpong(turn, it + j, WG, PINGPONG, False)
        s = warpgroup_mma(q_tile, k_bufs.index(st).permute((1, 0)), s0, use_acc=False, is_async=True)
        _pingpong(turn, 0, WG, PINGPONG, True)
        s = warpgroup_mma_wait(0, deps=(s,))
        release_stage(bars, st, False, WS, EARLY_K)
        p, alpha, m_i, l_i = softmax_tile(s, m_i, l_i, sc, pos, j * BLOCK_N, MASK, CAUSAL, WINDOW, SOFT_CAP)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, acc.type.layout)), 1)
        p16 = gl.convert_layout(p.to(q_tile.dtype), p_layout)
        mbarrier.wait(v_ready.index(st), ph)
        acc = warpgroup_mma(p16, v_bufs.index(st), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(acc,))
        release_stage(bars, st, True, WS, EARLY_K)
    return m_i, l_i, acc


@gluon.jit
def _overlap_loop(lo, hi, it, p16, m_i, l_i, acc, s0, q_tile, descs, bufs, bars, sc, pos, kv_row, n_tiles,
                  MASK: gl.constexpr, CAUSAL: gl.constexpr, WINDOW: gl.constexpr, SOFT_CAP: gl.constexpr,
                  WS: gl.constexpr, WG: gl.constexpr, PINGPONG: gl.constexpr, STAGES: gl.constexpr,
                  BLOCK_N: gl.constexpr, p_layout: gl.constexpr, EARLY_K: gl.constexpr):
    """Tiles lo..hi-1 (lo >= 1), QK^T(j) with PV(j-1), softmax(j) under PV(j-1); p16: P(j-1) -> P(hi-1)."""
    q_smem, k_bufs, v_bufs = bufs
    k_ready, v_ready, empty, q_bar, turn, empty_v, q_empty = bars
    for j in range(lo, hi):
        g = it + j
        st = g % STAGES
        pst = (g - 1) % STAGES
        if not WS:                                               # stage of tile j-2 (or a fresh one) is free
            nt = j + STAGES - 2
            gl.thread_barrier()
            load_kv(descs, bufs, bars, kv_row + nt * BLOCK_N, (it + nt) % STAGES, nt < n_tiles)
        mbarrier.wait(k_ready.index(st), (g // STAGES) & 1)
        mbarrier.wait(v_ready.index(pst), ((g - 1) // STAGES) & 1)
        _pingpong(turn, g, WG, PINGPONG, False)
        s = warpgroup_mma(q_tile, k_bufs.index(st).permute((1, 0)), s0, use_acc=False, is_async=True)
        acc = warpgroup_mma(p16, v_bufs.index(pst), acc, is_async=True)
        _pingpong(turn, 0, WG, PINGPONG, True)
        s = warpgroup_mma_wait(1, deps=(s,))                    # QK^T(j) done, PV(j-1) may still run
        release_stage(bars, st, False, WS, EARLY_K)
        p, alpha, m_i, l_i = softmax_tile(s, m_i, l_i, sc, pos, j * BLOCK_N, MASK, CAUSAL, WINDOW, SOFT_CAP)
        acc, p16 = warpgroup_mma_wait(0, deps=(acc, p16))
        release_stage(bars, pst, True, WS, EARLY_K)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, acc.type.layout)), 1)
        p16 = gl.convert_layout(p.to(q_tile.dtype), p_layout)
    return p16, m_i, l_i, acc


@gluon.jit
def _free_q(q_empty, PERSIST: gl.constexpr, TMA_STORE: gl.constexpr, STORED: gl.constexpr):
    """PERSIST: this consumer is done with its Q buffer, so the producer may load the next tile's
    Q there: after the last QK^T, or (TMA_STORE, O staged in that buffer) once O has left."""
    if PERSIST:
        if TMA_STORE == STORED:
            mbarrier.arrive(q_empty, count=1)


@gluon.jit
def _consumer_tile(descs, bufs, bars, dims, o_ptr, lse_ptr, sc, m, bh, it, q_phase, BLOCK_M: gl.constexpr,
                   BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                   WINDOW: gl.constexpr, SOFT_CAP: gl.constexpr, WS: gl.constexpr, OVERLAP: gl.constexpr,
                   TMA_STORE: gl.constexpr, PINGPONG: gl.constexpr, EARLY_K: gl.constexpr, PERSIST: gl.constexpr,
                   WG: gl.constexpr, num_warps: gl.constexpr):
    """One work tile (query block m of bh): QK^T, softmax, PV and the epilogue for BM = BLOCK_M / NQ
    rows of the block (NQ = 1: all 8 warps, two warpgroups in lockstep; NQ = 2: consumer WG, one
    warpgroup). it: the program's key tiles before this one (the ring's stages and phases run
    on); q_phase: the phase its Q arrives in. Returns the key tiles it visited."""
    q_desc, k_desc, v_desc, o_desc = descs
    q_smem, k_bufs, v_bufs = bufs
    k_ready, v_ready, empty, q_bar, turn, empty_v, q_empty = bars
    n_q, n_k = dims[0], dims[1]
    NQ: gl.constexpr = q_smem.shape[0]
    BM: gl.constexpr = BLOCK_M // NQ
    ROW_OFF: gl.constexpr = WG * BM
    q_row, kv_row, key0, n_tiles, full_lo, n_full = tile_coords(dims, m, bh, ROW_OFF, BM, BLOCK_M, BLOCK_N,
                                                                CAUSAL, WINDOW)
    q_row = q_row + ROW_OFF
    q_tile = q_smem.index(WG)
    dtype: gl.constexpr = q_desc.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, HEAD_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    row0 = m * BLOCK_M + ROW_OFF
    pos = (row0, n_k, n_k - n_q, dims[5])
    if WINDOW:                                                   # key positions from the first key loaded
        pos = (row0, n_k - key0, n_k - n_q - key0, dims[5])
    m_i = gl.full([BM], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BM], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BM, HEAD_D], gl.float32, o_layout)
    s0 = gl.zeros([BM, BLOCK_N], gl.float32, s_layout)

    if not WS:                                                   # the computing warps load, STAGES-1 ahead
        mbarrier.expect(q_bar, q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_tile)
        for t in gl.static_range(STAGES - 1):
            load_kv(descs, bufs, bars, kv_row + t * BLOCK_N, t, t < n_tiles)
    mbarrier.wait(q_bar, q_phase)

    loop_args = (s0, q_tile, descs, bufs, bars, sc, pos, kv_row, n_tiles)
    if OVERLAP:
        if n_tiles > 0:                                          # tile 0: QK^T and softmax, no PV yet
            st0 = it % STAGES
            mbarrier.wait(k_ready.index(st0), (it // STAGES) & 1)
            _pingpong(turn, it, WG, PINGPONG, False)
            s = warpgroup_mma(q_tile, k_bufs.index(st0).permute((1, 0)), s0, use_acc=False, is_async=True)
            _pingpong(turn, 0, WG, PINGPONG, True)
            s = warpgroup_mma_wait(0, deps=(s,))
            release_stage(bars, st0, False, WS, EARLY_K)
            p, alpha, m_i, l_i = softmax_tile(s, m_i, l_i, sc, pos, 0, True, CAUSAL, WINDOW, SOFT_CAP)
            p16 = gl.convert_layout(p.to(dtype), p_layout)
            first = 1
            if WINDOW:                                           # the window's lower edge: masked
                first = gl.maximum(full_lo, 1)
                p16, m_i, l_i, acc = _overlap_loop(1, first, it, p16, m_i, l_i, acc, *loop_args, True, CAUSAL,
                                                   WINDOW, SOFT_CAP, WS, WG, PINGPONG, STAGES, BLOCK_N, p_layout,
                                                   EARLY_K)
            mid = gl.maximum(n_full, first)
            p16, m_i, l_i, acc = _overlap_loop(first, mid, it, p16, m_i, l_i, acc, *loop_args, False, CAUSAL,
                                               WINDOW, SOFT_CAP, WS, WG, PINGPONG, STAGES, BLOCK_N, p_layout,
                                               EARLY_K)
            p16, m_i, l_i, acc = _overlap_loop(mid, n_tiles, it, p16, m_i, l_i, acc, *loop_args, True, CAUSAL,
                                               WINDOW, SOFT_CAP, WS, WG, PINGPONG, STAGES, BLOCK_N, p_layout,
                                               EARLY_K)
            _free_q(q_empty, PERSIST, TMA_STORE, False)          # the last QK^T is done
            lst = (it + n_tiles - 1) % STAGES                     # the last PV
            mbarrier.wait(v_ready.index(lst), ((it + n_tiles - 1) // STAGES) & 1)
            acc = warpgroup_mma(p16, v_bufs.index(lst), acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=(acc,))
            release_stage(bars, lst, True, WS, EARLY_K)
        else:
            _free_q(q_empty, PERSIST, TMA_STORE, False)
    else:                                       # the window's lower edge, the unmasked tiles, the masked ones
        if WINDOW:
            m_i, l_i, acc = _plain_loop(0, full_lo, it, m_i, l_i, acc, *loop_args, True, CAUSAL, WINDOW, SOFT_CAP,
                                        WS, WG, PINGPONG, STAGES, BLOCK_N, p_layout, EARLY_K)
        m_i, l_i, acc = _plain_loop(full_lo, n_full, it, m_i, l_i, acc, *loop_args, False, CAUSAL, WINDOW, SOFT_CAP,
                                    WS, WG, PINGPONG, STAGES, BLOCK_N, p_layout, EARLY_K)
        m_i, l_i, acc = _plain_loop(n_full, n_tiles, it, m_i, l_i, acc, *loop_args, True, CAUSAL, WINDOW, SOFT_CAP,
                                    WS, WG, PINGPONG, STAGES, BLOCK_N, p_layout, EARLY_K)
        _free_q(q_empty, PERSIST, TMA_STORE, False)

    # epilogue: o = acc / l (0 for a row that saw no key), lse in natural log (-inf there)
    l_o = gl.convert_layout(l_i, o_rows)
    o = acc / gl.expand_dims(gl.where(l_o > 0, l_o, 1.0), 1)
    lse = gl.where(l_i > 0, (m_i + gl.log2(gl.where(l_i > 0, l_i, 1.0))) * LN2, float("-inf"))
    rows_s = row0 + gl.arange(0, BM, layout=gl.SliceLayout(1, s_layout))
    gl.store(lse_ptr + bh.to(gl.int64) * n_q + rows_s, lse, mask=rows_s < n_q)
    if TMA_STORE:
        q_tile.store(o.to(dtype))                                # Q is dead: its buffer stages O
        fence_async_shared()
        tma.async_copy_shared_to_global(o_desc, [q_row, 0], q_tile)
        tma.store_wait(0)
        _free_q(q_empty, PERSIST, TMA_STORE, True)
    else:
        rows = row0 + gl.arange(0, BM, layout=o_rows)
        cols = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, o_layout))
        ptrs = o_ptr + (bh.to(gl.int64) * n_q + gl.expand_dims(rows, 1)) * HEAD_D + gl.expand_dims(cols, 0)
        gl.store(ptrs, o.to(dtype), mask=gl.expand_dims(rows < n_q, 1))
    return n_tiles


@gluon.jit
def _consumer(descs, bufs, bars, dims, sched, o_ptr, lse_ptr, sc, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
              HEAD_D: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr, WINDOW: gl.constexpr,
              SOFT_CAP: gl.constexpr, LPT: gl.constexpr, WS: gl.constexpr, OVERLAP: gl.constexpr,
              TMA_STORE: gl.constexpr, PINGPONG: gl.constexpr, EARLY_K: gl.constexpr, PERSIST: gl.constexpr,
              WG: gl.constexpr, num_warps: gl.constexpr):
    """Computing warps: each of the program's work tiles in turn (one without PERSIST)."""
    start, end = work_range(sched, PERSIST)
    it = 0
    for w in range(start, end):
        m, bh = work_tile(sched, w, dims[4], LPT, PERSIST)
        it += _consumer_tile(descs, bufs, bars, dims, o_ptr, lse_ptr, sc, m, bh, it, (w - start) & 1, BLOCK_M,
                             BLOCK_N, HEAD_D, STAGES, CAUSAL, WINDOW, SOFT_CAP, WS, OVERLAP, TMA_STORE, PINGPONG,
                             EARLY_K, PERSIST, WG, num_warps)


@gluon.jit
def fa3_fwd_kernel(q_desc, k_desc, v_desc, o_desc, o_ptr, lse_ptr, tiles_ptr, indptr_ptr, qk_scale, cap_in,
                   cap_out, n_q, n_k, H, GROUP, num_m, window, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                   HEAD_D: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr, WINDOW: gl.constexpr,
                   SOFT_CAP: gl.constexpr, LPT: gl.constexpr, WS: gl.constexpr, OVERLAP: gl.constexpr,
                   TMA_STORE: gl.constexpr, SPLIT: gl.constexpr, PINGPONG: gl.constexpr, EARLY_K: gl.constexpr,
                   PERSIST: gl.constexpr, num_warps: gl.constexpr):
    """Shared memory (Q, STAGES K and V stages, their barriers), then the partitions. SPLIT (with
    WS): two 4-warp consumer partitions of BLOCK_M / 2 rows each, which run independently.
    PERSIST (with WS): one program per SM, each running its list tiles_ptr[indptr_ptr[p]:
    indptr_ptr[p + 1]] (`machine.schedule.persistent_tiles`)."""
    dtype: gl.constexpr = q_desc.dtype
    NQ: gl.constexpr = 2 if SPLIT else 1
    q_smem = gl.allocate_shared_memory(dtype, [NQ, BLOCK_M // NQ, HEAD_D], q_desc.layout)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], k_desc.layout)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_D], v_desc.layout)
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty_v = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())   # EARLY_K only
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())          # PERSIST only
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(turn.index(0), count=1)
    mbarrier.init(turn.index(1), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=NQ)                  # every consumer releases every stage
        mbarrier.init(empty_v.index(i), count=NQ)
    mbarrier.init(q_bar, count=1)
    mbarrier.init(q_empty, count=NQ)
    descs = (q_desc, k_desc, v_desc, o_desc)
    bufs = (q_smem, k_bufs, v_bufs)
    bars = (k_ready, v_ready, empty, q_bar, turn, empty_v, q_empty)
    dims = (n_q, n_k, H, GROUP, num_m, window)
    sched = (tiles_ptr, indptr_ptr)
    sc = (qk_scale, cap_in, cap_out)
    if WS:
        if SPLIT:
            gl.warp_specialize([(_consumer, (descs, bufs, bars, dims, sched, o_ptr, lse_ptr, sc, BLOCK_M, BLOCK_N,
                                             HEAD_D, STAGES, CAUSAL, WINDOW, SOFT_CAP, LPT, WS, OVERLAP, TMA_STORE,
                                             PINGPONG, EARLY_K, PERSIST, 0, 4)),
                                (_consumer, (descs, bufs, bars, dims, sched, o_ptr, lse_ptr, sc, BLOCK_M, BLOCK_N,
                                             HEAD_D, STAGES, CAUSAL, WINDOW, SOFT_CAP, LPT, WS, OVERLAP, TMA_STORE,
                                             PINGPONG, EARLY_K, PERSIST, 1, 4)),
                                (_producer, (descs, bufs, bars, dims, sched, BLOCK_M, BLOCK_N, STAGES, CAUSAL, WINDOW,
                                             LPT, EARLY_K, PERSIST))],
                               [4, 1], [240, 24])
        else:
            gl.warp_specialize([(_consumer, (descs, bufs, bars, dims, sched, o_ptr, lse_ptr, sc, BLOCK_M, BLOCK_N,
                                             HEAD_D, STAGES, CAUSAL, WINDOW, SOFT_CAP, LPT, WS, OVERLAP, TMA_STORE,
                                             False, EARLY_K, PERSIST, 0, num_warps)),
                                (_producer, (descs, bufs, bars, dims, sched, BLOCK_M, BLOCK_N, STAGES, CAUSAL, WINDOW,
                                             LPT, EARLY_K, PERSIST))],
                               [1], [24])
    else:
        _consumer(descs, bufs, bars, dims, sched, o_ptr, lse_ptr, sc, BLOCK_M, BLOCK_N, HEAD_D, STAGES, CAUSAL,
                  WINDOW, SOFT_CAP, LPT, WS, OVERLAP, TMA_STORE, False, False, False, 0, num_warps)
