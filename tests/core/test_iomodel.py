"""HBM accounting: the counter, the closed forms in iomodel and an independent block enumeration
must agree exactly; the lecture's published numbers; how the IO scales with N and M."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from attnlab.core.attention import flash_attention, standard_attention
from attnlab.core.hbm import HBM, Event
from attnlab.core.iomodel import flash_io, io_ratio, io_table, lower_bound, standard_io

from refs import reference as ref

ORDERS = ("fa1", "fa2")


def _qkv(seed, n_q, n_k, d, d_v=None, lead=(), hkv=None):
    rng = np.random.default_rng(seed)
    d_v = d if d_v is None else d_v
    shp = tuple(lead)
    kv_lead = (lead[0], hkv if hkv is not None else lead[1]) if lead else ()
    return (
        rng.standard_normal(shp + (n_q, d)),
        rng.standard_normal(kv_lead + (n_k, d)),
        rng.standard_normal(kv_lead + (n_k, d_v)),
    )


def _counted(fn, *args, trace=False, **kwargs):
    hbm = HBM(trace=trace)
    fn(*args, hbm=hbm, **kwargs)
    return hbm


# --- the HBM counter itself ---------------------------------------------------------------------


def test_hbm_counts_reads_writes_total_bytes():
    hbm = HBM()
    assert (hbm.reads, hbm.writes, hbm.total) == (0, 0, 0)
    assert hbm.by_tensor() == {}
    hbm.read("Q", 64 * 128)
    hbm.write("O", 64 * 128)
    hbm.read("K", np.zeros((3, 5)))  # an array counts its elements
    hbm.read("Q", 7)
    hbm.write("Q", 0)
    assert hbm.reads == 64 * 128 + 15 + 7
    assert hbm.writes == 64 * 128
    assert hbm.total == hbm.reads + hbm.writes
    assert hbm.by_tensor() == {"Q": (64 * 128 + 7, 0), "O": (0, 64 * 128), "K": (15, 0)}
    assert hbm.bytes() == 2 * hbm.total
    assert hbm.bytes(4) == 4 * hbm.total
    assert hbm.bytes(dtype_bytes=1) == hbm.total
    assert "reads=" in repr(hbm)


@pytest.mark.parametrize(
    "n",
    [np.int64(7), np.int32(7), np.uint16(7), np.arange(10)[7]],
    ids=["int64", "int32", "uint16", "arange-item"],
)
def test_hbm_numpy_integer_is_a_count(n):
    # a numpy integer (e.g. r1 - r0 from np.arange, lengths[i] * d) is an element count,
    # not a one-element array
    hbm = HBM()
    hbm.read("K", n)
    hbm.write("O", n * 2)
    assert hbm.by_tensor() == {"K": (7, 0), "O": (0, 14)}


def test_hbm_by_tensor_first_touched_order():
    # by_tensor's docstring: "tensors in first-touched order" (a write-only tensor touched
    # before a later read tensor comes first)
    hbm = HBM()
    hbm.read("Q", 1)
    hbm.write("O", 1)
    hbm.read("K", 1)
    assert list(hbm.by_tensor()) == ["Q", "O", "K"]


def test_hbm_reset():
    hbm = HBM(trace=True)
    hbm.read("Q", 10, rows=(0, 10))
    hbm.write("O", 4)
    hbm.compute((0, 2), (0, 2))
    assert len(hbm.events) == 3
    hbm.reset()
    assert (hbm.reads, hbm.writes, hbm.total) == (0, 0, 0)
    assert hbm.by_tensor() == {} and hbm.events == []
    hbm.read("V", 3)
    assert hbm.by_tensor() == {"V": (3, 0)}


def test_hbm_trace_only_when_asked():
    off = HBM()
    off.read("Q", 8, rows=(0, 2))
    off.write("O", 8, rows=(0, 2))
    off.compute((0, 2), (0, 4))
    assert off.events == [] and off.total == 16

    on = HBM(trace=True)
    on.read("Q", 8, rows=(0, 2))
    on.write("O", 8, rows=(0, 2))
    on.compute((0, 2), (0, 4))
    assert on.events == [
        Event("read", "Q", 8, (0, 2)),
        Event("write", "O", 8, (0, 2)),
        Event("compute", "S", 0, (0, 2), (0, 4)),
    ]
    assert on.total == 16  # compute is traced, never counted


def test_hbm_trace_off_for_kernels():
    q, k, v = _qkv(0, 9, 9, 4)
    for fn, kw in [
        (standard_attention, {}),
        (flash_attention, {"order": "fa1", "block_r": 3, "block_c": 3}),
        (flash_attention, {"order": "fa2", "block_r": 3, "block_c": 3}),
    ]:
        assert _counted(fn, q, k, v, **kw).events == []
        assert len(_counted(fn, q, k, v, trace=True, **kw).events) > 0


@pytest.mark.parametrize(
    "n, exc",
    [
        (-1, ValueError),
        (-100, ValueError),
        (2.5, TypeError),
        (3.0, TypeError),
        pytest.param(np.float64(2.5), TypeError, id="np.float64(2.5)"),
        pytest.param(np.float32(4.0), TypeError, id="np.float32(4.0)"),
        (True, TypeError),
        ("4", TypeError),
        (None, TypeError),
    ],
)
@pytest.mark.parametrize("method", ["read", "write"])
def test_hbm_bad_counts(method, n, exc):
    hbm = HBM(trace=True)
    with pytest.raises(exc, match=r"\bn\b"):
        getattr(hbm, method)("Q", n)
    assert hbm.total == 0 and hbm.events == []


# --- standard attention: counter == closed form == enumeration ----------------------------------


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n_q, n_k, d", [(1, 1, 1), (5, 5, 3), (7, 13, 4), (13, 7, 6), (32, 32, 8)])
def test_standard_counter_equals_closed_forms(n_q, n_k, d, causal):
    q, k, v = _qkv(n_q + n_k, n_q, n_k, d)
    hbm = _counted(standard_attention, q, k, v, causal=causal)
    want = ref.standard_io_ref(n_q, d, n_k)
    assert want == 2 * n_q * d + 2 * n_k * d + 4 * n_q * n_k
    assert hbm.total == want
    assert standard_io(n_q, d, n_k=n_k) == want
    if n_q == n_k:
        assert standard_io(n_q, d) == want
    bt = hbm.by_tensor()
    assert bt["S"] == (n_q * n_k, n_q * n_k)
    assert bt["P"] == (n_q * n_k, n_q * n_k)
    assert bt["Q"] == (n_q * d, 0)
    assert bt["K"] == (n_k * d, 0)
    assert bt["V"] == (n_k * d, 0)
    assert bt["O"] == (0, n_q * d)
    assert set(bt) == {"Q", "K", "V", "S", "P", "O"}


def test_standard_counter_with_dv_and_batched_gqa():
    q, k, v = _qkv(3, 6, 9, 5, d_v=2)
    assert _counted(standard_attention, q, k, v).total == ref.standard_io_ref(6, 5, 9, d_v=2)
    b, hq, hkv = 2, 6, 3
    q, k, v = _qkv(4, 7, 5, 3, lead=(b, hq), hkv=hkv)
    # every query head is one run of Algorithm 0 (its KV head is read for it)
    assert _counted(standard_attention, q, k, v).total == b * hq * ref.standard_io_ref(7, 3, 5)


# --- FlashAttention: counter == iomodel.flash_io == enumeration, exactly ------------------------

SHAPES = [(1, 1, 2), (5, 5, 3), (17, 17, 4), (16, 33, 3), (33, 16, 5), (12, 7, 2)]
BLOCKS = [(1, 1), (4, 4), (5, 3), (16, 7), (64, 64)]


@pytest.mark.parametrize("return_lse", [False, True], ids=["o", "lse"])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("br, bc", BLOCKS)
@pytest.mark.parametrize("n_q, n_k, d", SHAPES)
def test_flash_counter_equals_closed_form_and_enumeration(n_q, n_k, d, br, bc, causal, order, return_lse):
    q, k, v = _qkv(n_q * 31 + n_k, n_q, n_k, d)
    hbm = _counted(
        flash_attention, q, k, v, causal=causal, order=order, block_r=br, block_c=bc, return_lse=return_lse
    )
    enum = ref.flash_io_ref(
        n_q, d, n_k=n_k, block_r=br, block_c=bc, order=order, causal=causal, return_lse=return_lse
    )
    closed = flash_io(
        n_q, d, order=order, causal=causal, n_k=n_k, block_r=br, block_c=bc, return_lse=return_lse
    )
    assert isinstance(closed, int)
    assert hbm.by_tensor() == enum
    assert hbm.total == ref.total(enum) == closed


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n, d, sram", [(300, 16, 1000), (257, 64, 100_000), (130, 8, 200), (100, 5, 33)])
def test_flash_counter_default_blocks_from_sram(n, d, sram, causal, order):
    q, k, v = _qkv(n, n, n, d)
    hbm = _counted(flash_attention, q, k, v, causal=causal, order=order, sram=sram)
    br, bc = ref.paper_blocks(d, sram)
    enum = ref.flash_io_ref(n, d, block_r=br, block_c=bc, order=order, causal=causal)
    assert hbm.by_tensor() == enum
    assert hbm.total == ref.total(enum) == flash_io(n, d, sram, order, causal)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_counter_with_dv(order, causal):
    q, k, v = _qkv(8, 11, 14, 5, d_v=3)
    hbm = _counted(
        flash_attention, q, k, v, causal=causal, order=order, block_r=4, block_c=3, return_lse=True
    )
    assert hbm.by_tensor() == ref.flash_io_ref(
        11, 5, n_k=14, d_v=3, block_r=4, block_c=3, order=order, causal=causal, return_lse=True
    )


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_counter_batched_gqa_is_per_head_times_heads(order, causal):
    b, hq, hkv, n_q, n_k, d = 2, 4, 2, 9, 13, 3
    q, k, v = _qkv(12, n_q, n_k, d, lead=(b, hq), hkv=hkv)
    hbm = _counted(flash_attention, q, k, v, causal=causal, order=order, block_r=4, block_c=5)
    per_head = flash_io(n_q, d, order=order, causal=causal, n_k=n_k, block_r=4, block_c=5)
    assert hbm.total == b * hq * per_head


@pytest.mark.parametrize("n_q, n_k", [(8, 8), (5, 12)])
def test_fa2_writes_each_output_element_once(n_q, n_k):
    d = 3
    q, k, v = _qkv(1, n_q, n_k, d)
    for causal, (br, bc) in itertools.product([False, True], [(1, 1), (3, 2), (16, 16)]):
        bt = _counted(
            flash_attention, q, k, v, causal=causal, order="fa2", block_r=br, block_c=bc
        ).by_tensor()
        assert bt["O"] == (0, n_q * d)  # O never read back, written exactly once
        assert "lse" not in bt and "l" not in bt and "m" not in bt
        bt = _counted(
            flash_attention, q, k, v, causal=causal, order="fa2", block_r=br, block_c=bc, return_lse=True
        ).by_tensor()
        assert bt["lse"] == (0, n_q)
        assert bt["Q"] == (n_q * d, 0)  # every Q row sees a key here: read once


def test_fa1_reads_each_kv_block_once():
    n, d = 20, 4
    q, k, v = _qkv(2, n, n, d)
    for causal, (br, bc) in itertools.product([False, True], [(1, 1), (3, 7), (32, 32)]):
        bt = _counted(
            flash_attention, q, k, v, causal=causal, order="fa1", block_r=br, block_c=bc, return_lse=True
        ).by_tensor()
        assert bt["K"] == (n * d, 0) and bt["V"] == (n * d, 0)
        assert "lse" not in bt  # derived from stored l, m: no extra traffic


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("n_q, n_k, br, bc", [(9, 9, 2, 3), (12, 5, 4, 2), (5, 12, 3, 5), (7, 7, 1, 1)])
def test_trace_visits_exactly_the_unmasked_blocks(n_q, n_k, br, bc, order):
    q, k, v = _qkv(3, n_q, n_k, 2)
    mask = ref.ref_mask(n_q, n_k, True)
    want = [
        ((r0, min(r0 + br, n_q)), (c0, min(c0 + bc, n_k)))
        for r0 in range(0, n_q, br)
        for c0 in range(0, n_k, bc)
        if mask[r0 : r0 + br, c0 : c0 + bc].any()
    ]
    hbm = _counted(flash_attention, q, k, v, causal=True, order=order, block_r=br, block_c=bc, trace=True)
    got = [(e.rows, e.cols) for e in hbm.events if e.kind == "compute"]
    if order == "fa2":  # Q outer: row-major visiting order
        assert got == want
    else:  # K/V outer: column-major
        assert got == sorted(want, key=lambda rc: (rc[1], rc[0]))
    moved = [e for e in hbm.events if e.kind != "compute"]
    assert sum(e.elements for e in moved if e.kind == "read") == hbm.reads
    assert sum(e.elements for e in moved if e.kind == "write") == hbm.writes


# --- the lecture's numbers ------------------------------------------------------------------------


def test_lecture_exercise_n4096_d64():
    fa1 = flash_io(4096, 64)
    assert fa1 == 9_355_264
    assert fa1 == 524_288 + 11 * 802_816
    assert flash_io(4096, 64, 100_000, "fa1") == fa1  # defaults: M = 100k, fa1
    std = standard_io(4096, 64)
    assert std == 68_157_440
    assert round(std / fa1, 1) == 7.3
    assert round(io_ratio(4096, 64), 1) == 7.3


def test_lecture_ratio_at_32k():
    assert 7.5 <= io_ratio(32768, 64) <= 8.5
    assert 1.8 <= io_ratio(32768, 128) <= 2.2


@pytest.mark.parametrize("n", [4096, 8192, 16384, 32768])
def test_fa2_moves_more_than_fa1_at_d64_only_under_fa1s_rule(n):
    # under the lecture's rule (B_r <= d) the FA2 order re-reads K, V every 64 query rows ...
    assert flash_io(n, 64, order="fa2") > flash_io(n, 64, order="fa1")
    # ... under its own tile rule (a tall Q block, B_r = ceil(M/4d)) it moves less than FA1
    assert flash_io(n, 64, order="fa2", rule="fa2") < flash_io(n, 64, order="fa1")


def _fa2_rule(d, sram):
    """FlashAttention-2's tile rule written out: B_r = ceil(M / 4d), B_c = min(ceil(M / 4d), d)."""
    b = math.ceil(sram / (4 * d))
    return b, min(b, d)


