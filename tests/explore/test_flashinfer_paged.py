"""Notebook 05's paged-KV explorers (attnlab.explore.flashinfer.page_table, .composable): their pure
functions against attnlab.core.paged called directly here and against counts worked out by hand
(the lecture's kv_indptr [0, 5, 8, 16] and 76 against 31 blocks), bad input refused by name, and
what the figures show."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.explore import EXPLORERS, style
from attnlab.explore import flashinfer as fx
from attnlab.explore.flashinfer import _cells
from attnlab.explore.flashinfer.composable import SAME
from attnlab.core.paged import PagedKVCache, bsr_attention, composable_attention, to_bsr

# --- page tables ---------------------------------------------------------------------------------


def _cache(page_size, lengths, forks, pool, seed=0):
    """The explorer's setup, written out here: the typed requests, then fork j of request 0
    appending j tokens."""
    c = PagedKVCache(pool, page_size, 1, seed=seed)
    rids = [c.add(np.zeros((n, 1)), np.zeros((n, 1))) for n in lengths]
    for j in range(1, forks + 1):
        rids.append(c.fork(rids[0]))
        c.append(rids[-1], np.zeros((j, 1)), np.zeros((j, 1)))
    return c, rids


def test_lecture_page_table():
    r = fx.page_table_numbers()
    assert (r.page_size, r.pool, r.lengths, r.forks) == (4, 32, (19, 10, 29), 0)
    assert r.layout.kv_indptr.tolist() == [0, 5, 8, 16]  # 5, 3 and 8 pages
    assert r.layout.kv_last_page_len.tolist() == [3, 2, 1]  # 19 = 4*4+3, 10 = 4*2+2, 29 = 4*7+1
    c, rids = _cache(4, (19, 10, 29), 0, 32)
    assert r.tables == tuple(tuple(c.block_table(i)) for i in rids)
    assert r.layout.kv_indices.tolist() == sum((c.block_table(i) for i in rids), [])
    assert sorted(r.layout.kv_indices.tolist()) != r.layout.kv_indices.tolist()  # shuffled
    assert np.array_equal(r.tokens, to_bsr(c, rids).to_scipy().toarray())
    assert r.tokens.sum(axis=1).tolist() == [19, 10, 29]
    assert r.users.sum() == 16 and set(np.unique(r.users)) == {0, 1}
    text = fx.page_table_text()
    assert "kv_indptr        = [0, 5, 8, 16]" in text and "kv_last_page_len = [3, 2, 1]" in text
    assert f"request 2: 29 tokens, block table {c.block_table(rids[2])}" in text


@pytest.mark.parametrize(
    "page_size, lengths, forks, pool",
    [(1, (5, 1, 9), 2, 30), (3, (7,), 4, 20), (16, (1, 40, 16, 17), 3, 12), (4, (19, 10, 29), 4, 64)],
)
def test_page_table_against_the_cache(page_size, lengths, forks, pool):
    r = fx.page_table_numbers(page_size, ", ".join(map(str, lengths)), forks, pool)
    c, rids = _cache(page_size, lengths, forks, pool)
    lay = to_bsr(c, rids)
    for name in ("kv_indptr", "kv_indices", "kv_last_page_len"):
        assert np.array_equal(getattr(r.layout, name), getattr(lay, name)), name
    assert r.lengths == tuple(lengths) + tuple(lengths[0] + j for j in range(1, forks + 1))
    pages = -(-np.array(r.lengths) // page_size)
    assert np.diff(r.layout.kv_indptr).tolist() == pages.tolist()
    assert (page_size * (pages - 1) + r.layout.kv_last_page_len).tolist() == list(r.lengths)
    # forks share request 0's full pages by reference; a partial last page was copied on write
    full = lengths[0] // page_size
    for i in range(len(lengths), len(r.lengths)):
        assert r.tables[i][:full] == r.tables[0][:full]
        assert not set(r.tables[i][full:]) & set(r.tables[0])
    want = np.zeros(pool, int)
    for t in r.tables:
        want[list(t)] += 1
    assert np.array_equal(r.users, want)
    assert (r.users[list(r.tables[0][:full])] == 1 + forks).all()


@pytest.mark.parametrize(
    "text, want",
    [("19, 10, 29", (19, 10, 29)), ("19 10,29", (19, 10, 29)), (" 7 ", (7,)), ([3, 4.0], (3, 4))],
)
def test_parse_lengths(text, want):
    assert fx.parse_lengths(text) == want


@pytest.mark.parametrize(
    "bad, exc",
    [
        ("a, 3", ValueError),
        ("-3, 4", ValueError),
        ("0", ValueError),
        ("", ValueError),
        ("3.5", ValueError),
        ("1 2 3 4 5 6 7", ValueError),
        ("99999", ValueError),
        (3, TypeError),
        (None, TypeError),
        ([True], TypeError),
        ([2.5], TypeError),
    ],
)
def test_bad_lengths(bad, exc):
    with pytest.raises(exc, match="lengths"):
        fx.parse_lengths(bad)
    with pytest.raises(exc, match="lengths"):
        fx.page_table_numbers(lengths=bad)


@pytest.mark.parametrize(
    "kw, exc, name",
    [
        ({"page_size": 0}, ValueError, "page_size"),
        ({"page_size": 17}, ValueError, "page_size"),
        ({"page_size": 2.5}, TypeError, "page_size"),
        ({"page_size": True}, TypeError, "page_size"),
        ({"forks": -1}, ValueError, "forks"),
        ({"pool": 0}, ValueError, "pool"),
        ({"pool": 12}, ValueError, "pool=12"),
        ({"page_size": 1}, ValueError, "pool=32"),
    ],
)
def test_page_table_bad_input(kw, exc, name):
    with pytest.raises(exc, match=name):
        fx.page_table_numbers(**kw)


def test_page_table_explorer():
    ex = EXPLORERS["page_table"]()
    r = ex.compute(**ex.values)
    nnz = r.layout.kv_indices.size
    assert len(ex.cells["b"].fill.get_paths()) == 2 * nnz  # a cell and its used part
    assert len(ex.cells["c"].fill.get_paths()) == 2 * nnz
    assert len(ex.labels["c"].pc.get_paths()) == nnz  # every physical id written
    assert "19, 10, 29" in ex.head.get_text() and "page size 4" in ex.head.get_text()
    assert "kv_indptr        = [0, 5, 8, 16]" in ex.summary.value
    assert not len(ex.cells["a"].stripes.get_segments())  # nothing shared yet
    ex.set(forks=2)
    assert len(ex.cells["a"].stripes.get_segments()) == 4 * 4  # 4 shared blocks, 4 stripes each
    assert "copy-on-write" in ex.summary.value
    for bad in ("a, 3", "-3, 4"):  # typed text: shown in the figure
        ex.set(lengths=bad)
        assert ex.error and "lengths" in ex.error and ex._error_text.get_visible()
    ex.set(lengths="19, 10, 29", page_size=1)  # 58 pages, 32 blocks
    assert "pool=32" in ex.error
    ex.set(pool=64)
    assert ex.error is None
    with pytest.raises(ValueError, match="page_size"):
        ex.set(page_size=0)
    with pytest.raises(TypeError, match="lengths"):
        ex.set(lengths=3)


# --- composable formats --------------------------------------------------------------------------


def test_lecture_composable_numbers():
    r = fx.composable_numbers()
    assert (r.n, r.prefix, r.own, r.page_size) == (4, 15, 4, 16)
    assert (r.single, r.composable, r.shared) == (76, 31, 15)  # 4 x 19 against 15 + 4 x 4
    assert r.saving == pytest.approx(1 - 31 / 76)
    assert 0 < r.max_diff < 1e-6  # float32: equal to rounding
    assert r.layout.kv_indptr.tolist() == [0, 19, 38, 57, 76]
    text = fx.composable_text()
    assert "single format 76, composable 31 (59% fewer" in text


def test_composable_explorer_at_every_combination_of_extremes():
    """Each control at either end, in all 16 combinations (e.g. many requests with no own blocks,
    which once asked the random generator for a negative size): counts by hand, or, for an empty
    cache (no prefix, no own blocks), the refusal shown in the figure."""
    import itertools

    from attnlab.explore import EXPLORERS
    from attnlab.explore._drive import extremes

    ex = EXPLORERS["composable"]()
    ends = {k: extremes(w) for k, w in ex.widgets.items()}
    assert ends == {
        "n": [1, 16],
        "prefix": [0, 32],
        "own": [0, 16],
        "page_size": [fx.PAGE_SIZES[0], fx.PAGE_SIZES[-1]],
    }
    for n, prefix, own, ps in itertools.product(*ends.values()):
        ex.set(n=n, prefix=prefix, own=own, page_size=ps)
        if prefix == own == 0:
            assert ex.error and "prefix=0 and own=0" in ex.error and ex._error_text.get_visible()
            continue
        assert ex.error is None, (n, prefix, own, ps, ex.error)
        r = fx.composable_numbers(n, prefix, own, ps)
        assert r.single == n * (prefix + own)
        shared = prefix if (prefix and n > 1) else (prefix + own if n == 1 else 0)
        assert (r.shared, r.composable) == (shared, shared + n * (prefix + own - shared))
        assert r.max_diff < SAME
        assert f"<b>{r.single}</b>" in ex.summary.value and "below 1e-06" in ex.summary.value


def test_composable_text_states_a_verdict_not_roundoff_digits():
    text = fx.composable_text()
    assert text.splitlines()[-1] == (
        "composable = single to float32 roundoff: max difference below 1e-06 (random data, head dim 16)"
    )
    assert fx.composable_numbers().max_diff < SAME


@pytest.mark.parametrize(
    "n, prefix, own, ps",
    [
        (4, 15, 4, 16),
        (2, 1, 0, 1),
        (9, 4, 0, 16),
        (7, 3, 5, 4),
        (16, 32, 16, 16),
        (3, 0, 2, 8),
        (1, 6, 2, 2),
        (5, 9, 1, 2),
    ],
)
def test_composable_against_the_library(n, prefix, own, ps):
    r = fx.composable_numbers(n, prefix, own, ps)
    # by hand: every request holds prefix + own pages; the group shares the prefix when there is
    # one and more than one request (a single request "shares" its whole table with itself)
    assert r.single == n * (prefix + own)
    shared = prefix if (prefix and n > 1) else (prefix + own if n == 1 else 0)
    assert r.shared == shared
    assert r.composable == shared + n * (prefix + own) - n * shared
    # the same cache built here, through attnlab.core.paged
    d = fx.CHECK_HEAD_DIM
    rng = np.random.default_rng(0)
    c = PagedKVCache(prefix + n * own + 1, ps, d, dtype=np.float32, seed=0)
    kv = lambda t: rng.standard_normal((2, t, d), dtype=np.float32)  # noqa: E731
    if prefix:
        base = c.add(*kv(prefix * ps))
        rids = [c.fork(base) for _ in range(n)]
        for i, r_ in enumerate(rids):
            if own:
                c.append(r_, *kv(own * ps - i % ps))
    else:
        rids = [c.add(*kv(own * ps - i % ps)) for i in range(n)]
    q = rng.standard_normal((n, d), dtype=np.float32)
    out, reads = composable_attention(q, c, rids)
    assert reads == {"single": r.single, "composable": r.composable, "shared": r.shared}
    assert np.array_equal(to_bsr(c, rids).kv_indices, r.layout.kv_indices)
    assert r.max_diff == float(np.abs(out - bsr_attention(q, c, to_bsr(c, rids))).max()) < 1e-6


@pytest.mark.parametrize(
    "kw, exc, name",
    [
        ({"prefix": 0, "own": 0}, ValueError, "prefix"),
        ({"page_size": 3}, ValueError, "page_size"),
        ({"page_size": "16"}, ValueError, "page_size"),
        ({"n": 0}, ValueError, r"\bn\b"),
        ({"n": 2.5}, TypeError, r"\bn\b"),
        ({"own": -1}, ValueError, "own"),
        ({"prefix": True}, TypeError, "prefix"),
    ],
)
def test_composable_bad_input(kw, exc, name):
    with pytest.raises(exc, match=name):
        fx.composable_numbers(**kw)


def test_composable_explorer():
    ex = EXPLORERS["composable"]()
    assert [b.get_height() for b in ex.bar_p] == pytest.approx([100 * 60 / 76, 100 * 15 / 76])
    assert [b.get_y() + b.get_height() for b in ex.bar_o] == pytest.approx([100, 100 * 31 / 76])
    # single format: one (1, page size) cell per request and page; composable: the 15 prefix
    # pages once, each n rows tall, then the 16 own pages
    assert len(ex.cells["a"].fill.get_paths()) == 2 * 76
    assert len(ex.cells["b"].fill.get_paths()) == 2 * 31
    tall = [np.ptp(p.vertices[:, 1]) for p in ex.cells["b"].fill.get_paths()[:15]]
    assert tall == pytest.approx([4 - ex.cells["b"].GAP] * 15)
    assert "<b>76</b>" in ex.summary.value and "<b>31</b>" in ex.summary.value
    assert "59% fewer" in ex.summary.value and "head dim 16" in ex.summary.value
    assert "4 requests, prefix 15 blocks, 4 own blocks each, page size 16" == ex.head.get_text()
    ex.set(prefix=0, own=0)
    assert ex.error and "prefix" in ex.error and ex._error_text.get_visible()
    ex.set(own=3)
    assert ex.error is None
    assert [b.get_y() + b.get_height() for b in ex.bar_o] == pytest.approx([100, 100])


def test_labels_drawn_as_paths_are_readable():
    """Cell labels are glyph paths, not Text artists (which the generic font check sees): they
    use LABEL_PT, at least the course's smallest font, and their glyphs are that tall."""
    assert _cells.LABEL_PT >= style.SMALL
    height_pt = np.ptp(_cells._glyphs("10").vertices[:, 1])
    assert 0.6 * _cells.LABEL_PT < height_pt < _cells.LABEL_PT
