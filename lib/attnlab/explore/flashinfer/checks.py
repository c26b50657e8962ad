"""Checks notebook 05 prints: each runs a layer-1 or layer-2 routine on seeded random data and
sets it beside an independent route to the same answer (contiguous attention, scipy's BSR, the
variant's definition written out densely, full attention), in a few lines of text.

This file is long because notebook 05's checks share one rounding analysis (`_gamma`,
`attention_bound`) and one printed form (`Checked`: portable text, a verdict and the measured
errors); apart, each check would import those by private name or repeat them.
"""

from __future__ import annotations

import json

import numpy as np

from attnlab.catalog import data_path
from attnlab.validate import as_array, as_float, as_int, as_sequence
from attnlab.core.paged import PagedKVCache, bsr_attention, composable_attention, to_bsr
from attnlab.machine.schedule import plan_balanced, plan_fixed_split, plan_per_request, run_plan
from attnlab.machine.workload import lengths
from attnlab.core.softmax import attention_state, merge_states
from attnlab.core.variants import sigmoid, sliding_window, soft_cap, variant_attention
from attnlab.explore import style

__all__ = [
    "Checked",
    "attention_bound",
    "bsr_check",
    "composable_check",
    "variants_check",
    "determinism_check",
    "batch_invariance_check",
    "planner_cost",
    "paper_table",
]


_U64, _U32 = 2.0**-53, 2.0**-24  # unit roundoff of float64 and float32


class Checked(str):
    """A check's printed text (portable: counts, verdicts and bounds from the analysis, never a
    roundoff digit) with `ok`, True when every measured error is within its bound, and
    `measured`, the errors themselves ({name: float}) for a cell whose output is not compared."""

    ok: bool
    measured: dict

    def __new__(cls, text: str, ok: bool, measured: dict):
        obj = super().__new__(cls, text)
        obj.ok, obj.measured = bool(ok), dict(measured)
        return obj


def _gamma(n: int, u: float) -> float:
    """gamma_n = n u / (1 - n u): the relative error bound of n roundings in a row (Higham)."""
    return n * u / (1 - n * u)


def attention_bound(q, k, v, u: float = _U64, *, scale=None, terms: int | None = None) -> float:
    """Worst-case |o - o_exact| of softmax attention computed in a format with unit roundoff u:
    each logit is a length-d dot product, off by at most Delta = gamma_d scale max_ij sum_t
    |q_it k_jt|; logits off by Delta change the weights by a factor within e^(+-2 Delta), so the
    output moves by at most (e^(2 Delta) - 1) max|v|; the exps, the sums, the rescales of an
    online softmax and the division add gamma_(2 N_k + d + 8) max|v| (`terms` replaces N_k where
    a mask leaves fewer keys). Two computations of the same attention differ by at most twice
    this. Every input is exact seeded data, so the bound reads the same on every CPU.
    u in (0, 1/2], and small enough that every gamma_n it takes has n u < 1 (else the bound is
    not one: it turns negative), else ValueError; scale a positive real; terms an integer >= 1.

    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((50, 16)) for _ in range(3))
    >>> from attnlab.core.softmax import attention_state
    >>> err = abs(attention_state(q, k, v)[0] - attention_state(q[:, ::-1], k[:, ::-1], v)[0]).max()
    >>> bool(err <= 2 * attention_bound(q, k, v))
    True
    """
    q = as_array("q", q, ndim=(1, 2), shape="(d,) or (n, d)").astype(np.float64)
    k = as_array("k", k, ndim=2, shape="(n_k, d)").astype(np.float64)
    v = as_array("v", v, ndim=2, shape="(n_k, d_v)").astype(np.float64)
    if q.shape[-1] != k.shape[1] or len(v) != len(k) or not (q.size and k.size and v.size):
        raise ValueError(
            f"q {q.shape}, k {k.shape}, v {v.shape}: need one head dim d >= 1 for q and "
            f"k, and as many rows of v as of k (at least one)"
        )
    u = as_float("u", u, 0.0, 0.5, lo_open=True)
    d = q.shape[-1]
    scale = 1 / np.sqrt(d) if scale is None else as_float("scale", scale, 0.0, None, lo_open=True)
    n = len(k) if terms is None else as_int("terms", terms, 1, None)
    if max(d, 2 * n + d + 8) * u >= 1:
        raise ValueError(
            f"u={u!r} is too large for this bound: gamma_n = n u / (1 - n u) needs n u < 1, "
            f"here n = 2 N_k + d + 8 = {2 * n + d + 8}; valid: u < {1 / (2 * n + d + 8):.3g}"
        )
    delta = _gamma(d, u) * scale * float((np.abs(q) @ np.abs(k).T).max())
    return (np.expm1(2 * delta) + _gamma(2 * n + d + 8, u)) * float(np.abs(v).max())


