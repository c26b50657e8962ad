"""Notebook 03's view of the persistent scheduler (`explore.measured.persistent`), checked against
the recorded run's raw rows and against K/V bytes counted by hand."""

from __future__ import annotations

import json

import pytest

from attnlab.explore.measured import persistent
from attnlab.explore.measured.reader import measurements_dir


def _raw(name):
    with open(measurements_dir() / name) as f:
        return json.load(f)["rows"]


def test_rows_are_the_best_peers_time_over_ours_from_the_raw_rows():
    raw = _raw(persistent.PERSISTENT_FILE)
    rows = persistent.persistent_rows()
    assert len(rows) == 36 and sum(r["causal"] for r in rows) == 18
    for r in rows:
        want = {k: r[k] for k in ("batch", "N", "head_dim", "kv_heads", "causal")}
        same = [x for x in raw if all(x["shape"][k] == v for k, v in want.items())]  # a launch adds "steps"
        ours = next(x for x in same if x["impl"] == "ours-gluon" and "steps" not in x["shape"])
        peers = [x["time_us"] for x in same if not x["impl"].startswith("ours")]
        assert r["ratio"] == pytest.approx(min(peers) / ours["time_us"], rel=1e-12)
        assert r["ours"] == pytest.approx(ours["flop"] / ours["time_us"] / 1e6, rel=1e-12)
        before = [x for x in same if x["shape"].get("steps") == "not_persistent"]
        assert ("gain" in r) == bool(before) == r["causal"]  # the step is on for causal only
        if before:
            assert r["gain"] == pytest.approx(before[0]["time_us"] / ours["time_us"] - 1, rel=1e-12)


def test_summary_fits_and_its_band_is_the_largest_move_of_a_peer_call():
    text = persistent.persistent_summary()
    assert max(len(line) for line in text.splitlines()) <= 100
    a, b = _raw(persistent.PERSISTENT_FILE), _raw(persistent.FIRST_FILE)
    key = lambda x: (x["impl"], tuple(sorted(x["shape"].items())))  # noqa: E731
    first = {key(x): x["time_us"] for x in b}
    moves = [
        abs(x["time_us"] / first[key(x)] - 1)
        for x in a
        if not x["impl"].startswith("ours") and key(x) in first
    ]
    assert f"up to {max(moves):.0%}" in text


@pytest.mark.parametrize(
    "batch, kv_heads, n, per_tile, sections",
    [  # (MB, CTAs per KV head) of the first 132 work items
        (4, 32, 4096, (128 * 2, 132 / 128), (8 * 2, 132 / 8)),  # 128 (batch, head) pairs of 2 MB; 8 heads
        (4, 8, 4096, (32 * 2, 132 / 32), (8 * 2, 132 / 8)),  # 4 query heads a KV head; a section of 32
        (1, 32, 16384, (32 * 8, 132 / 32), (2 * 8, 132 / 2)),  # 32 heads of 8 MB; a section of 2
    ],
)
def test_first_waves_count_the_kv_heads_they_read(batch, kv_heads, n, per_tile, sections):
    assert persistent.first_wave("per tile", batch, 32, kv_heads, n) == pytest.approx(per_tile)
    assert persistent.first_wave("sections", batch, 32, kv_heads, n) == pytest.approx(sections)
    with pytest.raises(ValueError, match="order must be"):
        persistent.first_wave("random", batch, 32, kv_heads, n)


def test_first_wave_refuses_sizes_it_cannot_count():
    with pytest.raises(ValueError, match="kv_heads=3 does not divide heads=32"):
        persistent.first_wave("sections", 1, 32, 3, 4096)
    with pytest.raises(TypeError, match="batch"):
        persistent.first_wave("per tile", "1", 32, 8, 4096)
