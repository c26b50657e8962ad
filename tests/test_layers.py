"""The architecture's rule, checked: a module's layer is its folder, imports point down only
(docs/architecture.md), and nothing outside kernels/ and gpubench/ imports torch or triton."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import attnlab

PKG = Path(attnlab.__file__).parent
# A module's layer is its folder (or, for the three foundation modules, its file): the one map.
LAYER = {"validate": 0, "catalog": 0, "fmt": 0, "core": 1, "machine": 2, "explore": 3, "course": 3}
# The GPU path sits beside layer 3: each part may import these (and itself), nothing else.
GPU_ALLOWED = {"kernels": {"validate", "catalog", "fmt", "core", "machine"},
               "gpubench": {"validate", "catalog", "fmt", "core", "machine", "kernels"}}
TORCH_FOLDERS = set(GPU_ALLOWED)


def _module_layer(path: Path) -> tuple[str, int]:
    top = path.relative_to(PKG).parts[0].removesuffix(".py")
    return top, LAYER.get(top, 3 if top in GPU_ALLOWED else -1)


def _imports(path: Path):
    """(top-level attnlab module, line) for every attnlab import, and third-party top names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel_depth = len(path.relative_to(PKG).parts) - 1
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:                                    # relative: resolve against the package
                parts = list(path.relative_to(PKG).parts[:-1])[: rel_depth - (node.level - 1)]
                target = (parts + (node.module.split(".") if node.module else []))
                if target:
                    yield "attnlab", target[0], node.lineno
                else:                                         # `from . import x, y`
                    for a in node.names:
                        yield "attnlab", a.name, node.lineno
            elif node.module and node.module.startswith("attnlab."):
                yield "attnlab", node.module.split(".")[1], node.lineno
            elif node.module:
                yield "ext", node.module.split(".")[0], node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield "ext", a.name.split(".")[0], node.lineno


FILES = sorted(p for p in PKG.rglob("*.py") if p.name != "__init__.py" or p.parent != PKG)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PKG)))
def test_imports_point_down(path):
    top, layer = _module_layer(path)
    assert layer >= 0, f"{top} is no layer folder of this test's map; add it"
    for kind, name, line in _imports(path):
        if kind != "attnlab" or name == top:
            continue
        where = f"{path.relative_to(PKG)}:{line}"
        if top in GPU_ALLOWED:
            assert name in GPU_ALLOWED[top], f"{where}: {top}/ imports {name}; it may import {sorted(GPU_ALLOWED[top])}"
            continue
        if name in GPU_ALLOWED:
            assert layer == 3, f"{where} (layer {layer}) imports the GPU path ({name}); only layer 3 may"
            continue
        assert name in LAYER, f"{where} imports unknown attnlab module {name}"
        assert LAYER[name] <= layer, f"{where} (layer {layer}) imports {name} (layer {LAYER[name]}): imports must point down"


def test_the_layers_are_the_folders():
    """Every module sits in a folder (or foundation file) the map names, and every named one exists."""
    tops = {p.relative_to(PKG).parts[0].removesuffix(".py") for p in FILES}
    assert tops == set(LAYER) | set(GPU_ALLOWED), tops ^ (set(LAYER) | set(GPU_ALLOWED))


@pytest.mark.parametrize("path", [p for p in FILES if _module_layer(p)[0] not in TORCH_FOLDERS],
                         ids=lambda p: str(p.relative_to(PKG)))
def test_no_torch_outside_the_gpu_path(path):
    for kind, name, line in _imports(path):
        assert not (kind == "ext" and name in ("torch", "triton")), \
            f"{path.relative_to(PKG)}:{line} imports {name}; only kernels/ and gpubench/ may"


def test_library_files_stay_short_or_say_why():
    """One idea per file: a module over 300 lines says in its docstring why it is long."""
    import ast
    for path in sorted(PKG.rglob("*.py")):
        text = path.read_text()
        n = text.count("\n")
        if n > 300:
            doc = ast.get_docstring(ast.parse(text)) or ""
            assert "long because" in doc, f"{path.relative_to(PKG)} has {n} lines and no reason"