def _kv(rng, n, d, dtype=np.float64):
    return rng.standard_normal((n, d)).astype(dtype), rng.standard_normal((n, d)).astype(dtype)


def bsr_check(lens=(19, 10, 29), block_size: int = 4, d: int = 64, seed: int = 0) -> Checked:
    """The lecture's three requests in a shuffled pool of 24 blocks: block tables, FlashInfer's
    arrays (beside scipy's own BSR indptr/indices for the same matrix) and whether BSR attention
    equals, bit for bit, attention over each request's gathered, contiguous K/V (the same numbers
    in the same order: an exact verdict, not a tolerance)."""
    block_size, d = as_int("block_size", block_size, 1, 64), as_int("d", d, 1, 1024)
    lens = [
        as_int(f"lens[{i}]", n, 1, 24 * block_size)  # the pool holds 24 blocks
        for i, n in enumerate(as_sequence("lens", lens, "a list of lengths"))
    ]
    rng = np.random.default_rng(as_int("seed", seed, 0, None))
    cache = PagedKVCache(24, block_size, d, seed=seed)
    rids = [cache.add(*_kv(rng, n, d)) for n in lens]
    layout = to_bsr(cache, rids)
    m = layout.to_scipy()
    q = rng.standard_normal((len(rids), d))
    o = bsr_attention(q, cache, layout)
    ref = np.stack([attention_state(q[i], *cache.gather(r))[0] for i, r in enumerate(rids)])
    lines = [
        f"request {i}: length {cache.seq_len(r)}, block table {cache.block_table(r)}"
        for i, r in enumerate(rids)
    ]
    same = np.array_equal(m.indptr, layout.kv_indptr) and np.array_equal(m.indices, layout.kv_indices)
    equal = np.array_equal(o, ref)
    return Checked(
        "\n".join(
            lines
            + [
                f"kv_indptr        = {layout.kv_indptr.tolist()}",
                f"kv_indices       = {layout.kv_indices.tolist()}",
                f"kv_last_page_len = {layout.kv_last_page_len.tolist()}",
                f"scipy.sparse.bsr_array {m.shape[0]} x {m.shape[1]}, blocks {m.blocksize}: "
                f"indptr and indices {'equal' if same else 'DIFFER'}",
                f"BSR attention vs contiguous attention (float64, decode): "
                f"{'bitwise identical' if equal else 'DIFFERENT'}",
            ]
        ),
        same and equal,
        {"bsr": float(np.abs(o - ref).max())},
    )


def composable_check(
    n: int = 4, prefix_blocks: int = 15, own_blocks: int = 4, block_size: int = 4, d: int = 64, seed: int = 0
) -> Checked:
    """n requests forked from one prefix, then own blocks appended to each: KV blocks read by the
    single format and the composable one, and the composable output against each request's
    attention over its gathered K/V (float32), within twice `attention_bound` plus the merge's
    few roundings."""
    n, prefix_blocks = as_int("n", n, 1, 256), as_int("prefix_blocks", prefix_blocks, 1, 4096)
    own_blocks, block_size = (
        as_int("own_blocks", own_blocks, 0, 4096),
        as_int("block_size", block_size, 1, 1024),
    )
    d = as_int("d", d, 1, 1024)
    rng = np.random.default_rng(as_int("seed", seed, 0, None))
    cache = PagedKVCache(prefix_blocks + n * own_blocks + 1, block_size, d, dtype=np.float32, seed=seed)
    root = cache.add(*_kv(rng, prefix_blocks * block_size, d, np.float32))
    rids = [root] + [cache.fork(root) for _ in range(n - 1)]
    for r in rids:
        if own_blocks:
            cache.append(r, *_kv(rng, own_blocks * block_size, d, np.float32))
    q = rng.standard_normal((n, d)).astype(np.float32)
    o, reads = composable_attention(q, cache, rids)
    kvs = [cache.gather(r) for r in rids]
    ref = np.stack([attention_state(q[i], *kv)[0] for i, kv in enumerate(kvs)])
    err = float(np.abs(o - ref).max())
    bound = max(
        2 * attention_bound(q[i : i + 1], *kv, u=_U32) + _gamma(8, _U32) * float(np.abs(kv[1]).max())
        for i, kv in enumerate(kvs)
    )
    return Checked(
        f"{n} requests forked from a prefix of {prefix_blocks} blocks, then {own_blocks} own blocks "
        f"each (block size {block_size})\n"
        f"KV blocks read: single format {reads['single']}, composable {reads['composable']}\n"
        f"|composable - per-request attention| (float32) within the rounding bound "
        f"{style.magnitude(bound)}: {'yes' if err <= bound else 'NO'}",
        err <= bound,
        {"composable": err},
    )


