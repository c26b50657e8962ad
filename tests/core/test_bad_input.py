"""Adversarial inputs to every public function of layers 1 and 2.

Each case: a call, the exception it must raise (TypeError for a wrong type, ValueError for a wrong
value) and the parameter name the message must contain as a word; where the value is a plain
number, the message must show it too. NaN/inf arrays, strings as flags, bools as numbers, object,
string and complex arrays, shape mismatches, non-integer and non-positive sizes, fractions of a
byte, paths outside data/. The second half runs accepted edge inputs with every warning turned
into an error: no RuntimeWarning may reach a caller.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from attnlab import catalog as _catalog, validate as _check
from attnlab.core.attention import block_sizes, causal_mask, fa2_head, flash_attention, standard_attention
from attnlab.core.decode import (
    cascade_attention,
    cascade_intensity,
    decode_cost,
    intensity,
    split_bounds,
    split_kv_attention,
)
from attnlab.machine.hardware import (
    GPU,
    attainable,
    best_split,
    decode_time,
    dtype_name,
    get_gpu,
    peak,
    ridge_point,
    roofline_time,
    sm_share_time,
)
from attnlab.core.hbm import HBM, Event
from attnlab.core.iomodel import flash_io, io_ratio, io_table, lower_bound, standard_io
from attnlab.machine.models import (
    Model,
    attention_linear_crossover,
    get_model,
    linear_flops_per_token,
    prefill_cost,
    prefill_cost_curve,
)
from attnlab.core.softmax import (
    attention_state,
    merge,
    merge_states,
    online_softmax,
    online_softmax_trace,
    softmax,
)

RNG = np.random.default_rng(20240601)
Q, K, V = RNG.standard_normal((5, 4)), RNG.standard_normal((7, 4)), RNG.standard_normal((7, 3))
Q1 = RNG.standard_normal(4)
Q4, K4, V4 = (
    RNG.standard_normal((2, 4, 5, 4)),
    RNG.standard_normal((2, 2, 6, 4)),
    RNG.standard_normal((2, 2, 6, 3)),
)
STATE = (np.zeros((3, 4)), np.zeros(3))


def _with(a, index, value):
    """A copy of `a` (float) with one entry replaced: a NaN or an inf somewhere in the middle."""
    b = np.array(a, dtype=np.float64)
    b[index] = value
    return b


CASES = []


def case(id_, fn, exc, name, /, *args, value=None, **kwargs):
    CASES.append(pytest.param(fn, args, kwargs, exc, name, value, id=id_))


# --- flags: only real bools -------------------------------------------------------------------------

BAD_FLAGS = ["False", "True", "", 0, 1, 1.0, None, [True], np.array([True]), "no"]
for i, flag in enumerate(BAD_FLAGS):
    case(f"flash-causal-{i}", flash_attention, TypeError, "causal", Q, K, V, causal=flag)
    case(f"flash-return_lse-{i}", flash_attention, TypeError, "return_lse", Q, K, V, return_lse=flag)
    case(f"standard-causal-{i}", standard_attention, TypeError, "causal", Q, K, V, causal=flag)
    case(f"fa2_head-causal-{i}", fa2_head, TypeError, "causal", Q, K, V, block_r=2, block_c=3, causal=flag)
    case(
        f"fa2_head-return_lse-{i}",
        fa2_head,
        TypeError,
        "return_lse",
        Q,
        K,
        V,
        block_r=2,
        block_c=3,
        return_lse=flag,
    )
    case(f"flash_io-causal-{i}", flash_io, TypeError, "causal", 4096, 64, 100_000, "fa1", flag)
    case(f"flash_io-return_lse-{i}", flash_io, TypeError, "return_lse", 4096, 64, return_lse=flag)
    case(f"io_ratio-causal-{i}", io_ratio, TypeError, "causal", 4096, 64, 100_000, "fa1", flag)
    case(f"io_table-causal-{i}", io_table, TypeError, "causal", [64], 64, causal=flag)
    case(f"HBM-trace-{i}", HBM, TypeError, "trace", flag)
    case(
        f"split_kv-return_states-{i}",
        split_kv_attention,
        TypeError,
        "return_states",
        Q,
        K,
        V,
        2,
        return_states=flag,
    )

# --- scale: a positive finite real, not a bool -------------------------------------------------------

BAD_SCALES = [
    (0, ValueError),
    (-1, ValueError),
    (0.0, ValueError),
    (-0.25, ValueError),
    (np.nan, ValueError),
    (np.inf, ValueError),
    (-np.inf, ValueError),
    (True, TypeError),
    (False, TypeError),
    ("1", TypeError),
    (1j, TypeError),
    ([0.5], TypeError),
    (np.array(0.5), TypeError),
    (np.bool_(True), TypeError),
]
for i, (sc, exc) in enumerate(BAD_SCALES):
    case(f"attention_state-scale-{i}", attention_state, exc, "scale", Q, K, V, scale=sc)
    case(f"split_kv-scale-{i}", split_kv_attention, exc, "scale", Q, K, V, 3, scale=sc)
    case(
        f"cascade-scale-{i}",
        cascade_attention,
        exc,
        "scale",
        Q[:2],
        K,
        V,
        [(K[:2], V[:2]), (K[:0], V[:0])],
        scale=sc,
    )
    case(f"standard-scale-{i}", standard_attention, exc, "scale", Q, K, V, scale=sc)
    case(f"flash-scale-{i}", flash_attention, exc, "scale", Q, K, V, scale=sc)
    case(f"fa2_head-scale-{i}", fa2_head, exc, "scale", Q, K, V, block_r=2, block_c=2, scale=sc)

# --- q, k, v: finite real arrays of the right shapes ------------------------------------------------

BAD_VALUES = [("nan", np.nan), ("+inf", np.inf), ("-inf", -np.inf)]
for fn_id, fn, kw in [
    ("standard", standard_attention, {}),
    ("flash-fa1", flash_attention, {"order": "fa1"}),
    ("flash-fa2", flash_attention, {"order": "fa2"}),
    ("fa2_head", fa2_head, {"block_r": 2, "block_c": 3}),
    ("attention_state", attention_state, {}),
]:
    for vid, bad in BAD_VALUES:
        case(f"{fn_id}-q-{vid}", fn, ValueError, "q", _with(Q, (0, 0), bad), K, V, **kw)
        case(f"{fn_id}-k-{vid}", fn, ValueError, "k", Q, _with(K, (3, 2), bad), V, **kw)
        case(f"{fn_id}-v-{vid}", fn, ValueError, "v", Q, K, _with(V, (6, 1), bad), **kw)
    for name, pos in (("q", 0), ("k", 1), ("v", 2)):
        good = [Q, K, V]
        for tid, bad_arr, exc in [
            ("object", np.array(good[pos], dtype=object), TypeError),
            ("string", good[pos].astype(str), TypeError),
            ("complex", good[pos] + 0j, TypeError),
            ("bool", good[pos] > 0, TypeError),
            ("ragged", [[1.0, 2.0], [3.0]], TypeError),
            ("None", None, TypeError),
            ("masked", np.ma.array(good[pos], mask=good[pos] > 1), TypeError),
            ("str", "abc", TypeError),
            ("3-D", good[pos][None], ValueError),
            ("0-D", np.float64(1.0), ValueError),
        ]:
            args = list(good)
            args[pos] = bad_arr
            case(f"{fn_id}-{name}-{tid}", fn, exc, name, *args, **kw)
    case(f"{fn_id}-head-dims", fn, ValueError, "k", Q, K[:, :3], V, **kw)
    case(f"{fn_id}-kv-rows", fn, ValueError, "v", Q, K, V[:6], **kw)
    case(f"{fn_id}-v-longer", fn, ValueError, "v", Q, K, np.vstack([V, V]), **kw)
    case(
        f"{fn_id}-v-no-columns",
        fn,
        ValueError,
        "d_v" if fn_id != "attention_state" else "v",
        Q,
        K,
        V[:, :0],
        **kw,
    )
    case(
        f"{fn_id}-q-d0",
        fn,
        ValueError,
        "d" if fn_id != "attention_state" else "q",
        Q[:, :0],
        K[:, :0],
        V,
        **kw,
    )

case("attention_state-q-1d-nan", attention_state, ValueError, "q", _with(Q1, 2, np.nan), K, V)
case("attention_state-no-queries", attention_state, ValueError, "q", Q[:0], K, V)
case("attention_state-mask-int", attention_state, TypeError, "mask", Q, K, V, mask=np.ones((5, 7), dtype=int))
case("attention_state-mask-float", attention_state, TypeError, "mask", Q, K, V, mask=np.full((5, 7), 0.5))
case("attention_state-mask-str", attention_state, TypeError, "mask", Q, K, V, mask="all")
case(
    "attention_state-mask-shape",
    attention_state,
    ValueError,
    "mask",
    Q,
    K,
    V,
    mask=np.ones((5, 6), dtype=bool),
)
case("standard-3-vs-2-D", standard_attention, ValueError, "rank", Q4, K, V)
case("flash-gqa", flash_attention, ValueError, "heads", Q4[:, :3], K4, V4)
case("flash-batch", flash_attention, ValueError, "batch", Q4[:1], K4, V4)
case("flash-batch-0", flash_attention, ValueError, "batch", Q4[:0], K4[:0], V4[:0])
case("flash-kv-heads-0", flash_attention, ValueError, "heads", Q4, K4[:, :0], V4[:, :0])
case("fa2_head-4-D", fa2_head, ValueError, "q", Q4, K4, V4, block_r=2, block_c=2)

# --- tiled-kernel parameters ---------------------------------------------------------------------------

for i, (kw, exc, name) in enumerate(
    [
        ({"order": "fa3"}, ValueError, "order"),
        ({"order": "FA1"}, ValueError, "order"),
        ({"order": 2}, TypeError, "order"),
        ({"order": None}, TypeError, "order"),
        ({"order": ["fa1"]}, TypeError, "order"),
        ({"order": np.array(["fa1"])}, TypeError, "order"),
        ({"block_r": 0}, ValueError, "block_r"),
        ({"block_r": -3, "block_c": 4}, ValueError, "block_r"),
        ({"block_r": 2.5}, TypeError, "block_r"),
        ({"block_r": "8"}, TypeError, "block_r"),
        ({"block_r": True}, TypeError, "block_r"),
        ({"block_c": 0}, ValueError, "block_c"),
        ({"block_c": np.nan}, TypeError, "block_c"),
        ({"block_c": [4]}, TypeError, "block_c"),
        ({"sram": 0}, ValueError, "sram"),
        ({"sram": 8}, ValueError, "sram"),
        ({"sram": "big"}, TypeError, "sram"),
        ({"sram": True}, TypeError, "sram"),
        ({"sram": 1.5, "block_r": 2, "block_c": 2}, TypeError, "sram"),
        ({"hbm": "counter"}, TypeError, "hbm"),
        ({"hbm": 3}, TypeError, "hbm"),
        ({"hbm": object()}, TypeError, "hbm"),
    ]
):
    case(f"flash-param-{i}", flash_attention, exc, name, Q, K, V, **kw)
case("standard-hbm", standard_attention, TypeError, "hbm", Q, K, V, hbm={})
case("fa2_head-block_r-0", fa2_head, ValueError, "block_r", Q, K, V, block_r=0, block_c=2)
case("fa2_head-block_c-float", fa2_head, TypeError, "block_c", Q, K, V, block_r=2, block_c=2.5)
case("fa2_head-block_r-missing", fa2_head, TypeError, "block_r", Q, K, V, block_c=2)
case("fa2_head-hbm", fa2_head, TypeError, "hbm", Q, K, V, block_r=2, block_c=2, hbm=[])

for i, (args, exc, name, value) in enumerate(
    [
        ((0,), ValueError, "d", "0"),
        ((-1,), ValueError, "d", "-1"),
        ((1.5,), TypeError, "d", "1.5"),
        (("64",), TypeError, "d", "64"),
        ((True,), TypeError, "d", None),
        ((None,), TypeError, "d", None),
        ((64, 0), ValueError, "sram", "0"),
        ((64, 255), ValueError, "sram", "255"),
        ((64, 2.5e5 + 0.5), TypeError, "sram", None),
        ((64, False), TypeError, "sram", None),
    ]
):
    case(f"block_sizes-{i}", block_sizes, exc, name, *args, value=value)
for i, (args, exc, name) in enumerate(
    [
        ((-1, 3), ValueError, "n_q"),
        ((3, -2), ValueError, "n_k"),
        ((2.5, 3), TypeError, "n_q"),
        ((3, "4"), TypeError, "n_k"),
        ((True, 3), TypeError, "n_q"),
        ((3, None), TypeError, "n_k"),
    ]
):
    case(f"causal_mask-{i}", causal_mask, exc, name, *args)

# --- online softmax and softmax ------------------------------------------------------------------------

BAD_X = [
    ("nan", [1.0, np.nan, 2.0], ValueError),
    ("+inf", [1.0, np.inf], ValueError),
    ("only-nan", [np.nan], ValueError),
    ("empty", [], ValueError),
    ("2-D", [[1.0, 2.0]], ValueError),
    ("0-D", 3.0, ValueError),
    ("complex", [1 + 1j, 2], TypeError),
    ("strings", ["1", "2"], TypeError),
    ("str", "12", TypeError),
    ("object", np.array([1.0, 2.0], dtype=object), TypeError),
    ("bool", [True, False], TypeError),
    ("None", None, TypeError),
    ("ragged", [[1.0], [2.0, 3.0]], TypeError),
]
for xid, x, exc in BAD_X:
    case(f"online_softmax_trace-x-{xid}", online_softmax_trace, exc, "x", x, chunk=1)
    case(f"online_softmax-x-{xid}", online_softmax, exc, "x", x, chunk=1)
    if xid not in ("2-D", "empty"):
        case(f"softmax-x-{xid}", softmax, exc, "x", x)
case("softmax-x-empty-axis", softmax, ValueError, "x", np.zeros((3, 0)))
case("softmax-x-nan-2d", softmax, ValueError, "x", _with(np.zeros((2, 3)), (1, 2), np.nan))
for i, (ch, exc, value) in enumerate(
    [
        (0, ValueError, "0"),
        (-1, ValueError, "-1"),
        (1.5, TypeError, "1.5"),
        ("2", TypeError, "2"),
        (True, TypeError, None),
        (None, TypeError, None),
        (np.nan, TypeError, "nan"),
    ]
):
    case(
        f"online_softmax_trace-chunk-{i}",
        online_softmax_trace,
        exc,
        "chunk",
        [1.0, 2.0],
        chunk=ch,
        value=value,
    )
    case(f"online_softmax-chunk-{i}", online_softmax, exc, "chunk", [1.0, 2.0], chunk=ch, value=value)
for i, (ax, exc) in enumerate(
    [
        (1, ValueError),
        (-2, ValueError),
        (1.5, TypeError),
        (True, TypeError),
        ("0", TypeError),
        (None, TypeError),
    ]
):
    case(f"softmax-axis-{i}", softmax, exc, "axis", [1.0, 2.0], axis=ax)

# --- attention states and merge -----------------------------------------------------------------------

BAD_STATES = [
    ("o-nan", (_with(np.zeros((3, 4)), (1, 1), np.nan), np.zeros(3)), ValueError, "o"),
    ("o-inf", (_with(np.zeros((3, 4)), (2, 0), np.inf), np.zeros(3)), ValueError, "o"),
    ("o--inf", (_with(np.zeros((3, 4)), (0, 3), -np.inf), np.zeros(3)), ValueError, "o"),
    ("lse-nan", (np.zeros((3, 4)), _with(np.zeros(3), 1, np.nan)), ValueError, "lse"),
    ("lse-+inf", (np.zeros((3, 4)), _with(np.zeros(3), 2, np.inf)), ValueError, "lse"),
    ("o-object", (np.zeros((3, 4), dtype=object), np.zeros(3)), TypeError, "o"),
    ("o-complex", (np.zeros((3, 4)) + 0j, np.zeros(3)), TypeError, "o"),
    ("lse-string", (np.zeros((3, 4)), np.array(["0", "0", "0"])), TypeError, "lse"),
    ("o-0-d", (np.float64(1.0), np.zeros(())), ValueError, "o"),
    ("lse-shape", (np.zeros((3, 4)), np.zeros(4)), ValueError, "lse"),
    ("not-pair-array", np.zeros(3), TypeError, "pair"),
    ("not-pair-float", 5.0, TypeError, "pair"),
    ("not-pair-None", None, TypeError, "pair"),
    ("not-pair-1", (np.zeros((3, 4)),), TypeError, "pair"),
    ("not-pair-3", (np.zeros((3, 4)), np.zeros(3), np.zeros(3)), TypeError, "pair"),
    ("not-pair-str", "ol", TypeError, "pair"),
]
for sid, bad, exc, name in BAD_STATES:
    case(f"merge-a-{sid}", merge, exc, name, bad, STATE)
    case(f"merge-b-{sid}", merge, exc, name, STATE, bad)
    case(f"merge_states-{sid}", merge_states, exc, name if name == "pair" else "states[1]", [STATE, bad])
case("merge-shapes", merge, ValueError, "shapes", STATE, (np.zeros((2, 4)), np.zeros(2)))
case("merge-d_v", merge, ValueError, "shapes", STATE, (np.zeros((3, 5)), np.zeros(3)))
for i, (states, exc) in enumerate(
    [
        (None, TypeError),
        (5, TypeError),
        ("ab", TypeError),
        ([], ValueError),
        (STATE, TypeError),
        (list(STATE), TypeError),
        (np.zeros((2, 3)), TypeError),
    ]
):
    case(f"merge_states-states-{i}", merge_states, exc, "states", states)
for i, (order, exc) in enumerate(
    [
        ("sideways", ValueError),
        ([0, 0, 1], ValueError),
        ([0, 1], ValueError),
        ([0, 1, 3], ValueError),
        ([-1, 0, 1], ValueError),
        ([0.0, 1.0, 2.0], ValueError),
        ([True, False, 2], ValueError),
        (5, TypeError),
        (1.5, TypeError),
        ("Forward", ValueError),
    ]
):
    case(f"merge_states-order-{i}", merge_states, exc, "order", [STATE] * 3, order=order)
    case(f"split_kv-order-{i}", split_kv_attention, exc, "order", Q, K, V, 3, order=order)

# --- decode ------------------------------------------------------------------------------------------------

BAD_POSITIVE_REAL = [
    (0, ValueError),
    (-1, ValueError),
    (np.nan, ValueError),
    (np.inf, ValueError),
    (True, TypeError),
    ("8", TypeError),
    (1j, TypeError),
    (None, TypeError),
    ([1, 0], ValueError),
    (np.array(["a"]), TypeError),
    ([1, np.nan], ValueError),
    (np.array([1, 2], dtype=object), TypeError),
]
for i, (bad, exc) in enumerate(BAD_POSITIVE_REAL):
    case(f"intensity-g-{i}", intensity, exc, "g", bad, 1, 8192)
    case(f"intensity-l_qo-{i}", intensity, exc, "l_qo", 8, bad, 8192)
    case(f"intensity-l_kv-{i}", intensity, exc, "l_kv", 8, 1, bad)

BAD_COUNT = [
    (0, ValueError),
    (-2, ValueError),
    (1.5, TypeError),
    (True, TypeError),
    ("8", TypeError),
    (None, TypeError),
    (np.nan, TypeError),
    ([4, 0], ValueError),
    ([1.5], TypeError),
    (np.array([True]), TypeError),
    (np.array(["4"]), TypeError),
]
for i, (bad, exc) in enumerate(BAD_COUNT):
    for pos, name in enumerate(("g", "l_qo", "l_kv", "d")):
        args = [8, 1, 8192, 128]
        args[pos] = bad
        case(f"decode_cost-{name}-{i}", decode_cost, exc, name, *args)
    case(f"decode_cost-batch-{i}", decode_cost, exc, "batch", 8, 1, 8192, 128, batch=bad)
BAD_DTYPE_BYTES = [
    (0, ValueError),
    (-2, ValueError),
    (0.3, ValueError),
    (1.5, ValueError),
    (np.nan, ValueError),
    (np.inf, ValueError),
    (True, TypeError),
    ("2", TypeError),
    (None, TypeError),
    (2j, TypeError),
]
for i, (bad, exc) in enumerate(BAD_DTYPE_BYTES):
    case(f"decode_cost-dtype_bytes-{i}", decode_cost, exc, "dtype_bytes", 8, 1, 8192, 128, dtype_bytes=bad)
    case(f"intensity-dtype_bytes-{i}", intensity, exc, "dtype_bytes", 8, 1, 8192, dtype_bytes=bad)
    case(f"HBM.bytes-{i}", HBM().bytes, exc, "dtype_bytes", bad)
case("decode_cost-broadcast", decode_cost, ValueError, "l_kv", [1, 2], 1, [1, 2, 3], 64)
case("decode_cost-int64", decode_cost, ValueError, "l_kv", np.array([1 << 30]), 1 << 20, 1 << 20, 1 << 10)

for i, (args, exc, name) in enumerate(
    [
        ((0, 1), ValueError, "l_kv"),
        ((10, 0), ValueError, "splits"),
        ((10, 11), ValueError, "splits"),
        ((10.5, 2), TypeError, "l_kv"),
        ((10, 2.5), TypeError, "splits"),
        ((True, 1), TypeError, "l_kv"),
        ((10, True), TypeError, "splits"),
        (("10", 2), TypeError, "l_kv"),
        ((10, None), TypeError, "splits"),
    ]
):
    case(f"split_bounds-{i}", split_bounds, exc, name, *args)
for i, (sp, exc) in enumerate(
    [
        (0, ValueError),
        (8, ValueError),
        (1.5, TypeError),
        (True, TypeError),
        ("2", TypeError),
        (None, TypeError),
    ]
):
    case(f"split_kv-splits-{i}", split_kv_attention, exc, "splits", Q, K, V, sp)
case("split_kv-v-longer", split_kv_attention, ValueError, "v", Q, K, np.vstack([V, V]), 2)
case("split_kv-v-shorter", split_kv_attention, ValueError, "v", Q, K, V[:3], 2)
case("split_kv-k-empty", split_kv_attention, ValueError, "k", Q, K[:0], V[:0], 1)
case("split_kv-k-1d", split_kv_attention, ValueError, "k", Q, K[0], V, 1)
case("split_kv-k-nan", split_kv_attention, ValueError, "k", Q, _with(K, (1, 1), np.nan), V, 2)
case("split_kv-v-inf", split_kv_attention, ValueError, "v", Q, K, _with(V, (5, 0), np.inf), 2)
case("split_kv-q-nan", split_kv_attention, ValueError, "q", _with(Q1, 0, np.nan), K, V, 2)
case("split_kv-q-string", split_kv_attention, TypeError, "q", Q1.astype(str), K, V, 2)
case("split_kv-v-complex", split_kv_attention, TypeError, "v", Q, K, V + 1j, 2)

UNIQUE = [(K[:2], V[:2]), (K[:0], V[:0])]
for i, (args, exc, name) in enumerate(
    [
        ((Q1, K, V, UNIQUE), ValueError, "queries"),
        ((_with(Q[:2], (1, 1), np.nan), K, V, UNIQUE), ValueError, "queries"),
        ((Q[:0], K, V, []), ValueError, "queries"),
        ((Q[:2].astype(str), K, V, UNIQUE), TypeError, "queries"),
        ((Q[:2], _with(K, (0, 0), np.inf), V, UNIQUE), ValueError, "prefix_k"),
        ((Q[:2], K, _with(V, (0, 0), np.nan), UNIQUE), ValueError, "prefix_v"),
        ((Q[:2], K[:, :3], V, UNIQUE), ValueError, "prefix_k"),
        ((Q[:2], K, V[:5], UNIQUE), ValueError, "prefix_v"),
        ((Q[:2], K, V + 0j, UNIQUE), TypeError, "prefix_v"),
        ((Q[:2], K, V, None), TypeError, "unique_kv"),
        ((Q[:2], K, V, 5), TypeError, "unique_kv"),
        ((Q[:2], K, V, "kv"), TypeError, "unique_kv"),
        ((Q[:2], K, V, UNIQUE[:1]), ValueError, "unique_kv"),
        ((Q[:2], K, V, UNIQUE * 2), ValueError, "unique_kv"),
        ((Q[:2], K, V, [np.zeros(3), UNIQUE[1]]), TypeError, "unique_kv[0]"),
        ((Q[:2], K, V, [UNIQUE[0], (K[:2],)]), TypeError, "unique_kv[1]"),
        ((Q[:2], K, V, [UNIQUE[0], (K[:2], V[:2], V[:2])]), TypeError, "unique_kv[1]"),
        ((Q[:2], K, V, [(_with(K[:2], (0, 1), np.nan), V[:2]), UNIQUE[1]]), ValueError, "unique_kv[0]"),
        ((Q[:2], K, V, [UNIQUE[0], (K[:2], V[:3])]), ValueError, "unique_kv[1]"),
        ((Q[:2], K, V, [UNIQUE[0], (K[:2, :3], V[:2])]), ValueError, "unique_kv[1]"),
        ((Q[:2], K, V, [UNIQUE[0], (K[:2], V[:2, :2])]), ValueError, "unique_kv[1]"),
        ((Q[:2], K, V, [UNIQUE[0], (K[:2].astype(object), V[:2])]), TypeError, "unique_kv[1]"),
    ]
):
    case(f"cascade-{i}", cascade_attention, exc, name, *args)

for i, (args, exc, name) in enumerate(
    [
        ((0, 4096, 256), ValueError, "n"),
        ((1.5, 4096, 256), TypeError, "n"),
        ((True, 4096, 256), TypeError, "n"),
        ((64, 0, 256), ValueError, "prefix"),
        ((64, "4096", 256), TypeError, "prefix"),
        ((64, 4096, -1), ValueError, "unique"),
        ((64, 4096, 2.5), TypeError, "unique"),
        ((64, 4096, 256, 0), ValueError, "g"),
        ((64, 4096, 256, True), TypeError, "g"),
    ]
):
    case(f"cascade_intensity-{i}", cascade_intensity, exc, name, *args)

# --- closed forms --------------------------------------------------------------------------------------

BAD_N = [
    (0, ValueError, "0"),
    (-1, ValueError, "-1"),
    (64.5, TypeError, "64.5"),
    ("64", TypeError, "64"),
    (True, TypeError, None),
    (None, TypeError, None),
    (np.nan, TypeError, "nan"),
    (1j, TypeError, None),
    ([64, 0], ValueError, "0"),
    (np.array([64.5]), TypeError, "64.5"),
    (np.array([True]), TypeError, None),
    (np.array(["64"]), TypeError, None),
    ([[64], [0]], ValueError, None),
    (np.array([1, 2], dtype=object), TypeError, None),
]
for i, (bad, exc, value) in enumerate(BAD_N):
    case(f"standard_io-N-{i}", standard_io, exc, "N", bad, 64, value=value)
    case(f"flash_io-N-{i}", flash_io, exc, "N", bad, 64, value=value)
    case(f"lower_bound-N-{i}", lower_bound, exc, "N", bad, 64, 100_000, value=value)
    case(f"io_ratio-N-{i}", io_ratio, exc, "N", bad, 64, value=value)
for i, (bad, exc, value) in enumerate(
    [
        (0, ValueError, "0"),
        (-64, ValueError, "-64"),
        (1.5, TypeError, "1.5"),
        (True, TypeError, None),
        ("64", TypeError, None),
        ([64], TypeError, None),
    ]
):
    case(f"standard_io-d-{i}", standard_io, exc, "d", 1024, bad, value=value)
    case(f"flash_io-d-{i}", flash_io, exc, "d", 1024, bad, value=value)
    case(f"lower_bound-d-{i}", lower_bound, exc, "d", 1024, bad, 100_000, value=value)
    case(f"standard_io-n_k-{i}", standard_io, exc, "n_k", 1024, 64, n_k=bad, value=value)
    case(f"flash_io-n_k-{i}", flash_io, exc, "n_k", 1024, 64, n_k=bad, value=value)
    case(f"flash_io-block_r-{i}", flash_io, exc, "block_r", 1024, 64, block_r=bad, value=value)
    case(f"flash_io-block_c-{i}", flash_io, exc, "block_c", 1024, 64, block_c=bad, value=value)
    case(f"lower_bound-sram-{i}", lower_bound, exc, "sram", 1024, 64, bad, value=value)
    case(f"flash_io-sram-{i}", flash_io, exc, "sram", 1024, 64, bad, value=value)
case("flash_io-sram-small", flash_io, ValueError, "sram", 1024, 64, 100)
case("flash_io-order", flash_io, ValueError, "order", 1024, 64, order="fa3")
case("flash_io-order-type", flash_io, TypeError, "order", 1024, 64, order=1)
case("standard_io-int64", standard_io, ValueError, "N", np.array([1 << 31, 1 << 32]), 64)
case("flash_io-int64", flash_io, ValueError, "N", np.array([1 << 40]), 64)
case("lower_bound-huge", lower_bound, ValueError, "N", 1 << 60, 64, 100_000)
for i, (Ns, exc) in enumerate(
    [
        (5, TypeError),
        ([0], ValueError),
        ([1.5], TypeError),
        ("abc", TypeError),
        ([[64, 128]], TypeError),
        (None, TypeError),
        ([True], TypeError),
    ]
):
    case(f"io_table-Ns-{i}", io_table, exc, "Ns", Ns, 64)

# --- the HBM counter ----------------------------------------------------------------------------------------

for method in ("read", "write"):
    for i, (n, exc) in enumerate(
        [
            (-1, ValueError),
            (1.5, TypeError),
            (3.0, TypeError),
            ("3", TypeError),
            (True, TypeError),
            (np.bool_(True), TypeError),
            (None, TypeError),
            ([3], TypeError),
        ]
    ):
        case(f"HBM.{method}-n-{i}", getattr(HBM(), method), exc, "n", "Q", n)
    for i, name in enumerate([None, 3, "", b"Q"]):
        case(f"HBM.{method}-name-{i}", getattr(HBM(), method), TypeError, "name", name, 4)
    for i, (rows, exc) in enumerate(
        [
            ((1,), TypeError),
            ((2, 1), ValueError),
            ((-1, 2), ValueError),
            ("ab", TypeError),
            ((0.5, 1), TypeError),
            ([0, 1], TypeError),
        ]
    ):
        case(f"HBM.{method}-rows-{i}", getattr(HBM(trace=True), method), exc, "rows", "Q", 4, rows=rows)
for i, (rows, cols, exc, name) in enumerate(
    [
        (None, (0, 1), TypeError, "rows"),
        ((0, 1), None, TypeError, "cols"),
        ((0, 1), (3, 2), ValueError, "cols"),
        ((1.5, 2), (0, 1), TypeError, "rows"),
    ]
):
    case(f"HBM.compute-{i}", HBM(trace=True).compute, exc, name, rows, cols)
for i, (kw, exc, name) in enumerate(
    [
        ({"kind": "load"}, ValueError, "kind"),
        ({"elements": -1}, ValueError, "elements"),
        ({"elements": 1.5}, TypeError, "elements"),
        ({"tensor": 3}, TypeError, "tensor"),
        ({"rows": (2, 1)}, ValueError, "rows"),
    ]
):
    case(f"Event-{i}", Event, exc, name, **({"kind": "read", "tensor": "Q", "elements": 4} | kw))

# --- hardware ------------------------------------------------------------------------------------------------

for i, (gpu, exc) in enumerate(
    [(None, TypeError), (42, TypeError), ("X100", ValueError), ("", ValueError), (["H100"], TypeError)]
):
    case(f"get_gpu-{i}", get_gpu, exc, "gpu", gpu)
    case(f"peak-gpu-{i}", peak, exc, "gpu", gpu)
    case(f"decode_time-gpu-{i}", decode_time, exc, "gpu", 1, 1024, gpu=gpu)
for i, (dt, exc) in enumerate(
    [(None, TypeError), (16, TypeError), ("int3", ValueError), ("fp4", ValueError), (["bf16"], TypeError)]
):
    case(f"peak-dtype-{i}", peak, exc, "dtype", "H100", dt)
    case(f"ridge_point-dtype-{i}", ridge_point, exc, "dtype", "H100", dt)
    case(f"attainable-dtype-{i}", attainable, exc, "dtype", 10, "H100", dt)
    if dt != "fp4":  # fp4 has a size; decode_time only needs bytes per element
        case(f"decode_time-dtype-{i}", decode_time, exc, "dtype", 1, 1024, dtype=dt)
        case(f"dtype_name-{i}", dtype_name, exc, "dtype", dt)
BAD_NONNEG = [
    (-1, ValueError, "-1"),
    (np.nan, ValueError, "nan"),
    (np.inf, ValueError, "inf"),
    (True, TypeError, None),
    ("5", TypeError, "5"),
    ("abc", TypeError, "abc"),
    ([1, -1], ValueError, "-1"),
    (1j, TypeError, None),
    (np.array(["1"]), TypeError, None),
    (None, TypeError, None),
    (np.array([1, 2], dtype=object), TypeError, None),
    ([True, False], TypeError, None),
]
for i, (bad, exc, value) in enumerate(BAD_NONNEG):
    case(f"attainable-intensity-{i}", attainable, exc, "intensity", bad, "H100", value=value)
    case(f"roofline_time-flops-{i}", roofline_time, exc, "flops", bad, 1e8, "H100", value=value)
    case(f"roofline_time-bytes-{i}", roofline_time, exc, "bytes", 1e9, bad, "H100", value=value)
for i, (args, kw, exc, name) in enumerate(
    [
        ((0, 1e6, "H100"), {}, ValueError, "n_blocks"),
        ((1.5, 1e6, "H100"), {}, TypeError, "n_blocks"),
        ((True, 1e6, "H100"), {}, TypeError, "n_blocks"),
        (("8", 1e6, "H100"), {}, TypeError, "n_blocks"),
        ((8, -1, "H100"), {}, ValueError, "block_bytes"),
        ((8, np.nan, "H100"), {}, ValueError, "block_bytes"),
        ((8, np.inf, "H100"), {}, ValueError, "block_bytes"),
        ((8, True, "H100"), {}, TypeError, "block_bytes"),
        ((8, "1e6", "H100"), {}, TypeError, "block_bytes"),
        ((8, 10**400, "H100"), {}, ValueError, "block_bytes"),
        ((8, 1e6, "H100"), {"sms": 0}, ValueError, "sms"),
        ((8, 1e6, "H100"), {"sms": 2.7}, TypeError, "sms"),
        ((8, 1e6, "H100"), {"sms": True}, TypeError, "sms"),
        ((8, 1e6, "H100"), {"sms": "132"}, TypeError, "sms"),
    ]
):
    case(f"sm_share_time-{i}", sm_share_time, exc, name, *args, **kw)
for i, (kw, exc, name) in enumerate(
    [
        ({"batch": 0}, ValueError, "batch"),
        ({"batch": 1.5}, TypeError, "batch"),
        ({"batch": True}, TypeError, "batch"),
        ({"context": 0}, ValueError, "context"),
        ({"context": "1024"}, TypeError, "context"),
        ({"context": 1 << 60}, ValueError, "context"),
        ({"kv_heads": 0}, ValueError, "kv_heads"),
        ({"splits": 0}, ValueError, "splits"),
        ({"splits": 2048}, ValueError, "splits"),
        ({"splits": True}, TypeError, "splits"),
        ({"head_dim": 0}, ValueError, "head_dim"),
        ({"group": 0}, ValueError, "group"),
        ({"group": 2.5}, TypeError, "group"),
    ]
):
    case(f"decode_time-{i}", decode_time, exc, name, **({"batch": 1, "context": 1024} | kw))
for i, (kw, exc, name) in enumerate(
    [
        ({"candidates": "abc"}, TypeError, "candidates"),
        ({"candidates": 5}, TypeError, "candidates"),
        ({"candidates": [0, 2]}, ValueError, "candidates"),
        ({"candidates": [1.5]}, TypeError, "candidates"),
        ({"candidates": [True]}, TypeError, "candidates"),
        ({"candidates": [4096]}, ValueError, "context"),
        ({"context": 0}, ValueError, "context"),
        ({"batch": "1"}, TypeError, "batch"),
        ({"head_dim": 0}, ValueError, "head_dim"),
    ]
):
    case(f"best_split-{i}", best_split, exc, name, **({"batch": 1, "context": 1024} | kw))
H100 = get_gpu("H100")
for i, (kw, exc, name) in enumerate(
    [
        ({"sms": 0}, ValueError, "sms"),
        ({"sms": 1.5}, TypeError, "sms"),
        ({"hbm_bandwidth": 0.0}, ValueError, "hbm_bandwidth"),
        ({"hbm_bandwidth": np.nan}, ValueError, "hbm_bandwidth"),
        ({"hbm_bytes": -1}, ValueError, "hbm_bytes"),
        ({"l2_bytes": -1}, ValueError, "l2_bytes"),
        ({"peak_flops": {}}, TypeError, "peak_flops"),
        ({"peak_flops": {"bf16": -1.0}}, ValueError, "peak_flops"),
        ({"peak_flops": {"int3": 1e15}}, ValueError, "dtype"),
        ({"name": ""}, TypeError, "name"),
    ]
):
    case(
        f"GPU-{i}",
        lambda **kw: GPU(
            **{
                f: getattr(H100, f)
                for f in (
                    "name",
                    "sms",
                    "hbm_bytes",
                    "hbm_bandwidth",
                    "sram_per_sm",
                    "l2_bytes",
                    "peak_flops",
                )
            }
            | kw
        ),
        exc,
        name,
        **kw,
    )

# --- models ------------------------------------------------------------------------------------------------------

for i, (m, exc) in enumerate([(None, TypeError), (3, TypeError), ("GPT-9", ValueError), ("", ValueError)]):
    case(f"get_model-{i}", get_model, exc, "model", m)
    case(f"linear_flops_per_token-{i}", linear_flops_per_token, exc, "model", m)
    case(f"attention_linear_crossover-{i}", attention_linear_crossover, exc, "model", m)
    case(f"prefill_cost-model-{i}", prefill_cost, exc, "model", m, "H100", 1024)
for i, (bad, exc, value) in enumerate(
    [
        (0, ValueError, "0"),
        (-3, ValueError, "-3"),
        (1.5, TypeError, "1.5"),
        ("1024", TypeError, "1024"),
        (True, TypeError, None),
        (None, TypeError, None),
        (1 << 60, ValueError, None),
        ([1024], TypeError, None),
    ]
):
    case(f"prefill_cost-N-{i}", prefill_cost, exc, "N", "Llama-3-8B", "H100", bad, value=value)
for i, (kw, exc, name) in enumerate(
    [
        ({"sram": 100}, ValueError, "sram"),
        ({"sram": 0}, ValueError, "sram"),
        ({"sram": True}, TypeError, "sram"),
        ({"dtype": "fp4"}, ValueError, "dtype"),
        ({"dtype": "int4"}, ValueError, "dtype"),
        ({"dtype": None}, TypeError, "dtype"),
    ]
):
    case(f"prefill_cost-{i}", prefill_cost, exc, name, "Llama-3-8B", "H100", 1024, **kw)
    case(f"prefill_cost_curve-{i}", prefill_cost_curve, exc, name, "Llama-3-8B", "H100", [1024], **kw)
for i, (Ns, exc) in enumerate(
    [
        ([], ValueError),
        ([0], ValueError),
        ([1 << 25], ValueError),
        ([1.5], TypeError),
        ("abc", TypeError),
        ([True], TypeError),
        (np.array(["1"]), TypeError),
        (None, TypeError),
        (True, TypeError),
        (np.array([1, 2], dtype=object), TypeError),
    ]
):
    case(f"prefill_cost_curve-Ns-{i}", prefill_cost_curve, exc, "Ns", "Llama-3-8B", "H100", Ns)
LLAMA = get_model("Llama-3-8B")
for i, (kw, exc, name) in enumerate(
    [
        ({"layers": 0}, ValueError, "layers"),
        ({"head_dim": 1.5}, TypeError, "head_dim"),
        ({"kv_heads": 0}, ValueError, "kv_heads"),
        ({"q_heads": 30}, ValueError, "q_heads"),
        ({"name": None}, TypeError, "name"),
        ({"params": True}, TypeError, "params"),
    ]
):
    case(
        f"Model-{i}",
        lambda **kw: Model(
            **{
                f: getattr(LLAMA, f)
                for f in (
                    "name",
                    "layers",
                    "hidden",
                    "q_heads",
                    "kv_heads",
                    "head_dim",
                    "intermediate",
                    "vocab",
                    "params",
                    "source",
                )
            }
            | kw
        ),
        exc,
        name,
        **kw,
    )

# --- the data folder and the checks themselves ----------------------------------------------------------------

for i, (name, exc) in enumerate(
    [
        ("../README.md", ValueError),
        ("/etc/passwd", ValueError),
        ("..", ValueError),
        ("sub/gpus.json", ValueError),
        (None, TypeError),
        ("", TypeError),
        ("nope.json", FileNotFoundError),
    ]
):
    case(f"data_path-{i}", _catalog.data_path, exc, "name" if exc is not FileNotFoundError else "nope", name)
for i, (fn, args, exc, name) in enumerate(
    [
        (_check.as_bool, ("flag", "False"), TypeError, "flag"),
        (_check.as_bool, ("flag", 1), TypeError, "flag"),
        (_check.as_int, ("n", 2.5), TypeError, "n"),
        (_check.as_int, ("n", 5, 0, 4), ValueError, "n"),
        (_check.as_float, ("x", np.bool_(False)), TypeError, "x"),
        (_check.as_float, ("x", 10**400), ValueError, "x"),
        (_check.choice, ("mode", "c", ("a", "b")), ValueError, "mode"),
        (_check.choice, ("mode", 1, ("a",)), TypeError, "mode"),
        (_check.choice, ("k", True, (1, 2)), ValueError, "k"),
        (_check.as_array, ("a", [[1], [1, 2]]), TypeError, "a"),
        (lambda *a: _check.as_array(*a, ndim=2), ("a", [1, 2]), ValueError, "a"),
        (_check.as_counts, ("N", [1, 2**64]), ValueError, "N"),
        (_check.as_reals, ("r", [1, -1], 0.0), ValueError, "r"),
    ]
):
    case(f"_check-{i}", fn, exc, name, *args)


@pytest.mark.parametrize("fn, args, kwargs, exc, name, value", CASES)
def test_bad_input_is_refused_by_name(fn, args, kwargs, exc, name, value):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning on the way to the error is a leak too
        with pytest.raises(exc) as info:
            fn(*args, **kwargs)
    assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
    msg = str(info.value)
    assert re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", msg), (
        f"{name!r} not named in: {msg}"
    )
    if value is not None:
        assert value in msg, f"value {value!r} not shown in: {msg}"


def test_a_few_hundred_cases():
    assert len(CASES) >= 600


def test_nothing_counted_when_refused():
    hbm = HBM(trace=True)
    for bad in (-1, 1.5, "3"):
        with pytest.raises((TypeError, ValueError)):
            hbm.read("Q", bad)
    with pytest.raises(ValueError):
        flash_attention(_with(Q, (4, 3), np.nan), K, V, hbm=hbm)
    assert hbm.total == 0 and hbm.events == []


# --- the known leaks, as they were reported ---------------------------------------------------------------------


def test_nan_row_is_not_a_masked_row():
    q = np.array([[np.nan, 0, 0, 0], [1, 0, 0, 0]])
    with pytest.raises(ValueError, match=r"\bq\b.*nan"):
        flash_attention(q, np.eye(3, 4), np.eye(3, 4), return_lse=True)
    # a row masked by the causal mask stays a legitimate answer: 0 output, lse -inf
    o, lse = flash_attention(np.ones((4, 4)), np.ones((2, 4)), np.ones((2, 4)), causal=True, return_lse=True)
    assert np.all(o[:2] == 0) and np.all(lse[:2] == -np.inf) and np.all(np.isfinite(lse[2:]))


def test_string_false_is_not_causal():
    with pytest.raises(TypeError, match=r"\bcausal\b.*'False'"):
        flash_io(4096, 64, 100_000, "fa1", "False")
    assert flash_io(4096, 64, 100_000, "fa1", np.bool_(False)) == flash_io(4096, 64, 100_000, "fa1", False)


def test_fractional_bytes_are_exact():
    hbm = HBM()
    hbm.read("K", 3)
    assert hbm.bytes(0.5) == 1.5 and hbm.bytes(0.25) == 0.75 and hbm.bytes(2) == 6
    hbm.read("V", 1)
    assert hbm.bytes(0.5) == 2 and isinstance(hbm.bytes(0.5), int)


def test_online_softmax_minus_inf_is_masked_not_bad():
    assert online_softmax([-np.inf, 0.0, -np.inf], chunk=1).tolist() == [0.0, 1.0, 0.0]
    assert softmax([-np.inf, -np.inf]).tolist() == [0.0, 0.0]


def test_merge_empty_states_are_fine_but_nan_is_not():
    o, lse = merge((np.zeros(3), -np.inf), (np.ones(3), -np.inf))
    assert np.all(o == 0) and lse == -np.inf
    with pytest.raises(ValueError, match="lse"):
        merge((np.zeros(3), np.nan), (np.ones(3), 0.0))


# --- no RuntimeWarning escapes on accepted input -------------------------------------------------------------------


def _edge_calls():
    huge = np.full((3, 4), 1e150)  # logits ~ 1e300 / 2: finite, near the top
    tiny = np.full((3, 4), 1e-300)  # logits underflow to 0
    spread = np.array([[300.0, -300.0, 0.0, 1.0]] * 3)  # exp underflows for most keys
    f16 = RNG.standard_normal((9, 8)).astype(np.float16)
    calls = [
        ("flash-huge", flash_attention, (huge, huge, huge), {"return_lse": True}),
        ("flash-fa1-huge", flash_attention, (huge, -huge, huge), {"order": "fa1"}),
        ("flash-tiny", flash_attention, (tiny, tiny, tiny), {"causal": True}),
        ("flash-spread", flash_attention, (spread * 10, np.eye(4) * 10, np.eye(4)), {"block_c": 1}),
        (
            "flash-masked-rows",
            flash_attention,
            (np.ones((6, 4)), np.ones((2, 4)), np.ones((2, 4))),
            {"causal": True, "return_lse": True, "order": "fa1"},
        ),
        ("flash-f16", flash_attention, (f16, f16, f16), {"causal": True, "block_r": 2, "block_c": 3}),
        (
            "fa2_head-masked",
            fa2_head,
            (np.ones((6, 4)), np.ones((2, 4)), np.ones((2, 4))),
            {"block_r": 1, "block_c": 1, "causal": True, "return_lse": True},
        ),
        (
            "standard-masked",
            standard_attention,
            (np.ones((6, 4)), np.ones((2, 4)), np.ones((2, 4))),
            {"causal": True},
        ),
        ("standard-huge", standard_attention, (huge, huge, huge), {}),
        ("state-empty", attention_state, (Q, K[:0], V[:0]), {}),
        ("state-all-masked", attention_state, (Q, K, V), {"mask": np.zeros((5, 7), dtype=bool)}),
        ("state-huge", attention_state, (huge, huge, huge), {}),
        ("state-tiny-scale", attention_state, (Q, K, V), {"scale": 1e-300}),
        ("merge-far-apart", merge, ((np.ones(2), 1e308), (np.ones(2), -1e308)), {}),
        ("merge-empty", merge, ((np.zeros(2), -np.inf), (np.zeros(2), -np.inf)), {}),
        (
            "merge_states-mixed",
            merge_states,
            ([(np.ones(2), -np.inf), (np.ones(2), 700.0), (np.ones(2), -700.0)],),
            {},
        ),
        ("softmax-extremes", softmax, (np.array([1e308, -1e308, -np.inf]),), {}),
        ("online-extremes", online_softmax, (np.array([1e308, -1e308, -np.inf, 0.0]),), {"chunk": 1}),
        ("online-all-masked", online_softmax_trace, (np.full(4, -np.inf),), {"chunk": 3}),
        ("split_kv-huge", split_kv_attention, (huge[0], huge, huge, 3), {}),
        ("cascade-empty-unique", cascade_attention, (Q[:2], K, V, [(K[:0], V[:0])] * 2), {}),
        ("cascade-empty-prefix", cascade_attention, (Q[:2], K[:0], V[:0], [(K[:1], V[:1])] * 2), {}),
        ("intensity-tiny", intensity, (1e-300, 1e-300, 1e-300), {}),
        ("intensity-huge", intensity, (1e100, 1e100, 1e100), {}),
        ("decode_cost-big", decode_cost, (np.array([8, 16]), 1, 1 << 40, 128), {}),
        ("attainable-huge", attainable, (1e308, "H100"), {}),
        ("roofline-tiny", roofline_time, (1e-320, 1e-320, "H100"), {}),
        ("sm_share-huge", sm_share_time, (1, 1e300, "H100"), {}),
        ("decode_time-huge", decode_time, (1 << 20, 1 << 50), {"splits": 64}),
        ("flash_io-huge", flash_io, (1 << 60, 256, 1024), {"causal": True, "order": "fa2"}),
        ("lower_bound-big", lower_bound, (np.array([1, 1 << 50]), 1 << 20, 1), {}),
        ("io_ratio-array", io_ratio, (np.array([1, 7, 4096]), 64), {"causal": True}),
        ("prefill-1", prefill_cost, ("Gemma-2-9B", "H100", 1), {}),
        ("prefill-huge", prefill_cost, ("Llama-3-70B", "B200", 1 << 53), {}),
        ("prefill_curve", prefill_cost_curve, ("DeepSeek-V3", "A100", [1, 1 << 24]), {}),
    ]
    return [pytest.param(fn, args, kw, id=i) for i, fn, args, kw in calls]


@pytest.mark.parametrize("fn, args, kwargs", _edge_calls())
@pytest.mark.parametrize("mode", ["default", "raise"])
def test_no_runtime_warning_on_accepted_input(fn, args, kwargs, mode):
    """Accepted edge inputs: no warning of any kind, and (mode 'raise') no floating-point
    overflow, division by zero or invalid operation that the function does not handle itself."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if mode == "raise":
            with np.errstate(all="raise", under="ignore"):
                out = fn(*args, **kwargs)
        else:
            out = fn(*args, **kwargs)
    arrays = out if isinstance(out, tuple) else (out,)
    for a in arrays:
        if isinstance(a, np.ndarray) and a.dtype.kind == "f":
            assert not np.isnan(a).any()


