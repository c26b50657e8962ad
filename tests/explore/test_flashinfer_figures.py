"""Notebook 05's block pictures as a learner sees them: a panel redrawn alone leaves nothing of its
old picture behind, a refused pool says what fits and sits off the labels, the note of panel (d)
is off the cells, dense cells lose their gaps instead of aliasing them, the variant controls keep
their sliders, and each measured section states its own date."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
from PIL import Image

from attnlab.explore import EXPLORERS, measured
from attnlab.explore._base import png_rgb
from attnlab.explore.flashinfer import page_table as pt
from attnlab.explore.flashinfer import variant_gallery as vg
from attnlab.explore.flashinfer._cells import DENSE_PX, Cells, gap_for


def _pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)


@pytest.mark.parametrize(
    "name, moves",
    [
        (
            "page_table",
            [
                {"pool": 64},
                {"page_size": 1},
                {"page_size": 16},
                {"pool": 32},
                {"page_size": 1},
                {"page_size": 2},
                {"page_size": 3},
            ],
        ),
        ("composable", [{"n": 16}, {"prefix": 32}, {"own": 16}, {"n": 3}]),
    ],
)
def test_a_panel_redrawn_alone_leaves_no_trace_of_its_old_picture(name, moves):
    """Each move redraws the panels whose axes changed; the picture must equal a full redraw
    pixel for pixel (a tick label that moved away used to leave half a glyph past the last tick,
    and a neighbour's wipe took a column of the panel redrawn before it)."""
    ex = EXPLORERS[name]()
    partial = ex.partial_draws
    for values in moves:
        ex.set(**values)
        fast = _pixels(ex.image.value)
        full = _pixels(ex.png(full=True))
        assert np.abs(fast - full).max() == 0, f"{name}: the blit differs from a full redraw after {values}"
    assert ex.partial_draws > partial  # the moves did redraw panels alone


def test_the_fast_png_holds_the_same_pixels():
    rng = np.random.default_rng(5)
    rgb = rng.integers(0, 256, size=(37, 53, 3), dtype=np.uint8)
    rgb[:10] = 255  # flat rows, as a plot has
    back = np.asarray(Image.open(io.BytesIO(png_rgb(rgb))).convert("RGB"))
    assert back.shape == rgb.shape and np.array_equal(back, rgb)


def _holds(page_size, lengths, forks):
    """Blocks held, counted by hand: each request's pages; fork j of request 0 (length L) shares
    its full pages, copies a partial last page and appends j tokens."""
    own = sum(-(-n // page_size) for n in lengths)
    first = lengths[0]
    return own + sum(-(-(first % page_size + j) // page_size) for j in range(1, forks + 1))


def test_a_pool_too_small_says_how_many_blocks_fit_and_ends_its_sentence():
    rng = np.random.default_rng(3)
    for _ in range(20):
        ps, forks = int(rng.integers(1, 17)), int(rng.integers(0, pt.MAX_FORKS + 1))
        lengths = tuple(int(v) for v in rng.integers(1, 200, size=rng.integers(1, 4)))
        assert pt.blocks_needed(ps, lengths, forks) == _holds(ps, lengths, forks), (ps, lengths, forks)
    with pytest.raises(ValueError) as e:
        pt.page_table_numbers(page_size=1, pool=32)
    msg = str(e.value)
    assert "pool=32" in msg and "page_size=1" in msg and f"need {19 + 10 + 29} blocks" in msg
    assert "num_blocks" not in msg and msg.endswith(".")
    assert pt.page_table_numbers(page_size=1, pool=58).layout.kv_indices.size == 58  # the bound fits


def test_the_refusal_box_sits_off_the_labels_and_reads_as_sentences():
    ex = EXPLORERS["page_table"]()
    ex.set(page_size=1)
    assert ex.error is not None
    text = ex._error_text.get_text().replace("\n", " ")
    assert "page size. The figure still shows" in text and text.endswith("page_size = 4.")
    r = ex.canvas.get_renderer()
    box = ex._error_text.get_bbox_patch().get_window_extent(r)
    for label in (ex.ax_b.xaxis.label, ex.ax_c.title, ex.ax_a.xaxis.label, ex.ax_d.title):
        assert not box.overlaps(label.get_window_extent(r)), label.get_text()


def test_the_kv_indices_note_is_in_the_title_not_over_the_cells():
    ex = EXPLORERS["page_table"](page_size=1, pool=64)
    nnz = 19 + 10 + 29
    assert f"{nnz} ids are listed under the figure" in ex.head.get_text()
    texts = [p for p in ex.labels["d"].pc.get_paths()]
    widest = max(p.get_extents().width for p in texts)
    assert widest < 40  # numbers and "req i" only, no sentence
    ex.set(page_size=4)
    assert "listed" not in ex.head.get_text()


def test_cell_gaps_are_a_pixel_or_more_or_none():
    for px in np.linspace(0.5, 40, 200):
        g = gap_for(px)
        assert g == 0 or g * px >= 1 - 1e-9
        assert g <= max(Cells.GAP, 1 / DENSE_PX)  # never more than a sixth of a cell
    ex = EXPLORERS["composable"](n=16, prefix=32, own=16)
    verts = ex.cells["a"].fill.get_paths()
    widths = {round(float(np.ptp(p.vertices[:4, 0])), 6) for p in verts[: len(verts) // 2]}
    assert widths == {1.0}  # 288 columns: no gap left to alias


def test_variant_controls_keep_their_sliders():
    """A 440-pixel slider whose label is long keeps a stub of a track: every parameter label stays
    short, and the dropdowns leave room before the next control."""
    for kind, (_, label, _, _) in vg.KINDS.items():
        assert label is None or len(label) <= 26, (kind, label)
    ex = EXPLORERS["variant_gallery"]()
    for name in ("variant", "second"):
        assert ex.widgets[name].layout.margin.split()[1] == "40px"


def test_each_measured_section_states_its_own_date():
    run = measured.newest_run()
    for name, sec in run["sections"].items():
        text = measured.provenance(run, name)
        assert re.search(rf", {sec['date']}: torch", text), name
        if sec["date"] != run["date"]:
            assert run["date"] not in text, name
    assert f", {run['sections']['paged']['date']}: torch" in measured.paged_summary(
        measured.section(run, "paged")
    )