def _dense(q, k, v, logits=None, mask=None, weights="softmax"):
    """The variant written out on the full (N_q, N_k) matrix, positions bottom-right aligned."""
    n_q, n_k = len(q), len(k)
    qi, kj = np.arange(n_q)[:, None] + n_k - n_q, np.arange(n_k)[None, :]
    s = q @ k.T / np.sqrt(q.shape[1])
    s = s if logits is None else logits(s)
    vis = np.ones_like(s, bool) if mask is None else mask(qi, kj)
    if weights == "sigmoid":
        return np.where(vis, 1 / (1 + np.exp(-s)), 0) @ v
    e = np.where(vis, np.exp(s - np.where(vis, s, -np.inf).max(axis=1, keepdims=True)), 0)
    return (e / e.sum(axis=1, keepdims=True)) @ v


def variants_check(n: int = 300, d: int = 64, seed: int = 0) -> Checked:
    """Soft-cap, sliding window and sigmoid attention through `variant_attention` (the FA2 loop
    with functors) against their dense definitions, each within a worst-case float64 bound
    (twice `attention_bound`; the soft-cap adds its tanh's roundings, c gamma_4, to the logit
    error; sigmoid weights are not normalised, so its bound is N times the largest output
    term), and how far each is from plain attention."""
    n, d = as_int("n", n, 1, 4096), as_int("d", d, 1, 1024)
    rng = np.random.default_rng(as_int("seed", seed, 0, None))
    q, k, v = (3 * rng.standard_normal((n, d)) for _ in range(3))
    plain = _dense(q, k, v)
    vmax, base = float(np.abs(v).max()), attention_bound(q, k, v)
    logit = _gamma(d, _U64) * float((np.abs(q) @ np.abs(k).T).max()) / np.sqrt(d)
    cases = [
        (
            soft_cap(5),
            dict(logits=lambda s: 5 * np.tanh(s / 5)),
            2 * (base + np.expm1(2 * 5 * _gamma(4, _U64)) * vmax),
        ),
        (
            sliding_window(64),
            dict(mask=lambda qi, kj: (kj <= qi) & (kj > qi - 64)),
            2 * attention_bound(q, k, v, terms=64),
        ),
        (
            sigmoid(-2),
            dict(logits=lambda s: s - 2, weights="sigmoid"),
            2 * n * vmax * (np.expm1(logit + _gamma(8, _U64)) + _gamma(2 * n + d + 8, _U64)),
        ),
    ]
    rows, measured = [], {}
    for var, kw, bound in cases:
        o, want = variant_attention(q, k, v, var), _dense(q, k, v, **kw)
        err = float(np.abs(o - want).max())
        measured[var.name] = err
        rows.append(
            {
                "variant": var.name,
                "bound": style.magnitude(bound),
                "ok": "yes" if err <= bound else "NO",
                "plain": float(np.abs(o - plain).max()),
            }
        )
    ok = all(r["ok"] == "yes" for r in rows)
    return Checked(
        f"N = {n}, d = {d}, float64, logits scaled by 3 so the variants bite\n"
        + style.table(
            rows,
            {
                "variant": "variant",
                "bound": "rounding bound",
                "ok": "|kernel - definition| within it",
                "plain": "max |variant - plain|",
            },
            {"plain": ".1f"},
        ),
        ok,
        measured,
    )