@pytest.mark.parametrize(
    "fn, args",
    [
        (flash_attention, (np.full((2, 4), 1e200), np.full((3, 4), 1e200), np.ones((3, 4)))),
        (standard_attention, (np.full((2, 4), 1e200), np.full((3, 4), 1e200), np.ones((3, 4)))),
        (attention_state, (np.full((2, 4), 1e200), np.full((3, 4), -1e200), np.ones((3, 4)))),
        (flash_attention, (np.ones((2, 4)), np.ones((3, 4)), np.full((3, 4), 1.7e308))),
        (
            attention_state,
            (np.ones((2, 4), np.float32), np.ones((3, 4), np.float32), np.full((3, 4), 3e38, np.float32)),
        ),
    ],
)
def test_overflow_is_an_error_not_inf(fn, args):
    """Finite inputs whose logits or weighted sums overflow: ValueError, never inf or a silently
    masked key (an overflow to -inf would look like a mask)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="overflow"):
            fn(*args)


# --- cached results are not shared mutable state -------------------------------------------------------------------


def test_catalog_tables_are_read_only():
    from attnlab.machine import hardware, models

    for loaded in (hardware._load(), models._load()):
        for table in loaded:
            with pytest.raises(TypeError):
                table["X"] = None
    g = get_gpu("H100")
    with pytest.raises(TypeError):
        g.peak_flops["bf16"] = 1.0
    names = hardware.gpus()
    names.append("mine")  # a copy: the next call is unchanged
    assert "mine" not in hardware.gpus()
