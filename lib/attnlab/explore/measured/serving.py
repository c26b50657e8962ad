"""Notebooks 05 and 06's views of three serving kernels beside FlashInfer: MLA decode
(`gpubench.mla`, beside the roofline's time), a mixed batch of one prefill chunk and many
decodes (`gpubench.mixed`, beside our own two launches), and a speculative tree's mask
(`gpubench.tree`). Each takes a run (a run file's name in data/measurements/, or a run as
`reader.view` gives it) and reads its section's rows.

    mla_rows(run) / mla_summary(run)       ours, FlashInfer's best backend, the ratio, TFLOP/s,
                                           TB/s, the model's roof and ours over the model's time
    mixed_rows(run) / mixed_summary(run)   ours in one launch, ours in two, FlashInfer's best
                                           call (FA2, FA3 or POD) and the ratios
    tree_rows(run) / tree_summary(run)     ours and FlashInfer's custom mask

A ratio is FlashInfer's time over ours (above 1: ours is faster). "ours" is the kernel's own
launch choice (the row without launch parameters); where a run also swept launches, the fastest
of them is given beside it.
"""

from __future__ import annotations

from attnlab.explore import style
from attnlab.explore.measured.reader import impl_name, load, measurements_dir, section

__all__ = ["mla_rows", "mla_summary", "mixed_rows", "mixed_summary", "tree_rows", "tree_summary"]


def _run(run):
    if isinstance(run, str):
        return load(measurements_dir() / run)
    if not isinstance(run, dict) or "sections" not in run:
        raise TypeError(
            f"run must be a run file's name or a run as reader.view gives it, got {type(run).__name__}"
        )
    return run


def _cases(run, name: str, fields: tuple) -> dict:
    """case (the fields' values) -> {"ours": row of the kernel's own launch, "swept": [rows of
    ours with launch parameters], "two": row, "peers": {impl: row}}."""
    out: dict = {}
    for r in section(_run(run), name)["rows"]:
        c = out.setdefault(tuple(r["shape"][f] for f in fields), {"swept": [], "peers": {}})
        who = impl_name(r)
        if who == "ours":
            if r["impl"] == "ours":
                c["ours"] = r
            else:
                c["swept"].append(r)
        elif who == "two":
            c["two"] = r
        else:
            c["peers"][who] = r
    return out


def _best(peers: dict):
    """(impl, row) of the fastest peer, or (None, None)."""
    if not peers:
        return None, None
    who = min(peers, key=lambda k: peers[k]["time_us"])
    return who, peers[who]


def _common(c: dict) -> dict:
    ours = c.get("ours")
    if ours is None:
        raise ValueError("a case has no row of ours with the kernel's own launch")
    who, peer = _best(c["peers"])
    fastest = min([ours, *c["swept"]], key=lambda r: r["time_us"])
    return {
        "ours_us": ours["time_us"],
        "peer": who,
        "peer_us": None if peer is None else peer["time_us"],
        "ratio": None if peer is None else peer["time_us"] / ours["time_us"],
        "fastest": fastest["impl"],
        "fastest_us": fastest["time_us"],
    }


def mla_rows(run) -> list[dict]:
    """One dict per (batch, kv) of the run's mla section: batch, kv, ours_us, peer (FlashInfer's
    fastest backend), peer_us, ratio, fastest (our fastest launch) and fastest_us, ours' TFLOP/s
    and TB/s, the model's bound and time at the run's ceilings, ours over that time."""
    rows = []
    for (batch, kv), c in sorted(_cases(run, "mla", ("batch", "kv")).items()):
        r, x = c.get("ours"), (c.get("ours") or {}).get("extra", {})
        rows.append(
            {
                "batch": batch, "kv": kv, **_common(c), "tflops": r["tflops"], "tbps": r["tbps"],
                "bound": x.get("model_bound_measured"), "model_us": x.get("model_us_measured"),
                "over_model": x.get("over_model_measured"),
            }
        )  # fmt: skip
    return rows