def determinism_check(
    batch: int = 4, kv_heads: int = 2, group: int = 4, d: int = 128, seed: int = 0, trials: int = 3
) -> Checked:
    """float32 decode through a balanced plan with many chunks: merge each output's partial states
    in the plan's fixed order `trials` times (bitwise identical), then in random orders (atomics
    that finish in any order: the last bits move, within 2 gamma_(4k) max|V| for k states, since
    each merge rounds a few times and every state is a convex mix of V's rows)."""
    batch, kv_heads = as_int("batch", batch, 1, 256), as_int("kv_heads", kv_heads, 1, 64)
    group, d = as_int("group", group, 1, 64), as_int("d", d, 1, 1024)
    trials = as_int("trials", trials, 1, 100)
    seed = as_int("seed", seed, 0, None)
    rng = np.random.default_rng(seed)
    lens = [(1, int(n)) for n in rng.integers(2000, 8000, batch)]
    plan = plan_balanced(lens, kv_heads=kv_heads, num_ctas=64, group=group)
    q = rng.standard_normal((batch, kv_heads * group, d)).astype(np.float32)
    kv = [rng.standard_normal((2, kv_heads, n, d)).astype(np.float32) for _, n in lens]
    states = [
        attention_state(
            q[w.request, w.kv_head * group + np.array(w.q_rows)],
            kv[w.request][0, w.kv_head, w.kv_start : w.kv_end],
            kv[w.request][1, w.kv_head, w.kv_start : w.kv_end],
        )
        for w in plan.work
    ]

    def run(order_rng=None):
        outs = []
        for _, js in plan.merge:
            order = None if order_rng is None else order_rng.permutation(len(js))
            outs.append(merge_states([states[j] for j in js], order)[0])
        return np.concatenate(outs)

    fixed = [run().tobytes() for _ in range(trials)]
    shuffled = [run(np.random.default_rng(seed + 1 + t)) for t in range(trials)]
    base = run()
    parts = max(len(js) for _, js in plan.merge)
    bound = 2 * _gamma(4 * parts, _U32) * max(float(np.abs(x[1]).max()) for x in kv)
    diffs = [float(np.abs(s - base).max()) for s in shuffled]
    moved = sum(not np.array_equal(s, base) for s in shuffled)
    same = len(set(fixed)) == 1
    ok = same and moved == trials and max(diffs) <= bound
    return Checked(
        f"{batch} requests, {len(plan.work)} work items, up to {parts} partial states per output "
        f"(float32)\nplan's fixed order, {trials} runs: {'bitwise identical' if same else 'DIFFERENT'}\n"
        f"random orders, {trials} runs: {moved} of {trials} differ from the fixed order, each within "
        f"the rounding bound {style.magnitude(bound)}: {'yes' if max(diffs) <= bound else 'NO'}",
        ok,
        {f"random order {t}": x for t, x in enumerate(diffs)},
    )


