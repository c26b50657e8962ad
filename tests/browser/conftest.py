"""The real-browser test's closing report: why it did not run (loudly), or the timing table.

The test itself (test_notebooks_in_browser.py) stores what it found on `config`; this hook prints
it after the run and writes build/browser_timings.json (gitignored) for quoting.
"""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TIMINGS_JSON = REPO / "build" / "browser_timings.json"


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return None if not n else (xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tr = terminalreporter
    missing = getattr(config, "_attnlab_browser_missing", [])
    if missing:
        tr.section("BROWSER TEST NOT RUN", sep="!", red=True, bold=True)
        for m in dict.fromkeys(missing):
            tr.write_line(m, red=True, bold=True)
    rows = getattr(config, "_attnlab_browser_timings", None)
    if not rows:
        return
    for r in rows:
        r["median_ms"] = _median(r["src_ms"])
        r["median_loaded_ms"] = _median(r["loaded_ms"])
        r["max_ms"] = max(r["src_ms"]) if r["src_ms"] else None
        r["median_first_ms"] = _median(r["first_ms"])
    fmt = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
    tr.section("explorers in the browser: key press / click -> new image src")
    tr.write_line(
        f"{'notebook':<27} {'#':>2}  {'explorer cell':<34} {'controls':>8} {'changes':>7} "
        f"{'median ms':>9} {'first ms':>8} {'max ms':>7} {'loaded ms':>9}"
    )
    for r in rows:
        tr.write_line(
            f"{r['notebook']:<27} {r['index']:>2}  {r['call'][:34]:<34} {r['controls']:>8} "
            f"{len(r['src_ms']):>7} {fmt(r['median_ms']):>9} {fmt(r['median_first_ms']):>8} {fmt(r['max_ms']):>7} "
            f"{fmt(r['median_loaded_ms']):>9}"
        )
    every = [x for r in rows for x in r["src_ms"]]
    if every:
        tr.write_line(
            f"all {len(every)} changes: median {_median(every):.0f} ms, max {max(every):.0f} ms; "
            f"'loaded ms' is to the new PNG decoded (what the learner sees)"
        )
    first = [x for r in rows for x in r["first_ms"]]
    if first:
        tr.write_line(
            f"first move of each of {len(first)} controls (a value not drawn before, the "
            f"'first ms' column): median {_median(first):.0f} ms, max {max(first):.0f} ms"
        )
    TIMINGS_JSON.parent.mkdir(parents=True, exist_ok=True)
    meta = getattr(config, "_attnlab_browser_meta", {})
    TIMINGS_JSON.write_text(json.dumps({"meta": meta, "explorers": rows}, indent=1) + "\n")
    tr.write_line(f"written to {TIMINGS_JSON.relative_to(REPO)}")
