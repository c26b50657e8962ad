"""The decode side of the harness as declarations (gpubench.decode, cascade, scheduled), each run by
the one loop (gpubench.core.measure) on its smallest dry case under Triton's interpreter: its rows
are run-file schema rows whose texts match the recorded runs', its counts are worked out here
again, notebook 04's and 05's views read them, and a planted bug (a wrong answer, an output never
written) drops its row with the reason printed."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnlab import runfile  # noqa: E402
from attnlab.explore import measured  # noqa: E402
from attnlab.gpubench import cascade, decode, scheduled  # noqa: E402
from attnlab.gpubench.core import measure  # noqa: E402
from attnlab.gpubench.declare import Impl  # noqa: E402

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the dry runs are for a CPU")


def _run(res: dict, name: str) -> dict:
    """Section result `res` as a run file's dict (what `python -m attnlab.gpubench` writes),
    checked against the schema, as the views read it."""
    settings = {k: v for k, v in res.items() if k != "rows"}
    run = {
        **{k: res[k] for k in ("device", "sms", "torch", "triton", "flashinfer", "commit", "date")},
        "schema": runfile.SCHEMA,
        "ceilings": {"copy_bytes_per_s": 1e9, "bf16_matmul_flops": 1e10},
        "sections": {name: settings},
        "rows": res["rows"],
    }
    return measured.view(runfile.check(run, name))


def test_decode_rows_carry_the_model_and_a_relative_error():
    from attnlab.machine.hardware import decode_time, get_gpu

    res = measure(decode.SECTION, [(1, 24, (1, 2))], dry=True)
    run = _run(res, "decode")
    rows = run["rows"]
    assert [(r["what"], r["impl"]) for r in rows] == [("batch 1, context 24", f"ours s{s}") for s in (1, 2)]
    hq, hkv, d = (decode.SECTION.dry_shape[k] for k in ("heads", "kv_heads", "head_dim"))
    for r in rows:
        s = r["shape"]["splits"]
        m = decode_time(1, 24, hkv, s, get_gpu(decode.GPU), head_dim=d, group=hq // hkv)
        assert (r["extra"]["blocks"], r["extra"]["waves"]) == (m.blocks, m.waves)
        assert r["extra"]["model_us"] == m.time * 1e6
        assert r["bytes"] == 2 * hkv * 24 * d * 2 and r["ours"]
        assert 0 <= r["error"] < 1e-2  # relative: the norm of the difference over the norm
    sec = measured.section(run, "decode")
    fig = measured.decode_figure(sec, cases=((1, 24),))  # notebook 04's figure: measured, model
    assert [len(line.get_xdata()) for line in fig.axes[0].lines] == [2, 2]
    import matplotlib.pyplot as plt

    plt.close(fig)
    from attnlab.explore.decode.measured_tables import split_measured_table

    text = split_measured_table(sec)
    assert "worst relative error" in text and max(map(len, text.splitlines())) <= 100


def test_a_decode_launch_with_two_heads_swapped_is_dropped(capsys):
    def swapped(torch, c, ctx):
        for launch in decode._ours(torch, c, ctx):
            yield dataclasses.replace(
                launch, fn=lambda fn=launch.fn: fn()[:, [1, 0, *range(2, c.q.shape[1])]]
            )

    sec = dataclasses.replace(decode.SECTION, impls=(Impl("ours", swapped, ours=True),))
    assert measure(sec, [(1, 24, (1,))], dry=True)["rows"] == []
    assert "over the section's tolerance" in capsys.readouterr().out


def test_cascade_rows_count_what_each_kernel_reads_and_the_view_reads_them(capsys):
    n, prefix, unique = 2, 16, 1
    res = measure(cascade.SECTION, [(n, prefix, unique)], dry=True)
    run = _run(res, "cascade")
    rows = {r["impl"]: r for r in run["rows"]}
    # the fixed split 2 clips to the prefix's one split: timed once
    assert list(rows) == ["cascade s1 auto", "cascade s1", "paged", "paged-unique"]
    assert {r["what"] for r in rows.values()} == {f"n {n}, prefix {prefix}, unique {unique}"}
    hkv, d = cascade.SECTION.dry_shape["kv_heads"], cascade.SECTION.dry_shape["head_dim"]
    tokens = {"cascade s1": prefix + n * unique, "paged": n * (prefix + unique), "paged-unique": n * unique}
    for impl, t in tokens.items():
        assert rows[impl]["extra"]["kv_tokens"] == t and rows[impl]["bytes"] == t * 2 * hkv * d * 2
    for r in rows.values():
        assert r["error"] < 2e-2 and r["ours"]
        assert r["extra"]["x_plain"] == rows["paged"]["time_us"] / r["time_us"]
    text = measured.cascade_summary(run)
    assert "cascade (auto)" in text and f"{rows['cascade s1 auto']['time_us']:.1f}" in text
    with pytest.raises(ValueError, match="whole number of pages"):
        measure(cascade.SECTION, [(2, 20, 5)], dry=True)


def test_a_cascade_part_checked_against_the_whole_answer_is_dropped(capsys):
    def unique_as_whole(torch, c, ctx):
        for launch in cascade._ours(torch, c, ctx):
            if launch.name == "paged-unique":  # its answer leaves out the shared prefix
                yield dataclasses.replace(launch, ref=None)

    sec = dataclasses.replace(cascade.SECTION, impls=(Impl("ours", unique_as_whole, ours=True),))
    assert measure(sec, [(2, 16, 1)], dry=True)["rows"] == []
    assert "over the section's tolerance" in capsys.readouterr().out


def test_scheduled_plans_share_one_decoder_over_the_batches():
    import numpy as np

    res = measure(scheduled.SECTION, [(1,), (3,)], ("balanced", "balanced+fused", "paged"), dry=True)
    run = _run(res, "scheduled")
    rows = run["rows"]
    assert [(r["what"], r["impl"]) for r in rows] == [
        (f"batch {b}", i) for b in (1, 3) for i in ("sched balanced", "sched balanced+fused", "paged auto")
    ]
    shape, ctas = scheduled.SECTION.dry_shape, scheduled.DRY["ctas"]
    hq, hkv = shape["heads"], shape["kv_heads"]
    planner = scheduled._planner("balanced", hkv, hq // hkv, ctas, scheduled.DRY["chunk"])
    plans = [planner(scheduled._lengths(b, True)) for b in (1, 3)]
    for r in rows:
        tokens = int(scheduled._lengths(r["shape"]["batch"], True)[:, 1].sum())
        assert r["extra"]["tokens"] == tokens and r["error"] <= 0.05
        assert (
            r["bytes"]
            == tokens * 2 * hkv * shape["head_dim"] * 2 + 2 * r["shape"]["batch"] * hq * shape["head_dim"] * 2
        )
        if r["impl"].startswith("sched"):
            # one decoder for both batches: its maxima hold the larger of the two plans
            assert r["extra"]["max_items"] == max(int(np.bincount(p.cta).max()) for p in plans)
            assert r["extra"]["max_outputs"] == max(p.num_outputs for p in plans)
            assert r["extra"]["ctas"] == ctas and r["extra"]["plan_us"] > 0 and r["extra"]["load_us"] > 0
    assert [r["extra"]["items"] for r in rows if r["impl"] == "sched balanced"] == [
        len(p.work) for p in plans
    ]
    text = measured.schedules_summary(run)
    assert f"plans for {ctas} CTAs" in text and max(map(len, text.splitlines())) <= 100


def test_a_scheduled_output_never_written_is_dropped(monkeypatch, capsys):
    from attnlab.kernels.scheduled import ScheduledDecoder

    monkeypatch.setattr(ScheduledDecoder, "run", lambda self, k, v: self._result())  # launches nothing
    rows = measure(scheduled.SECTION, [(1,)], ("balanced", "paged"), dry=True)["rows"]
    assert [r["impl"] for r in rows] == ["paged auto"]  # the poisoned output stays NaN: refused
    assert "NaN or inf" in capsys.readouterr().out


def test_the_one_decode_call_is_measured_with_the_decoder_it_chose(monkeypatch):
    """scheduled's decode_paged row: planned once outside the timing (plan_us), checked like the
    rest, and named by the decoder kernels.tuning.choose_decoder picks for the batch's lengths."""
    from attnlab.kernels import tuning

    monkeypatch.setattr(tuning, "PLAN_FROM_BATCH", 3)  # the dry batch of 3 (16, 11, 29 tokens)
    monkeypatch.setattr(tuning, "PLAN_SKEW", 1.2)  # ... uneven enough: it takes the plan
    rows = measure(scheduled.SECTION, [(1,), (3,)], ("decode_paged",), dry=True)["rows"]
    for r in rows:
        lengths = scheduled._lengths(r["shape"]["batch"], True)[:, 1]
        want = tuning.choose_decoder(lengths)
        assert r["impl"] == f"decode_paged decoder={want}" and r["shape"]["decoder"] == want
        assert r["error"] <= 0.05 and r["extra"]["plan_us"] > 0 and r["ours"]
    assert [r["shape"]["decoder"] for r in rows] == ["split", "plan"]  # one request: never a plan


def test_another_draw_of_long_tailed_lengths_is_its_own_case():
    """--draw N: the batches of seed N (workload.lengths), named so in each row's case; the
    recorded draw (0) keeps the recorded rows' case text."""
    from attnlab.machine.workload import lengths

    rows = measure(scheduled.SECTION, [(3,)], ("paged",), dry=True, options={"draw": 5})["rows"]
    (r,) = rows
    want = sum(n for _, n in lengths("longtail", 3, seed=5, mean=40, max_len=100))
    assert r["what"] == "batch 3, draw 5" and r["extra"]["tokens"] == want
    (r0,) = measure(scheduled.SECTION, [(3,)], ("paged",), dry=True)["rows"]
    assert r0["what"] == "batch 3" and r0["shape"] == {"batch": 3, "auto": True}
    assert r0["extra"]["tokens"] != want  # another draw, other lengths