def batch_invariance_check(
    l_kv: int = 6000,
    small: int = 1,
    large: int = 7,
    kv_heads: int = 2,
    group: int = 4,
    d: int = 64,
    chunk: int = 1024,
    num_ctas: int = 64,
    seed: int = 0,
) -> Checked:
    """One decode request (l_kv tokens, float32) in two batches: alone with `small` others and with
    `large` others, the others' lengths drawn from the same seed, through `run_plan` under three
    plans. The balanced plan's chunk L_kv depends on the whole batch, so the request's KV is cut
    differently and its merged output changes in the last bits (within 2 gamma_(4k) max|V| for k
    states). A fixed split of `chunk` tokens and no split at all cut the request the same way in
    any batch: its output is bitwise equal. FlashInfer's switches for the two are
    `fixed_split_size` (in pages) and `disable_split_kv`."""
    l_kv, num_ctas = as_int("l_kv", l_kv, 1, 1 << 16), as_int("num_ctas", num_ctas, 1, 1024)
    small, large = as_int("small", small, 0, 63), as_int("large", large, 1, 63)
    if large <= small:
        raise ValueError(f"large={large} must exceed small={small}; valid: small < large <= 63")
    kv_heads, group = as_int("kv_heads", kv_heads, 1, 16), as_int("group", group, 1, 16)
    d, chunk = as_int("d", d, 1, 512), as_int("chunk", chunk, 1, 1 << 16)
    rng = np.random.default_rng(as_int("seed", seed, 0, None))
    lens = [(1, l_kv)] + [(1, int(n)) for n in rng.integers(500, 8000, large)]
    q = rng.standard_normal((large + 1, kv_heads * group, d)).astype(np.float32)
    kv = [rng.standard_normal((2, kv_heads, n, d)).astype(np.float32) for _, n in lens]
    kw = dict(kv_heads=kv_heads, num_ctas=num_ctas, group=group)
    plans = {
        "balanced": plan_balanced,
        f"fixed {chunk}": lambda x, **k: plan_fixed_split(x, chunk=chunk, **k),
        "no split": plan_per_request,
    }
    rows, measured, ok = [], {}, True
    for name, make in plans.items():
        outs, parts = [], []
        for n in (small + 1, large + 1):  # request 0 and the first n - 1 others
            plan = make(lens[:n], **kw)
            outs.append(run_plan(plan, q[:n], [x[0] for x in kv[:n]], [x[1] for x in kv[:n]])[0])
            parts.append(sorted({w.kv_end - w.kv_start for w in plan.work if w.request == 0}))
        same = np.array_equal(outs[0], outs[1])
        bound = 2 * _gamma(4 * max(-(-l_kv // min(x)) for x in parts), _U32) * float(np.abs(kv[0][1]).max())
        measured[name] = diff = float(np.abs(outs[0] - outs[1]).max())
        ok = ok and diff <= bound and same == (name != "balanced")
        cuts = (
            f"the same chunks of {max(parts[0])} in both"
            if parts[0] == parts[1]
            else " vs ".join(f"chunks of {max(x)}" for x in parts)
        )
        rows.append(
            {
                "plan": name,
                "cuts": cuts,
                "same": "bitwise equal" if same else f"differ, within {style.magnitude(bound)}",
            }
        )
    head = (
        f"request 0 (decode, {l_kv:,} KV tokens, float32) in a batch of {small + 1} and in a batch "
        f"of {large + 1}, {num_ctas} CTAs"
    )
    return Checked(
        head
        + "\n"
        + style.table(
            rows, {"plan": "plan", "cuts": "request 0's KV cut into", "same": "its output in the two batches"}
        ),
        ok,
        measured,
    )


def planner_cost(batch: int = 256, repeats: int = 20) -> str:
    """Median wall time of `plan_balanced` for a long-tailed batch (Llama-3-8B: 8 KV heads, group 4,
    132 CTAs) on this machine, per layer of a 32-layer model (one plan serves every layer), and
    beside it `make bench`'s straightforward heapq planner (a WorkItem object and a heap pop and
    push per item) on the same batch. Machine-dependent: for a cell whose output is not compared."""
    from attnlab.machine.schedule.lpt import balanced_heapq  # the planner `make bench` times too
    from attnlab.timing import median_time

    lens = lengths("longtail", batch, seed=0)
    plan = plan_balanced(lens, kv_heads=8, num_ctas=132, group=4)
    t = median_time(lambda: plan_balanced(lens, kv_heads=8, num_ctas=132, group=4), repeats)
    t_heap = median_time(lambda: balanced_heapq(lens, 8, 132, 4), max(3, repeats // 5))
    return (
        f"plan_balanced, batch {batch}: {t * 1e6:,.0f} µs per plan ({len(plan.work):,} work items), "
        f"{t * 1e6 / 32:,.1f} µs per layer over 32 layers\n"
        f"heapq planner, same batch: {t_heap * 1e3:,.1f} ms per plan"
    )


def paper_table() -> str:
    """The lecture's §5.7 figures from the FlashInfer paper, as reported there (not measured here)."""
    rows = json.loads(data_path("flashinfer_paper.json").read_text(encoding="utf-8"))["rows"]
    settings = "\n".join(f"- {r['what']}:\n    {r['setting']}" for r in rows)  # within 100 a line
    return (
        style.table(rows, {"what": "what", "reported": "reported", "from": "design behind it"})
        + "\n\nthe setting of each figure:\n"
        + settings
    )
