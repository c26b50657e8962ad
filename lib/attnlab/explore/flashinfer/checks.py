"""Checks notebook 05 prints: each runs a layer-1 or layer-2 routine on seeded random data and
sets it beside an independent route to the same answer (contiguous attention, scipy's BSR, the
variant's definition written out densely, full attention), in a few lines of text."""
from __future__ import annotations

import json

import numpy as np

from ..._catalog import data_path
from ...paged import PagedKVCache, bsr_attention, composable_attention, to_bsr
from ...schedule import lengths, plan_balanced
from ...softmax import attention_state, merge_states
from ...variants import sigmoid, sliding_window, soft_cap, variant_attention
from .. import style

__all__ = ["bsr_check", "composable_check", "variants_check", "determinism_check", "planner_cost",
           "paper_table"]


def _kv(rng, n, d, dtype=np.float64):
    return rng.standard_normal((n, d)).astype(dtype), rng.standard_normal((n, d)).astype(dtype)


def bsr_check(lens=(19, 10, 29), block_size: int = 4, d: int = 64, seed: int = 0) -> str:
    """The lecture's three requests in a shuffled pool of 24 blocks: block tables, FlashInfer's
    arrays (beside scipy's own BSR indptr/indices for the same matrix) and the largest difference
    between BSR attention and attention over each request's gathered, contiguous K/V."""
    rng = np.random.default_rng(seed)
    cache = PagedKVCache(24, block_size, d, seed=seed)
    rids = [cache.add(*_kv(rng, n, d)) for n in lens]
    layout = to_bsr(cache, rids)
    m = layout.to_scipy()
    q = rng.standard_normal((len(rids), d))
    o = bsr_attention(q, cache, layout)
    ref = np.stack([attention_state(q[i], *cache.gather(r))[0] for i, r in enumerate(rids)])
    lines = [f"request {i}: length {cache.seq_len(r)}, block table {cache.block_table(r)}"
             for i, r in enumerate(rids)]
    same = np.array_equal(m.indptr, layout.kv_indptr) and np.array_equal(m.indices, layout.kv_indices)
    return "\n".join(lines + [
        f"kv_indptr        = {layout.kv_indptr.tolist()}",
        f"kv_indices       = {layout.kv_indices.tolist()}",
        f"kv_last_page_len = {layout.kv_last_page_len.tolist()}",
        f"scipy.sparse.bsr_array {m.shape[0]} x {m.shape[1]}, blocks {m.blocksize}: "
        f"indptr and indices {'equal' if same else 'DIFFER'}",
        f"max |BSR attention - contiguous attention| = {np.abs(o - ref).max():.1e} (float64, decode)"])


def composable_check(n: int = 4, prefix_blocks: int = 15, own_blocks: int = 4, block_size: int = 4,
                     d: int = 64, seed: int = 0) -> str:
    """n requests forked from one prefix, then own blocks appended to each: KV blocks read by the
    single format and the composable one, and the largest difference between the composable
    output and each request's attention over its gathered K/V (float32)."""
    rng = np.random.default_rng(seed)
    cache = PagedKVCache(prefix_blocks + n * own_blocks + 1, block_size, d, dtype=np.float32, seed=seed)
    root = cache.add(*_kv(rng, prefix_blocks * block_size, d, np.float32))
    rids = [root] + [cache.fork(root) for _ in range(n - 1)]
    for r in rids:
        if own_blocks:
            cache.append(r, *_kv(rng, own_blocks * block_size, d, np.float32))
    q = rng.standard_normal((n, d)).astype(np.float32)
    o, reads = composable_attention(q, cache, rids)
    ref = np.stack([attention_state(q[i], *cache.gather(r))[0] for i, r in enumerate(rids)])
    return (f"{n} requests forked from a prefix of {prefix_blocks} blocks, then {own_blocks} own blocks "
            f"each (block size {block_size})\n"
            f"KV blocks read: single format {reads['single']}, composable {reads['composable']}\n"
            f"max |composable - per-request attention| = {style.magnitude(np.abs(o - ref).max())} (float32)")


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


