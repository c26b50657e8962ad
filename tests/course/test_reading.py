"""What a reader meets in every committed notebook, read from the JSON (no kernel): text outputs
that fit in 100 characters (JupyterLab wraps a wider table and its columns stop lining up), a
closing summary that links the next notebook, other notebooks named by a link, no reference to a
lecture the course does not contain, and no commit hash or tuning history (docs/gpu-notes.md
keeps those)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
CHECKED = {
    "00": "01",
    "01": "02",
    "02": "03",
    "03": "04",
    "04": "05",
    "05": "06",
    "06": "07",
    "07": "00",
}  # notebook -> the one it leads to
HISTORY = re.compile(
    r"\b(?:commit|at) [0-9a-f]{7,40}\b|defaults then|as it was then|\bthe defaults were\b", re.IGNORECASE
)
WIDTH = 100


def _nb(prefix: str) -> tuple[str, dict]:
    path = next(NOTEBOOKS.glob(f"{prefix}_*.ipynb"))
    return path.stem, json.loads(path.read_text(encoding="utf-8"))


def _text_outputs(cell):
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if "application/vnd.jupyter.widget-view+json" in data:
            continue  # a widget's repr, never shown beside it
        yield "".join(out.get("text", "")) or "".join(data.get("text/plain", ""))


@pytest.mark.parametrize("prefix", sorted(CHECKED))
def test_committed_text_fits_in_100_characters(prefix):
    name, nb = _nb(prefix)
    wide = []
    for i, cell in enumerate(nb["cells"]):
        code = "".join(cell["source"])
        if "getsource(" in code or "function_source(" in code:
            continue  # a printed source listing: code lines, not a table
        for text in _text_outputs(cell):
            for line in text.splitlines():
                if len(line) > WIDTH and not re.fullmatch(r"\s*\S+://\S+", line):  # a URL cannot wrap
                    wide.append(f"[{i}] {len(line)}: {line[:60]}...")
    assert not wide, f"{name}: lines wider than {WIDTH} characters:\n" + "\n".join(wide)


@pytest.mark.parametrize("prefix", sorted(CHECKED))
def test_ends_with_a_summary_and_a_link_to_the_next_notebook(prefix):
    name, nb = _nb(prefix)
    last = nb["cells"][-1]
    text = "".join(last["source"])
    nxt = next(NOTEBOOKS.glob(f"{CHECKED[prefix]}_*.ipynb")).name
    assert last["cell_type"] == "markdown" and text.startswith("## What this notebook showed"), name
    assert f"]({nxt})" in text.split("**Next:**")[-1], f"{name}: the last cell does not link {nxt}"


@pytest.mark.parametrize("prefix", sorted(CHECKED))
def test_other_notebooks_are_links(prefix):
    name, nb = _nb(prefix)
    bare = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        text = re.sub(r"`[^`]*`|\[[^\]]*\]\([^)]*\)", "", "".join(cell["source"]))  # code and links out
        bare += [
            f"[{i}] {m.group(0)}"
            for m in re.finditer(r"[Nn]otebooks? (0[0-7])\b", text)
            if m.group(1) != prefix
        ]
    assert not bare, f"{name}: notebooks named without a link: {bare}"
    for i, cell in enumerate(nb["cells"]):
        for target in re.findall(r"\]\(([^)#]+\.ipynb)", "".join(cell["source"])):
            assert (NOTEBOOKS / target).exists(), f"{name} [{i}] links {target}, which does not exist"


@pytest.mark.parametrize("prefix", sorted(CHECKED))
def test_no_lecture_the_course_does_not_contain(prefix):
    name, nb = _nb(prefix)
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    for phrase in (
        r"[Ll]ecture \d",
        r"lecture pitfall",
        r"lecture's data",
        r"lecture §[78]",
        r"lecture exercise",
    ):
        assert not re.search(phrase, text), f"{name}: {phrase!r} names something the course does not contain"


@pytest.mark.parametrize("prefix", sorted(CHECKED))
def test_no_commit_hash_or_tuning_history(prefix):
    name, nb = _nb(prefix)
    for i, cell in enumerate(nb["cells"]):
        texts = ["".join(cell["source"])] if cell["cell_type"] == "markdown" else list(_text_outputs(cell))
        for text in texts:
            found = HISTORY.search(text)
            assert not found, (
                f"{name} [{i}]: {found.group(0)!r} belongs in docs/gpu-notes.md, not in a lesson"
            )
