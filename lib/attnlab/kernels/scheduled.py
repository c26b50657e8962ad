"""Persistent decode driven by a plan (lecture §5.6): one CUDA graph, captured once, replayed while
the batch's lengths change.

`attnlab.machine.schedule` decides on the CPU who computes what (`plan_per_request`, `plan_fixed_split`,
`plan_balanced`) and packs the decision into fixed shapes (`fixed_size_workspace`). Here the GPU
reads that workspace.

Kernel 1 does the plan's work items, each CTA its own in order, into fixed partial-state slots,
or, for an output of one item, straight into the output; kernel 2, persistent, merges only the
outputs of two or more items, each in the plan's fixed order (bitwise reproducible). With
`fused_merge=True` there is one launch: each item of a merged output counts itself done with an
atomic add after storing its state, and the last one merges the output (same fixed order, fewer
slots per step; the counter is reset by that item for the next replay). It is off by default: on
the H200 (notebook 05's long-tailed batches) it pays only at batches 1-2 (docs/gpu-notes.md has
the numbers). Both kernels, and the item layout they read, are in `kernels.scheduled_kernels`.

`ScheduledDecoder` owns every buffer the two launches read or write (q, the page table, the
workspace, the partial states, the output), sized by maxima fixed at construction; `load` copies
a new batch into them (a batch or plan that does not fit is refused by name), `run` launches,
`capture` records `run` in a torch.cuda.CUDAGraph and `replay` replays it. On a CPU (the Triton
interpreter) `capture` and `replay` raise RuntimeError saying why; `run` is the eager stand-in.
`scheduled_decode` is the one-call form for tests and one-off use.

Under TRITON_INTERPRET=1 the dot products run in float32 and a bf16 output is rounded by torch,
as in `kernels.paged`. What it leaves out on purpose: prefill items (l_qo > 1), the HND layout
(pass a permuted view), fp8 KV.

The decoder's launch choices (block_n) come from `kernels.tuning.auto_block_n`.

This file is long because `ScheduledDecoder` owns every buffer its two launches read and write, and
`load`, `run`, `capture` and `replay` all act on those static buffers (a CUDA graph replays fixed
addresses); the kernels are in `kernels.scheduled_kernels`.
"""

from __future__ import annotations

import numpy as np
import torch
import triton

from attnlab.validate import as_bool, as_int
from attnlab.machine.schedule import Plan, Workspace, fixed_size_workspace
from attnlab.kernels import interpreting
from attnlab.kernels.common import DTYPES, LOG2E, as_block, as_scale, as_stages, as_warps, check_paged
from attnlab.kernels.scheduled_kernels import (
    MERGE_WARPS,
    check_fit,
    merge_items_kernel,
    merge_slots,
    routes,
    scheduled_kernel,
)
from attnlab.kernels.tuning import auto_block_n

__all__ = ["ScheduledDecoder", "scheduled_decode", "merge_slots"]