def variants_check(n: int = 300, d: int = 64, seed: int = 0) -> str:
    """Soft-cap, sliding window and sigmoid attention through `variant_attention` (the FA2 loop
    with functors) against their dense definitions, and how far each is from plain attention."""
    rng = np.random.default_rng(seed)
    q, k, v = (3 * rng.standard_normal((n, d)) for _ in range(3))
    plain = _dense(q, k, v)
    cases = [(soft_cap(5), dict(logits=lambda s: 5 * np.tanh(s / 5))),
             (sliding_window(64), dict(mask=lambda qi, kj: (kj <= qi) & (kj > qi - 64))),
             (sigmoid(-2), dict(logits=lambda s: s - 2, weights="sigmoid"))]
    rows = []
    for var, kw in cases:
        o, want = variant_attention(q, k, v, var), _dense(q, k, v, **kw)
        rows.append({"variant": var.name, "err": float(np.abs(o - want).max()),
                     "plain": float(np.abs(o - plain).max())})
    return (f"N = {n}, d = {d}, float64, logits scaled by 3 so the variants bite\n" + style.table(
        rows, {"variant": "variant", "err": "max |kernel - definition|", "plain": "max |variant - plain|"},
        {"err": ".1e", "plain": ".2f"}))


def determinism_check(batch: int = 4, kv_heads: int = 2, group: int = 4, d: int = 128, seed: int = 0,
                      trials: int = 3) -> str:
    """float32 decode through a balanced plan with many chunks: merge each output's partial states
    in the plan's fixed order `trials` times (bitwise identical), then in random orders (atomics
    that finish in any order: the last bits move)."""
    rng = np.random.default_rng(seed)
    lens = [(1, int(n)) for n in rng.integers(2000, 8000, batch)]
    plan = plan_balanced(lens, kv_heads=kv_heads, num_ctas=64, group=group)
    q = rng.standard_normal((batch, kv_heads * group, d)).astype(np.float32)
    kv = [rng.standard_normal((2, kv_heads, n, d)).astype(np.float32) for _, n in lens]
    states = [attention_state(q[w.request, w.kv_head * group + np.array(w.q_rows)],
                              kv[w.request][0, w.kv_head, w.kv_start:w.kv_end],
                              kv[w.request][1, w.kv_head, w.kv_start:w.kv_end]) for w in plan.work]

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
    return (f"{batch} requests, {len(plan.work)} work items, up to {parts} partial states per output "
            f"(float32)\nplan's fixed order, {trials} runs: "
            f"{'bitwise identical' if len(set(fixed)) == 1 else 'DIFFERENT'}\n"
            f"random orders, {trials} runs: max |difference| from the fixed order = "
            + ", ".join(style.magnitude(np.abs(s - base).max()) for s in shuffled))


def planner_cost(batch: int = 256, repeats: int = 50) -> str:
    """Median wall time of `plan_balanced` for a long-tailed batch (Llama-3-8B: 8 KV heads, group 4,
    132 CTAs) on this machine, and per layer of a 32-layer model (one plan serves every layer)."""
    from ...bench import _median_time                   # the one timer `make bench` uses
    lens = lengths("longtail", batch, seed=0)
    plan = plan_balanced(lens, kv_heads=8, num_ctas=132, group=4)
    t = _median_time(lambda: plan_balanced(lens, kv_heads=8, num_ctas=132, group=4), repeats)
    return (f"plan_balanced, batch {batch}: {t * 1e6:,.0f} µs per plan ({len(plan.work):,} work items), "
            f"{t * 1e6 / 32:,.1f} µs per layer over 32 layers")


def paper_table() -> str:
    """The lecture's §5.7 figures from the FlashInfer paper, as reported there (not measured here)."""
    rows = json.loads(data_path("flashinfer_paper.json").read_text(encoding="utf-8"))["rows"]
    return style.table(rows, {"what": "what", "reported": "reported", "setting": "setting",
                              "from": "design behind it"})
