"""More refusals of layers 0 and 1, one reproducer per defect: numbers that were passed through
as if they were right (a fractional byte count under the limit, a bool among counts, a float
request id), raw Python and numpy errors where one naming the parameter belongs, and sizes that
were allocated or looped over before anything was checked.

Every size case is refused before numpy allocates: the inputs are broadcast views of a few bytes
standing for arrays of many GiB, so a missing check would show up as a MemoryError or a test that
does not finish, never as a pass.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from attnlab import fmt, validate
from attnlab.core import inputs, lowprec
from attnlab.core.decode import decode_cost, intensity, split_kv_attention
from attnlab.core.mla import mla_decode_cost
from attnlab.core.paged import BSRLayout, PagedKVCache, to_bsr
from attnlab.core.softmax import attention_state, merge_states, softmax, softmax_scale
from attnlab.core.variants import sliding_window, variant_mask


def _raises(exc, word, fn, /, *args, **kwargs):
    """fn(*args, **kwargs) raises exactly exc (not a subclass standing in for it) whose message
    names `word` as a word; no warning on the way."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(Exception) as info:
            fn(*args, **kwargs)
    assert isinstance(info.value, exc), f"{type(info.value).__name__}: {info.value}"
    assert re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", str(info.value)), str(info.value)
    return str(info.value)


def _huge(shape, dtype=np.float64):
    """A read-only view of `shape` that costs one element of memory."""
    return np.broadcast_to(np.ones((), dtype), shape)


# --- silent wrong answers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "nbytes, exc",
    [
        (2**31 + 0.9, TypeError),
        (2.5, TypeError),
        (-1, ValueError),
        ("100", TypeError),
        (True, TypeError),
        (None, TypeError),
        (float("nan"), TypeError),
        (2**31 + 1, ValueError),
    ],
)
def test_check_bytes_refuses_what_is_not_a_byte_count_in_range(nbytes, exc):
    _raises(exc, "x", validate.check_bytes, "x", nbytes)


def test_check_bytes_passes_counts_in_range():
    assert validate.check_bytes("x", np.int64(2**31)) == 2**31
    assert validate.check_bytes("x", 0) == 0 and type(validate.check_bytes("x", np.int32(5))) is int


def test_bsr_to_scipy_counts_its_temporaries():
    lay = BSRLayout([0, 1], [0], [1], 2**30, 1)  # 1 GiB of int8 blocks, 8 GiB of arange
    _raises(ValueError, "to_scipy", lay.to_scipy)


@pytest.mark.parametrize(
    "call, exc, word",
    [
        (lambda: validate.as_counts("c", [True, 2]), TypeError, "c"),
        (lambda: validate.as_counts("c", [[1, 2], [3, np.True_]]), TypeError, "c"),
        (lambda: validate.as_reals("x", [1.5, False]), TypeError, "x"),
        (lambda: BSRLayout([0, 1, 2], [0, 1], [2, True], 4, 4), TypeError, "kv_last_page_len"),
        (lambda: BSRLayout([0, True], [0], [1], 4, 4), TypeError, "kv_indptr"),
        (lambda: decode_cost([8, True], 1, 100, 64), TypeError, "g"),
    ],
)
def test_bools_among_numbers_are_refused(call, exc, word):
    _raises(exc, word, call)


def test_masks_may_still_be_lists_of_bools():
    q = np.ones((2, 4))
    o, _ = attention_state(q, q, q, mask=[[True, False], [True, True]])
    assert np.allclose(o, 1.0)


def test_compare_methods_refuses_a_block_it_cannot_label():
    _raises(TypeError, "block", lowprec.compare_methods, block=None, n=64, d=8)


@pytest.mark.parametrize(
    "call, word",
    [
        (lambda c: to_bsr(c, {0, 1}), "rids"),
        (lambda c: to_bsr(c, {0: 1}), "rids"),
        (lambda c: merge_states([(np.ones(2), 0.0), (np.ones(2), 0.0)], order={1, 0}), "order"),
    ],
)
def test_unordered_collections_are_refused_where_order_matters(call, word):
    cache = PagedKVCache(8, 4, 2)
    for n in (3, 5):
        cache.add(np.ones((n, 2)), np.ones((n, 2)))
    _raises(TypeError, word, call, cache)


# --- raw errors -------------------------------------------------------------------------------


def test_short_describes_integers_past_the_digit_limit():
    text = validate.short(10**5000)
    assert len(text) <= 60 and "5001 digits" in text


@pytest.mark.parametrize(
    "call, word",
    [
        (lambda: validate.as_int("n", 10**5000, 1, 10), "n"),
        (lambda: sliding_window(10**5000), "w"),
        (lambda: validate.as_float("x", 10**5000), "x"),
        (lambda: mla_decode_cost("absorbed", 10**400, dtype_bytes=0.5), "l_kv"),
        (lambda: decode_cost(1, 1, 10**400, 1, dtype_bytes=0.5), "l_kv"),
        (lambda: softmax_scale(None, 0), "d"),
        (lambda: BSRLayout([0], [], [], 4, 4), "kv_indptr"),
        (lambda: intensity(np.ones(2), np.ones(3), 4.0), "l_qo"),
        (lambda: decode_cost(np.ones(2, int), np.ones(3, int), 4, 8), "l_qo"),
    ],
)
def test_raw_errors_become_ours(call, word):
    _raises(ValueError, word, call)