class ScheduledDecoder:
    """Static buffers and the two launches of the plan-driven decode; one CUDA graph for all batches.

    max_batch requests of q_heads query heads over kv_heads KV heads of head_dim; a workspace of
    max_ctas x max_items items and max_outputs merge outputs (default max_batch x q_heads: any
    decode plan's query tiles fit); page tables naming up to max_pages pages of page_size tokens
    (the pool passed to `run` holds at least max_pages pages). dtype is q's and the pool's.

        dec = ScheduledDecoder(256, 32, 8, 128, 132, 32, pages, 16, torch.bfloat16, "cuda")
        dec.load(plan, q, kv_indptr, kv_indices, kv_last_page_len)   # first batch
        dec.capture(k_pool, v_pool)                                  # records run() once
        dec.load(plan2, q2, ...); o = dec.replay()                   # later batches: contents only

    `run`/`replay` return o (batch, q_heads, head_dim) in dtype, a view of the static output (the
    next load + run overwrites it); `lse` is the matching (batch, q_heads) float32 view, natural log.
    """

    def __init__(
        self,
        max_batch: int,
        q_heads: int,
        kv_heads: int,
        head_dim: int,
        max_ctas: int,
        max_items: int,
        max_pages: int,
        page_size: int,
        dtype=torch.bfloat16,
        device="cuda",
        *,
        max_outputs: int | None = None,
        scale: float | None = None,
        block_n: int | None = None,
        num_warps: int | None = None,
        num_stages: int | None = None,
        prefetch: bool | None = None,
        fused_merge: bool = False,
    ):
        # no prefetch by default: on the H200 it moves the decoder's time by 0-3 % at most (its launch
        # run, data/measurements/h200-2026-12-01-scheduled-launch.json)
        self.prefetch = False if prefetch is None else as_bool("prefetch", prefetch)
        self.fused_merge = as_bool("fused_merge", fused_merge)
        self.max_batch = as_int("max_batch", max_batch, 1, None)
        self.q_heads = as_int("q_heads", q_heads, 1, None)
        self.kv_heads = as_int("kv_heads", kv_heads, 1, None)
        if self.q_heads % self.kv_heads:
            raise ValueError(f"q_heads={q_heads} must be a multiple of kv_heads={kv_heads}")
        self.head_dim = as_int("head_dim", head_dim, 1, 256)
        self.max_ctas = as_int("max_ctas", max_ctas, 1, None)
        self.max_items = as_int("max_items", max_items, 1, None)
        self.max_pages = as_int("max_pages", max_pages, 1, None)
        self.page_size = as_int("page_size", page_size, 1, None)
        self.max_outputs = (
            self.max_batch * self.q_heads
            if max_outputs is None
            else as_int("max_outputs", max_outputs, 1, None)
        )
        if dtype not in DTYPES:
            raise TypeError(f"dtype={dtype} is not supported; valid: float16, bfloat16, float32")
        block_n, num_warps, num_stages = (
            as_block("block_n", block_n),
            as_warps(num_warps),
            as_stages(num_stages),
        )
        self.dtype, self.group = dtype, self.q_heads // self.kv_heads
        self.scale = as_scale(scale, self.head_dim)
        dev = torch.device(device)
        i32, f32 = dict(dtype=torch.int32, device=dev), dict(dtype=torch.float32, device=dev)
        B, hq, d, slots = self.max_batch, self.q_heads, self.head_dim, self.max_ctas * self.max_items
        self.q = torch.zeros((B, hq, d), dtype=dtype, device=dev)
        self.kv_indptr = torch.zeros(B + 1, **i32)
        self.kv_indices = torch.zeros(self.max_pages, **i32)
        self.kv_last_page_len = torch.ones(B, **i32)
        # the plan's arrays, views of one int32 buffer that `load` fills with one copy
        shapes = {
            "items": (self.max_ctas, self.max_items, 6),
            "count": (self.max_ctas,),
            "merge_indptr": (self.max_outputs + 1,),
            "merge_slots": (slots,),
            "merge_out": (self.max_outputs, 4),
            "direct": (slots,),  # 1: the slot is its output's only item
            "multi": (self.max_outputs,),  # the outputs of two or more items
            "num_multi": (1,),
            "owner": (slots,),  # the output of the slot's item (fused merge)
        }
        sizes = {k: int(np.prod(v)) for k, v in shapes.items()}
        self._plan_buf = torch.zeros(sum(sizes.values()), **i32)  # no items until a load
        self._plan_at, at = {}, 0
        for k, shape in shapes.items():
            self._plan_at[k] = slice(at, at + sizes[k])
            setattr(self, k, self._plan_buf[at : at + sizes[k]].view(shape))
            at += sizes[k]
        self.done = torch.zeros(self.max_outputs, **i32)  # fused merge: items of each output finished
        self.o_partial = torch.zeros((slots * self.group, d), **f32)  # slot s, packed row r: s*group + r
        self.lse_partial = torch.zeros(slots * self.group, **f32)
        self.out = torch.zeros((B, hq, d), dtype=dtype, device=dev)
        self.lse_out = torch.zeros((B, hq), **f32)
        self.device = self.out.device
        self.interp = interpreting()
        # the interpreter casts fp32 to bf16 by truncation (a GPU rounds): there the merge writes fp32
        self._dst = (
            self.out if not (self.interp and dtype == torch.bfloat16) else torch.zeros((B, hq, d), **f32)
        )
        # the pool's shape for `load`'s check_paged, no memory
        self._pool_shape = torch.empty(1, dtype=dtype, device=dev).expand(
            self.max_pages, self.page_size, self.kv_heads, d
        )
        self.block_n = block_n or auto_block_n(self.max_ctas, dev)
        self.merge_s = (
            8
            if self.interp
            else merge_slots(
                triton.next_power_of_2(self.group), max(16, triton.next_power_of_2(self.head_dim))
            )
        )
        self._kw = {} if self.interp else {"num_warps": num_warps or 4, "num_stages": num_stages or 2}
        # the fused merge runs in kernel 1's warps: its slots per step scaled to keep MERGE_ELEMENTS a warp
        self.merge_s_fused = max(1, self.merge_s * self._kw.get("num_warps", MERGE_WARPS) // MERGE_WARPS)
        self.batch, self.workspace, self.graph, self._pools = 0, None, None, None

    def load(self, plan, q, kv_indptr, kv_indices, kv_last_page_len) -> None:
        """Copy a batch into the static buffers: `plan` a schedule.Plan (packed here with
        fixed_size_workspace at this decoder's maxima) or a Workspace of exactly these maxima;
        q (batch, q_heads, head_dim) and the int32 page table on this decoder's device. Checks
        the table's contents and that the plan covers it when they are on the CPU."""
        if isinstance(kv_indices, torch.Tensor) and kv_indices.numel() > self.max_pages:
            raise ValueError(
                f"kv_indices has {kv_indices.numel()} pages; valid: <= max_pages={self.max_pages}"
            )
        try:  # the pool as this decoder sees it: max_pages pages
            B, hq, d, _, _ = check_paged(
                q, self._pool_shape, self._pool_shape, kv_indptr, kv_indices, kv_last_page_len, self.page_size
            )
        except ValueError as e:
            raise ValueError(f"{e} (the pool: this decoder's max_pages={self.max_pages})") from None
        if q.device != self.device:
            raise ValueError(f"q is on {q.device}; this decoder's buffers are on {self.device}")
        if hq != self.q_heads:
            raise ValueError(f"q has {hq} heads; this decoder was made for q_heads={self.q_heads}")
        if B > self.max_batch:
            raise ValueError(f"q holds batch={B} requests; valid: batch <= max_batch={self.max_batch}")
        if isinstance(plan, Plan):
            ws = fixed_size_workspace(plan, self.max_ctas, self.max_items, self.max_outputs)
        elif isinstance(plan, Workspace):
            ws = plan
            want = (self.max_ctas, self.max_items, self.max_outputs)
            if (ws.max_ctas, ws.max_items, ws.max_outputs) != want:
                raise ValueError(
                    f"the workspace has (max_ctas, max_items, max_outputs) = "
                    f"{(ws.max_ctas, ws.max_items, ws.max_outputs)}; this decoder's are {want}"
                )
        else:
            raise TypeError(f"plan must be a schedule.Plan or schedule.Workspace, got {type(plan).__name__}")
        lengths = None
        if kv_indptr.device.type == "cpu":
            indptr = kv_indptr.numpy().astype(np.int64)
            lengths = (np.diff(indptr) - 1) * self.page_size + kv_last_page_len.numpy()
        check_fit(ws, B, self.kv_heads, self.group, lengths)
        ws.check_decode(self.group)  # a prefill plan's rows can look like a larger group
        self.q[:B].copy_(q)
        self.kv_indptr[: B + 1].copy_(kv_indptr)
        self.kv_indices[: kv_indices.numel()].copy_(kv_indices)
        self.kv_last_page_len[:B].copy_(kv_last_page_len)
        direct, multi, owner = routes(ws)
        host = np.zeros(self._plan_buf.numel(), np.int32)
        for k, a in (
            ("items", ws.items),
            ("count", ws.count),
            ("merge_indptr", ws.merge_indptr),
            ("merge_slots", ws.merge_slots),
            ("merge_out", ws.merge_out),
            ("direct", direct),
            ("multi", multi),
            ("num_multi", [multi.size]),
            ("owner", owner),
        ):
            at = self._plan_at[k]
            host[at.start : at.start + np.size(a)] = np.ravel(a)
        self._plan_buf.copy_(torch.from_numpy(host))  # one copy to the device
        self.done.zero_()  # a run cut short leaves no count
        self.batch, self.workspace = B, ws

    def _check_pools(self, k_pool, v_pool):
        for name, t in (("k_pool", k_pool), ("v_pool", v_pool)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            want = (self.page_size, self.kv_heads, self.head_dim)
            if t.dim() != 4 or tuple(t.shape[1:]) != want or t.shape[0] < self.max_pages:
                raise ValueError(
                    f"{name} has shape {tuple(t.shape)}; valid: NHD (pages >= max_pages="
                    f"{self.max_pages}, page_size, kv_heads, head_dim) = (>= {self.max_pages}, "
                    f"{', '.join(map(str, want))})"
                )
            if t.dtype != self.dtype or t.device != self.device:
                raise ValueError(f"{name} is {t.dtype} on {t.device}; valid: {self.dtype} on {self.device}")

    def _launch(self, k_pool, v_pool):
        interp, fp32 = self.interp, self.dtype == torch.float32
        block_d = max(16, triton.next_power_of_2(self.head_dim))
        block_g = max(16, triton.next_power_of_2(self.group))
        q = self.q
        dst = self._dst
        merge_g = triton.next_power_of_2(self.group)
        scheduled_kernel[(self.max_ctas,)](
            q,
            k_pool,
            v_pool,
            self.o_partial,
            self.lse_partial,
            dst,
            self.lse_out,
            self.kv_indptr,
            self.kv_indices,
            self.items,
            self.count,
            self.direct,
            self.scale * LOG2E,
            *q.stride(),
            *k_pool.stride(),
            *v_pool.stride(),
            dst.stride(0),
            dst.stride(1),
            self.lse_out.stride(0),
            self.max_items,
            self.group,
            self.head_dim,
            self.owner,
            self.done,
            self.merge_indptr,
            self.merge_slots,
            self.merge_out,
            PAGE_SIZE=self.page_size,
            BLOCK_G=block_g,
            BLOCK_N=self.block_n,
            BLOCK_D=block_d,
            D_CONTIG=q.stride(2) == k_pool.stride(3) == v_pool.stride(3) == 1,
            UPCAST=interp or fp32,
            IEEE=interp or fp32,
            PREFETCH=self.prefetch,
            FUSED=self.fused_merge,
            MERGE_G=merge_g,
            MERGE_S=self.merge_s_fused,
            **self._kw,
        )
        if not self.fused_merge:
            merge_items_kernel[(min(self.max_outputs, self.max_ctas),)](
                self.o_partial,
                self.lse_partial,
                dst,
                self.lse_out,
                self.merge_indptr,
                self.merge_slots,
                self.merge_out,
                self.multi,
                self.num_multi,
                dst.stride(0),
                dst.stride(1),
                self.lse_out.stride(0),
                self.group,
                self.head_dim,
                BLOCK_G=merge_g,
                BLOCK_D=block_d,
                MERGE_S=self.merge_s,
                **({} if interp else {"num_warps": MERGE_WARPS}),
            )
        if dst is not self.out:
            self.out.copy_(dst)

    def _result(self):
        if not self.batch:
            raise RuntimeError(
                "nothing loaded: call load(plan, q, kv_indptr, kv_indices, kv_last_page_len) first"
            )
        return self.out[: self.batch]

    @property
    def lse(self):
        """(batch, q_heads) float32, natural log, of the last run or replay."""
        return self.lse_out[: self.batch]

    def run(self, k_pool, v_pool):
        """Launch both kernels eagerly on the loaded batch; o (batch, q_heads, head_dim)."""
        self._result()
        self._check_pools(k_pool, v_pool)
        self._launch(k_pool, v_pool)
        return self._result()

    def capture(self, k_pool, v_pool):
        """Record run() on these pools in a torch.cuda.CUDAGraph (warm-up run first, which also
        compiles); the graph keeps the pools' addresses, so they must stay allocated. CUDA only."""
        if self.device.type != "cuda" or self.interp:
            raise RuntimeError(
                "CUDA graphs need a CUDA device and compiled kernels (not TRITON_INTERPRET=1); "
                f"this decoder is on {self.device}{' under the interpreter' if self.interp else ''}: "
                "call run(k_pool, v_pool), the eager equivalent, instead"
            )
        self.run(k_pool, v_pool)
        cur, side = torch.cuda.current_stream(), torch.cuda.Stream()
        side.wait_stream(cur)
        with torch.cuda.stream(side):
            self._launch(k_pool, v_pool)
        cur.wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._launch(k_pool, v_pool)
        self.graph, self._pools = graph, (k_pool, v_pool)
        return graph

    def replay(self):
        """Replay the captured graph on the currently loaded batch; o (batch, q_heads, head_dim)."""
        if self.graph is None:
            raise RuntimeError(
                "no graph captured: call capture(k_pool, v_pool) first (CUDA only; on a CPU "
                "run(k_pool, v_pool) is the eager equivalent)"
            )
        self._result()
        self.graph.replay()
        return self._result()


def scheduled_decode(
    q,
    k_pool,
    v_pool,
    kv_indptr,
    kv_indices,
    kv_last_page_len,
    plan_or_workspace,
    *,
    page_size: int,
    scale: float | None = None,
    return_lse: bool = False,
    fused_merge: bool = False,
):
    """Decode attention over a paged KV cache (FlashInfer's arrays, NHD pool, any strides), computed
    as the plan says: a schedule.Plan of this batch (packed at its own size: plan.num_ctas CTAs,
    the busiest CTA's items, its outputs) or a schedule.Workspace. Returns o (batch, q_heads, d) in
    q's dtype, or (o, lse) with lse float32 (batch, q_heads), natural log. fused_merge: as
    ScheduledDecoder's (one launch)."""
    B, hq, d, hkv, page_size = check_paged(
        q, k_pool, v_pool, kv_indptr, kv_indices, kv_last_page_len, page_size
    )
    return_lse = as_bool("return_lse", return_lse)
    if isinstance(plan_or_workspace, Plan):
        p = plan_or_workspace
        ws = fixed_size_workspace(p, p.num_ctas, int(np.bincount(p.cta).max()), p.num_outputs)
    elif isinstance(plan_or_workspace, Workspace):
        ws = plan_or_workspace
    else:
        raise TypeError(
            f"plan_or_workspace must be a schedule.Plan or schedule.Workspace, "
            f"got {type(plan_or_workspace).__name__}"
        )
    dec = ScheduledDecoder(
        B,
        hq,
        hkv,
        d,
        ws.max_ctas,
        ws.max_items,
        k_pool.shape[0],
        page_size,
        q.dtype,
        q.device,
        max_outputs=ws.max_outputs,
        scale=scale,
        fused_merge=fused_merge,
    )
    dec.load(ws, q, kv_indptr, kv_indices, kv_last_page_len)
    o = dec.run(k_pool, v_pool)
    return (o, dec.lse) if return_lse else o
