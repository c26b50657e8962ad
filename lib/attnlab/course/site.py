"""Render every notebook, with its committed outputs, to static HTML pages, as `make site` does.

    python -m attnlab.course.site [--out site] [--notebooks DIR] [--mathjax-url URL]

Nothing is executed: each page shows the outputs and figures stored in the notebook. It writes
one page per notebooks/*.ipynb, in file-name order (the lecture's order), and index.html with the
course title, one entry per notebook (its first heading, its lecture line and its first
paragraph) and how to run the course live. The pages are nbconvert's JupyterLab template with
every image embedded as a data URI, so the folder works opened from disk, with no server.

An explorer is an ipywidgets view, which a static page cannot run. Its figure lives in the widget
state saved with the notebook (an `ImageModel` holding the PNG); each explorer output becomes a
one-line note saying how to run it live, that PNG, the explorer's summary line and the control
settings it was drawn at. The widget state and the view's mime bundle are then dropped, so the
page loads neither the widget renderer nor require.js (both from a CDN in the default template).

What still needs the network: MathJax, which typesets the formulas (nbconvert loads it from
cdnjs). Offline the formulas show as their TeX source, e.g. `$\\Theta(N^2 d^2 / M)$`; for typeset
formulas offline, point --mathjax-url at a local MathJax 2 (Debian: `apt-get install
libjs-mathjax`, then `--mathjax-url "file:///usr/share/javascript/mathjax/MathJax.js?config=TeX-AMS_CHTML"`).

This file is long because `make site` is one pass over the notebooks: nbconvert's template with the
course's navigation, each notebook's index entry, its explorers turned into their committed figures,
and the links between pages; each is a short function that `build` calls in turn on the same
notebook nodes.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
COURSE = "Efficient Attention: FlashAttention and FlashInfer"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
EXPLORER_NOTE = (
    "Interactive explorer: run this notebook live (<code>make lab</code>) to move the "
    "sliders. Below is the figure it was committed with."
)
NOTE_CLASS = "attnlab-explorer-note"

# nbconvert's JupyterLab template, less the two CDN scripts a page of static outputs has no use
# for, plus a line of navigation at the top and bottom of each page.
TEMPLATE = """{%- extends 'index.html.j2' -%}
{% block html_head_js_requirejs %}{% endblock %}
{% block jupyter_widgets %}{% endblock %}
{% block extra_css %}<style>
nav.attnlab-nav { display: flex; gap: 1.5em; padding: 0.6em 1em; font: 14px sans-serif;
                  border-bottom: 1px solid #ddd; }
nav.attnlab-nav.bottom { border-top: 1px solid #ddd; border-bottom: none; margin-top: 2em; }
.attnlab-explorer-note { margin: 0; padding: 0.3em 0.6em; border-left: 3px solid #f0a030;
                         background: #fff8ec; font-style: italic; }
.attnlab-explorer-settings { color: #555; font-size: 90%; }
</style>{% endblock extra_css %}
{% macro nav(where) -%}
{%- set n = resources.attnlab_nav -%}
{%- if n -%}
<nav class="attnlab-nav {{ where }}"><a href="index.html">Course index</a>
{%- if n.prev %}<a href="{{ n.prev[0] }}" rel="prev">&larr; {{ n.prev[1] | e }}</a>{% endif -%}
{%- if n.next %}<a href="{{ n.next[0] }}" rel="next">{{ n.next[1] | e }} &rarr;</a>{% endif -%}
</nav>
{%- endif -%}
{%- endmacro %}
{% block body_header %}{{ super() }}{{ nav('top') }}{% endblock body_header %}
{% block body_footer %}{{ nav('bottom') }}{{ super() }}{% endblock body_footer %}
"""


@dataclass(frozen=True)
class Page:
    """One notebook's entry in the index."""

    source: Path
    href: str  # the page's file name in the site folder
    title: str  # the notebook's first heading
    meta: str  # its first italic line (lecture section, reading time), markdown; may be ""
    summary: str  # its first paragraph after those, markdown
    explorers: int


def _blocks(text: str) -> list[str]:
    return [b.strip() for b in re.split(r"\n\s*\n", text) if b.strip()]


def _is_italic_line(block: str) -> bool:
    return "\n" not in block and bool(re.fullmatch(r"([*_])[^*_].*\1", block))


def describe(nb, source: Path) -> Page:
    """Title, lecture line and first paragraph of a notebook, from its first markdown cells.

    >>> import nbformat.v4 as v4
    >>> text = "# 09 · Title · 标题\\n\\n*Lecture 9*\\n\\nFirst.\\n\\nSecond."
    >>> nb = v4.new_notebook(cells=[v4.new_markdown_cell(text)])
    >>> p = describe(nb, Path("09_x.ipynb")); (p.title, p.meta, p.summary, p.href)
    ('09 · Title · 标题', '*Lecture 9*', 'First.', '09_x.html')
    """
    title = meta = summary = ""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for block in _blocks(cell.source):
            if not title and block.startswith("#"):
                title = block.splitlines()[0].lstrip("#").strip()
                rest = "\n".join(block.splitlines()[1:]).strip()
                if not rest:
                    continue
                block = rest
            if not title:
                continue
            if not meta and not summary and _is_italic_line(block):
                meta = block
            elif not summary and not block.startswith("#"):
                summary = block
        if summary:
            break
    n = sum(
        WIDGET_VIEW in out.get("data", {})
        for c in nb.cells
        if c.cell_type == "code"
        for out in c.get("outputs", [])
    )
    return Page(source, source.with_suffix(".html").name, title or source.stem, meta, summary, n)


# --- explorers: the widget view becomes its committed figure --------------------------------------


def _widget_parts(state: dict, model_id: str) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """(images as (mime, base64)), HTML values, 'control = value' lines of the widget tree at model_id."""
    images, html, settings = [], [], []

    def walk(mid: str, depth: int = 0) -> None:
        entry = state.get(mid)
        if entry is None or depth > 50:
            return
        name, s = entry.get("model_name", ""), entry.get("state", {})
        if name == "ImageModel":
            data = s.get("value") if isinstance(s.get("value"), str) else None
            for buf in entry.get("buffers", []):
                if buf.get("path") == ["value"] and buf.get("encoding", "base64") == "base64":
                    data = buf["data"]
            fmt = s.get("format", "png")
            if data and fmt in ("png", "jpeg"):
                images.append((f"image/{fmt}", data))
        elif name == "OutputModel":
            for out in s.get("outputs", []):
                for mime in ("image/png", "image/jpeg"):
                    if mime in out.get("data", {}):
                        images.append((mime, out["data"][mime]))
                        break
        elif name == "HTMLModel" and s.get("value"):
            html.append(s["value"])
        elif s.get("description") and ("value" in s or "index" in s):
            if "_options_labels" in s and isinstance(s.get("index"), int):
                value = s["_options_labels"][s["index"]]
            elif isinstance(s.get("value"), bool):
                value = "on" if s["value"] else "off"
            elif isinstance(s.get("value"), float) and s.get("readout_format"):
                try:
                    value = format(s["value"], s["readout_format"])
                except ValueError:
                    value = str(s["value"])
            else:
                value = str(s.get("value"))
            settings.append(f"{s['description']} = {value}")
        for child in s.get("children", []):
            if isinstance(child, str):
                walk(child.removeprefix("IPY_MODEL_"), depth + 1)

    walk(model_id)
    return images, html, settings


def static_explorers(nb) -> int:
    """Replace every widget view in nb (in place) by the explorer note, its committed figure, its
    summary line and its settings; drop the saved widget state. Returns the number of views.

    The figure is the view's Image widget as saved in the notebook's widget state, else an
    image/png beside the view in the same output; with neither, the note says the figure appears
    when the notebook runs."""
    import nbformat.v4 as v4
    from html import escape

    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    views = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        outputs = []
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                outputs.append(out)
                continue
            views += 1
            images, html, settings = _widget_parts(state, view.get("model_id", ""))
            if not images:
                images = [(m, out["data"][m]) for m in ("image/png", "image/jpeg") if m in out["data"]][:1]
            note = (
                EXPLORER_NOTE
                if images
                else (
                    EXPLORER_NOTE.split(". ")[0] + ". Its figure was not "
                    "saved with this notebook; it appears when the notebook runs."
                )
            )
            outputs.append(
                v4.new_output("display_data", {"text/html": f'<p class="{NOTE_CLASS}">{note}</p>'})
            )
            outputs += [
                v4.new_output("display_data", {mime: data, "text/plain": "<explorer figure>"})
                for mime, data in images
            ]
            extra = "".join(f"<div>{h}</div>" for h in html)
            if settings:
                extra += (
                    f'<div class="attnlab-explorer-settings">Drawn at: {escape(" · ".join(settings))}</div>'
                )
            if extra:
                outputs.append(v4.new_output("display_data", {"text/html": extra}))
        cell.outputs = outputs
    nb.metadata.pop("widgets", None)
    return views


# --- the site -------------------------------------------------------------------------------------


def _exporter(mathjax_url: str | None):
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        extra_loaders=[DictLoader({"attnlab_site.html.j2": TEMPLATE})],
        template_file="attnlab_site.html.j2",
        embed_images=True,
    )
    if mathjax_url:
        exporter.mathjax_url = mathjax_url
    return exporter


def _link_pages(html: str, hrefs: set[str]) -> str:
    """Links to another notebook of the course (`03_flashattention.ipynb#...`) point to its page."""
    return re.sub(
        r'href="([^"/#:]+)\.ipynb(#[^"]*)?"',
        lambda m: f'href="{m[1]}.html{m[2] or ""}"' if f"{m[1]}.html" in hrefs else m[0],
        html,
    )


def _index_notebook(pages: list[Page], web_mathjax: bool = True):
    import nbformat.v4 as v4

    cells = [
        v4.new_markdown_cell(
            f"# {COURSE}\n\n"
            "The course notebooks as static pages, with the outputs and figures they were committed "
            "with, in lecture order. Nothing here runs: the explorers' sliders need a live kernel. "
            + (
                "The pages need no server; only the formulas, typeset by MathJax, are fetched from the web "
                "(offline they show as TeX)."
                if web_mathjax
                else "The pages need no server."
            )
        )
    ]
    for p in pages:
        explorers = f"{p.explorers} interactive explorer{'s' * (p.explorers != 1)}" if p.explorers else ""
        meta = " · ".join(x for x in (p.meta, explorers) if x)
        cells.append(
            v4.new_markdown_cell(
                f"## [{p.title}]({p.href})\n\n" + (f"{meta}\n\n" if meta else "") + p.summary
            )
        )
    cells.append(
        v4.new_markdown_cell(
            "## Run the course live · 运行课程\n\n"
            "Clone the repository and run `make lab`: it installs the notebooks' dependencies into "
            "`.venv` and opens JupyterLab at notebook 00. Run All in a notebook, then move the explorers' "
            "sliders; every figure is recomputed in place. `make test` runs every check."
        )
    )
    nb = v4.new_notebook(cells=cells)
    nb.metadata["title"] = COURSE
    return nb


def build(
    out: str | Path = "site", notebooks: str | Path | None = None, mathjax_url: str | None = None
) -> list[Path]:
    """Write one page per notebook in `notebooks` (default: the repository's notebooks/) and
    index.html into `out`; returns the paths written, index first. The notebooks are only read."""
    import nbformat

    src = Path(notebooks) if notebooks is not None else REPO / "notebooks"
    paths = sorted(src.glob("*.ipynb"))
    if not paths:
        raise FileNotFoundError(f"no notebooks (*.ipynb) in {src}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    exporter = _exporter(mathjax_url)
    nbs = [nbformat.read(p, as_version=4) for p in paths]
    pages = [describe(nb, p) for nb, p in zip(nbs, paths)]
    hrefs = {p.href for p in pages}
    written = []
    for i, (nb, page) in enumerate(zip(nbs, pages)):
        nb = copy.deepcopy(nb)
        static_explorers(nb)
        nb.metadata["title"] = page.title
        nav = {
            "prev": (pages[i - 1].href, pages[i - 1].title) if i else None,
            "next": (pages[i + 1].href, pages[i + 1].title) if i + 1 < len(pages) else None,
        }
        html, _ = exporter.from_notebook_node(
            nb, resources={"metadata": {"name": page.title, "path": str(src)}, "attnlab_nav": nav}
        )
        (out / page.href).write_text(_link_pages(html, hrefs), encoding="utf-8")
        written.append(out / page.href)
    web = mathjax_url is None or mathjax_url.split(":")[0] in ("http", "https")
    html, _ = exporter.from_notebook_node(
        _index_notebook(pages, web), resources={"metadata": {"name": COURSE}}
    )
    (out / "index.html").write_text(html, encoding="utf-8")
    return [out / "index.html", *written]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m attnlab.course.site", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="site", help="folder to write the pages into (default: site)")
    ap.add_argument(
        "--notebooks", default=None, help="folder of notebooks (default: the repository's notebooks/)"
    )
    ap.add_argument("--mathjax-url", default=None, help="MathJax 2 script URL (default: nbconvert's CDN one)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    written = build(args.out, args.notebooks, args.mathjax_url)
    for p in written:
        print(f"wrote {p} ({p.stat().st_size / 1e6:.1f} MB)")
    print(
        f"{len(written) - 1} notebook pages and the index in {time.perf_counter() - t0:.1f} s; "
        f"open {written[0]} in a browser"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
