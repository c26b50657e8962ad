"""Notebook 05's scheduler and workspace explorers (attnlab.explore.flashinfer), checked against
attnlab.machine.schedule called directly here, and the committed batches against their generator."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnlab.machine import schedule, workload
from attnlab.explore import EXPLORERS
from attnlab.explore import flashinfer as fx
from attnlab.catalog import data_path
from attnlab.course import batches

KV_HEADS, GROUP = 8, 4  # Llama-3-8B
PLANNERS = {
    "per-request": schedule.plan_per_request,
    "fixed 1024": lambda lens, **kw: schedule.plan_fixed_split(lens, chunk=1024, **kw),
    "balanced": schedule.plan_balanced,
    "holistic": schedule.plan_holistic,
}
CASES = [
    (1, "longtail", 132, "balanced"),
    (64, "longtail", 132, "per-request"),
    (256, "zipf", 132, "fixed 1024"),
    (16, "constant", 16, "balanced"),
    (8, "uniform", 264, "per-request"),
    (64, "longtail", 264, "holistic"),
]


def direct_plan(batch, dist, num_ctas, scheduler, prefill=0):
    lens = workload.lengths(dist, batch, seed=batches.SEED)
    if prefill:
        lens = [(prefill, 2 * prefill)] + lens
    return PLANNERS[scheduler](lens, kv_heads=KV_HEADS, num_ctas=num_ctas, group=GROUP)


def packed_loads(p, num_ctas):
    """Each CTA's load with every item costed 2 x its packed query rows + its KV tokens."""
    loads = [0] * num_ctas
    for w in p.work:
        loads[w.cta] += 2 * len(w.q_rows) + (w.kv_end - w.kv_start)
    return loads


# --- the committed batches -------------------------------------------------------------------------


def test_committed_batches_equal_the_generator():
    path = data_path(batches.FILENAME)
    assert path.read_text(encoding="utf-8") == batches.dumps(batches.generate()), (
        "data/request_lengths.json drifted from workload.lengths: run python -m attnlab.course.batches"
    )
    content = json.loads(path.read_text(encoding="utf-8"))
    assert content["seed"] == batches.SEED == 0
    assert content["parameters"] == {"l_qo": 1, "mean": 4096, "max_len": 131072}
    assert list(content["batches"]) == list(workload.DISTS)
    for dist in workload.DISTS:
        assert [int(b) for b in content["batches"][dist]] == list(workload.RECORDED_BATCHES)
        for b in workload.RECORDED_BATCHES:
            assert workload.recorded_lengths(dist, b) == workload.lengths(dist, b, seed=0)


def test_check_mode_reports_an_up_to_date_file(capsys):
    assert batches.main(["--check"]) == 0
    assert "up to date" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args,exc,word",
    [
        (("gaussian", 4), ValueError, "dist"),
        (("zipf", 0), ValueError, "batch"),
        (("zipf", 3), ValueError, "batch=3"),
        ((1, 4), TypeError, "dist"),
        (("zipf", "4"), TypeError, "batch"),
    ],
)
def test_recorded_lengths_refuses_bad_input_by_name(args, exc, word):
    with pytest.raises(exc, match=word):
        workload.recorded_lengths(*args)


def test_recorded_lengths_returns_a_fresh_list():
    a = workload.recorded_lengths("longtail", 4)
    a.append((1, 1))
    assert len(workload.recorded_lengths("longtail", 4)) == 4


# --- scheduler numbers against schedule.* ----------------------------------------------------------


@pytest.mark.parametrize("prefill", fx.PREFILLS)
@pytest.mark.parametrize("batch,dist,num_ctas,scheduler", CASES)
def test_numbers_equal_the_plans(batch, dist, num_ctas, scheduler, prefill):
    r = fx.scheduler_numbers(batch, dist, num_ctas, scheduler, prefill)
    assert (r.kv_heads, r.group, r.prefill) == (KV_HEADS, GROUP, prefill)
    for s, stats in zip(fx.SCHEDULERS, r.plans):
        p = direct_plan(batch, dist, num_ctas, s, prefill)
        sizes = [len(js) for _, js in p.merge]
        loads = packed_loads(p, num_ctas)  # one unit for all four plans
        if s != "holistic":
            assert loads == p.loads.tolist()
        assert stats.scheduler == s == p.name
        assert stats.utilization == pytest.approx(sum(loads) / (num_ctas * max(loads)), abs=1e-15)
        assert (stats.makespan, stats.items, stats.total) == (max(loads), len(p.work), sum(loads))
        rows = {(w.request, w.kv_head, w.q_rows.start): len(w.q_rows) for w in p.work}
        tile = {
            (w.request, w.kv_head, w.q_rows.start): (p.tile_rows[j] if s == "holistic" else p.tile_q)
            for j, w in enumerate(p.work)
        }
        assert (stats.launched, stats.used) == (sum(tile.values()), sum(rows.values()))
        assert (stats.outputs, stats.merged, stats.max_merge) == (
            len(sizes),
            sum(n > 1 for n in sizes),
            max(sizes),
        )
        assert stats.time_h200 == pytest.approx(p.time("H200-SXM"))
        assert stats.time_h100 == pytest.approx(p.time("H100-SXM"))
    assert r.chosen is r.plans[fx.SCHEDULERS.index(scheduler)]
    assert r.x_max == max(p.makespan for p in r.plans)


