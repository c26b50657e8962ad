"""The two kernels of the plan-driven persistent decode (`kernels.scheduled.ScheduledDecoder`
launches them) and the check that a plan's work items fit the batch they will read.

Kernel 1, `scheduled_kernel`, grid = max_ctas programs (fixed): program c does its CTA's items
j = 0 .. count[c] - 1 in order. Item (request, kv_head, q_start, q_end, kv_start, kv_end): for
decode (l_qo = 1) the packed query rows q_start:q_end of KV head h are query heads h * group + r;
their partial state (o, lse) over KV positions kv_start:kv_end of the request, read from the
paged pool (NHD, `kernels.paged`'s addressing and gather loop `paged_span`: token pos is in page
kv_indices[kv_indptr[request] + pos // page_size], slot pos % page_size), goes to the fixed slot
c * max_items + j of the partial-state buffers, or, when the item is its output's only one
(direct[slot] = 1: FlashInfer's direct write), straight to the output (o, lse) with no merge.
Kernel 2, `merge_items_kernel`, a fixed grid of persistent programs over the num_multi outputs
of two or more items (their indices in `multi`): output g folds the partial states in slots
merge_slots[merge_indptr[g]:merge_indptr[g + 1]] with ⊕ and writes its query heads' o and lse.
With FUSED, kernel 1 does that merge itself (`merge_output`, the same code): after an item's
partial state is stored (a CTA barrier, then an acq_rel atomic add on its output's DONE counter),
the item that finds every other item of its output done merges it, reading the partial states
from L2 (.cg: other SMs wrote them), and resets the counter. `merge_output` takes MERGE_S slots
at a time (their loads in flight together, the running maximum updated once per group), always in the same order (kv_start ascending: `Plan.merge`), so the result is
bitwise reproducible. An output of one item is that item's state unchanged, so the per-request
plan gives the same bits as `paged_decode(splits=1)` with the same block size.

`check_fit` refuses, on the host, a workspace whose items this batch cannot serve (the kernels
trust their items: a request or KV head past the batch would read out of bounds).

This file is long because the two kernels share the work-item layout and `merge_output`, the one
merge that both the separate and the fused launch run, so that both give the same bits; `check_fit`
and `routes` read that layout on the host.
"""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from attnlab.machine.schedule import Workspace
from attnlab.kernels.common import finish
from attnlab.kernels.paged import paged_span

__all__ = [
    "scheduled_kernel",
    "merge_items_kernel",
    "merge_output",
    "check_fit",
    "routes",
    "merge_slots",
    "MERGE_ELEMENTS",
    "MERGE_WARPS",
]


#: Elements of partial state (slots x packed rows x head dim) the merge loads at once, in flight
#: together: 64 fp32 registers a thread for its 4 warps (16 slots at group 4, d = 128), so that at
#: group 4 the head dim spans a warp's lanes, the rows its warps, and the slots stay in each
#: thread's registers: the sum over slots needs no shared memory.
MERGE_ELEMENTS = 8192
MERGE_WARPS = 4


