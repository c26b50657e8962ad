"""A plan packed into fixed shapes (lecture §5.6, CUDA graphs): the items per CTA and the merge
plan as int32 arrays whose shapes depend on the workspace's limits only, so a new batch changes
their contents and a captured CUDA graph replays unchanged."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.validate import as_int, check_bytes, fields_equal
from attnlab.machine.schedule.pieces import MAX_CTAS, MAX_ITEMS
from attnlab.machine.schedule.plans import Plan

__all__ = ["Workspace", "fixed_size_workspace"]


@dataclass(frozen=True, eq=False)
class Workspace:
    """A plan packed into fixed shapes, as a CUDA-graph-replayed persistent kernel reads it:
    item j of CTA c is (request, kv_head, q_start, q_end, kv_start, kv_end)[c, j] where valid, and
    its partial state goes to slot c * max_items + j.

    The merge plan, in fixed shapes too: output g (request, kv_head, q_start, q_end) = merge_out[g]
    folds the partial states in slots merge_slots[merge_indptr[g]:merge_indptr[g + 1]] with ⊕, in
    that order (kv_start ascending, as `Plan.merge`). Outputs are numbered as Plan.merge lists them;
    padding outputs past the plan's have an empty range and merge_out (0, 0, 0, 0); padding slots
    of merge_slots are -1. l_qo and group say what the plan was made for, so that a decode
    kernel can refuse a prefill plan whose packed rows l_qo x group look like a larger group."""

    items: np.ndarray  # int32 (max_ctas, max_items, 6)
    valid: np.ndarray  # bool (max_ctas, max_items)
    count: np.ndarray  # int32 (max_ctas,): items per CTA
    merge_indptr: np.ndarray  # int32 (max_outputs + 1,)
    merge_slots: np.ndarray  # int32 (max_ctas * max_items,)
    merge_out: np.ndarray  # int32 (max_outputs, 4): (request, kv_head, q_start, q_end)
    l_qo: int = 1  # the largest l_qo of the plan's requests (1: a decode plan)
    group: int = 1  # the plan's GQA group: query heads per KV head

    __eq__ = fields_equal  # arrays compared as wholes
    __hash__ = None

    @property
    def max_ctas(self) -> int:
        return self.items.shape[0]

    @property
    def max_items(self) -> int:
        return self.items.shape[1]

    @property
    def max_outputs(self) -> int:
        return self.merge_out.shape[0]

    def check_decode(self, group: int) -> None:
        """Refuse, for a decode kernel whose q has `group` query heads per KV head, a plan made for
        prefill (l_qo > 1) or for another group: its packed rows l_qo x group could match the
        kernel's group and run as a wrong decode without a word."""
        if self.l_qo != 1:
            raise ValueError(
                f"the plan was made for requests of up to l_qo={self.l_qo} queries; a decode "
                f"kernel runs decode plans only (every request l_qo = 1)"
            )
        if self.group != group:
            raise ValueError(
                f"the plan was made for group={self.group} query heads per KV head; q has "
                f"q_heads / kv_heads = {group}"
            )

    @property
    def num_outputs(self) -> int:
        """Outputs that have items (the rest is padding)."""
        return int(np.count_nonzero(np.diff(self.merge_indptr)))


def fixed_size_workspace(
    plan: Plan, max_ctas: int, max_items: int, max_outputs: int | None = None
) -> Workspace:
    """Shapes depend on max_ctas, max_items and max_outputs only: a new batch changes contents,
    not shapes. max_outputs (output tiles the merge can hold) defaults to max_ctas x max_items,
    which every plan that fits the items fits (each output has at least one item); a decode
    engine passes max_batch x kv_heads (x query tiles per KV head), a smaller merge grid."""
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be a Plan, got {type(plan).__name__}")
    max_ctas = as_int("max_ctas", max_ctas, 1, MAX_CTAS)
    max_items = as_int("max_items", max_items, 1, MAX_ITEMS)
    max_outputs = (
        max_ctas * max_items if max_outputs is None else as_int("max_outputs", max_outputs, 1, MAX_ITEMS)
    )
    slots = max_ctas * max_items  # 6 int32 + a bool + a merge slot each
    check_bytes(
        f"max_ctas={max_ctas} x max_items={max_items} (and max_outputs={max_outputs})",
        slots * (6 * 4 + 1 + 4) + max_outputs * (4 * 4 + 4),
    )
    if plan.num_ctas > max_ctas:
        raise ValueError(f"the plan uses {plan.num_ctas} CTAs; max_ctas={max_ctas} holds fewer")
    cta = plan.cta
    n = len(cta)
    by_cta = np.argsort(cta, kind="stable")  # each CTA's items in plan order
    counts = np.bincount(cta, minlength=max_ctas)
    slot_j = np.empty(n, np.int64)
    slot_j[by_cta] = np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts)
    over = np.flatnonzero(slot_j >= max_items)
    if over.size:
        raise ValueError(f"CTA {int(cta[over[0]])} has more than max_items={max_items} work items")
    if plan.num_outputs > max_outputs:
        raise ValueError(
            f"the plan has {plan.num_outputs} outputs (request, KV head, query tile); "
            f"max_outputs={max_outputs} holds fewer"
        )
    items = np.zeros((max_ctas, max_items, 6), np.int32)
    valid = np.zeros((max_ctas, max_items), bool)
    items[cta, slot_j] = np.stack(
        [plan.request, plan.kv_head, plan.q_start, plan.q_end, plan.kv_start, plan.kv_end], axis=1
    )
    valid[cta, slot_j] = True
    count = counts.astype(np.int32)
    order, ends = plan.merge_order
    merge_slots = np.full(max_ctas * max_items, -1, np.int32)
    merge_slots[:n] = (cta * max_items + slot_j)[order]
    merge_indptr = np.full(max_outputs + 1, n, np.int32)
    merge_indptr[: len(ends)] = ends
    merge_out = np.zeros((max_outputs, 4), np.int32)
    first = order[ends[:-1]]
    merge_out[: len(first)] = np.stack(
        [plan.request[first], plan.kv_head[first], plan.q_start[first], plan.q_end[first]], axis=1
    )
    ws = Workspace(
        items, valid, count, merge_indptr, merge_slots, merge_out, int(plan.l_qo.max()), plan.group
    )
    for a in (items, valid, count, merge_indptr, merge_slots, merge_out):
        a.setflags(write=False)
    return ws