@pytest.mark.parametrize("d", [2.5, True, "64", None])
def test_softmax_scale_takes_a_head_dim(d):
    _raises(TypeError, "d", softmax_scale, None, d)


def test_fields_equal_of_other_types_is_not_implemented():
    assert validate.fields_equal(1, 1) is NotImplemented
    assert validate.fields_equal("a", "a") is NotImplemented


def test_attention64_with_scores_beyond_float64_is_refused_without_nan():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((8, 4)) for _ in range(3))
    _raises(ValueError, "q", lowprec.attention64, 1e200 * q, 1e200 * k, v)
    assert np.isfinite(lowprec.attention64(1e100 * q, k, v)).all()  # large, still finite


# --- wrong class or name ----------------------------------------------------------------------


@pytest.mark.parametrize("rid", [0.0, "0", True, None, np.float64(0)])
def test_request_ids_of_the_wrong_type_are_type_errors(rid):
    cache = PagedKVCache(8, 4, 2)
    cache.add(np.ones((3, 2)), np.ones((3, 2)))
    for call in (cache.block_table, cache.seq_len, cache.gather, cache.fork, cache.free):
        _raises(TypeError, "rid", call, rid)
    _raises(TypeError, "rid", to_bsr, cache, [rid])
    _raises(ValueError, "rid", cache.seq_len, 7)  # an int, not a request
    assert cache.seq_len(np.int64(0)) == 3


@pytest.mark.parametrize("i", [1.0, True, "0", None])
def test_bsr_pages_takes_an_integer_index(i):
    lay = BSRLayout([0, 1, 2], [0, 1], [1, 1], 4, 4)
    _raises(TypeError, "i", lay.pages, i)
    assert lay.pages(np.int32(1)).tolist() == [1]


@pytest.mark.parametrize(
    "call, exc, word",
    [
        (lambda: fmt.si("0.5"), TypeError, "x"),
        (lambda: fmt.si(True), TypeError, "x"),
        (lambda: fmt.seconds(-1), ValueError, "t"),
        (lambda: fmt.seconds(float("nan")), ValueError, "t"),
        (lambda: fmt.seconds("1"), TypeError, "t"),
        (lambda: fmt.binary_bytes("1"), TypeError, "b"),
        (lambda: fmt.binary_bytes(-1), ValueError, "b"),
        (lambda: fmt.magnitude("1e-8"), TypeError, "x"),
    ],
)
def test_formats_refuse_what_they_cannot_format(call, exc, word):
    _raises(exc, word, call)


def test_formats_still_format():
    assert fmt.si(9_355_264) == "9.36 M" and fmt.si(-2e3, "B") == "-2 kB"
    assert fmt.seconds(0) == "0 µs" and fmt.seconds(0.0831) == "83.1 ms"
    assert fmt.binary_bytes(2**36) == "64 GiB" and fmt.magnitude(5.2e-8) == "5e-8"


# --- sizes, refused before anything is allocated or looped over -------------------------------


@pytest.mark.parametrize(
    "call, word",
    [
        (lambda: inputs.causal_mask(2**20, 2**20), "causal_mask"),
        (lambda: softmax(_huge((2**16, 2**16))), "x"),
        (lambda: softmax(_huge((2**12, 2**12, 64))), "softmax"),
        (lambda: attention_state(_huge((2**17, 4)), _huge((2**17, 4)), _huge((2**17, 4))), "attention_state"),
        (lambda: lowprec.quantise(_huge((2**31,), np.float32)), "x"),
        (lambda: lowprec.quantise(_huge((2**27,), np.float32)), "quantise"),
        (lambda: variant_mask([sliding_window(3)], 2**15, 2**16), "variant_mask"),
        (lambda: split_kv_attention(np.ones(4), _huge((2**31, 4)), _huge((2**31, 4)), 4), "k"),
        (lambda: split_kv_attention(np.ones(4), np.ones((8, 4)), np.ones((8, 4)), 2**40), "splits"),
        (lambda: lowprec.attention_error(n=65536, d=1, n_outliers=1), "n"),
        (lambda: intensity(_huge((2**15, 1)), 1, _huge((1, 2**15))), "intensity"),
    ],
)
def test_sizes_are_refused_before_allocating(call, word):
    _raises(ValueError, word, call)


def test_sizes_below_the_limits_still_run():
    assert inputs.causal_mask(3, 5).sum() == 12
    assert variant_mask([sliding_window(3)], 64, 128).sum() == 64 * 3
    assert lowprec.quantise(_huge((1000,), np.float32)).shape == (1000,)
    assert softmax(_huge((3, 4))).sum() == pytest.approx(3.0)


@pytest.mark.parametrize(
    "call, word",
    [
        (lambda: inputs.causal_mask(10**5000, 4), "n_q"),
        (lambda: inputs.block_sizes(10**5000), "d"),
        (lambda: intensity(8, 1, 100, dtype_bytes=10**400), "dtype_bytes"),
        (lambda: variant_mask([sliding_window(3)], 10**5000, 4), "n_q"),
    ],
)
def test_integers_past_any_size_are_refused_by_name(call, word):
    _raises(ValueError, word, call)


def test_tile_blocks_past_the_sequence_are_one_tile():
    from attnlab.core.variants import causal, tile_io, tile_mask

    assert tile_mask([causal()], 8, 8, 10**5000, 10**5000).tolist() == [["partial"]]
    assert tile_io([causal()], 8, 8, 10**5000, 2**40, 2) == tile_io([causal()], 8, 8, 8, 8, 2)
