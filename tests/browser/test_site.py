"""`make site` in a real browser: the static pages of every notebook, opened from disk (file://) in
headless Chromium with the network cut off, as a reader without any install would open them.

The site is built into a temporary folder from the committed notebooks. Each page must load with
its title, without a JavaScript error or a console error, with every <img> decoded, every link
into the site resolving to a file (and its #anchor), and one explorer note per explorer, followed
by the explorer's figure. Every request that is not file:// is cut off and recorded: only MathJax
may ask for the network (it is answered with an empty script, so the formulas stay as TeX).

Uses the Chromium and the not-run reporting of test_notebooks_in_browser.py; no JupyterLab.
"""

from __future__ import annotations

import html
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest

from attnlab.course import site

from .test_notebooks_in_browser import CHROMIUM_ARGS, NOTEBOOK_DIR, NOTEBOOKS, browser_tools

PAGES = ["index.html"] + [Path(n).with_suffix(".html").name for n in NOTEBOOKS]
LOAD_S = 30

JS_PAGE = """() => {
  const imgs = Array.from(document.images).map(i => ({src: i.src.slice(0, 80), complete: i.complete,
                                                      width: i.naturalWidth}));
  const links = Array.from(document.querySelectorAll('a[href]')).map(a => a.href);
  const notes = Array.from(document.querySelectorAll('p.attnlab-explorer-note')).map(p => {
    // the note is one output; the explorer's figure is the next output of the same cell
    const child = p.closest('.jp-OutputArea-child');
    const next = child && child.nextElementSibling;
    const img = next && next.querySelector('img');
    return {text: p.textContent, figure: !!img && img.complete && img.naturalWidth > 0};
  });
  const h1 = document.querySelector('h1');
  return {title: document.title, h1: h1 ? h1.textContent : null, imgs, links, notes,
          ids: Array.from(document.querySelectorAll('[id]')).map(e => e.id)};
}"""


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory):
    before = {p.name: p.read_bytes() for p in NOTEBOOK_DIR.glob("*.ipynb")}
    out = tmp_path_factory.mktemp("site")
    site.build(out, NOTEBOOK_DIR)
    assert {p.name: p.read_bytes() for p in NOTEBOOK_DIR.glob("*.ipynb")} == before, "a notebook was written"
    return out


@pytest.fixture(scope="module")
def reader(request):
    """A Chromium page that can read file:// and nothing else, with its errors and requests."""
    sync_playwright, chromium = browser_tools(request.config)
    mathjax = site._exporter(None).mathjax_url
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        log = {"errors": [], "console": [], "network": [], "mathjax": 0}

        def route(r):
            url = r.request.url
            if url.startswith("file:"):
                r.continue_()
            elif url == mathjax:
                log["mathjax"] += 1
                r.fulfill(status=200, content_type="application/javascript", body="")
            else:
                log["network"].append(url)
                r.abort()

        page.route("**/*", route)
        page.on("pageerror", lambda e: log["errors"].append(str(e)))
        page.on("console", lambda m: log["console"].append(m.text) if m.type == "error" else None)
        page.log = log
        try:
            yield page
        finally:
            browser.close()


def _expected(name: str) -> tuple[str, int]:
    """(title, number of explorers) of a page, from its notebook."""
    if name == "index.html":
        return site.COURSE, 0
    src = NOTEBOOK_DIR / Path(name).with_suffix(".ipynb").name
    p = site.describe(nbformat.read(src, as_version=4), src)
    return p.title, p.explorers


def _local(url: str) -> tuple[Path, set[str]]:
    """The file a file:// URL names, and the ids its #fragment may match: as written (nbconvert's
    ids are themselves percent-encoded) or decoded, the two a browser tries."""
    parts = urlsplit(url)
    return Path(unquote(parts.path)), {parts.fragment, unquote(parts.fragment)} - {""}


@pytest.mark.parametrize("name", PAGES)
def test_page_reads_offline(site_dir, reader, name):
    log = reader.log
    for k in ("errors", "console", "network"):
        log[k].clear()
    path = site_dir / name
    assert path.is_file(), f"{name} was not written"
    reader.goto(path.as_uri(), wait_until="load", timeout=LOAD_S * 1000)
    got = reader.evaluate(JS_PAGE)
    title, explorers = _expected(name)
    problems = []
    if got["title"] != title:
        problems.append(f"title {got['title']!r}, expected {title!r}")
    if not got["h1"] or not got["h1"].startswith(title.split(" · ")[0]):
        problems.append(f"first heading {got['h1']!r}")
    problems += [f"image not loaded: {i}" for i in got["imgs"] if not (i["complete"] and i["width"] > 0)]
    if len(got["notes"]) != explorers:
        problems.append(f"{len(got['notes'])} explorer notes for {explorers} explorers")
    problems += [
        f"explorer note {k + 1} has no figure after it" for k, n in enumerate(got["notes"]) if not n["figure"]
    ]
    for href in got["links"]:
        if not href.startswith("file:"):
            continue  # the web, e.g. the papers cited
        target, anchor = _local(href)
        if not target.is_file():
            problems.append(f"link to a missing file: {href}")
        elif (
            anchor
            and target != path
            and not any(f'id="{html.escape(a)}"' in target.read_text("utf-8") for a in anchor)
        ):
            problems.append(f"link to a missing anchor: {href}")
        elif anchor and target == path and not anchor & set(got["ids"]):
            problems.append(f"link to a missing anchor on this page: {href}")
    problems += [f"JavaScript error: {e}" for e in log["errors"]]
    problems += [f"console error: {e}" for e in log["console"]]
    problems += [f"asked the network for {u}" for u in log["network"]]
    if name == "index.html":
        pages = [str(site_dir / p) for p in PAGES[1:]]
        linked = [str(_local(h)[0]) for h in got["links"] if h.startswith("file:")]
        in_order = [p for p in linked if p in pages]
        if list(dict.fromkeys(in_order)) != pages:
            problems.append(f"the index links {in_order}, expected every page in lecture order {pages}")
    assert not problems, f"{name}:\n" + "\n".join(problems)