def _num(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _formats(specs: dict) -> dict:
    """Column formats: a number by its spec, None as '-'."""
    return {k: (lambda v, spec=spec: _num(v, spec)) for k, spec in specs.items()}


def _summary(head: list[str], rows: list[dict], cols: dict, fmt: dict) -> str:
    """Head lines, the table, and the verdict line, as each view prints them."""
    return "\n".join([*head, style.table(rows, cols, fmt), "", _verdict(rows)])


def _backend(impl) -> str:
    """FlashInfer's call as a column shows it: "fa3" of "flashinfer-fa3"."""
    return "-" if impl is None else impl.removeprefix("flashinfer-")


def _verdict(rows: list[dict]) -> str:
    got = [r["ratio"] for r in rows if r["ratio"] is not None]
    if not got:
        return "no FlashInfer rows in this run"
    met = sum(g >= 1 for g in got)
    return f"ours at or ahead of FlashInfer's best on {met} of {len(got)} cases; ratios {min(got):.2f} to {max(got):.2f}"


def mla_summary(run) -> str:
    """The mla rows as a table that fits 100 characters, and a verdict line."""
    rows = mla_rows(run)
    cols = {
        "case": "batch x kv", "ours_us": "ours us", "peer": "FlashInfer", "peer_us": "its us",
        "ratio": "FI/ours", "tflops": "TFLOP/s", "tbps": "TB/s", "bound": "model", "over_model": "x model",
    }  # fmt: skip
    fmt = _formats({"ours_us": ".1f", "peer_us": ".1f", "ratio": ".2f", "tflops": ".0f", "tbps": ".2f",
                    "over_model": ".2f"})  # fmt: skip
    fmt["peer"], fmt["bound"] = _backend, lambda v: v or "-"
    for r in rows:
        r["case"] = (
            f"{r['batch']} x {r['kv'] // 1024}K" if r["kv"] % 1024 == 0 else f"{r['batch']} x {r['kv']}"
        )
    head = [
        "MLA decode, DeepSeek-V3's shape (128 heads, latent 512, rope 64), bf16, page 64; 'model': the",
        "roof that bounds the case at the run's own ceilings; 'x model': ours over the roofline's time",
    ]
    return _summary(head, rows, cols, fmt)


def mixed_rows(run) -> list[dict]:
    """One dict per (chunk, decodes) of the run's mixed section: chunk, decodes, ours_us (one
    launch), two_us (ours as two launches) and saved (two_us / ours_us), peer, peer_us, ratio,
    fastest, fastest_us."""
    rows = []
    for (chunk, n), c in sorted(_cases(run, "mixed", ("chunk", "decodes")).items()):
        two = c.get("two")
        row = {"chunk": chunk, "decodes": n, **_common(c), "two_us": None if two is None else two["time_us"]}
        row["saved"] = None if two is None else two["time_us"] / row["ours_us"]
        rows.append(row)
    return rows


def mixed_summary(run) -> str:
    """The mixed rows as a table that fits 100 characters, and a verdict line."""
    rows = mixed_rows(run)
    cols = {
        "case": "chunk + decodes", "ours_us": "one launch us", "two_us": "two launches us", "saved": "two/one",
        "peer": "FlashInfer", "peer_us": "its us", "ratio": "FI/ours",
    }  # fmt: skip
    fmt = _formats({"ours_us": ".1f", "two_us": ".1f", "saved": ".2f", "peer_us": ".1f", "ratio": ".2f"})
    fmt["peer"] = _backend
    for r in rows:
        r["case"] = f"{r['chunk']} + {r['decodes']}"
    head = [
        "One prefill chunk (1,024 cached keys before it) beside long-tailed decodes, 32/8 heads, d = 128,",
        "bf16, page 16; 'two/one': our two launches' time over our one launch's",
    ]
    return _summary(head, rows, cols, fmt)


def tree_rows(run) -> list[dict]:
    """One dict per (batch, tree, prefix) of the run's tree section: batch, tree, prefix, ours_us,
    peer, peer_us, ratio, fastest, fastest_us."""
    found = _cases(run, "tree", ("batch", "tree", "prefix"))
    return [{"batch": b, "tree": t, "prefix": p, **_common(c)} for (b, t, p), c in sorted(found.items())]


def tree_summary(run) -> str:
    """The tree rows as a table that fits 100 characters, and a verdict line."""
    rows = tree_rows(run)
    cols = {"batch": "batch", "tree": "tree tokens", "prefix": "prefix", "ours_us": "ours us",
            "peer_us": "FlashInfer us", "ratio": "FI/ours"}  # fmt: skip
    fmt = _formats({"ours_us": ".1f", "peer_us": ".1f", "ratio": ".2f"})
    head = [
        "A speculative tree's tokens verified in one launch (each sees the prefix and its ancestors),",
        "32/8 heads, d = 128, bf16, page 16; FlashInfer given the same custom_mask",
    ]
    return _summary(head, rows, cols, fmt)
