"""Execute notebooks in place, storing outputs and widget state, as `make notebooks` does.

    python -m attnlab.course.execute notebooks/*.ipynb

Outputs must then reproduce under strict nbval: cells with timings or widgets carry
`# NBVAL_IGNORE_OUTPUT`. The kernel is the current interpreter, so run it from the project venv.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def execute(path: str | Path, timeout: int = 600) -> None:
    import nbformat
    from nbclient import NotebookClient

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        store_widget_state=True,
        resources={"metadata": {"path": str(path.parent)}},
    )
    client.execute()
    nbformat.write(nb, path)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    for p in argv:
        print(f"executing {p}", flush=True)
        execute(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
