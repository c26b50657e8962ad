"""Work partitioning for batched attention (lecture §5.6): who computes which piece of which
request on which CTA, and how the pieces are merged back.

Three plans over a batch of (l_qo, l_kv) requests, each KV head its own work (`plans`):

    plan_per_request   one work item per (request, KV head, query tile): the whole KV at once
    plan_fixed_split   the KV cut into fixed chunks (1024 tokens), items in arrival order
    plan_balanced      FlashInfer's Algorithm 1: a maximum chunk L_kv from the total work,
                       chunks of at most L_kv, longest first, each to the least-loaded CTA

A request's query rows are packed with its GQA group (l_qo x group rows, as FlashInfer packs the
query heads that share a KV head) and cut into tiles of T_q rows (`query_tile`: from the batch's
integer average packed length, or, under CUDA graphs, the worst case the captured batch allows). An item costs
alpha x (its packed query rows) + beta x (its KV chunk's length), FlashInfer's Hopper cost
2 qo_len + kv_len. Every plan carries its merge plan: for each output tile, the items whose partial
states (o, lse) fold with ⊕, in a fixed order, so the result is bitwise reproducible.

The package by idea:

    batch       the lengths read into int64 columns, each bad pair refused by its index
    tiles       the query tile rule, per batch or for a CUDA graph
    pieces      the batch checked and cut into pieces with numpy (L_kv)
    lpt         the assignment: `heap_schedule`, Algorithm 1 as the short heap loop a learner
                reads, and `list_schedule`, the fast path that gives exactly its assignment a
                round of up to one item per CTA at a time (its docstring proves it)
    plans       Plan, WorkItem, the three planners and `run_plan`
    holistic    FlashInfer's persistent two-tile-class plan (`TwoStageHolisticPlan`): prefill-like
                requests in 128-row query tiles, decode steps in 16-row tiles, in one plan
    workspace   a plan in fixed shapes for a CUDA-graph-replayed persistent kernel

A fourth plan, `plan_holistic`, gives prefill-like and decode requests query tiles of their own
sizes in one plan, as FlashInfer's persistent kernel does.

What this leaves out on purpose: the KV tile search FlashInfer runs, and kernel launch costs; plan times use `hardware.sm_share_time`'s
"SMs share the bandwidth" model for memory-bound decode.
"""

from __future__ import annotations

from attnlab.machine.schedule.lpt import heap_schedule, list_schedule
from attnlab.machine.schedule.tiles import TILE_MODES, query_tile
from attnlab.machine.schedule.plans import (
    KV_TILES,
    PLAN_COLUMNS,
    Plan,
    WorkItem,
    plan_balanced,
    plan_fixed_split,
    plan_per_request,
    run_plan,
)
from attnlab.machine.schedule.workspace import Workspace, fixed_size_workspace
from attnlab.machine.schedule.holistic import HOLISTIC_TILES, HolisticPlan, holistic_chunk, plan_holistic

__all__ = [
    "query_tile",
    "TILE_MODES",
    "plan_holistic",
    "HolisticPlan",
    "holistic_chunk",
    "HOLISTIC_TILES",
    "KV_TILES",
    "WorkItem",
    "Plan",
    "PLAN_COLUMNS",
    "plan_per_request",
    "plan_fixed_split",
    "plan_balanced",
    "run_plan",
    "Workspace",
    "fixed_size_workspace",
    "heap_schedule",
    "list_schedule",
]
