"""explore.measured.serving on a run made here: the harness's mla, mixed and tree sections run dry
(our kernels under the interpreter), FlashInfer's rows added as a GPU run would add them (each a
copy of ours at a known multiple of its time), then read back through the one reader. The ratios,
the two-launch column and the model's columns must be the ones put in; tables fit 100
characters."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnlab.explore.measured import reader, serving  # noqa: E402
from attnlab.gpubench.run import run  # noqa: E402
from attnlab.runfile import rank  # noqa: E402

#: FlashInfer's time as a multiple of ours, per section and peer
PEERS = {"mla": {"flashinfer-fa3": 1.5, "flashinfer-auto": 0.8}, "mixed": {"flashinfer-fa2": 2.0, "flashinfer-fa3": 1.25},
         "tree": {"flashinfer-fa2": 0.5}}  # fmt: skip


@pytest.fixture(scope="module")
def measured():
    res = run(("mla", "mixed", "tree"), dry=True, out="")
    for r in [r for r in res["rows"] if r["impl"] == "ours"]:
        for peer, k in PEERS[r["section"]].items():
            p = copy.deepcopy(r)
            p.update(impl=peer, ours=False, time_us=r["time_us"] * k, extra={})
            res["rows"].append(p)
    rank(res["rows"])
    return reader.view(res)


def test_mla_rows_read_the_best_backend_and_the_model(measured):
    rows = serving.mla_rows(measured)
    assert len(rows) == 2
    for r in rows:
        assert r["peer"] == "flashinfer-auto" and r["ratio"] == pytest.approx(0.8)
        assert r["bound"] in ("compute", "memory") and r["over_model"] == pytest.approx(
            r["ours_us"] / r["model_us"]
        )
    text = serving.mla_summary(measured)
    assert "on 0 of 2 cases; ratios 0.80 to 0.80" in text
    assert max(map(len, text.splitlines())) <= 100


def test_mixed_rows_put_our_two_launches_beside_one(measured):
    rows = serving.mixed_rows(measured)
    assert len(rows) == 2
    for r in rows:
        assert r["peer"] == "flashinfer-fa3" and r["ratio"] == pytest.approx(1.25)
        assert r["saved"] == pytest.approx(r["two_us"] / r["ours_us"]) and r["two_us"] > 0
    text = serving.mixed_summary(measured)
    assert "on 2 of 2 cases; ratios 1.25 to 1.25" in text and max(map(len, text.splitlines())) <= 100


def test_tree_rows_and_refusals(measured):
    rows = serving.tree_rows(measured)
    assert [(r["batch"], r["tree"], r["prefix"]) for r in rows] == [(1, 3, 0), (2, 5, 9)]
    assert all(r["ratio"] == pytest.approx(0.5) for r in rows)
    assert max(map(len, serving.tree_summary(measured).splitlines())) <= 100
    with pytest.raises(TypeError, match="run must be a run file's name"):
        serving.mla_rows(["not", "a", "run"])
    with pytest.raises(KeyError, match="no 'mla' section"):
        serving.mla_rows({**measured, "sections": {}})