@pytest.mark.parametrize("batch,dist,num_ctas,scheduler", CASES)
def test_gantt_bars_are_the_plans_items_back_to_back(batch, dist, num_ctas, scheduler):
    r = fx.scheduler_numbers(batch, dist, num_ctas, scheduler)
    p = direct_plan(batch, dist, num_ctas, scheduler)
    loads = packed_loads(p, num_ctas)
    assert r.cost.sum() == sum(loads)  # total bar length
    assert np.bincount(r.cta, weights=r.cost, minlength=num_ctas).tolist() == loads
    assert (r.start + r.cost).max() == max(loads)
    for c in range(num_ctas):  # each CTA runs its items in plan order, from 0, no gaps
        mine = [w for w in p.work if w.cta == c]
        sel = r.cta == c
        assert [2 * len(w.q_rows) + w.kv_end - w.kv_start for w in mine] == r.cost[sel].tolist()
        assert [w.request for w in mine] == r.request[sel].tolist()
        assert r.start[sel].tolist() == (np.cumsum(r.cost[sel]) - r.cost[sel]).tolist()


@pytest.mark.parametrize("batch,dist,num_ctas,scheduler", CASES)
def test_gantt_raster_samples_the_bars(batch, dist, num_ctas, scheduler):
    r = fx.scheduler_numbers(batch, dist, num_ctas, scheduler)
    bins = r.gantt.shape[1]
    assert r.gantt.shape == (num_ctas, fx.scheduler.GANTT_BINS)
    t = (np.arange(bins) + 0.5) * r.x_max / bins
    load = np.bincount(r.cta, weights=r.cost, minlength=num_ctas)
    for c in range(num_ctas):
        for k in range(0, bins, 7):
            cover = np.flatnonzero((r.cta == c) & (r.start <= t[k]) & (t[k] < r.start + r.cost))
            cell = r.gantt[c, k]
            if cover.size:
                assert cell == r.request[cover[0]] % len(fx.scheduler.PALETTE)
            elif t[k] < r.chosen.makespan:
                assert cell == fx.scheduler.IDLE and t[k] >= load[c]
            else:
                assert cell == fx.scheduler.AFTER


def test_curves_are_each_plans_utilization_at_every_batch():
    r = fx.scheduler_numbers(64, "longtail", 132)
    assert r.curves.shape == (4, len(fx.BATCHES))
    for j, b in enumerate(fx.BATCHES):
        for i, s in enumerate(fx.SCHEDULERS):
            loads = packed_loads(direct_plan(b, "longtail", 132, s), 132)
            assert r.curves[i, j] == pytest.approx(sum(loads) / (132 * max(loads)), abs=1e-15)


def test_the_lectures_claims_at_132_ctas():
    """§5.6: one block per request starves the GPU at small batches and waits on the longest
    request at large ones; fixed 1024-token chunks help partly; the balanced plan stays at 80-100%."""
    per, fixed, bal, _ = fx.scheduler_numbers(64, "longtail", 132).curves
    assert bal.min() >= 0.8
    assert per[0] == pytest.approx(KV_HEADS / 132, rel=0.01)  # 8 items on 132 CTAs
    assert per[-1] < 0.6 and per[-1] < per[-2]  # batch 256: the long tail
    assert np.all(fixed >= per) and fixed[:3].max() < 0.5 and fixed[-1] > 0.95
    big = fx.scheduler_numbers(256, "longtail", 132, "per-request")
    longest = max(l_kv for _, l_kv in workload.recorded_lengths("longtail", 256))
    assert big.chosen.makespan >= longest + 2 * GROUP  # it waits on that request


def test_merge_only_where_a_request_is_split():
    one = fx.scheduler_numbers(256, "longtail", 132, "per-request").chosen
    assert (one.merged, one.max_merge, one.outputs) == (0, 1, 256 * KV_HEADS)
    bal = fx.scheduler_numbers(1, "longtail", 132, "balanced").chosen
    assert bal.outputs == KV_HEADS and bal.merged == KV_HEADS and bal.max_merge == 17