def merge_slots(block_g: int, block_d: int) -> int:
    """The merge's slots per step for these tiles: a power of two, 1 to 64.

    >>> merge_slots(4, 128), merge_slots(8, 128), merge_slots(64, 256)
    (16, 8, 1)
    """
    return max(1, min(64, MERGE_ELEMENTS // (block_g * block_d)))


def routes(ws: Workspace):
    """(direct, multi, owner) of a workspace: direct[slot] = 1 where the slot is its output's only
    item (kernel 1 writes the answer itself), multi the outputs of two or more items (kernel 2
    merges only those), owner[slot] the output a slot's item belongs to (-1: no item)."""
    per = np.diff(ws.merge_indptr)
    direct = np.zeros(ws.max_ctas * ws.max_items, np.int32)
    direct[ws.merge_slots[ws.merge_indptr[:-1][per == 1]]] = 1
    owner = np.full(ws.max_ctas * ws.max_items, -1, np.int32)
    owner[ws.merge_slots[: int(ws.merge_indptr[-1])]] = np.repeat(np.arange(per.size, dtype=np.int32), per)
    return direct, np.flatnonzero(per > 1).astype(np.int32), owner


@triton.jit
def scheduled_kernel(
    Q,
    K,
    V,
    OP,
    LP,
    O,
    LSE,
    INDPTR,
    INDICES,
    ITEMS,
    COUNT,
    DIRECT,
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
    s_ob,
    s_oh,
    s_lb,
    MAX_ITEMS,
    GROUP,
    HEAD_DIM,
    OWNER,
    DONE,
    M_INDPTR,
    M_SLOTS,
    M_OUT,
    PAGE_SIZE: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    D_CONTIG: tl.constexpr,
    UPCAST: tl.constexpr,
    IEEE: tl.constexpr,
    PREFETCH: tl.constexpr,
    FUSED: tl.constexpr,
    MERGE_G: tl.constexpr,
    MERGE_S: tl.constexpr,
):
    cta = tl.program_id(0)
    n_items = tl.load(COUNT + cta)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    if D_CONTIG:  # unit stride along d: vector loads
        dq, dk, dv = offs_d, offs_d, offs_d
    else:
        dq, dk, dv = offs_d * s_qd, offs_d * s_kd, offs_d * s_vd
    for j in range(0, n_items):  # this CTA's items, in the plan's order
        slot = cta * MAX_ITEMS + j
        item = ITEMS + slot * 6  # (request, kv_head, q_start, q_end, kv_start, kv_end)
        b = tl.load(item).to(tl.int64)
        hk = tl.load(item + 1)
        q0 = tl.load(item + 2)
        q1 = tl.load(item + 3)
        start = tl.load(item + 4)
        end = tl.load(item + 5)
        g_ok = offs_g < q1 - q0
        heads = hk * GROUP + q0 + offs_g  # packed row r of KV head hk: query head hk*g + r
        q = tl.load(
            Q + b * s_qb + heads[:, None] * s_qh + dq[None, :], mask=g_ok[:, None] & d_ok[None, :], other=0.0
        )
        if UPCAST:
            q = q.to(tl.float32)
        first = tl.load(INDPTR + b)
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
        )
        o, lse = finish(acc, m_i, l_i)
        if tl.load(DIRECT + slot) != 0:  # its output's only item: the answer itself
            tl.store(
                O + b * s_ob + heads[:, None] * s_oh + offs_d[None, :],
                o.to(O.dtype.element_ty),
                mask=g_ok[:, None] & d_ok[None, :],
            )
            tl.store(LSE + b * s_lb + heads, lse, mask=g_ok)
        else:
            row = slot.to(tl.int64) * GROUP + offs_g  # the slot's partial state, one row per packed row
            tl.store(OP + row[:, None] * HEAD_DIM + offs_d[None, :], o, mask=g_ok[:, None] & d_ok[None, :])
            tl.store(LP + row, lse, mask=g_ok)
            if FUSED:  # the output's last item to finish merges it
                g = tl.load(OWNER + slot)
                tl.debug_barrier()  # every thread's partial state stored ...
                done = tl.atomic_add(DONE + g, 1, sem="acq_rel", scope="gpu")  # ... before the count
                if done == tl.load(M_INDPTR + g + 1) - tl.load(M_INDPTR + g) - 1:
                    merge_output(
                        g,
                        OP,
                        LP,
                        O,
                        LSE,
                        M_INDPTR,
                        M_SLOTS,
                        M_OUT,
                        s_ob,
                        s_oh,
                        s_lb,
                        GROUP,
                        HEAD_DIM,
                        MERGE_G,
                        BLOCK_D,
                        MERGE_S,
                    )
                    tl.store(DONE + g, 0)  # ready for the next replay


@triton.jit
def merge_output(
    g,
    OP,
    LP,
    O,
    LSE,
    M_INDPTR,
    M_SLOTS,
    M_OUT,
    s_ob,
    s_oh,
    s_lb,
    GROUP,
    HEAD_DIM,
    BLOCK_G: tl.constexpr,
    BLOCK_D: tl.constexpr,
    MERGE_S: tl.constexpr,
):
    """Output g: ⊕ of the partial states in its slots, in the plan's order, MERGE_S at a time."""
    offs_s = tl.arange(0, MERGE_S)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    a = tl.load(M_INDPTR + g)
    e = tl.load(M_INDPTR + g + 1)
    out = M_OUT + g * 4  # (request, kv_head, q_start, q_end)
    b = tl.load(out).to(tl.int64)
    hk = tl.load(out + 1)
    q0 = tl.load(out + 2)
    q1 = tl.load(out + 3)
    g_ok = offs_g < q1 - q0
    m = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    w_sum = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    for i in range(a, e, MERGE_S):  # ⊕ in the plan's order, MERGE_S slots at a time
        s_ok = i + offs_s < e
        slot = tl.load(M_SLOTS + i + offs_s, mask=s_ok, other=0).to(tl.int64)
        rows = slot[:, None] * GROUP + offs_g[None, :]  # (S, G)
        ok = s_ok[:, None] & g_ok[None, :]
        lse_i = tl.load(
            LP + rows, mask=ok, other=float("-inf"), cache_modifier=".cg"
        )  # L2: other SMs' stores
        o_i = tl.load(
            OP + rows[:, :, None] * HEAD_DIM + offs_d[None, None, :],
            mask=ok[:, :, None] & d_ok[None, None, :],
            other=0.0,
            cache_modifier=".cg",
        )  # (S, G, D)
        m_new = tl.maximum(m, tl.max(lse_i, 0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)  # 0 for the first group
        w = tl.exp(lse_i - m_safe[None, :])
        acc = acc * alpha[:, None] + tl.sum(o_i * w[:, :, None], 0)
        w_sum = w_sum * alpha + tl.sum(w, 0)
        m = m_new
    safe = tl.where(w_sum > 0, w_sum, 1.0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    o = acc / safe[:, None]
    heads = hk * GROUP + q0 + offs_g
    tl.store(
        O + b * s_ob + heads[:, None] * s_oh + offs_d[None, :],
        o.to(O.dtype.element_ty),
        mask=g_ok[:, None] & d_ok[None, :],
    )
    tl.store(LSE + b * s_lb + heads, tl.where(w_sum > 0, m_safe + tl.log(safe), float("-inf")), mask=g_ok)


@triton.jit
def merge_items_kernel(
    OP,
    LP,
    O,
    LSE,
    M_INDPTR,
    M_SLOTS,
    M_OUT,
    MULTI,
    NUM_MULTI,
    s_ob,
    s_oh,
    s_lb,
    GROUP,
    HEAD_DIM,
    BLOCK_G: tl.constexpr,
    BLOCK_D: tl.constexpr,
    MERGE_S: tl.constexpr,
):
    for t in range(tl.program_id(0), tl.load(NUM_MULTI), tl.num_programs(0)):  # persistent
        merge_output(
            tl.load(MULTI + t),
            OP,
            LP,
            O,
            LSE,
            M_INDPTR,
            M_SLOTS,
            M_OUT,
            s_ob,
            s_oh,
            s_lb,
            GROUP,
            HEAD_DIM,
            BLOCK_G,
            BLOCK_D,
            MERGE_S,
        )


def check_fit(ws: Workspace, batch: int, kv_heads: int, group: int, lengths) -> None:
    """Refuse a workspace whose items this batch cannot serve: a request past the batch, a KV head
    past kv_heads, query rows past the group (decode: l_qo = 1); with `lengths` (a host page table),
    chunks past a request's end or outputs that do not cover every query head over its whole KV."""
    it = ws.items[ws.valid]
    if not it.size:
        raise ValueError("the workspace holds no work items; valid: a plan of this batch")
    for col, name, limit in ((0, "request", batch), (1, "kv_head", kv_heads)):
        if it[:, col].max() >= limit:
            raise ValueError(
                f"the plan's {name} reaches {int(it[:, col].max())}; valid: {name} < {limit} "
                f"(this batch has batch={batch}, kv_heads={kv_heads})"
            )
    if it[:, 3].max() > group:
        raise ValueError(
            f"the plan's packed query rows reach q_end={int(it[:, 3].max())}; valid: q_end <= "
            f"group={group} (decode, l_qo = 1: one packed row per query head of the group)"
        )
    if lengths is None:
        return
    if (it[:, 5] > lengths[it[:, 0]]).any():
        bad = it[np.argmax(it[:, 5] > lengths[it[:, 0]])]
        raise ValueError(
            f"the plan reads KV positions up to {bad[5]} of request {bad[0]}, which has "
            f"{lengths[bad[0]]} tokens: the plan was made for other lengths"
        )
    n = int(ws.merge_indptr[-1])
    flat = ws.items.reshape(-1, 6)[ws.merge_slots[:n]]
    out = ws.merge_out[: ws.num_outputs]
    covered = np.add.reduceat(flat[:, 5] - flat[:, 4], ws.merge_indptr[: ws.num_outputs])
    rows = np.bincount(out[:, 0], weights=out[:, 3] - out[:, 2], minlength=batch)
    if (covered != lengths[out[:, 0]]).any() or (rows != kv_heads * group).any():
        raise ValueError(
            "the plan does not cover every query head of every request over its whole KV; "
            "valid: a plan made from this batch's lengths, kv_heads and group"
        )
