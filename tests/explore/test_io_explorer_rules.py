"""Notebook 03's IO explorer under the two tile rules: FA2 drawn with its own tiles (or FA1's,
the lecture's table), its legend entry naming the rule, and legends and the 1/M guide that list
only the loop orders drawn."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnlab.core.iomodel import flash_io
from attnlab.explore.flash.io import IOExplorer, io_curves


def _visible_legend_texts(ax):
    legs = [a for a in ax.get_children() if type(a).__name__ == "Legend" and a.get_visible()]
    assert len(legs) == 1
    return [t.get_text() for t in legs[0].get_texts()]


@pytest.mark.parametrize("rule", ["fa2", "fa1"])
def test_curves_follow_the_rule(rule):
    r = io_curves(64, 100_000, 4096, fa2_rule=rule)
    b = math.ceil(100_000 / 256)
    assert (r.fa2_block_r, r.fa2_block_c) == ((b, 64) if rule == "fa2" else (64, b))
    assert r.fa2.tolist() == [flash_io(int(n), 64, 100_000, "fa2", rule=rule) for n in r.N]
    assert r.fa2_M.tolist() == [flash_io(4096, 64, int(m), "fa2", rule=rule) for m in r.M]
    falls = bool(r.fa2_M[-1] < r.fa2_M[len(r.M) // 2] / 3)
    assert falls is (rule == "fa2")  # own tiles: falls as 1/M; FA1's cap: flat


def test_legends_and_guide_per_loop_order():
    ex = IOExplorer()
    ax_n, ax_m = ex.figure.axes
    r = io_curves(64, 100_000, 32768)
    for order in ("both", "fa1", "fa2"):
        ex.set(order=order)
        left, right = _visible_legend_texts(ax_n), _visible_legend_texts(ax_m)
        assert ("FA1 order" in left) is (order != "fa2") and ("FA1 order" in right) is (order != "fa2")
        assert any(t.startswith("FA2 order") for t in left) is (order != "fa1")
        guide = next(t for t in right if t.startswith("∝ 1/M"))
        assert guide.endswith("below FA2)" if order == "fa2" else "below FA1)")
        anchor = r.fa2_M if order == "fa2" else r.fa1_M
        assert ex.m_inv.get_ydata()[0] == pytest.approx(0.5 * anchor[0])
    ex.set(order="both", fa2_tiles="FA1's")
    assert "FA2 order, FA1's tiles" in _visible_legend_texts(ax_n)
    assert "B<sub>r</sub> ≤ d, 64 × 391" in ex.summary.value
    ex.set(fa2_tiles="own")
    assert "FA2 order, own tiles" in _visible_legend_texts(ax_n)
    assert "391 × 64" in ex.summary.value and "357 M" in ex.summary.value
    with pytest.raises(ValueError, match="fa2_tiles"):
        ex.set(fa2_tiles="mine")


def test_fa2_own_tiles_below_fa1_at_every_n_and_m():
    r = io_curves(64, 100_000, 32768)
    assert np.all(r.fa2[r.N >= 1024] < r.fa1[r.N >= 1024])
    assert np.all(r.fa2_M[r.M >= 25_000] < r.fa1_M[r.M >= 25_000])
