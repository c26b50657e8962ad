"""Notebook 05's smaller computations beyond the explorers: a mixed prefill + decode batch
(chunked prefill) through the paged layer, a speculative-decoding token tree as a variant's mask,
and sentences read from the recorded GPU run (what FlashInfer's design buys, what its `plan()`
costs on the host). Every check returns a `checks.Checked`: portable text (counts, verdicts,
bounds) with the measured errors beside it. This file is long because notebook 05 calls all of
these by one name (`snippets`), each a short computation beside the text it prints."""

from __future__ import annotations

import numpy as np

from attnlab.validate import as_int, as_sequence
from attnlab.core.paged import PagedKVCache, bsr_attention, to_bsr
from attnlab.machine.schedule import fixed_size_workspace, plan_balanced
from attnlab.core.variants import Variant, variant_attention
from attnlab.explore import style
from attnlab.explore.flashinfer.checks import Checked, attention_bound
from attnlab.explore.measured.reader import impl_name

__all__ = [
    "mixed_batch_check",
    "tree_mask",
    "tree_check",
    "paged_lesson",
    "host_costs",
    "CUDA_GRAPH_SNIPPET",
    "cuda_graph_buffers",
]

#: FlashInfer's decode wrapper under a CUDA graph, as notebook 05 shows it (static: not run here).
#: Every buffer the graph reads has a fixed address and the size of the largest batch; plan()
#: copies each step's arrays and plan into them before the replay.
CUDA_GRAPH_SNIPPET = """\
import flashinfer, torch
B, P = 256, 256 * 512                      # the captured batch; pages of the longest steps
i32 = dict(dtype=torch.int32, device="cuda")
indptr, indices, last = torch.empty(B + 1, **i32), torch.empty(P, **i32), torch.empty(B, **i32)
ws = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")      # partial states of split chunks
w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
    ws, "NHD", use_cuda_graph=True, use_tensor_cores=True,
    paged_kv_indptr_buffer=indptr, paged_kv_indices_buffer=indices,
    paged_kv_last_page_len_buffer=last)
q = torch.empty(B, 32, 128, dtype=torch.bfloat16, device="cuda")   # fixed too
w.plan(kv_indptr, kv_indices, kv_last_page_len, 32, 8, 128, 16)    # a batch of B: the capture
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    o = w.run(q, (k_pool, v_pool))
for step in steps:                          # each step padded to B requests
    w.plan(step.kv_indptr, step.kv_indices, step.kv_last_page_len, 32, 8, 128, 16)
    q.copy_(step.q)                         # plan() has copied the arrays and the plan in
    graph.replay()                          # o now holds this step's output
"""


def _dense_masked(q, k, v, mask):
    """Softmax attention written out on the full matrix in float64, masked pairs dropped."""
    s = np.where(mask, q @ k.T / np.sqrt(q.shape[1]), -np.inf)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)) @ v


