"""Notebook 03's view of the persistent scheduler: the FA3 table's cases (`gpubench.prefill_fa3`)
from one recorded run, the Gluon kernel with and without its persistent step beside the best peer
of each case, and the run-to-run spread that says which differences are noise.

    persistent_rows(name)     one row per case: ours (both launches where both ran), the best
                              peer and which call it was, TFLOP/s and the ratios
    persistent_summary(name)  the causal rows as a table (100 characters), then one line per
                              mask: the range of ours over the best peer, and the noise band
    first_wave(...)           the K and V bytes the first wave of a launch order reads, and how
                              many of its CTAs share each KV head
"""

from __future__ import annotations

from attnlab.explore import style
from attnlab.explore.measured.reader import recorded

__all__ = ["PERSISTENT_FILE", "FIRST_FILE", "persistent_rows", "persistent_summary", "first_wave"]

#: the recorded run on inputs the defaults were not chosen on (--draw 1)
PERSISTENT_FILE = "h200-2026-12-04-prefill-fa3.json"
#: the first run, on the inputs the defaults were chosen on (seed 0): its peers give the band
FIRST_FILE = "h200-2026-12-04-persistent-first.json"
_PEERS = {"sdpa-cudnn": "cuDNN", "flashinfer-fa3": "FI FA3", "flashinfer-batch-fa3": "FI FA3 batch"}


def _key(shape: dict) -> tuple:
    return (shape["batch"], shape["N"], shape["head_dim"], shape["kv_heads"], shape["causal"])


def _times(res: dict) -> dict:
    """case key -> {call: time_us}; ours by its launch (default / not_persistent)."""
    out: dict = {}
    for r in res["rows"]:
        name = r["impl"]
        if name.startswith("ours-gluon"):
            name = "not_persistent" if "not_persistent" in name else "ours"
        out.setdefault(_key(r["shape"]), {})[name] = (r["time_us"], r["flop"])
    return out


def persistent_rows(name: str = PERSISTENT_FILE) -> list[dict]:
    """One dict per case of the recorded run, in its order: the shape, our TFLOP/s at the
    defaults (and one program per tile where that ran), the best peer's call and TFLOP/s, our
    ratio to it (its time over ours: above 1 is ours faster) and the persistent step's gain."""
    rows = []
    for key, calls in _times(recorded(name)).items():
        peers = {k: v for k, v in calls.items() if k in _PEERS}
        best = min(peers, key=lambda k: peers[k][0])
        us, flop = calls["ours"]
        row = dict(zip(("batch", "N", "head_dim", "kv_heads", "causal"), key))
        row.update(
            ours=flop / us * 1e-6,
            peer=_PEERS[best],
            peer_tflops=flop / peers[best][0] * 1e-6,
            ratio=peers[best][0] / us,
        )
        if "not_persistent" in calls:
            before = calls["not_persistent"][0]
            row.update(before=flop / before * 1e-6, gain=before / us - 1)
        rows.append(row)
    return rows


def _band(name: str, first: str) -> float:
    """The largest |t2 / t1 - 1| of any peer call on a case both runs hold: how far the same call
    moved between the two runs (other inputs, the same shapes)."""
    a, b = _times(recorded(name)), _times(recorded(first))
    moves = [
        abs(a[k][p][0] / b[k][p][0] - 1)
        for k in a.keys() & b.keys()
        for p in _PEERS
        if p in a[k] and p in b[k]
    ]
    return max(moves)


def persistent_summary(name: str = PERSISTENT_FILE, first: str = FIRST_FILE) -> str:
    """The causal cases as a table (one program per tile, persistent, the best peer), then for each
    mask the range of our ratio to the best peer, and the band: how far the peers moved between
    this run and the first one."""
    rows = persistent_rows(name)
    res = recorded(name)
    for r in rows:
        r["case"] = (
            f"{r['batch']} x {r['N'] // 1024}K, d {r['head_dim']}, {'MHA' if r['kv_heads'] == 32 else 'GQA'}"
        )
    causal = [r for r in rows if r["causal"]]
    cols = {
        "case": "case (32 query heads)",
        "before": "per tile",  # the same steps, one program per work item
        "ours": "persistent",
        "gain": "gain",
        "peer": "best peer",
        "peer_tflops": "peer",
        "ratio": "ours / best",
    }
    fmt = {"before": ".0f", "ours": ".0f", "gain": "+.0%", "peer_tflops": ".0f", "ratio": ".2f"}
    lines = [
        f"{res['device']}, {res['date']}, FlashInfer {res['flashinfer']}; causal, bf16, TFLOP/s;",
        "ours / best: the best peer's time over ours (above 1: ours is faster)",
        style.table(causal, cols, fmt),
        "",
    ]
    for flag, word in ((False, "no mask"), (True, "causal")):
        got = [r["ratio"] for r in rows if r["causal"] is flag]
        lines.append(f"{word:8}: ours / best peer {min(got):.2f} to {max(got):.2f} over {len(got)} cases")
    lines.append(
        f"band: the peers' calls moved by up to {_band(name, first):.0%} between this run and the first"
    )
    return "\n".join(lines)


def first_wave(
    order: str, batch: int, heads: int, kv_heads: int, n: int, head_dim: int = 128, sms: int = 132
):
    """(MB of K and V, CTAs per KV head) of the first wave of a causal launch, one work item per SM:
    "per tile" is one program per item launched longest first (every (batch, head)'s last query
    block, then the next), "sections" the persistent order (`machine.schedule.persistent`: L2-sized
    sections of heads, longest first inside one). A KV head is counted once however many of the
    wave's CTAs read it; the second number is how many read each, on average."""
    from attnlab.machine.schedule.persistent import l2_section, tile_order
    from attnlab.validate import as_int

    batch, heads, n = as_int("batch", batch, 1), as_int("heads", heads, 1), as_int("n", n, 1)
    kv_heads, sms = as_int("kv_heads", kv_heads, 1, heads), as_int("sms", sms, 1)
    if heads % kv_heads:
        raise ValueError(f"kv_heads={kv_heads} does not divide heads={heads}; valid: a divisor of heads")
    num_m = -(-n // 128)
    bh = batch * heads
    group = heads // kv_heads
    items = range(min(sms, bh * num_m))
    if order == "per tile":  # one CTA per item, the grid's longest-first launch order
        first = [t % bh for t in items]
    elif order == "sections":  # the persistent order: the first item of each program
        codes = tile_order(bh, num_m, l2_section(heads, group, n, head_dim))[: len(items)]
        first = (codes // num_m).tolist()
    else:
        raise ValueError(f"order must be 'per tile' or 'sections', got {order!r}")
    kv = {(b_h // heads, (b_h % heads) // group) for b_h in first}
    return len(kv) * 2 * n * head_dim * 2 / 2**20, len(first) / len(kv)