def test_table_lists_the_plans_at_the_notebooks_batch_sizes():
    text = fx.scheduler_table()
    lines = text.splitlines()
    assert "Llama-3-8B" in lines[0] and "longtail" in lines[0] and "132 CTAs" in lines[0]
    rows = [line.split() for line in lines[4:]]
    assert [int(r[0]) for r in rows] == [1, 8, 64, 256]
    for row, b in zip(rows, (1, 8, 64, 256)):
        for i, s in enumerate(fx.SCHEDULERS[:3]):
            p = direct_plan(b, "longtail", 132, s)
            assert row[1 + 2 * i] == f"{p.utilization:.0%}" and row[2 + 2 * i] == f"{p.makespan:,}"


@pytest.mark.parametrize(
    "kw,exc,word",
    [
        ({"dist": "gaussian"}, ValueError, "dist"),
        ({"batch": 0}, ValueError, "batch"),
        ({"num_ctas": 0}, ValueError, "num_ctas"),
        ({"scheduler": "stream-k"}, ValueError, "scheduler"),
        ({"batch": 3}, ValueError, "batch=3"),
        ({"dist": None}, TypeError, "dist"),
        ({"batch": "64"}, TypeError, "batch"),
        ({"num_ctas": 1.5}, TypeError, "num_ctas"),
    ],
)
def test_bad_input_is_refused_by_name(kw, exc, word):
    with pytest.raises(exc, match=word):
        fx.scheduler_numbers(**kw)


def test_explorer_draws_the_numbers():
    ex = EXPLORERS["scheduler"]()
    for batch, scheduler in ((256, "per-request"), (4, "fixed 1024"), (64, "balanced")):
        ex.set(batch=batch, scheduler=scheduler)
        r = ex.compute(**ex.values)
        assert [b.get_height() for b in ex.bars] == pytest.approx([100 * p.utilization for p in r.plans])
        assert np.array_equal(np.asarray(ex.img.get_array()), fx.scheduler.RGBA[r.gantt])
        assert ex.span.get_xdata()[0] == r.chosen.makespan
        assert f"batch {batch}" in ex.ax_g.get_title() and scheduler in ex.ax_g.get_title()
        assert f"{r.chosen.utilization:.0%}" in ex.summary.value
        assert f"{r.chosen.makespan:,}" in ex.summary.value
    with pytest.raises(ValueError, match="num_ctas"):
        ex.set(num_ctas=0)
    with pytest.raises(ValueError, match="batch"):
        EXPLORERS["scheduler"](batch=0)


