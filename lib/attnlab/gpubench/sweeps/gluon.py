"""`kernels.gluon_fa3` on an sm_90 GPU: every step set checked, then timed (Gluon kernels do not
run under Triton's interpreter, so this is where their numbers come from).

    python -m attnlab.gpubench.sweeps.gluon smoke     small odd shapes, GQA, N_q != N_k, N = 1,
                                                      every step set against a float32 reference;
                                                      soft_cap / window too (window 1, one wider
                                                      than N_k, rows that see no key)
    python -m attnlab.gpubench.sweeps.gluon full      the step table: per shape and mask, each step
                                                      set NaN-poisoned, checked (o and lse; within
                                                      2 x SDPA's error + 1e-3), timed beside
                                                      kernels.hopper and SDPA cuDNN / flash
    ... smoke final / full final                      the defaults (steps=None) and stage counts
    ... smoke early_k / full early_k                  early_k_release (K and V stages freed apart)
                                                      beside the defaults and a 3-stage overlap
    ... smoke persistent / full persistent            one program per SM on its list of tiles
                                                      (`persistent`) beside the defaults
    ... smoke default                                 the defaults alone (steps=None)
    python -m attnlab.gpubench.sweeps.gluon ladder    the lesson's step table: FA3's steps added one
                                                      at a time at today's defaults, each set
                                                      checked, then all timed round-robin REPEATS
                                                      times (the spread of the repeats is the
                                                      noise band)
    python -m attnlab.gpubench.sweeps.gluon record RUN.json OUT.json DATE COMMIT [early_k | ladder]
                                                      a `full` run as data/measurements/'s steps
                                                      file (ladder: RUN.json may be A.json,B.json,
                                                      runs on one machine whose repeats are pooled)

What each mode measures is declared in `sweeps.gluon_steps` (SMOKE, FULL, LADDER, on the step sets
and cases of `sweeps.gluon_sets`) and run by `gpubench.core.measure`, the loop every section
shares: one check against the float32 reference, one timer (`time_per_call`, CUDA-graph replay),
rows in the run file's schema. Results go to $OUT/gluon_smoke.json, gluon_check.json or
gluon_ladder.json, $OUT defaulting to the current folder; `record` (`sweeps.gluon_record`) turns
one into the step file notebook 03 reads.
"""

from __future__ import annotations

import json
import os
import sys
import time

from attnlab.gpubench.sweeps.gluon_sets import LADDER_SEED, TABLES
from attnlab.gpubench.sweeps.gluon_steps import FULL, LADDER, SMOKE

__all__ = ["SECTIONS", "FILES", "run", "main"]

SECTIONS = {"smoke": SMOKE, "full": FULL, "ladder": LADDER}
#: where each mode's result goes, in $OUT
FILES = {"smoke": "gluon_smoke.json", "full": "gluon_check.json", "ladder": "gluon_ladder.json"}


def run(mode: str, table: str | None = None, *, cases=None, out: str | None = None) -> dict:
    """Measure `mode`'s declaration (SECTIONS) on the step sets TABLES[mode][table] and `cases`
    (its own unless given), written to `out` (default $OUT/FILES[mode]) as rows come in; the
    rows' table is printed. The ladder's inputs use LADDER_SEED, the others seed 0."""
    from attnlab.gpubench.core import measure, table as text

    if mode not in SECTIONS:
        raise ValueError(f"mode must be one of {tuple(SECTIONS)}; got {mode!r}")
    if table not in TABLES[mode]:
        raise ValueError(f"table must be one of {tuple(TABLES[mode])} for {mode}; got {table!r}")
    out = os.path.join(os.environ.get("OUT", "."), FILES[mode]) if out is None else out
    t0 = time.time()
    seed = LADDER_SEED if mode == "ladder" else 0
    res = measure(SECTIONS[mode], cases, out=out, seed=seed, options={"sets": TABLES[mode][table]})
    print(text(res))
    print(f"{mode} done in {time.time() - t0:.0f}s", flush=True)
    return res


def _parser():
    from attnlab.gpubench.cli import Parser, describe, out_path

    ap = Parser(prog="python -m attnlab.gpubench.sweeps.gluon", description=describe(__doc__))
    sub = ap.add_subparsers(dest="mode")
    for mode, text in (
        ("smoke", "small odd shapes, every step set against a float32 reference"),
        ("full", "the step table: each step set checked, then timed beside the peers"),
    ):
        p = sub.add_parser(mode, help=text)
        names = tuple(k for k in TABLES[mode] if k)
        p.add_argument(
            "table", nargs="?", choices=names, help="run this table of step sets instead of VARIANTS"
        )
    sub.add_parser("ladder", help="the lesson's step table, timed REPEATS times round-robin")
    p = sub.add_parser("record", help="a `full` or `ladder` run as data/measurements/'s steps file")
    p.add_argument("run", help="the run's JSON (ladder: several, comma-separated, from one machine)")
    p.add_argument("out", type=out_path, help="the steps file to write")
    p.add_argument("date")
    p.add_argument("commit")
    p.add_argument("kind", nargs="?", choices=("early_k", "ladder"), help="the run's mode, if not `full`")
    return ap


def _record(ap, args) -> int:
    from attnlab.gpubench.sweeps.gluon_record import RECORD_EARLY, RECORD_STEPS, record, record_ladder

    loaded = []
    for path in args.run.split(","):  # ladder: several runs, comma-separated
        try:
            with open(path) as f:
                loaded.append(json.load(f))
        except (OSError, ValueError) as e:
            ap.error(f"argument run: {path}: {e}")
    try:
        if args.kind == "ladder":
            rec = record_ladder(loaded, date=args.date, commit=args.commit)
        else:
            steps = RECORD_EARLY if args.kind == "early_k" else RECORD_STEPS
            rec = record(loaded[0], date=args.date, commit=args.commit, steps=steps)
    except ValueError as e:
        ap.error(f"argument run: {args.run}: {e}")
    with open(args.out, "w") as f:
        json.dump(rec, f, indent=1)
    return 0


def main(argv=None) -> int:
    """The command line (see the module's docstring), checked before anything runs: a wrong mode
    or table, a missing argument, no sm_90 GPU are one usage line (exit status 2)."""
    from attnlab.gpubench.cli import need_gpu

    argv = sys.argv[1:] if argv is None else list(argv)
    ap = _parser()
    modes = (*SECTIONS, "record")
    if argv and not argv[0].startswith("-") and argv[0] not in modes:
        ap.error(f"argument mode: mode must be smoke, full, ladder or record; got {argv[0]!r}")
    args = ap.parse_args(argv or ["full"])
    if args.mode == "record":
        return _record(ap, args)
    need_gpu(
        ap,
        False,
        "no CUDA GPU here: the Gluon kernel runs on an sm_90 GPU only (not under Triton's interpreter)",
    )
    import torch

    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        ap.error(f"the Gluon kernel runs on an sm_90 GPU only; this one is sm_{major}{minor}")
    run(args.mode, getattr(args, "table", None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
