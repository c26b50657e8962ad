"""The FA3 pipeline model (machine.pipeline): the properties that pin a discrete-event schedule,
checked on random stage times, and its refusals."""

import itertools

import numpy as np
import pytest

from attnlab.machine.pipeline import CONSUMERS, RESOURCES, StageTimes, schedule, stage_times

SWITCHES = [
    (ws, c, ov, s)
    for ws, c, ov, s in itertools.product((False, True), CONSUMERS, (False, True), (1, 2, 3, 4))
    if not (ov and s < 2) and not (c == "pingpong" and (s < 2 or not ws))
]


def random_times(rng) -> StageTimes:
    load, qk, exp, fma, pv = rng.uniform(0.05, 1.0, 5)
    return StageTimes("H200-SXM", 128, 128, 1, load, qk, exp, fma, pv)


def check_no_overlap_in_resource(tl):
    """No resource runs two steps at once (lockstep's twin rows are one step)."""
    for r in RESOURCES:
        spans = sorted({(s.start, s.end) for s in tl.steps if s.resource == r})
        for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
            assert b0 >= a1 - 1e-12


def check_dependencies(tl):
    """Within a warpgroup a tile's QK^T, softmax and PV come in order, after the tile's load."""
    at = {(s.kind, s.who, s.tile): s for s in tl.steps}
    for s in tl.steps:
        if s.kind == "load":
            continue
        assert s.start >= at[("load", "producer", s.tile)].end - 1e-12
        if s.kind == "softmax":
            assert s.start >= at[("qk", s.who, s.tile)].end - 1e-12
        if s.kind == "pv":
            assert s.start >= at[("softmax", s.who, s.tile)].end - 1e-12


def test_everything_off_is_the_sum_of_the_steps():
    rng = np.random.default_rng(0)
    for _ in range(20):
        t = random_times(rng)
        tiles = int(rng.integers(1, 9))
        tl = schedule(t, tiles=tiles, warp_specialize=False, consumers="lockstep", overlap=False, stages=1)
        one_tile = t.load + 2 * (t.qk + t.exp + t.fma + t.pv)  # both warpgroups' work
        assert tl.makespan == pytest.approx(tiles * one_tile, rel=1e-12)
        assert tl.makespan == pytest.approx(tl.total, rel=1e-12)


def test_never_below_the_busiest_resource_and_valid():
    rng = np.random.default_rng(1)
    for ws, c, ov, s in SWITCHES:
        t = random_times(rng)
        tl = schedule(t, tiles=7, warp_specialize=ws, consumers=c, overlap=ov, stages=s)
        assert tl.bound - 1e-12 <= tl.makespan <= tl.total + 1e-12
        assert len([x for x in tl.steps if x.kind == "load"]) == 7
        assert len(tl.steps) == 7 * 7  # 7 loads + 2 x 3 x 7
        check_no_overlap_in_resource(tl)
        check_dependencies(tl)


def test_fa3_steps_reach_the_bound_once_the_pipeline_is_full():
    """Producer, ping-pong, overlap, enough stages, loads shorter than the GEMMs: each added tile
    costs exactly the busiest resource's share of a tile (the steady state is the bound)."""
    rng = np.random.default_rng(2)
    for _ in range(20):
        load, qk, pv = rng.uniform(0.2, 1.0, 3)
        exp = rng.uniform(0.05, 1.0) * (qk + pv) / 2
        t = StageTimes("H200-SXM", 128, 128, 1, load * (qk + pv) / 2, qk, exp, 0.0, pv)
        a, b = (schedule(t, tiles=n, stages=3) for n in (20, 40))
        per_tile = max(t.load, 2 * (t.qk + t.pv), 2 * t.softmax)
        assert (b.makespan - a.makespan) / 20 == pytest.approx(per_tile, rel=1e-9)


def test_pingpong_hides_a_softmax_no_longer_than_a_gemm():
    rng = np.random.default_rng(3)
    for _ in range(20):
        qk, pv = rng.uniform(0.2, 1.0, 2)
        soft = rng.uniform(0.0, 1.0) * min(qk, pv)
        t = StageTimes("H200-SXM", 128, 128, 1, 0.1 * qk, qk, soft / 2, soft / 2, pv)
        a, b = (schedule(t, tiles=n, consumers="pingpong", overlap=False, stages=2) for n in (10, 30))
        assert (b.makespan - a.makespan) / 20 == pytest.approx(2 * (qk + pv), rel=1e-9)  # tensor never idle
        lock = schedule(t, tiles=30, consumers="lockstep", overlap=False, stages=2)
        assert lock.makespan > b.makespan  # in lockstep the softmax shows


@pytest.mark.parametrize("consumers", ["lockstep", "pingpong"])
def test_more_stages_never_slower(consumers):
    rng = np.random.default_rng(4)
    for _ in range(15):
        t = random_times(rng)
        for ws, ov in itertools.product((False, True), (False, True)):
            if consumers == "pingpong" and not ws:
                continue
            lo = 2 if (ov or consumers == "pingpong") else 1
            spans = [
                schedule(t, tiles=9, warp_specialize=ws, consumers=consumers, overlap=ov, stages=s).makespan
                for s in range(lo, 6)
            ]
            assert all(b <= a + 1e-12 for a, b in zip(spans, spans[1:])), (ws, ov, spans)


def test_stage_times_from_the_specs():
    """Independent arithmetic from the datasheet numbers in data/gpus.json."""
    t = stage_times("H100", 128, reuse=1)
    per_sm = 989.4e12 / 132
    assert t.qk == pytest.approx(2 * 64 * 128 * 128 / per_sm, rel=1e-12)
    assert t.exp == pytest.approx(64 * 128 / (16 * 1.83e9), rel=1e-12)
    assert t.load == pytest.approx(2 * 128 * 128 * 2 / (3.35e12 / 132), rel=1e-12)
    assert stage_times("H100", 128, reuse=4).load == pytest.approx(t.load / 4, rel=1e-12)
    assert stage_times("H100", 256).block_n == 80
    tl = schedule(stage_times("H200", 128), tiles=64, stages=3)
    assert tl.tflops == pytest.approx(tl.tensor_share * 989.4, rel=1e-12)


@pytest.mark.parametrize(
    "kw, err, words",
    [
        (dict(tiles=0), ValueError, "tiles=0"),
        (dict(tiles=2.5), TypeError, "tiles"),
        (dict(stages=9), ValueError, "stages=9"),
        (dict(stages=True), TypeError, "stages"),
        (dict(warp_specialize="False"), TypeError, "warp_specialize"),
        (dict(consumers="both"), ValueError, "consumers"),
        (dict(overlap=True, stages=1), ValueError, "stages >= 2"),
        (dict(consumers="pingpong", warp_specialize=False), ValueError, "warp_specialize=True"),
        (dict(consumers="pingpong", overlap=False, stages=1), ValueError, "pingpong' with stages=1"),
    ],
)
def test_refusals(kw, err, words):
    with pytest.raises(err, match=words):
        schedule(stage_times("H200", 128), **kw)


@pytest.mark.parametrize(
    "kw, err",
    [
        (dict(d=96), ValueError),
        (dict(reuse=0), ValueError),
        (dict(gpu="H300"), ValueError),
        (dict(reuse=1.5), TypeError),
    ],
)
def test_stage_time_refusals(kw, err):
    with pytest.raises(err):
        stage_times(**{"gpu": "H200", "d": 128, **kw})
    with pytest.raises(TypeError, match="StageTimes"):
        schedule({"qk": 1.0})
