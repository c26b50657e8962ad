"""The plan-driven decode refuses a plan made for prefill, or for another GQA group, before any
kernel runs: packed rows l_qo x group = 2 x 1 read like a decode step of group 2, and would run
as one without a word."""

from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnlab.machine import schedule  # noqa: E402
from attnlab.kernels.scheduled import scheduled_decode  # noqa: E402


def _batch(lens, hkv, group, d=16, page_size=4):
    pages = [-(-n // page_size) for n in lens]
    indptr = torch.tensor(np.concatenate([[0], np.cumsum(pages)]), dtype=torch.int32)
    indices = torch.arange(sum(pages), dtype=torch.int32)
    last = torch.tensor([n - page_size * (p - 1) for n, p in zip(lens, pages)], dtype=torch.int32)
    pool = torch.zeros((sum(pages), page_size, hkv, d))
    q = torch.zeros((len(lens), hkv * group, d))
    return q, pool, pool.clone(), indptr, indices, last, page_size


@pytest.mark.parametrize(
    "plan, group, word",
    [
        (schedule.plan_balanced([(2, 5), (2, 6)], kv_heads=1, num_ctas=2, group=1), 2, "l_qo"),
        (schedule.plan_per_request([(1, 5), (1, 6)], kv_heads=1, num_ctas=2, group=4), 2, "group"),
    ],
)
def test_scheduled_decode_refuses_a_plan_made_for_something_else(plan, group, word):
    q, k_pool, v_pool, indptr, indices, last, ps = _batch([5, 6], 1, group)
    for p in (plan, schedule.fixed_size_workspace(plan, plan.num_ctas, 8)):
        with pytest.raises(ValueError) as info:
            scheduled_decode(q, k_pool, v_pool, indptr, indices, last, p, page_size=ps)
        assert re.search(rf"\b{word}\b", str(info.value)), str(info.value)
