"""Named entries read from data/*.json (GPUs, models), looked up by name or alias.

One place for what `hardware` and `models` share: where data/ is, freezing the JSON into
read-only values, case- and separator-insensitive names, and the error for an unknown name.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType

DATA_DIR = Path(__file__).resolve().parent.parent.parent / "data"


def data_path(name: str) -> Path:
    """Path of a file in the repository's `data/` folder (lib/attnlab/../../data).

    Example: `data_path("gpus.json").name == "gpus.json"`. FileNotFoundError if it is missing.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty file name, got {name!r}")
    if Path(name).name != name or name in (".", ".."):
        raise ValueError(f"name={name!r} must be a plain file name inside data/ (no folders, no '..')")
    path = DATA_DIR / name
    if not path.is_file():
        raise FileNotFoundError(
            f"data file {name!r} not found at {path}; the data/ folder sits "
            f"beside lib/ in the repository (editable install expected)"
        )
    return path


def freeze(obj):
    """JSON value -> read-only value (dicts become mapping proxies, lists tuples)."""
    if isinstance(obj, dict):
        return MappingProxyType({k: freeze(v) for k, v in obj.items()})
    if isinstance(obj, list):
        return tuple(freeze(v) for v in obj)
    return obj


def key(name: str) -> str:
    """Lookup key: 'H100 SXM', 'h100_sxm' and 'H100-SXM' are the same name."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {name!r} ({type(name).__name__})")
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def load(filename: str, section: str, build) -> tuple[dict, dict]:
    """(entries by name, lookup key -> name) from `data/<filename>`'s list `section`;
    `build(entry)` makes each entry's object (with a `.name`); "aliases" add lookup keys.
    Both mappings are read-only: callers cache them (lru_cache), so nobody may edit them."""
    with open(data_path(filename), encoding="utf-8") as f:
        raw = json.load(f)[section]
    table, lookup = {}, {}
    for entry in raw:
        item = build(entry)
        table[item.name] = item
        for alias in (item.name, *entry.get("aliases", ())):
            lookup[key(alias)] = item.name
    return MappingProxyType(table), MappingProxyType(lookup)


def find(param: str, value, cls, loaded: tuple[dict, dict]):
    """`value` itself if it is a `cls`, else the entry it names; TypeError / ValueError naming
    `param`, the value and the valid names."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, str):
        raise TypeError(
            f"{param} must be a {cls.__name__} or a {param} name, got {value!r} ({type(value).__name__})"
        )
    table, lookup = loaded
    name = lookup.get(key(value))
    if name is None:
        raise ValueError(f"{param}={value!r} is not known; valid: {', '.join(table)}")
    return table[name]
