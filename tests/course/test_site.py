"""`make site` on two small notebooks made here: the pages, the index, the explorers' static figures.
(tests/browser/test_site.py opens the real course's pages in Chromium.)"""

from __future__ import annotations

import base64
import io
import re

import nbformat
import nbformat.v4 as v4
import pytest
from PIL import Image

from attnlab.course import site

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _png(color) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (4, 3), color).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


RED, BLUE, GREEN = _png("red"), _png("blue"), _png("green")


def _view(model_id: str, **data):
    return v4.new_output(
        "display_data",
        {
            WIDGET_VIEW: {"model_id": model_id, "version_major": 2, "version_minor": 0},
            "text/plain": "VBox(...)",
            **data,
        },
    )


def _model(name: str, state: dict, buffers=None) -> dict:
    m = {
        "model_module": "@jupyter-widgets/controls",
        "model_module_version": "2.0.0",
        "model_name": name,
        "state": state,
    }
    if buffers:
        m["buffers"] = buffers
    return m


def _notebooks(tmp_path):
    plot = v4.new_notebook(
        cells=[
            v4.new_markdown_cell(
                "# 00 · A plot · 一张图\n\n*Lecture section 0 · five minutes*\n\n"
                "What $N^2$ looks like.\n\nMore later."
            ),
            v4.new_code_cell(
                "plot()",
                outputs=[v4.new_output("display_data", {"image/png": RED, "text/plain": "<Figure>"})],
            ),
            v4.new_markdown_cell("On to [the explorer](01_explorer.ipynb#top)."),
        ]
    )
    explorer = v4.new_notebook(
        cells=[
            v4.new_markdown_cell(
                "# 01 · An explorer · 探索器\n\n"
                "**After this notebook you can**\n- move a slider;\n- read a figure."
            ),
            v4.new_code_cell("explore.Thing()", outputs=[_view("root")]),  # state saved
            v4.new_code_cell(
                "explore.Other()", outputs=[_view("gone", **{"image/png": GREEN})]
            ),  # no state, png
            v4.new_code_cell("explore.Bare()", outputs=[_view("gone too")]),  # nothing to show
        ]
    )
    explorer.metadata["widgets"] = {
        site.WIDGET_STATE: {
            "version_major": 2,
            "version_minor": 0,
            "state": {
                "root": _model(
                    "VBoxModel", {"children": ["IPY_MODEL_slider", "IPY_MODEL_img", "IPY_MODEL_html"]}
                ),
                "slider": _model(
                    "SelectionSliderModel",
                    {"description": "head dim d", "index": 1, "_options_labels": ["32", "64"]},
                ),
                "img": _model(
                    "ImageModel", {"format": "png"}, [{"path": ["value"], "data": BLUE, "encoding": "base64"}]
                ),
                "html": _model("HTMLModel", {"value": "ratio <b>7.9x</b>"}),
            },
        }
    }
    src = tmp_path / "nbs"
    src.mkdir()
    nbformat.write(plot, src / "00_plot.ipynb")
    nbformat.write(explorer, src / "01_explorer.ipynb")
    return src


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("site")
    src = _notebooks(tmp)
    before = {p.name: p.read_bytes() for p in src.glob("*.ipynb")}
    written = site.build(tmp / "out", src)
    return src, before, tmp / "out", written


def _read(out, name):
    return (out / name).read_text(encoding="utf-8")


def test_pages_and_index_are_written_in_lecture_order(built):
    src, before, out, written = built
    assert [p.name for p in written] == ["index.html", "00_plot.html", "01_explorer.html"]
    assert {p.name: p.read_bytes() for p in src.glob("*.ipynb")} == before, "a notebook was written"


def test_index_lists_every_notebook_with_title_and_first_paragraph(built):
    out = built[2]
    html = _read(out, "index.html")
    assert f"<title>{site.COURSE}</title>" in html
    links = re.findall(r'<a href="(\d\d_[^"]+\.html)">([^<]+)</a>', html)
    assert links == [
        ("00_plot.html", "00 · A plot · 一张图"),
        ("01_explorer.html", "01 · An explorer · 探索器"),
    ]
    assert "Lecture section 0 · five minutes" in html and "What $N^2$ looks like." in html
    assert "More later." not in html  # the first paragraph only
    assert "After this notebook you can" in html and "read a figure." in html
    assert "3 interactive explorers" in html
    assert "make lab" in html


def test_a_plain_figure_is_embedded(built):
    html = _read(built[2], "00_plot.html")
    assert "<title>00 · A plot · 一张图</title>" in html
    assert f"data:image/png;base64,{RED}" in html
    assert site.NOTE_CLASS + '"' not in html  # no explorer, no note
    assert 'href="01_explorer.html#top"' in html  # a link to a notebook goes to its page
    assert 'href="01_explorer.html" rel="next"' in html


def test_explorers_show_their_committed_figure_under_the_note(built):
    html = _read(built[2], "01_explorer.html")
    assert html.count(f'<p class="{site.NOTE_CLASS}">') == 3
    assert f"data:image/png;base64,{BLUE}" in html  # from the saved widget state
    assert f"data:image/png;base64,{GREEN}" in html  # from the view's own bundle
    assert "not saved with this notebook" in html  # the third has neither
    assert "ratio <b>7.9x</b>" in html and "head dim d = 64" in html
    note, fig = html.index(site.NOTE_CLASS + '">'), html.index(BLUE)
    assert note < fig
    # nothing left that needs the widget renderer or require.js from a CDN
    assert WIDGET_VIEW not in html and "widget-state" not in html
    srcs = re.findall(r'<script[^>]* src="([^"]*)"', html)
    assert all("mathjax" in s for s in srcs), srcs


def test_static_explorers_keeps_other_outputs_and_drops_the_state():
    nb = v4.new_notebook(
        cells=[
            v4.new_code_cell("x", outputs=[v4.new_output("stream", name="stdout", text="hi\n"), _view("m")])
        ]
    )
    nb.metadata["widgets"] = {site.WIDGET_STATE: {"state": {}}}
    assert site.static_explorers(nb) == 1
    outs = nb.cells[0].outputs
    assert outs[0].output_type == "stream" and site.NOTE_CLASS in outs[1].data["text/html"]
    assert "widgets" not in nb.metadata


def test_no_notebooks_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no notebooks"):
        site.build(tmp_path / "out", tmp_path)


def test_a_local_mathjax_is_used_and_the_index_stops_saying_web(tmp_path, built):
    url = "mathjax/MathJax.js?config=TeX-AMS_CHTML"
    site.build(tmp_path / "out", built[0], mathjax_url=url)
    for name in ("index.html", "00_plot.html"):
        html = _read(tmp_path / "out", name)
        assert re.findall(r'<script[^>]* src="([^"]*)"', html) == [url], name
    assert "fetched from the web" not in _read(tmp_path / "out", "index.html")
    assert "fetched from the web" in _read(built[2], "index.html")