def test_mixed_batch_table_tiles_by_class():
    """One 512-query prefill chunk before 64 decode steps (g = 4): the balanced plan reads the
    batch's integer average, (2,048 + 64 x 4) // 65 = 35 rows -> one 64-row tile for all, so a
    decode step leaves 60 of 64 rows idle; the holistic plan gives the chunk 128-row tiles and the
    decode steps 16-row ones. The table's columns, counted here from the plans."""
    text = fx.mixed_plan_table(64, "longtail", 264, 512)
    rows = {line.split()[0]: line.split() for line in text.splitlines()[4:]}
    for s in ("balanced", "holistic"):
        p = direct_plan(64, "longtail", 264, s, 512)
        loads = packed_loads(p, 264)
        used = KV_HEADS * (512 + 64) * GROUP
        if s == "balanced":
            assert p.tile_q == 64 and rows[s][1] == "64"
            launched = p.num_outputs * 64
        else:
            assert rows[s][1] == "128/16"
            launched = KV_HEADS * (512 * GROUP // 128 * 128 + 64 * 16)
        assert rows[s][2] == f"{1 - used / launched:.0%}"
        assert rows[s][3] == str(len(p.work)) and rows[s][5] == f"{max(loads):,}"
        assert rows[s][6] == f"{sum(loads) / (264 * max(loads)):.0%}"


# --- the fixed-size workspace --------------------------------------------------------------------------


def test_max_items_is_the_smallest_multiple_of_8_holding_every_committed_batch():
    need = max(int(fx.workspace_need(d).max()) for d in workload.DISTS)
    assert fx.MAX_ITEMS >= need > fx.MAX_ITEMS - 8
    for d in workload.DISTS:
        counts = [
            np.bincount([w.cta for w in direct_plan(b, d, 132, "balanced").work]).max() for b in fx.BATCHES
        ]
        assert fx.workspace_need(d).tolist() == counts


@pytest.mark.parametrize("dist", workload.DISTS)
def test_shapes_never_change_contents_do(dist):
    seen = set()
    for b in fx.BATCHES:
        w = fx.workspace_numbers(b, dist)
        p = direct_plan(b, dist, fx.MAX_CTAS, "balanced")
        ws = schedule.fixed_size_workspace(p, fx.MAX_CTAS, fx.MAX_ITEMS)
        assert w.shapes == (
            ("items", "int32", (132, 32, 6)),
            ("valid", "bool", (132, 32)),
            ("count", "int32", (132,)),
        )
        assert w.nbytes == 132 * 32 * 6 * 4 + 132 * 32 + 132 * 4
        assert w.used == len(p.work) == ws.valid.sum() and w.busiest == ws.count.max()
        assert np.array_equal(w.count, ws.count)
        expect = np.where(ws.valid, ws.items[..., 0] % len(fx.scheduler.PALETTE), fx.scheduler.IDLE).T
        assert np.array_equal(w.grid, expect)
        seen.add(w.grid.tobytes())
    assert len(seen) == len(fx.BATCHES)


def test_a_plan_that_does_not_fit_is_refused_and_shown():
    with pytest.raises(ValueError, match=r"max_items >= 17"):
        fx.workspace_numbers(256, "longtail", 16)
    ex = EXPLORERS["workspace"]()
    ex.set(batch=256, max_items=16)
    assert ex.error and "max_items >= 17" in ex.error and ex._error_text.get_visible()
    ex.set(max_items=24)
    assert ex.error is None and "(132, 24, 6)" in ex.ax_w.get_title()
    assert "(132, 24, 6)" in ex.summary.value


@pytest.mark.parametrize(
    "kw,exc,word",
    [
        ({"dist": "gaussian"}, ValueError, "dist"),
        ({"batch": 0}, ValueError, "batch"),
        ({"max_items": 0}, ValueError, "max_items"),
        ({"batch": 3}, ValueError, "batch"),
    ],
)
def test_workspace_bad_input_is_refused_by_name(kw, exc, word):
    with pytest.raises(exc, match=word):
        fx.workspace_numbers(**kw)


def test_workspace_explorer_keeps_its_shape_title_while_the_batch_moves():
    ex = EXPLORERS["workspace"]()
    first = ex.ax_w.get_title().splitlines()[:2]
    for b in fx.BATCHES:
        ex.set(batch=b)
        assert ex.ax_w.get_title().splitlines() == first
        assert f"batch {b}," in ex.ax_n.get_title()
    assert first[1] == "items int32 (132, 32, 6), valid bool (132, 32), count int32 (132,)"


def test_a_refused_batch_is_not_claimed_by_the_stale_figure_and_its_box_covers_no_label():
    """256 requests do not fit 16 slots: the picture stays at batch 128, and the box says so
    (the right panel's title still reads "batch 128"); the box sits over the grid, clear of the
    right panel with its axis label and ticks, and inside the figure."""
    ex = EXPLORERS["workspace"]()
    ex.set(batch=128, max_items=16)
    assert ex.error is None
    ex.set(batch=256)
    assert ex.error and "max_items >= 17" in ex.error
    assert "batch 128," in ex.ax_n.get_title()
    note = "The figure still shows the last valid values: batch = 128."
    assert note in ex._error_text.get_text().replace("\n", " ") and note in ex.summary.value
    r = ex.canvas.get_renderer()
    box = ex._error_text.get_window_extent(r)
    right = ex.ax_n.get_tightbbox(r)
    assert box.x1 < right.x0, (box, right)
    fb = ex.figure.bbox
    assert fb.x0 <= box.x0 and box.x1 <= fb.x1 and fb.y0 <= box.y0 and box.y1 <= fb.y1
    ex.set(batch=64)  # a valid value: the note and the box go
    assert ex.error is None and not ex._error_text.get_visible() and "batch 64," in ex.ax_n.get_title()


def test_mixed_table_longest_first_row_is_lpt_of_the_holistic_items():
    from attnlab.machine.schedule import heap_schedule

    p = direct_plan(64, "longtail", 264, "holistic", 512)
    cost = sorted((2 * len(w.q_rows) + w.kv_end - w.kv_start for w in p.work), reverse=True)
    loads = heap_schedule(cost, 264)[2]
    row = fx.mixed_plan_table(64, "longtail", 264, 512).splitlines()[-1].split()
    assert row[:3] == ["holistic,", "longest", "first"]
    assert row[-2] == f"{max(loads):,}" and row[-1] == f"{sum(loads) / (264 * max(loads)):.0%}"