def test_fa2_rule_numbers_at_32k():
    """N = 32,768, d = 64: 2Nd (1 + T_r) with T_r = ceil(N / ceil(M/4d)), against FA1's counts;
    the FA2 count falls with M (as 1/M) instead of staying at 2Nd + 2N^2."""
    n, d = 32768, 64
    for sram, t_r in ((100_000, 84), (800_000, 11)):
        assert -(-n // _fa2_rule(d, sram)[0]) == t_r  # B_r = 391, 3125
        assert flash_io(n, d, sram, "fa2", rule="fa2") == 2 * n * d * (1 + t_r)
    assert flash_io(n, d, 100_000, "fa2", rule="fa2") == 356_515_840  # 357 M
    assert flash_io(n, d, 100_000, "fa1") == 543_686_656  # 544 M
    assert flash_io(n, d, 800_000, "fa2", rule="fa2") == 50_331_648  # 50 M
    assert flash_io(n, d, 800_000, "fa1") == 74_842_112  # 75 M
    assert flash_io(n, d, 100_000, "fa2") == 2 * n * d + 2 * n * n  # FA1's cap: 2.15 G
    by_m = [flash_io(n, d, m, "fa2", rule="fa2") for m in (25_000, 100_000, 400_000)]
    assert by_m[0] > 3.5 * by_m[1] > 3.5 * 3.5 * by_m[2]


@pytest.mark.parametrize("seed", range(6))
def test_fa2_rule_counter_equals_closed_form_random_odd_sizes(seed):
    """The counter of flash_attention(order="fa2", rule="fa2") equals the closed form and the
    enumeration with the rule's blocks written out, at random odd sizes, causal or not."""
    rng = np.random.default_rng(100 + seed)
    n_q, n_k, d = (int(x) * 2 + 1 for x in rng.integers(1, 20, 3))
    sram = int(rng.integers(4 * d, 40 * d))
    causal = bool(seed % 2)
    q, k, v = _qkv(seed, n_q, n_k, d)
    br, bc = _fa2_rule(d, sram)
    assert br >= bc
    for order in ORDERS:
        hbm = _counted(flash_attention, q, k, v, causal=causal, order=order, sram=sram, rule="fa2")
        enum = ref.flash_io_ref(n_q, d, n_k=n_k, block_r=br, block_c=bc, order=order, causal=causal)
        assert hbm.by_tensor() == enum, (n_q, n_k, d, sram, order)
        assert hbm.total == flash_io(n_q, d, sram, order, causal, n_k=n_k, rule="fa2")
    # the default rule stays the paper's for either order
    assert _counted(flash_attention, q, k, v, sram=sram).total == flash_io(n_q, d, sram, "fa2", n_k=n_k)


def test_rule_is_refused_by_name():
    with pytest.raises(ValueError, match="rule"):
        flash_io(1024, 64, rule="fa3")
    with pytest.raises(TypeError, match="rule"):
        flash_io(1024, 64, rule=2)
    with pytest.raises(ValueError, match="rule"):
        flash_attention(np.eye(4), np.eye(4), np.eye(4), rule="own")


def test_lecture_sram_sweep_n8192_d128():
    assert round(flash_io(8192, 128, 25_000) / 1e6) == 536
    assert round(flash_io(8192, 128, 400_000) / 1e6) == 37
    srams = np.geomspace(25_000, 400_000, 13).round().astype(int)
    io = np.array([flash_io(8192, 128, int(m)) for m in srams], dtype=np.float64)
    assert np.all(np.diff(io) <= 0)  # more SRAM never costs more
    prod = io * srams
    assert prod.max() / prod.min() <= 1.5  # roughly 1/M


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("n, d", [(1024, 64), (4096, 64), (8192, 128), (32768, 64)])
def test_causal_moves_less(n, d, order):
    assert flash_io(n, d, order=order, causal=True) < flash_io(n, d, order=order)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("n", [8192, 16384, 32768])
def test_flash_io_grows_like_n_squared(n, d, order):
    r = flash_io(2 * n, d, order=order) / flash_io(n, d, order=order)
    assert 3.5 <= r <= 4.5
    r = standard_io(2 * n, d) / standard_io(n, d)
    assert 3.5 <= r <= 4.5


def test_lower_bound_definition():
    assert lower_bound(4096, 64, 100_000) == pytest.approx(4096**2 * 64**2 / 100_000, rel=1e-15)
    ns = np.array([1024, 2048, 4096])
    lb = lower_bound(ns, 64, 100_000)
    assert lb.shape == (3,)
    assert np.allclose(lb[1:] / lb[:-1], 4.0, rtol=1e-15)


def test_io_table_rows_agree():
    rows = io_table([1024, 4096], 64)
    assert [r["N"] for r in rows] == [1024, 4096]
    for r in rows:
        n = r["N"]
        assert r["standard"] == standard_io(n, 64)
        assert r["fa1"] == flash_io(n, 64, order="fa1")
        assert r["fa2"] == flash_io(n, 64, order="fa2")
        assert r["fa2_own"] == flash_io(n, 64, order="fa2", rule="fa2") < r["fa1"]
        assert r["ratio"] == pytest.approx(r["standard"] / r["fa1"], rel=1e-15)


# --- bad input to the closed forms --------------------------------------------------------------


@pytest.mark.parametrize(
    "call, exc, pattern",
    [
        (lambda: flash_io(0, 64), ValueError, r"\bN\b"),
        (lambda: flash_io(64, 0), ValueError, r"\bd\b"),
        (lambda: flash_io(64, 64, order="fa3"), ValueError, r"\border\b"),
        (lambda: flash_io(64, 64, 100), ValueError, r"\bsram\b"),
        (lambda: flash_io(64, 64, n_k=0), ValueError, r"\bn_k\b"),
        (lambda: flash_io(64, 64, block_r=0, block_c=4), ValueError, r"\bblock_r\b"),
        (lambda: flash_io(64.5, 64), TypeError, r"\bN\b"),
        (lambda: standard_io(-1, 64), ValueError, r"\bN\b"),
        (lambda: standard_io(64, 64, n_k=-2), ValueError, r"\bn_k\b"),
    ],
)
def test_closed_forms_bad_input(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


# --- closed forms: random shapes against the block enumeration, arrays, any size ----------------


def _random_configs(seed, n, n_max):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        n_q, n_k = (int(x) for x in rng.integers(1, n_max + 1, size=2))
        if rng.random() < 0.3:  # very unequal lengths, both ways
            n_q, n_k = (n_q, max(1, n_k // 9)) if rng.random() < 0.5 else (max(1, n_q // 9), n_k)
        br, bc = (int(x) for x in rng.integers(1, 40, size=2))
        yield (
            n_q,
            n_k,
            int(rng.integers(1, 9)),
            br,
            bc,
            ORDERS[int(rng.integers(2))],
            bool(rng.integers(2)),
            bool(rng.integers(2)),
        )


@pytest.mark.parametrize("cfg", list(_random_configs(77, 240, 90)), ids=lambda c: "-".join(map(str, c)))
def test_closed_form_equals_enumeration_random(cfg):
    n_q, n_k, d, br, bc, order, causal, lse = cfg
    enum = ref.total(
        ref.flash_io_ref(n_q, d, n_k=n_k, block_r=br, block_c=bc, order=order, causal=causal, return_lse=lse)
    )
    got = flash_io(n_q, d, order=order, causal=causal, n_k=n_k, block_r=br, block_c=bc, return_lse=lse)
    assert type(got) is int and got == enum


def _grid_count(n_q, n_k, d, br, bc, order, causal, lse):
    """The earlier T_r x T_c block-grid formula (visited blocks as a boolean array), kept here as a
    second, independently written count for sizes the enumeration cannot reach."""
    r0 = np.arange(0, n_q, br)
    r1 = np.minimum(r0 + br, n_q)
    c0 = np.arange(0, n_k, bc)
    c1 = np.minimum(c0 + bc, n_k)
    active = (c0[None, :] <= (r1 - 1 + n_k - n_q)[:, None]) if causal else np.ones((r0.size, c0.size), bool)
    rows, keys = (r1 - r0)[:, None], (c1 - c0)[None, :]
    if order == "fa1":
        return 2 * d * int(keys.sum()) + int((active * rows).sum()) * (3 * d + 4)
    q_read = d * int((rows[:, 0] * active.any(axis=1)).sum())
    return q_read + 2 * d * int((active * keys).sum()) + n_q * d + (n_q if lse else 0)


@pytest.mark.parametrize(
    "cfg",
    [
        (40_000, 40_000, 64, 64, 391),
        (50_000, 7_777, 128, 128, 196),
        (3_333, 60_001, 256, 98, 98),
        (30_000, 30_001, 96, 17, 5),
        (99_999, 12_345, 32, 32, 781),
        (12_345, 99_999, 8, 3, 1000),
    ],
)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_closed_form_equals_block_grid_at_large_sizes(cfg, order, causal):
    n_q, n_k, d, br, bc = cfg
    for lse in (False, True):
        want = _grid_count(n_q, n_k, d, br, bc, order, causal, lse)
        assert (
            flash_io(n_q, d, order=order, causal=causal, n_k=n_k, block_r=br, block_c=bc, return_lse=lse)
            == want
        )


def test_floor_sum_against_brute_force():
    from attnlab.core.iomodel import _floor_sum

    rng = np.random.default_rng(5)
    for _ in range(3000):
        n, m, a, b = (
            int(x)
            for x in (rng.integers(0, 60), rng.integers(1, 50), rng.integers(0, 120), rng.integers(0, 300))
        )
        assert _floor_sum(n, m, a, b) == sum((a * i + b) // m for i in range(n)), (n, m, a, b)


def test_huge_sizes_cost_no_memory_and_no_time():
    import time
    import tracemalloc

    tracemalloc.start()
    t = time.perf_counter()
    counts = [
        flash_io(1 << 20, 256, 1024),
        flash_io(1 << 20, 256, 1024, causal=True),
        flash_io(1 << 40, 64, 100_000, "fa2", True, return_lse=True),
        flash_io(10**30, 128, 200_000, "fa1", True, n_k=10**29, block_r=1, block_c=1),
        standard_io(10**30, 128),
    ]
    elapsed = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert elapsed < 0.5 and peak < 1 << 20  # was: a 1 TiB T_r x T_c array
    assert all(type(c) is int and c > 0 for c in counts)
    # at 2^20 tokens, d = 256, M = 1024 (B_c = 1, B_r = 1) every block is one pair: exact by hand
    n = 1 << 20
    assert counts[0] == 2 * n * 256 + n * n * (3 * 256 + 4)
    assert counts[1] == 2 * n * 256 + n * (n + 1) // 2 * (3 * 256 + 4)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n_k", [None, 1000])
def test_closed_forms_accept_integer_arrays(order, causal, n_k):
    rng = np.random.default_rng(11)
    Ns = rng.integers(1, 200_000, size=(3, 5)).astype(np.int32)
    Ns[0, 0] = 1
    for kw in ({}, {"block_r": 7, "block_c": 13}, {"return_lse": True}):
        arr = flash_io(Ns, 64, 50_000, order, causal, n_k=n_k, **kw)
        assert arr.dtype == np.int64 and arr.shape == Ns.shape
        want = [[flash_io(int(x), 64, 50_000, order, causal, n_k=n_k, **kw) for x in row] for row in Ns]
        assert arr.tolist() == want and all(type(x) is int for row in want for x in row)
    std = standard_io(list(Ns.ravel()), 64, n_k=n_k)
    assert std.dtype == np.int64 and std.tolist() == [standard_io(int(x), 64, n_k=n_k) for x in Ns.ravel()]
    lb = lower_bound(Ns, 64, 50_000)
    assert lb.dtype == np.float64 and lb.tolist() == [
        [lower_bound(int(x), 64, 50_000) for x in r] for r in Ns
    ]
    ratio = io_ratio(Ns[0], 64, 50_000, order, causal)
    assert ratio.tolist() == [io_ratio(int(x), 64, 50_000, order, causal) for x in Ns[0]]
    # 0-d arrays and numpy scalars are scalars: Python ints out
    assert type(flash_io(np.int64(4096), 64)) is int and type(standard_io(np.array(4096), 64)) is int


def test_arrays_refuse_counts_beyond_int64_instead_of_wrapping():
    n = 1 << 31
    assert standard_io(n, 64) > np.iinfo(np.int64).max  # exact as a Python int
    with pytest.raises(ValueError, match=r"\bN=2147483648\b.*int64"):
        standard_io(np.array([1024, n]), 64)


def test_hbm_bytes_exact_for_every_dtype_size():
    from attnlab.machine.hardware import DTYPE_BYTES

    hbm = HBM()
    hbm.read("Q", 7)
    for name, b in DTYPE_BYTES.items():
        got = hbm.bytes(b)
        assert got == 7 * b, name
        assert type(got) is (int if float(7 * b).is_integer() else float), name
    hbm.write("O", 1)
    assert hbm.bytes(0.5) == 4 and type(hbm.bytes(0.5)) is int
    assert hbm.bytes(0.125) == 1 and hbm.bytes(np.int64(3)) == 24


# --- the backward pass: stored P against recomputation ------------------------------------------


def _grad_ref(q, k, v, do, causal):
    """dQ, dK, dV of sum(O * dO) by the dense formulas in float64 (P = softmax(S); dV = P^T dO;
    dS = P * (dP - rowsum(P * dP)); dQ = dS K / sqrt(d); dK = dS^T Q / sqrt(d))."""
    n_q, n_k, d = len(q), len(k), q.shape[1]
    mask = ref.ref_mask(n_q, n_k, causal)
    s = np.where(mask, q @ k.T / math.sqrt(d), -np.inf)
    m = s.max(axis=1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    l = e.sum(axis=1, keepdims=True)
    p = np.divide(e, l, out=np.zeros_like(e), where=l > 0)
    dp = do @ v.T
    ds = p * (dp - (p * dp).sum(axis=1, keepdims=True))
    return ds @ k / math.sqrt(d), ds.T @ q / math.sqrt(d), p.T @ do


def test_gradient_reference_against_finite_differences():
    """The dense formulas above are themselves checked: central differences of sum(O * dO)."""
    q, k, v = _qkv(5, 4, 5, 3)
    do = np.random.default_rng(6).standard_normal((4, 3))

    def loss(q, k, v):
        return float((ref.attention_head(q, k, v, causal=True)[0] * do).sum())

    grads = _grad_ref(q, k, v, do, True)
    h = 1e-6
    for arg, g in zip(range(3), grads):
        x = [q, k, v]
        for idx in np.ndindex(x[arg].shape):
            up = [a.copy() for a in x]
            dn = [a.copy() for a in x]
            up[arg][idx] += h
            dn[arg][idx] -= h
            assert abs((loss(*up) - loss(*dn)) / (2 * h) - g[idx]) < 1e-7


@pytest.mark.parametrize(
    "n_q, n_k, d, br, bc, causal",
    [
        (7, 7, 3, 2, 3, False),
        (9, 13, 5, 4, 3, True),
        (13, 9, 3, 5, 2, True),
        (11, 11, 5, 3, 5, True),
        (5, 3, 1, 7, 7, False),
    ],
)
def test_backward_gradients_and_counter_equal_closed_forms(n_q, n_k, d, br, bc, causal):
    from attnlab.core.backward import attention_backward
    from attnlab.core.iomodel import backward_io, recompute_flops

    q, k, v = _qkv(n_q + 7 * n_k, n_q, n_k, d)
    do = np.random.default_rng(d).standard_normal((n_q, d))
    want = _grad_ref(q, k, v, do, causal)
    totals = {}
    for mode in ("recompute", "stored"):
        hbm = HBM(trace=True)
        got = attention_backward(q, k, v, do, causal=causal, block_r=br, block_c=bc, mode=mode, hbm=hbm)
        for g, w in zip(got, want):
            assert np.abs(g - w).max() < 1e-13
        assert hbm.total == backward_io(n_q, d, mode=mode, causal=causal, n_k=n_k, block_r=br, block_c=bc)
        totals[mode] = hbm.total
        bt = hbm.by_tensor()
        assert bt["dK"] == (0, n_k * d) and bt["dV"] == (0, n_k * d)  # written once
        assert ("lse" in bt) is (mode == "recompute") and ("P" in bt) is (mode == "stored")
        area = sum(
            (e.rows[1] - e.rows[0]) * (e.cols[1] - e.cols[0]) for e in hbm.events if e.kind == "compute"
        )
        if mode == "stored":
            assert bt["P"] == (area, 0)  # each visited tile of P read once
        else:
            f = recompute_flops(n_q, d, causal=causal, n_k=n_k, block_r=br, block_c=bc)
            assert f["scores"] == f["exps"] == area and f["qk_flops"] == 2 * d * area
    assert totals["stored"] >= totals["recompute"]


def test_backward_closed_form_default_blocks_and_arrays():
    from attnlab.core.iomodel import backward_io

    n, d = 4096, 64  # B_c = 391, T_c = 11 (the paper's rule)
    assert backward_io(n, d) == 2 * n * d + n + 4 * n * d + 11 * n * (4 * d + 2)
    assert backward_io(n, d, mode="stored") == 2 * n * d + n + 4 * n * d + 11 * n * (4 * d + 1) + n * n
    arr = backward_io(np.array([300, 4096]), d, causal=True)
    assert arr.tolist() == [backward_io(300, d, causal=True), backward_io(4096, d, causal=True)]
    with pytest.raises(ValueError, match="mode"):
        backward_io(64, 8, mode="kept")
