"""The kernels folder's own rules (the refactor's, kept): no kernel imports another file's private
name (what they share is public, in kernels.common), and every file is under 300 lines or says in
its docstring why it is long."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import attnlab

KERNELS = Path(attnlab.__file__).parent / "kernels"
FILES = sorted(KERNELS.glob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_private_name_from_another_kernel_file(path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnlab.kernels"):
            private = [a.name for a in node.names if a.name.startswith("_")]
            assert not private, f"{path.name}:{node.lineno} imports {private} from {node.module}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_short_or_says_why(path):
    text = path.read_text(encoding="utf-8")
    doc = ast.get_docstring(ast.parse(text)) or ""
    assert len(text.splitlines()) < 300 or "long because" in doc, f"{path.name}: split it or say why"
