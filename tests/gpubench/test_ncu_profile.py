"""attnlab.gpubench.ncu: the recorded profile's calls run (tiny sizes under Triton's interpreter
on a CPU), a group's declared calls keep the launches of their sections that match, and the
distillation of an Nsight Compute report maps kernels to calls in order."""

from __future__ import annotations

import csv
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from types import SimpleNamespace  # noqa: E402

from attnlab.gpubench import ncu, ncu_groups  # noqa: E402
from attnlab.gpubench.declare import Impl, Launch, Section  # noqa: E402
from attnlab.gpubench.ncu_groups import Call  # noqa: E402


def test_the_dry_calls_run_and_launch_what_they_say(capsys):
    todo = ncu.calls(torch, dry=True)
    names = [n for n, _, _ in todo]
    assert sum(n.startswith("paged") for n in names) == 2 and sum(n.startswith("hopper") for n in names) == 2
    made = ncu.profile(torch, todo)
    assert made == [(n, k) for n, k, _ in todo]  # nothing left out here
    assert capsys.readouterr().out.count("profiled: ") == len(todo)
    outs = {n.split(" ")[0] + (" " + n[-3:] if n.startswith("paged") else ""): fn() for n, _, fn in todo}
    assert torch.equal(outs["paged pf0"], outs["paged pf1"])  # the prefetch changes no bit
    # the paged calls run on the paged section's pool of the contiguous call's K/V: the same answer
    assert torch.allclose(outs["paged pf0"].float(), outs["contiguous"].float(), atol=2e-2)


def test_the_scheduled_group_runs_two_kernels_a_call(capsys):
    todo = ncu.calls(torch, dry=True, group="scheduled")
    assert [n.split(" (")[0] for n, _, _ in todo] == [
        "sched balanced batch 1",
        "sched balanced-128 batch 1",
        "sched balanced batch 3",
        "sched balanced-128 batch 3",
    ]
    assert ncu.profile(torch, todo) == [(n, 2) for n, _, _ in todo]


def test_the_gaps_group_profiles_the_automatic_split_on_ragged_batches(capsys):
    from attnlab.gpubench.scheduled import setup
    from attnlab.gpubench.sweeps import ragged

    todo = ncu.calls(torch, dry=True, group="gaps")  # no Gluon under the interpreter
    assert [n for n, _, _ in todo] == ["paged auto ragged batch 1", "paged auto ragged batch 3"]
    assert ncu.profile(torch, todo) == [(n, 2) for n, _, _ in todo]
    batches, pools, refs = setup(torch, [3], ragged.SECTION.dry_shape, "cpu", dry=True)
    o = todo[1][2]()  # batch 3: the same pool and table
    assert torch.allclose(o.float(), refs[id(batches[0])], atol=2e-2)


def test_a_call_names_an_implementation_its_section_declares():
    assert all(
        isinstance(c, Call) for calls in ncu_groups.GROUPS.values() for c in calls
    )  # checked when made
    with pytest.raises(ValueError, match="impl must be one of .'paged', 'contiguous'.*got 'pagd'"):
        Call("x", ncu_groups.paged.SECTION, "pagd", (1, 64))
    with pytest.raises(TypeError, match="section must be a gpubench.declare.Section"):
        Call("x", "paged", "paged", (1, 64))


def _toy():
    """A section of CPU tensors: case (n,), two launches of one implementation, one failing one."""

    def inputs(torch, case, ctx):
        x = torch.arange(float(case[0]))
        yield SimpleNamespace(case={"n": case[0]}, x=x, ref=None, flop=None, bytes=None)

    def twice(torch, c, ctx):
        for k in ctx.options.factors:
            yield Launch("twice", lambda k=k: c.x * k, launch={"k": k}, extra={"sum": float(c.x.sum() * k)})

    def broken(torch, c, ctx):
        raise RuntimeError("no such library")
        yield

    return Section(
        name="toy",
        doc="a toy",
        fields=("n",),
        cases=((4,),),
        dry_cases=((2,),),
        shape={},
        dry_shape={},
        inputs=inputs,
        impls=(Impl("twice", twice), Impl("broken", broken)),
        options=(("--factors", "", None, (1, 2, 3)),),
    )


def test_a_call_keeps_the_launches_that_match_and_says_what_it_leaves_out(capsys, monkeypatch):
    toy = _toy()
    group = (
        Call("twice {n} k{k} sum {sum:g}", toy, "twice", (4,), where={"k": 2}, dry=((2,), {"k": 3})),
        Call("twice {n} k{k}", toy, "twice", (4,), options={"factors": (5, 6)}),
        Call("none", toy, "twice", (4,), where={"k": 4}),
        Call("not the bool", toy, "twice", (4,), where={"k": True}),  # k 1 is no True
        Call("broken", toy, "broken", (4,)),
    )
    monkeypatch.setitem(ncu_groups.GROUPS, "toy", group)
    todo = ncu_groups.calls("toy", torch)
    assert [(n, k) for n, k, _ in todo] == [("twice 4 k2 sum 12", 1), ("twice 4 k5", 1), ("twice 4 k6", 1)]
    assert torch.equal(todo[0][2](), torch.arange(4.0) * 2)
    out = capsys.readouterr().out
    assert out.count("left out: twice of toy at (4,) (no such launch here)") == 2  # "none", the bool
    assert "left out: broken of toy at (4,) (RuntimeError: no such library)" in out
    assert [n for n, _, _ in ncu_groups.calls("toy", torch, dry=True)] == ["twice 2 k3 sum 3"]