def mixed_batch_check(
    chunk: int = 512,
    cached: int = 512,
    decode_lens=(300, 700, 129, 1000),
    page_size: int = 16,
    d: int = 64,
    kv_heads: int = 8,
    group: int = 4,
    seed: int = 0,
) -> Checked:
    """One batch that mixes a prefill chunk with decode steps (chunked prefill): request 0 has
    `cached` tokens in the cache and brings `chunk` new queries (their K/V appended first, causal
    bottom-right), every other request brings one query over its `decode_lens` tokens. The
    batch goes through `bsr_attention` with FlashInfer's qo_indptr beside kv_indptr, is checked
    request by request against dense float64 attention written out with its mask (within twice
    `attention_bound`), and `plan_balanced` says which query tile the whole batch gets.

    >>> r = mixed_batch_check(chunk=40, cached=24, decode_lens=(30, 9), page_size=8, d=16)
    >>> r.ok, r.splitlines()[5]
    (True, 'qo_indptr = [0, 40, 41, 42]')
    """
    chunk, cached = as_int("chunk", chunk, 1, 4096), as_int("cached", cached, 0, 65536)
    dec = [
        as_int(f"decode_lens[{i}]", n, 1, 65536)
        for i, n in enumerate(as_sequence("decode_lens", decode_lens, "a list of KV lengths"))
    ]
    page_size, d = as_int("page_size", page_size, 1, 1024), as_int("d", d, 1, 1024)
    kv_heads, group = as_int("kv_heads", kv_heads, 1, 1024), as_int("group", group, 1, 1024)
    rng = np.random.default_rng(as_int("seed", seed, 0, None))
    kv_lens = [cached + chunk] + dec
    q_lens = [chunk] + [1] * len(dec)
    pages = sum(-(-n // page_size) for n in kv_lens)
    cache = PagedKVCache(pages + 1, page_size, d, seed=seed)
    kvs = [(rng.standard_normal((n, d)), rng.standard_normal((n, d))) for n in kv_lens]
    rids = [cache.add(k, v) for k, v in kvs]
    layout = to_bsr(cache, rids)
    qo_indptr = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    q = rng.standard_normal((int(qo_indptr[-1]), d))
    o = bsr_attention(q, cache, layout, qo_indptr=qo_indptr, causal=True)
    errs, ok = [], True
    for i, ((k, v), nq) in enumerate(zip(kvs, q_lens)):
        qi = q[qo_indptr[i] : qo_indptr[i + 1]]
        rows = np.arange(nq)[:, None] + len(k) - nq  # bottom-right causal
        want = _dense_masked(qi, k, v, np.arange(len(k))[None, :] <= rows)
        err, bound = (
            float(np.abs(o[qo_indptr[i] : qo_indptr[i + 1]] - want).max()),
            2 * attention_bound(qi, k, v),
        )
        errs.append(err)
        ok = ok and err <= bound
    plan = plan_balanced(list(zip(q_lens, kv_lens)), kv_heads=kv_heads, num_ctas=132, group=group)
    rows = [
        {
            "r": i,
            "kind": "prefill chunk" if i == 0 else "decode",
            "q": nq,
            "kv": n,
            "pages": len(layout.pages(i)),
        }
        for i, (nq, n) in enumerate(zip(q_lens, kv_lens))
    ]
    return Checked(
        style.table(
            rows,
            {
                "r": "request",
                "kind": "step",
                "q": "queries",
                "kv": "KV tokens",
                "pages": f"pages of {page_size}",
            },
        )
        + "\n"
        f"qo_indptr = {qo_indptr.tolist()}\n"
        f"kv_indptr = {layout.kv_indptr.tolist()}\n"
        f"paged attention (causal, bottom-right per request) vs dense float64 attention:\n"
        f"  each request within its rounding bound: {'yes' if ok else 'NO'}\n"
        f"balanced plan ({kv_heads} KV heads, g = {group}, 132 CTAs): {len(plan.work)} work items,\n"
        f"  query tile {plan.tile_q} rows for the whole batch; a decode request fills {group} of its "
        f"tile's {plan.tile_q} rows",
        ok,
        {f"request {i}": e for i, e in enumerate(errs)},
    )


def _ancestors(parents) -> np.ndarray:
    """(T, T) bool: row i is True at i and at every ancestor of token i (parents[i] < i; -1: root)."""
    t = len(parents)
    anc = np.eye(t, dtype=bool)
    for i, p in enumerate(parents):
        if p >= 0:
            anc[i] |= anc[p]
    return anc


def _parents(parents) -> list[int]:
    out = []
    for i, p in enumerate(as_sequence("parents", parents, "a list of ints (-1 for a root)")):
        out.append(as_int(f"parents[{i}]", p, -1, i - 1) if i else as_int("parents[0]", p, -1, -1))
    if not out:
        raise ValueError("parents is empty; valid: at least one draft token")
    return out


def tree_mask(parents, prefix: int) -> Variant:
    """A speculative-decoding token tree as a `Variant` mask. The T draft tokens are the last T
    positions after `prefix` cached tokens; draft token i sees every cached token, itself and
    its ancestors (`parents[i]`, -1 for a root, each parent earlier than its child), never a
    sibling's branch. Positions are bottom-right aligned as in every variant.

    >>> from attnlab.core.variants import variant_mask
    >>> variant_mask(tree_mask([-1, 0, 0], prefix=2), 3, 5).astype(int).tolist()
    [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 0, 1]]
    """
    pars, prefix = _parents(parents), as_int("prefix", prefix, 0, 1 << 62)
    anc = _ancestors(pars)
    t = len(pars)

    def mask(qi, kj):
        qi, kj = np.asarray(qi), np.asarray(kj)
        a = anc[np.clip(qi - prefix, 0, t - 1), np.clip(kj - prefix, 0, t - 1)]
        return (kj < prefix) | ((kj >= prefix) & (kj < prefix + t) & (qi >= prefix) & a)

    return Variant(name=f"tree({t} drafts after {prefix})", logits_mask=mask)


def tree_check(parents=(-1, 0, 0, 1, 1, 2, 2), prefix: int = 20, d: int = 32, seed: int = 0) -> Checked:
    """The tree mask through `variant_attention` (FA2's loop with the mask functor) against dense
    float64 attention whose mask is built separately, by walking each token's parent chain;
    within twice `attention_bound`. Prints which draft tokens each draft token sees.

    >>> tree_check((-1, 0, 1), prefix=4, d=8).ok
    True
    """
    pars, prefix = _parents(parents), as_int("prefix", prefix, 0, 65536)
    d, t = as_int("d", d, 1, 1024), len(pars)
    rng = np.random.default_rng(as_int("seed", seed, 0, None))
    q = rng.standard_normal((t, d))
    k, v = rng.standard_normal((prefix + t, d)), rng.standard_normal((prefix + t, d))
    o = variant_attention(q, k, v, tree_mask(pars, prefix), block_r=4, block_c=8)
    ref_mask = np.zeros((t, prefix + t), bool)
    ref_mask[:, :prefix] = True
    for i in range(t):
        j = i
        while j >= 0:  # the chain i, parent, grandparent, ...
            ref_mask[i, prefix + j] = True
            j = pars[j]
    err = float(np.abs(o - _dense_masked(q, k, v, ref_mask)).max())
    bound = 2 * attention_bound(q, k, v)
    lines = [f"draft tree: parents {pars} after {prefix} cached tokens (float64, d = {d})"]
    lines += [
        f"draft {i} sees the {prefix} cached tokens and drafts "
        f"{np.flatnonzero(ref_mask[i, prefix:]).tolist()}"
        for i in range(t)
    ]
    lines.append(
        f"tree-masked kernel vs dense attention with the walked mask: within the rounding "
        f"bound {style.magnitude(bound)}: {'yes' if err <= bound else 'NO'}"
    )
    return Checked("\n".join(lines), err <= bound, {"tree": err})


def _span(xs, fmt="{:.2f}") -> str:
    lo, hi = min(xs), max(xs)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"


def paged_lesson(sec: dict) -> str:
    """What the recorded paged section says about FlashInfer's design, in three sentences with
    the ratios computed from its rows: packing GQA heads into tensor-core tiles (its CUDA-core
    decode's time over its tensor-core decode's), paging's cost (the paged kernel's best split
    over the contiguous kernel from batch 64 up) and the course's kernel against FlashInfer's."""
    rows = [r for r in sec["rows"] if r["shape"].get("page_size")]
    cases = sorted({(r["shape"]["batch"], r["shape"]["page_size"]) for r in rows})

    def us(impl, b, ps):
        at = [
            r["time_us"]
            for r in rows
            if impl_name(r) == impl
            and (r["shape"]["batch"], r["shape"]["page_size"]) == (b, ps)
            and not (impl == "paged" and r["shape"].get("auto"))
        ]
        return min(at)

    contig = {
        b: min(r["time_us"] for r in sec["rows"] if impl_name(r) == "contiguous" and r["shape"]["batch"] == b)
        for b, _ in cases
    }
    cc = [us("flashinfer", b, ps) / us("flashinfer-tc", b, ps) for b, ps in cases]
    paging = [us("paged", b, ps) / contig[b] for b, ps in cases if b >= 64]
    ours = [us("flashinfer-tc", b, ps) / us("paged", b, ps) for b, ps in cases]
    return (
        f"FlashInfer's CUDA-core decode over its tensor-core one (GQA heads packed in a tile): "
        f"{_span(cc)}x\n  the time, all {len(cases)} cases.\n"
        f"Paged over contiguous KV (best split, batch 64 and up): {_span(paging)}x.\n"
        f"FlashInfer's tensor-core decode over our paged kernel: {_span(ours)}x (above 1: ours is faster)."
    )


def host_costs(res: dict) -> str:
    """The host-side costs the recorded run timed, in ms per call: FlashInfer's `plan()` in the
    paged and scheduled sections, and the course's balanced plan built and packed in Python
    (`plan_us`) and copied into the CUDA graph's buffers (`load_us`)."""
    secs = res["sections"]
    fi_paged = [r["extra"]["plan_us"] / 1e3 for r in secs["paged"]["rows"] if "plan_us" in r["extra"]]
    sched = secs["scheduled"]["rows"]
    fi_sched = [r["extra"]["plan_us"] / 1e3 for r in sched if r["impl"] == "flashinfer-tc"]
    ours = [r["extra"] for r in sched if r["impl"] == "sched balanced"]
    return (
        f"FlashInfer plan(), paged section: {_span(fi_paged)} ms per call ({len(fi_paged)} batches)\n"
        f"FlashInfer plan(), scheduled section: {_span(fi_sched)} ms per call ({len(fi_sched)} batches)\n"
        f"balanced plan, planned and packed in Python: {_span([r['plan_us'] / 1e3 for r in ours])} ms per step\n"
        f"balanced plan, copied into the graph's buffers: {_span([r['load_us'] / 1e3 for r in ours])} ms"
    )


def cuda_graph_buffers(
    max_batch: int = 256,
    max_pages: int = 256 * 512,
    max_ctas: int = 132,
    max_items: int = 32,
    kv_heads: int = 8,
    group: int = 4,
) -> str:
    """What `CUDA_GRAPH_SNIPPET`'s fixed buffers hold, beside the course's fixed-size workspace
    (`fixed_size_workspace`) that plays the same part for the persistent kernel of notebook 05:
    each row names FlashInfer's buffer, its shape for the largest batch, and the Workspace arrays
    of the same role with their shapes, read from a workspace built here (a balanced plan of
    max_batch decode requests of 1,024 tokens on max_ctas CTAs)."""
    max_batch = as_int("max_batch", max_batch, 1, 1 << 16)
    max_pages = as_int("max_pages", max_pages, max_batch, 1 << 31)
    max_ctas, max_items = as_int("max_ctas", max_ctas, 1, 1 << 12), as_int("max_items", max_items, 1, 1 << 12)
    kv_heads, group = as_int("kv_heads", kv_heads, 1, 256), as_int("group", group, 1, 64)
    plan = plan_balanced([(1, 1024)] * max_batch, kv_heads=kv_heads, num_ctas=max_ctas, group=group)
    ws = fixed_size_workspace(plan, max_ctas, max_items, max_batch * kv_heads)

    def shape(*names):
        return ", ".join(f"{n} {tuple(getattr(ws, n).shape)}" for n in names)

    rows = [
        {"fi": "paged_kv_indptr_buffer", "fs": f"({max_batch + 1},)", "ours": "kv_indptr (core.paged)"},
        {"fi": "paged_kv_indices_buffer", "fs": f"({max_pages:,},)", "ours": "kv_indices: the block tables"},
        {"fi": "paged_kv_last_page_len_buffer", "fs": f"({max_batch},)", "ours": "kv_last_page_len"},
        {"fi": "int workspace: the work items", "fs": "8 MiB", "ours": shape("items", "valid", "count")},
        {"fi": "int workspace: the merge", "fs": "", "ours": shape("merge_indptr", "merge_slots")},
        {"fi": "int workspace: the outputs", "fs": "", "ours": shape("merge_out")},
        {
            "fi": "float workspace ws",
            "fs": "128 MiB",
            "ours": f"partial (o, lse): {max_ctas * max_items:,} slots",
        },
    ]
    return (
        f"CUDA-graph buffers for a captured batch of {max_batch} decode requests, {kv_heads} KV heads, "
        f"g = {group}\n"
        + style.table(rows, {"fi": "FlashInfer buffer", "fs": "size", "ours": "the course's counterpart"})
    )
