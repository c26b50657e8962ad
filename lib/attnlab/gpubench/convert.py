"""Rewrite run files recorded before the one schema (gpubench.schema) into it, once:

    python -m attnlab.gpubench.convert data/measurements/h200-2026-12-01.json [...]

Each section's own rows become schema rows under the file's "rows" (its old flat table, whose
`x_best` had two opposite meanings, is dropped); the sections keep their settings, not their
rows. A file already in the schema is left as it is. Readers read only the schema."""
from __future__ import annotations

import json
import sys

from attnlab.gpubench.schema import SCHEMA, section_rows

__all__ = ["to_schema", "main"]


def to_schema(old: dict) -> dict:
    """The run file `old` (a dict with "sections", each with its own "rows") in the schema."""
    if not isinstance(old, dict) or not isinstance(old.get("sections"), dict):
        raise ValueError("old must be a run file's dict with a 'sections' dict")
    if old.get("schema") == SCHEMA:
        return old
    new = {k: v for k, v in old.items() if k not in ("rows", "sections")}
    new["schema"], new["sections"], new["rows"] = SCHEMA, {}, []
    commits = old.get("commits_by_section", {})
    for name, sec in old["sections"].items():
        new["sections"][name] = {k: v for k, v in sec.items() if k != "rows"}
        new["rows"] += section_rows(name, sec.get("rows", []), commits.get(name, old.get("commit")))
    return new


def main(argv=None) -> int:
    for path in (sys.argv[1:] if argv is None else argv):
        with open(path) as f:
            old = json.load(f)
        new = to_schema(old)
        if new is not old:
            with open(path, "w") as f:
                json.dump(new, f, indent=1)
        print(f"{path}: {'converted' if new is not old else 'already in the schema'}, {len(new['rows'])} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