def _write(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def test_summarize_maps_kernels_to_calls_in_order(tmp_path):
    head = [
        "ID",
        "Kernel Name",
        "Grid Size",
        "Block Size",
        "Section Name",
        "Metric Name",
        "Metric Value",
        "Rule Name",
        "Rule Description",
    ]
    rows = []
    for i, name in enumerate(("_split_kernel", "_merge_kernel", "_hopper_kernel")):
        rows += [
            [i, name, "(8, 32, 1)", "(128, 1, 1)", "SpeedOfLight", "Duration", f"{10 + i}.5", "", ""],
            [i, name, "(8, 32, 1)", "(128, 1, 1)", "Occupancy", "Registers Per Thread", "1,024", "", ""],
            [
                i,
                name,
                "(8, 32, 1)",
                "(128, 1, 1)",
                "WarpStateStats",
                "",
                "",
                "CPIStall",
                f"Each warp waits {i} cycles at a barrier. Look at the source.",
            ],
            [
                i,
                name,
                "(8, 32, 1)",
                "(128, 1, 1)",
                "WarpStateStats",
                "",
                "",
                "CPIStall",
                "Check the Warp Stall Sampling (All Samples) table.",
            ],
        ]
    _write(tmp_path / "d.csv", head, rows)
    stall = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
    _write(
        tmp_path / "r.csv",
        [
            "ID",
            "Kernel Name",
            *ncu.RAW_METRICS,
            stall.format("barrier"),
            stall.format("long_scoreboard"),
            "smsp__average_warps_issue_stalled_x.sum",
        ],
        [["", "", "Tbyte/s", "%", "", "", ""]]
        + [[i, "k", "3.5", f"{50 + i}", f"{i}.25", "n/a" if i else "0.5", "9"] for i in range(3)],
    )
    out = ncu.summarize(tmp_path / "d.csv", tmp_path / "r.csv", [("decode", 2), ("prefill", 1)])
    assert out[0]["stalls"] == {
        "barrier": 0.25,
        "long_scoreboard": 0.5,
    }  # other families and non-numbers left out
    assert out[2]["stalls"] == {"barrier": 2.25}
    assert [e["call"] for e in out] == ["decode", "decode", "prefill"]
    assert [e["kernel"] for e in out] == ["_split_kernel", "_merge_kernel", "_hopper_kernel"]
    assert out[2]["duration_us"] == 12.5 and out[0]["registers"] == 1024.0
    assert out[1]["tensor_pipe_active_pct"] == 51.0 and out[1]["dram_read_tb_per_s"] == 3.5
    assert out[2]["ncu_notes"] == ["Each warp waits 2 cycles at a barrier."]  # the pointer-only note dropped
    with pytest.raises(ValueError, match="holds 3 kernels; the calls made launch 4"):
        ncu.summarize(tmp_path / "d.csv", tmp_path / "r.csv", [("decode", 2), ("x", 2)])
    for bad in ([], [("decode", 4), ("x", -1)], [("decode", "2")], [("decode", True)]):
        with pytest.raises(ValueError, match="made must list"):
            ncu.summarize(tmp_path / "d.csv", tmp_path / "r.csv", bad)
    _write(tmp_path / "no_units.csv", ["ID", "Kernel Name", *ncu.RAW_METRICS], [[0, "k", "3.5", "50"]])
    with pytest.raises(ValueError, match="units row"):
        ncu.summarize(tmp_path / "d.csv", tmp_path / "no_units.csv", [("decode", 2), ("prefill", 1)])


def test_the_command_line_summarizes_into_a_file(tmp_path, capsys):
    assert ncu.main(["--metrics"]) == 0
    assert capsys.readouterr().out.strip() == ",".join([*ncu.RAW_METRICS, ncu.STALL_METRICS])
    with pytest.raises(ValueError, match="group must be one of"):
        ncu.calls(None, group="all")
    assert ncu.calls(None, dry=True, group="gluon") == []  # Gluon kernels need the GPU
    _write(
        tmp_path / "d.csv",
        ["ID", "Kernel Name", "Grid Size", "Block Size", "Metric Name", "Metric Value"],
        [[0, "k", "(1, 1, 1)", "(32, 1, 1)", "Duration", "2.0"]],
    )
    _write(tmp_path / "r.csv", ["ID", *ncu.RAW_METRICS], [["", "Tbyte/s", "%"], [0, "1", "5"]])
    (tmp_path / "made.json").write_text(json.dumps([["one", 1]]))
    assert (
        ncu.main(
            [
                "--summarize",
                str(tmp_path / "d.csv"),
                str(tmp_path / "r.csv"),
                "--made",
                str(tmp_path / "made.json"),
                "--out",
                str(tmp_path / "p.json"),
            ]
        )
        == 0
    )
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["kernels"][0]["call"] == "one" and doc["kernels"][0]["duration_us"] == 2.0


def test_summarize_reads_each_duration_in_its_own_unit(tmp_path):
    """ncu writes one kernel's duration in µs and a longer one's in ms: both come out in µs."""
    head = ["ID", "Kernel Name", "Grid Size", "Block Size", "Metric Name", "Metric Unit", "Metric Value"]
    rows = [[0, "a", "(1, 1, 1)", "(128, 1, 1)", "Duration", "us", "933.15"]]
    rows += [[1, "b", "(1, 1, 1)", "(128, 1, 1)", "Duration", "ms", "1.17"]]
    rows += [[2, "c", "(1, 1, 1)", "(128, 1, 1)", "Duration", "ns", "640"]]
    _write(tmp_path / "d.csv", head, rows)
    _write(tmp_path / "r.csv", ["ID", "Kernel Name"], [["", ""]] + [[i, "k"] for i in range(3)])
    out = ncu.summarize(tmp_path / "d.csv", tmp_path / "r.csv", [("x", 3)])
    assert [e["duration_us"] for e in out] == [933.15, 1170.0, pytest.approx(0.64)]
