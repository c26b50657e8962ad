"""Parts of the Gluon kernel in `kernels.gluon_fa3_kernel` (torch-free): where a program's tiles
are, the online-softmax step with the masks and the soft-cap, and the stage ring's loads and releases.

    work_range, work_tile    the work tiles a program runs: its list (persistent) or its program ids
    tile_coords(dims, ...)   a tile's rows where its TMA copies start, and the key tiles it visits:
                             how many, and which of them need no mask
    softmax_tile(s, ...)     one tile's logits (soft-capped, masked) folded into the running max and sum
    load_tile, load_kv       the TMA loads of a K and / or V tile into a stage, each arming its ready barrier
    release_stage            a consumer is done with a stage's K or V tile (early_k_release: apart)

Every partition of a program (the producer and each consumer) calls `tile_coords` and gets the same
first key tile and tile count, so the producer's ring and the consumers' loops agree on which
tile sits in which stage; only the unmasked range is per consumer (its own 64 or 128 rows).
The arithmetic is `kernels.variants.kv_block_range`'s, counted from the first tile loaded.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

__all__ = ["work_range", "work_tile", "tile_coords", "softmax_tile", "load_tile", "load_kv", "release_stage"]


@gluon.jit
def work_range(sched, PERSIST: gl.constexpr):
    """The work tiles this program runs, [start, end) of the schedule (`persistent`: its own list
    from `machine.schedule.persistent_tiles`; otherwise the one tile its program ids name)."""
    if PERSIST:
        start = gl.load(sched[1] + gl.program_id(0))
        end = gl.load(sched[1] + gl.program_id(0) + 1)
    else:
        start = 0
        end = 1
    return start, end


@gluon.jit
def work_tile(sched, w, num_m, LPT: gl.constexpr, PERSIST: gl.constexpr):
    """Work tile w's query block m and (batch, head) bh: read from the list (coded bh * num_m + m),
    or from the program ids (LPT: the longest blocks launch first)."""
    if PERSIST:
        t = gl.load(sched[0] + w)
        m = t % num_m
        bh = t // num_m
    elif LPT:
        bh = gl.program_id(0)
        m = num_m - 1 - gl.program_id(1)
    else:
        m = gl.program_id(0)
        bh = gl.program_id(1)
    return m, bh


@gluon.jit
def tile_coords(
    dims,
    m,
    bh,
    ROW_OFF: gl.constexpr,
    ROWS: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    CAUSAL: gl.constexpr,
    WINDOW: gl.constexpr,
):
    """For query block m of (batch, head) bh: the first rows of its Q block and of the keys it
    reads in the flattened (rows, d) views, the position key0 of that first key, how many key
    tiles the block visits from there, and the tiles [full_lo, full_hi) of those that need no
    mask for the ROWS rows from ROW_OFF on (a consumer's share of the block). Tiles are counted
    from key0: WINDOW starts the block at the first tile its first row's window reaches."""
    n_q, n_k, H, GROUP, num_m, window = dims
    kvh = (bh // H) * (H // GROUP) + (bh % H) // GROUP
    q_row = bh * n_q + m * BLOCK_M
    kv_row = kvh * n_k
    off = n_k - n_q  # bottom-right: row i sees keys <= i + off
    if CAUSAL:
        hi = gl.maximum(gl.minimum(n_k, (m + 1) * BLOCK_M + off), 0)
        n_full = gl.minimum(gl.maximum(m * BLOCK_M + ROW_OFF + off + 1, 0) // BLOCK_N, n_k // BLOCK_N)
    else:
        hi = n_k
        n_full = n_k // BLOCK_N
    n_tiles = gl.cdiv(hi, BLOCK_N)
    n_full = gl.minimum(n_full, n_tiles)
    full_lo = 0
    key0 = 0
    if WINDOW:  # row i sees keys > i + off - window
        lo = gl.maximum(m * BLOCK_M + off - window + 1, 0) // BLOCK_N
        last = m * BLOCK_M + ROW_OFF + ROWS - 1 + off  # this share's last row
        full_lo = gl.minimum(gl.cdiv(gl.maximum(last - window + 1, 0), BLOCK_N), n_tiles)
        n_full = gl.maximum(n_full, full_lo)  # lo <= full_lo <= n_full <= n_tiles
        key0 = lo * BLOCK_N
        kv_row = kv_row + key0
        n_tiles = n_tiles - lo
        full_lo = full_lo - lo
        n_full = n_full - lo
    return q_row, kv_row, key0, n_tiles, full_lo, n_full


@gluon.jit
def softmax_tile(
    s,
    m_i,
    l_i,
    sc,
    pos,
    col0,
    MASK: gl.constexpr,
    CAUSAL: gl.constexpr,
    WINDOW: gl.constexpr,
    SOFT_CAP: gl.constexpr,
):
    """One online-softmax step on raw logits s, for keys col0.. of rows pos[0]..: SOFT_CAP caps
    them, masked entries are -inf (MASK only), the running max m_i is in log2 units; returns
    p = 2^(s*qk_scale - m), the rescale factor alpha, the new m and l. sc = (qk_scale, cap_in,
    cap_out); pos = (row0, n_k, off, window), key positions counted from the first key loaded.
    A row that has seen no key keeps m = -inf, l = 0 and gives p = 0 (no NaN)."""
    qk_scale, cap_in, cap_out = sc
    if SOFT_CAP:  # c tanh(scale s / c) log2(e) = cap_out (1 - 2 / (1 + 2^(cap_in s))), base 2: qk_scale = 1
        s = cap_out - (2.0 * cap_out) / (1.0 + gl.exp2(s * cap_in))
    if MASK:
        row0, n_k, off, window = pos
        cols = col0 + gl.arange(0, s.shape[1], layout=gl.SliceLayout(0, s.type.layout))
        ok = gl.expand_dims(cols < n_k, 0)
        if CAUSAL:
            rows = row0 + gl.arange(0, s.shape[0], layout=gl.SliceLayout(1, s.type.layout))
            ok = ok & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows + off, 1))
            if WINDOW:
                ok = ok & (gl.expand_dims(cols, 0) > gl.expand_dims(rows + (off - window), 1))
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
def load_tile(descs, bufs, bars, which: gl.constexpr, row, st, pred):
    """The TMA load of the K (which = 1) or V (which = 2) tile at `row` into stage st, signalling
    that stage's ready barrier."""
    mbarrier.expect(bars[which - 1].index(st), descs[which].block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(
        descs[which], [row, 0], bars[which - 1].index(st), bufs[which].index(st), pred=pred
    )


@gluon.jit
def load_kv(descs, bufs, bars, row, st, pred):
    """TMA loads of the K and V tile at `row` into stage st, each signalling its ready barrier."""
    load_tile(descs, bufs, bars, 1, row, st, pred)
    load_tile(descs, bufs, bars, 2, row, st, pred)


@gluon.jit
def release_stage(bars, st, V: gl.constexpr, WS: gl.constexpr, EARLY_K: gl.constexpr):
    """This consumer is done with stage st's K (V = False) or V tile: EARLY_K frees each on its own
    barrier; otherwise one barrier frees both once V is done (no producer: nothing to free)."""
    if WS:
        if EARLY_K and V:
            mbarrier.arrive(bars[5].index(st), count=1)  # the V stage, apart
        elif EARLY_K or V:
            mbarrier.arrive(bars[2].index(st), count=1)  # the K stage, or K and V together
