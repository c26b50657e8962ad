"""Refusals of layer 2's planners, configs and workloads, one reproducer per defect: a prefill plan
run as a decode plan, costs the exact scheduler would truncate, flags that are not bools,
unordered batches, names that come out blank, and sizes looped over before they were checked.

Costs are compared with Algorithm 1 written out here by hand (a list of loads, the smallest
taken, the lower index on ties), not with the code under test.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from attnlab.machine.configs import as_model, config_path, from_config, kv_bytes_per_token, kv_cache_bytes
from attnlab.machine.schedule import (
    fixed_size_workspace,
    heap_schedule,
    list_schedule,
    plan_balanced,
    plan_fixed_split,
    plan_per_request,
    run_plan,
)
from attnlab.machine.workload import tile_waste

LLAMA = {
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
}


def _raises(exc, word, fn, /, *args, **kwargs):
    with pytest.raises(Exception) as info:
        fn(*args, **kwargs)
    assert isinstance(info.value, exc), f"{type(info.value).__name__}: {info.value}"
    assert re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", str(info.value)), str(info.value)
    return str(info.value)


def _by_hand(cost, m):
    """Algorithm 1 as a loop over a list of loads."""
    loads, cta = [0] * m, []
    for x in cost:
        c = min(range(m), key=lambda j: (loads[j], j))
        cta.append(c)
        loads[c] += x
    return cta, loads


# --- a plan records what it was made for ------------------------------------------------------


@pytest.mark.parametrize("planner", [plan_balanced, plan_per_request, plan_fixed_split])
def test_a_prefill_plan_is_not_run_as_a_decode_plan(planner):
    plan = planner([(3, 20)], kv_heads=1, num_ctas=2)  # 3 queries, group 1
    assert plan.l_qo.tolist() == [3] and plan.group == 1
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 3, 8))  # reads as group 3
    k = [rng.standard_normal((1, 20, 8))]
    _raises(ValueError, "l_qo", run_plan, plan, q, k, k)
    mixed = plan_balanced([(2, 5), (2, 6)], kv_heads=1, num_ctas=2, group=1)
    _raises(
        ValueError,
        "l_qo",
        run_plan,
        mixed,
        rng.standard_normal((2, 2, 8)),
        [rng.standard_normal((1, n, 8)) for n in (5, 6)],
        [rng.standard_normal((1, n, 8)) for n in (5, 6)],
    )


def test_a_workspace_records_the_plan_it_packs():
    ws = fixed_size_workspace(plan_balanced([(2, 5), (2, 6)], kv_heads=1, num_ctas=2), 2, 8)
    assert (ws.l_qo, ws.group) == (2, 1)
    ws = fixed_size_workspace(plan_balanced([(1, 5), (1, 6)], kv_heads=2, num_ctas=2, group=4), 2, 8)
    assert (ws.l_qo, ws.group) == (1, 4)


def test_a_decode_plan_still_runs():
    rng = np.random.default_rng(1)
    lens = [(1, 30), (1, 7)]
    plan = plan_balanced(lens, kv_heads=2, num_ctas=3, group=2)
    assert plan.l_qo.tolist() == [1, 1] and plan.group == 2
    q = rng.standard_normal((2, 4, 8))
    k = [rng.standard_normal((2, n, 8)) for _, n in lens]
    v = [rng.standard_normal((2, n, 8)) for _, n in lens]
    o = run_plan(plan, q, k, v)
    for i in range(2):  # float64 softmax by hand
        for h in range(4):
            s = k[i][h // 2] @ q[i, h] / np.sqrt(8)
            p = np.exp(s - s.max())
            assert np.allclose(o[i, h], p @ v[i][h // 2] / p.sum(), rtol=0, atol=1e-13)


# --- the schedulers' inputs -------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, exc, word",
    [
        (lambda: list_schedule(np.array([1.5, 2.7]), 2), TypeError, "cost"),
        (lambda: list_schedule([1, 2], 2, descending="False"), TypeError, "descending"),
        (lambda: list_schedule([3, -1], 2), ValueError, "cost"),
        (lambda: list_schedule([True, 2], 2), TypeError, "cost"),
        (lambda: list_schedule([1], 2**40), ValueError, "num_ctas"),
        (lambda: list_schedule([1], 0), ValueError, "num_ctas"),
        (lambda: list_schedule([1], 2, copies=0), ValueError, "copies"),
        (lambda: heap_schedule([3, -1, 2], 2), ValueError, "cost"),
        (lambda: heap_schedule([3, float("nan")], 2), ValueError, "cost"),
        (lambda: heap_schedule(["3"], 2), TypeError, "cost"),
        (lambda: heap_schedule([1], 0), ValueError, "num_ctas"),
        (lambda: heap_schedule([1], 2**40), ValueError, "num_ctas"),
        (lambda: heap_schedule([1], 2.5), TypeError, "num_ctas"),
    ],
)
def test_scheduler_inputs_are_checked(call, exc, word):
    _raises(exc, word, call)


def test_integral_float_costs_schedule_as_their_integers():
    cost = [5.0, 4.0, 3.0, 3.0]
    s = list_schedule(np.array(cost), 2)
    assert s.cta.tolist() == _by_hand([5, 4, 3, 3], 2)[0]
    assert s.loads.tolist() == _by_hand([5, 4, 3, 3], 2)[1]
    cta, _, loads = heap_schedule([1.5, 2.5, 0.5], 2)  # the plain loop takes reals
    assert (cta, loads) == _by_hand([1.5, 2.5, 0.5], 2)


@pytest.mark.parametrize("lens", [{(1, 5), (1, 6)}, frozenset({(1, 5)}), {(1, 5): 0}])
def test_a_batch_in_no_order_is_refused(lens):
    _raises(TypeError, "lengths", plan_balanced, lens, kv_heads=1, num_ctas=2)


@pytest.mark.parametrize(
    "call, exc, word",
    [
        (lambda: tile_waste({3: 4}), TypeError, "l_qo"),
        (lambda: tile_waste({3, 4}), TypeError, "l_qo"),
        (lambda: tile_waste(range(1, 2**28)), ValueError, "l_qo"),
        (lambda: tile_waste([1, True]), TypeError, "l_qo"),
    ],
)
def test_tile_waste_inputs_are_checked_before_the_loop(call, exc, word):
    _raises(exc, word, call)


def test_tile_waste_of_an_array_is_that_of_its_list():
    a, b = tile_waste(np.array([1, 1, 129])), tile_waste([1, 1, 129])
    assert a == b and a.tiles.tolist() == [1, 1, 3]


# --- configs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cfg, want",
    [
        ({**LLAMA, "_name_or_path": "  "}, "my-model"),
        ({**LLAMA, "_name_or_path": " / "}, "my-model"),
        ({**LLAMA, "_name_or_path": "", "model_type": " "}, "my-model"),
        ({**LLAMA, "_name_or_path": " ", "model_type": "llama"}, "llama"),
    ],
)
def test_a_blank_name_in_a_config_is_not_the_model_name(cfg, want):
    assert from_config(cfg).name == want


@pytest.mark.parametrize(
    "call, exc, word",
    [
        (lambda: from_config(LLAMA, name=""), ValueError, "name"),
        (lambda: from_config(LLAMA, name="  "), ValueError, "name"),
        (lambda: from_config(LLAMA, name=3), TypeError, "name"),
        (lambda: kv_cache_bytes(model=3, context=10), TypeError, "model"),
        (lambda: kv_bytes_per_token(3), TypeError, "model"),
        (lambda: as_model(None), TypeError, "model"),
        (lambda: config_path(""), ValueError, "name"),
        (lambda: config_path("no-such-model"), ValueError, "name"),
    ],
)
def test_config_parameters_are_named(call, exc, word):
    _raises(exc, word, call)


def test_a_workspace_refuses_a_decode_kernel_it_was_not_made_for():
    prefill = fixed_size_workspace(plan_balanced([(2, 5), (2, 6)], kv_heads=1, num_ctas=2), 2, 8)
    _raises(ValueError, "l_qo", prefill.check_decode, 2)  # packed rows 2 = a group of 2
    decode = fixed_size_workspace(plan_balanced([(1, 5), (1, 6)], kv_heads=1, num_ctas=2, group=4), 2, 8)
    decode.check_decode(4)
    _raises(ValueError, "group", decode.check_decode, 2)


def test_run_plan_takes_one_array_per_request_in_order():
    plan = plan_balanced([(1, 5)], kv_heads=1, num_ctas=2)
    k = np.ones((1, 5, 4))
    _raises(TypeError, "k", run_plan, plan, np.ones((1, 1, 4)), {0: k}, [k])


@pytest.mark.parametrize(
    "call, exc, word",
    [
        (lambda: plan_balanced([(1, 5)], kv_heads=1, num_ctas=2, group=10**5000), ValueError, "group"),
        (lambda: list_schedule([1, 2], 2, copies=2**40), ValueError, "copies"),
    ],
)
def test_counts_past_any_plan_are_refused_by_name(call, exc, word):
    _raises(exc, word, call)


def test_a_chunk_past_every_length_is_the_whole_kv():
    whole = plan_fixed_split([(1, 7), (1, 3)], chunk=10**5000, kv_heads=1, num_ctas=2)
    assert whole.kv_end.tolist() == [7, 3] and whole.kv_start.tolist() == [0, 0]


def test_a_dtype_past_any_size_is_named_not_a_digit_limit_error():
    from attnlab.machine.configs import kv_bytes_per_token
    from attnlab.machine.models import get_model

    with pytest.raises(TypeError, match="dtype must be a string"):
        kv_bytes_per_token(get_model("Llama-3-8B"), dtype=10**5000)
