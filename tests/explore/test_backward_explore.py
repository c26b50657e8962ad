"""The backward pass's table and figure (attnlab.explore.standard.backward), against the element
counts written out by hand for an unmasked head: P stored against recomputed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnlab.explore import standard as st


def _hand(N, d, M=100_000):
    t_c = math.ceil(N / math.ceil(M / (4 * d)))  # the paper's rule: B_c = ceil(M / 4d)
    both = 2 * N * d + N + 4 * N * d  # O, dO in, D out; K, V in, dK, dV out
    return both + t_c * N * (4 * d + 1) + N * N, both + t_c * N * (4 * d + 2)


@pytest.mark.parametrize("d", [64, 128])
def test_rows_by_hand_and_the_trade(d):
    rows = st.backward_rows([1000, 4096, 16384], d)
    for r in rows:
        N = r["N"]
        assert (r["stored"], r["recompute"]) == _hand(N, d)
        assert r["forward_p"] == N * N and r["saved"] == r["stored"] + N * N - r["recompute"] - N
        assert r["extra_flops"] == 2 * d * N * N and r["grad_flops"] == 8 * d * N * N
        assert r["saved_s"] == pytest.approx(r["saved"] * 2 / 3.35e12, rel=1e-12)
        assert r["extra_s"] == pytest.approx(2 * d * N * N / 989.4e12, rel=1e-12)
        assert r["saved_s"] > 3 * r["extra_s"]  # recomputing wins at the roofline


def test_table_and_figure():
    text = st.backward_table()
    assert max(map(len, text.splitlines())) <= 100 and "29,933,568" in text and "13,201,408" in text
    fig = st.backward_figure()
    ax_io, ax_t = fig.axes
    lines = {l.get_label(): l for l in ax_io.lines}
    rows = st.backward_rows(lines["P recomputed from Q, K, lse"].get_xdata().astype(int))
    np.testing.assert_array_equal(
        lines["P recomputed from Q, K, lse"].get_ydata(), [r["recompute"] for r in rows]
    )
    np.testing.assert_array_equal(lines["P stored: backward only"].get_ydata(), [r["stored"] for r in rows])
    assert all(ax.get_title() and ax.get_xlabel() and ax.get_ylabel() for ax in fig.axes)


def test_bad_input():
    with pytest.raises(TypeError, match="Ns"):
        st.backward_rows(4096)
    with pytest.raises(ValueError, match="d"):
        st.backward_rows([64], d=0)
    with pytest.raises(ValueError, match="GPU9"):
        st.backward_rows([64], gpu="GPU9")
