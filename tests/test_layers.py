"""The architecture's rule, checked: imports point down only (docs/architecture.md's three layers), and
nothing outside attnlab.gpu imports torch or triton."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import attnlab

PKG = Path(attnlab.__file__).parent
LAYER = {"_check": 0, "_catalog": 0, "_lpt": 1, "_pieces": 1, "hbm": 1, "softmax": 1, "attention": 1,
         "iomodel": 1, "paged": 1, "variants": 1, "decode": 1, "mla": 1, "lowprec": 1, "hardware": 2,
         "roofs": 2, "models": 2, "configs": 2, "schedule": 2, "workload": 2, "explore": 3, "exercises": 3,
         "bench": 3, "gpu": 3, "tools": 3}


def _module_layer(path: Path) -> tuple[str, int]:
    top = path.relative_to(PKG).parts[0].removesuffix(".py")
    return top, LAYER.get(top, -1)


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
    assert layer >= 0, f"{top} has no layer in this test's map; add it"
    for kind, name, line in _imports(path):
        if kind != "attnlab" or name == top:
            continue
        assert name in LAYER, f"{path.name}:{line} imports unknown attnlab module {name}"
        if top == "gpu" or name == "gpu":
            continue                                          # the optional path sits beside layer 3
        assert LAYER[name] <= layer, (f"{path.relative_to(PKG)}:{line} (layer {layer}) imports "
                                      f"{name} (layer {LAYER[name]}): imports must point down")


@pytest.mark.parametrize("path", [p for p in FILES if _module_layer(p)[0] != "gpu"],
                         ids=lambda p: str(p.relative_to(PKG)))
def test_no_torch_outside_gpu(path):
    for kind, name, line in _imports(path):
        assert not (kind == "ext" and name in ("torch", "triton")), \
            f"{path.relative_to(PKG)}:{line} imports {name}; only attnlab.gpu may"


def test_library_files_stay_short_or_say_why():
    """One idea per file: a module over 300 lines says in its docstring why it is long."""
    import ast
    for path in sorted(PKG.rglob("*.py")):
        text = path.read_text()
        n = text.count("\n")
        if n > 300:
            doc = ast.get_docstring(ast.parse(text)) or ""
            assert "long because" in doc, f"{path.relative_to(PKG)} has {n} lines and no reason"
