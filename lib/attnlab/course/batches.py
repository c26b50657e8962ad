"""Write data/request_lengths.json: the request-length batches notebook 05 and its explorers use.

    python -m attnlab.course.batches           # rewrite the file
    python -m attnlab.course.batches --check   # exit 1 if the file differs from the generator

Each batch is `attnlab.machine.workload.lengths(dist, batch, seed=SEED)` with the generator's default
parameters, which the file records beside the batches (and the tests compare with the code), so a
numpy or parameter change that moves the streams shows up as a diff instead of silently changing
the notebook's numbers.
"""

from __future__ import annotations

import inspect
import json
import sys

from attnlab.catalog import data_path
from attnlab.machine.workload import DISTS, RECORDED_BATCHES, lengths

FILENAME = "request_lengths.json"
SEED = 0
BATCHES = RECORDED_BATCHES  # 1, 2, 4, ..., 256: notebook 05's batch sizes


def generate() -> dict:
    """The file's content: how it was made, then the (l_qo, l_kv) pairs by dist and batch size."""
    params = {
        k: p.default
        for k, p in inspect.signature(lengths).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    return {
        "about": "Decode batches of (l_qo, l_kv) request lengths for notebook 05 (lecture §5.6): "
        "batches[dist][batch] = attnlab.machine.workload.lengths(dist, batch, seed=seed, "
        "**parameters). Written by `python -m attnlab.course.batches`; "
        "tests/explore/test_flashinfer_scheduler.py checks it against the generator.",
        "generator": "attnlab.machine.workload.lengths",
        "seed": SEED,
        "parameters": params,
        "batches": {
            d: {str(b): [list(p) for p in lengths(d, b, seed=SEED, **params)] for b in BATCHES} for d in DISTS
        },
    }


def dumps(content: dict) -> str:
    """JSON with one line per batch: diffs stay readable, the file small."""
    head = {k: v for k, v in content.items() if k != "batches"}
    lines = [
        "{",
        *(f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}," for k, v in head.items()),
        '  "batches": {',
    ]
    dists = list(content["batches"].items())
    for i, (dist, table) in enumerate(dists):
        lines.append(f"    {json.dumps(dist)}: {{")
        rows = [
            f"      {json.dumps(b)}: {json.dumps(pairs, separators=(',', ':'))}" for b, pairs in table.items()
        ]
        lines.append(",\n".join(rows))
        lines.append("    }" + ("," if i < len(dists) - 1 else ""))
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = dumps(generate())
    path = data_path("gpus.json").parent / FILENAME  # data/, found as for the GPU table
    if "--check" in argv:
        same = path.read_text(encoding="utf-8") == text
        print(f"{path}: {'up to date' if same else 'differs from the generator; rerun without --check'}")
        return 0 if same else 1
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
