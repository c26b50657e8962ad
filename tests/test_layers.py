"""The architecture's rule, checked: a module's layer is its folder, imports point down only
(docs/architecture.md), the import graph has no cycle, explore/ imports nothing of the GPU path,
and nothing outside kernels/ and gpubench/ imports torch or triton."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import attnlab

PKG = Path(attnlab.__file__).parent
# A module's layer is its folder (or, for the foundation modules, its file): the one map. explore
# and course have places of their own, so that an import between them both ways cannot pass.
LAYER = {
    "validate": 0,
    "catalog": 0,
    "fmt": 0,
    "runfile": 0,
    "timing": 0,
    "core": 1,
    "machine": 2,
    "explore": 3,
    "course": 4,
}
FOUNDATION = {name for name, layer in LAYER.items() if layer == 0}
# The GPU path sits beside explore: each part may import these (and itself), nothing else; no layer
# imports it (explore reads runs through runfile; a notebook's live GPU cell calls the harness).
GPU_ALLOWED = {
    "kernels": FOUNDATION | {"core", "machine"},
    "gpubench": FOUNDATION | {"core", "machine", "kernels"},
}
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
            if node.level:  # relative: resolve against the package
                parts = list(path.relative_to(PKG).parts[:-1])[: rel_depth - (node.level - 1)]
                target = parts + (node.module.split(".") if node.module else [])
                if target:
                    yield "attnlab", target[0], node.lineno
                else:  # `from . import x, y`
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
            assert name in GPU_ALLOWED[top], (
                f"{where}: {top}/ imports {name}; it may import {sorted(GPU_ALLOWED[top])}"
            )
            continue
        if name in GPU_ALLOWED:
            raise AssertionError(f"{where} ({top}/) imports the GPU path ({name}); no layer may")
            continue
        assert name in LAYER, f"{where} imports unknown attnlab module {name}"
        assert LAYER[name] <= layer, (
            f"{where} (layer {layer}) imports {name} (layer {LAYER[name]}): imports must point down"
        )


def _module_names(path: Path) -> str:
    rel = path.relative_to(PKG).with_suffix("")
    parts = ("attnlab", *rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_names(p): p for p in FILES} | {"attnlab": PKG / "__init__.py"}


def _targets(path: Path):
    """The attnlab modules `path` imports (at its top or inside a function), by dotted name:
    `from a.b import c` is a.b.c when c is a module, else a.b."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = _module_names(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (
                ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                if node.level
                else node.module or ""
            )
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:  # `import attnlab.x.y.Name`: its module
                name = name.rpartition(".")[0]
            if name.startswith("attnlab"):
                yield name


def _cycle(graph: dict) -> list:
    """One cycle of `graph` ({node: set of nodes}) as a list of nodes, or [] if there is none."""
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == "open":
                return stack[stack.index(m) :] + [m]
            if m not in state and (found := visit(m)):
                return found
        state[n] = "done"
        stack.pop()
        return []

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return []


def test_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def _graph() -> dict:
    return {name: {t for t in _targets(p) if t != name} for name, p in MODULES.items()}


def test_the_import_graph_has_no_cycle():
    """No module reaches itself through attnlab imports, counting those inside functions."""
    assert not (found := _cycle(_graph())), " -> ".join(found)


def test_the_layer_folders_import_each_other_one_way_only():
    """No folder reaches itself through another: a package's own parts importing each other aside."""
    tops: dict = {}
    for name, targets in _graph().items():
        top = name.split(".")[1] if "." in name else name
        tops.setdefault(top, set()).update(
            t.split(".")[1] for t in targets if "." in t and t.split(".")[1] != top
        )
    assert not (found := _cycle(tops)), " -> ".join(found)


def test_explore_imports_nothing_of_the_gpu_path():
    """The notebooks' views read runs through runfile; a live GPU cell calls the harness itself."""
    for name, path in MODULES.items():
        if name.startswith("attnlab.explore"):
            bad = [t for t in _targets(path) if t.split(".")[1:2] in (["gpubench"], ["kernels"])]
            assert not bad, f"{path.relative_to(PKG)} imports {bad}"


def test_the_layers_are_the_folders():
    """Every module sits in a folder (or foundation file) the map names, and every named one exists."""
    tops = {p.relative_to(PKG).parts[0].removesuffix(".py") for p in FILES}
    assert tops == set(LAYER) | set(GPU_ALLOWED), tops ^ (set(LAYER) | set(GPU_ALLOWED))


@pytest.mark.parametrize(
    "path",
    [p for p in FILES if _module_layer(p)[0] not in TORCH_FOLDERS],
    ids=lambda p: str(p.relative_to(PKG)),
)
def test_no_torch_outside_the_gpu_path(path):
    for kind, name, line in _imports(path):
        assert not (kind == "ext" and name in ("torch", "triton")), (
            f"{path.relative_to(PKG)}:{line} imports {name}; only kernels/ and gpubench/ may"
        )


def test_library_files_stay_short_or_say_why():
    """One idea per file: a module over 300 lines says in its docstring why it is long."""
    import ast

    for path in sorted(PKG.rglob("*.py")):
        text = path.read_text()
        n = text.count("\n")
        if n > 300:
            doc = ast.get_docstring(ast.parse(text)) or ""
            assert "long because" in doc, f"{path.relative_to(PKG)} has {n} lines and no reason"
