"""The source of functions in the package, read from their file without importing it, so that a
notebook can show a GPU kernel (Triton, Gluon) on a machine that has neither installed."""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["function_source"]

_PACKAGE = Path(__file__).resolve().parent.parent


def function_source(module: str, *names: str) -> str:
    """The top-level functions `names` of attnlab module `module` ("kernels.gluon_fa3_kernel"),
    decorators included, one after another, in the order asked.

    >>> print(function_source("fmt", "si").splitlines()[0])
    def si(x: float, unit: str = "", digits: int = 3) -> str:
    """
    if not isinstance(module, str) or not module or not all(p.isidentifier() for p in module.split(".")):
        raise ValueError(f"module={module!r} must be a dotted attnlab module name, e.g. 'kernels.fa2'")
    path = _PACKAGE.joinpath(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        raise ValueError(f"module={module!r}: no file {path.relative_to(_PACKAGE.parent)}")
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    defs = {n.name: n for n in ast.parse(text).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    if not names:
        raise ValueError("names: give at least one function name")
    out = []
    for name in names:
        if name not in defs:
            raise ValueError(f"{module} has no top-level function {name!r}; it has {', '.join(sorted(defs))}")
        node = defs[name]
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        out.append("\n".join(lines[first - 1 : node.end_lineno]))
    return "\n\n\n".join(out)
