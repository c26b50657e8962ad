"""A mixed batch in one launch: one chunked-prefill request beside many decode requests over one
paged KV cache, `kernels.paged_prefill` against FlashInfer's `BatchPrefillWithPagedKVCacheWrapper`
on the same batch (issue 28's measurement; lecture §5.6).

    python -m attnlab.gpubench.mixed --out mixed.json     # on a CUDA machine
    python -m attnlab.gpubench.mixed --dry                # tiny sizes on a CPU: the code path

A case is (chunk, decodes): the prefill request's new tokens (its keys: 1,024 cached ones and the
chunk itself, causal bottom-right) beside `decodes` requests of one query each, their cache lengths
the long-tailed draw of `machine.workload.lengths` (seed --draw). Llama-3-8B's layer (32 query
heads, 8 KV heads, d = 128), bf16, pages of 16 tokens from a shuffled pool. Each answer is checked
against the float32 reference built from the pages (`batch_reference`) and timed by CUDA-graph
replay; every implementation is planned outside the timing, as a serving loop plans once per
batch. The rows:
    ours               the batch in one launch (`kernels.paged_prefill.PrefillWorkspace`), one
                       row per --launches entry
    two                ours as two launches: the chunk alone, then the decodes through
                       `kernels.decode_paged` (what one launch saves)
    flashinfer-fa2/3   `BatchPrefillWithPagedKVCacheWrapper` with each backend
    flashinfer-pod     `BatchPODWithPagedKVCacheWrapper`: the chunk and the decodes in one launch
`gpubench.tree` (the speculative tree's mask) shares this module's inputs and peers.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np

from attnlab.gpubench.cli import launch_grid, section_main, seed_arg
from attnlab.gpubench.declare import Impl, Launch, Section

__all__ = [
    "SECTION", "CASES", "LAUNCH", "LAUNCHES", "paged_batch", "batch_reference", "ours", "two_launches",
    "flashinfer", "pod", "main",
]  # fmt: skip

PAGE = 16
#: (prefill chunk, decode requests)
CASES = tuple((c, n) for c in (512, 2048, 4096) for n in (16, 64, 128))
CACHED = 1024  # the chunk's request already holds this many keys
SHAPE = {"heads": 32, "kv_heads": 8, "head_dim": 128}
DRY = {"shape": {"heads": 4, "kv_heads": 2, "head_dim": 16}, "page": 4, "cached": 5}


def paged_batch(torch, q_lens, kv_lens, shape, page, device, seed, masks=None):
    """The batch's tensors as FlashInfer takes them: q (total_q, hq, d) bf16, NHD pools from a
    shuffled pool, the int32 qo_indptr and page table; `masks` (one (q_len, kv_len) bool array per
    request, or None) concatenated as custom_mask."""
    gen = torch.Generator().manual_seed(seed)
    hq, hkv, d = shape["heads"], shape["kv_heads"], shape["head_dim"]
    pages = [-(-n // page) for n in kv_lens]
    num = sum(pages) + 4
    i32 = dict(dtype=torch.int32, device=device)
    bf = dict(dtype=torch.bfloat16, device=device)
    b = SimpleNamespace(
        q=torch.randn(sum(q_lens), hq, d, generator=gen).to(**bf),
        k=torch.randn(num, page, hkv, d, generator=gen).to(**bf),
        v=torch.randn(num, page, hkv, d, generator=gen).to(**bf),
        qo=torch.tensor(np.concatenate([[0], np.cumsum(q_lens)]), **i32),
        indptr=torch.tensor(np.concatenate([[0], np.cumsum(pages)]), **i32),
        indices=torch.randperm(num, generator=gen)[: sum(pages)].to(**i32),
        last=torch.tensor([n - page * (p - 1) for n, p in zip(kv_lens, pages)], **i32),
        page=page,
        q_lens=list(q_lens),
        kv_lens=list(kv_lens),
        mask=None,
    )
    if masks is not None:
        b.mask = torch.tensor(np.concatenate([m.ravel() for m in masks]), dtype=torch.bool, device=device)
    return b


def _visible(b, i, torch):
    """Request i's (q_len, kv_len) mask: the custom one, else causal bottom-right."""
    a, n = b.q_lens[i], b.kv_lens[i]
    if b.mask is not None:
        start = sum(x * y for x, y in zip(b.q_lens[:i], b.kv_lens[:i]))
        return b.mask[start : start + a * n].view(a, n)
    return (
        torch.arange(n, device=b.q.device)[None, :] <= (n - a + torch.arange(a, device=b.q.device))[:, None]
    )


def batch_reference(torch, b):
    """float32 attention of every request's query rows over its keys gathered from the pages (a
    row that sees no key: 0), and the number of visible (query, key) pairs."""
    hq, hkv = b.q.shape[1], b.k.shape[2]
    out = torch.zeros(b.q.shape, dtype=torch.float32, device=b.q.device)
    qo, ptr, pairs = b.qo.tolist(), b.indptr.tolist(), 0
    for i, n in enumerate(b.kv_lens):
        pages = b.indices[ptr[i] : ptr[i + 1]].long()
        k, v = (
            p[pages].reshape(-1, hkv, p.shape[-1])[:n].float().repeat_interleave(hq // hkv, 1)
            for p in (b.k, b.v)
        )
        m = _visible(b, i, torch)
        pairs += int(m.sum())
        s = torch.einsum("qhd,khd->hqk", b.q[qo[i] : qo[i + 1]].float(), k) / b.q.shape[2] ** 0.5
        p = torch.softmax(s.masked_fill(~m[None], float("-inf")), -1).nan_to_num(0.0)
        out[qo[i] : qo[i + 1]] = torch.einsum("hqk,khd->qhd", p, v)
    return out, pairs


def case_of(torch, b, ctx, case: dict):
    """The section's Case: the batch, its reference, FLOPs (4 d per visible pair and head) and the
    bytes read (every request's K and V once, q and o)."""
    ref, pairs = batch_reference(torch, b)
    hq, hkv, d = b.q.shape[1], b.k.shape[2], b.q.shape[2]
    kv_bytes = sum(b.kv_lens) * 2 * hkv * d * 2
    return SimpleNamespace(
        b=b, case=case, ref=ref, flop=4 * pairs * hq * d, bytes=kv_bytes + 2 * b.q.numel() * 2,
        extra={"queries": int(sum(b.q_lens)), "keys": int(sum(b.kv_lens))},
    )  # fmt: skip


def _inputs(torch, case, ctx):
    from attnlab.machine.workload import lengths

    chunk, n = case
    cached, page = (DRY["cached"], DRY["page"]) if ctx.dry else (CACHED, PAGE)
    mean = 40 if ctx.dry else 4096
    dec = [kv for _, kv in lengths("longtail", n, seed=ctx.seed + 17 * ctx.options.draw, mean=mean)]
    q_lens, kv_lens = [chunk] + [1] * n, [cached + chunk] + dec
    b = paged_batch(torch, q_lens, kv_lens, ctx.shape, page, ctx.device, ctx.seed + chunk + n)
    yield case_of(
        torch,
        b,
        ctx,
        {"chunk": chunk, "decodes": n, **({"draw": ctx.options.draw} if ctx.options.draw else {})},
    )


#: our launch choices a --launches entry names, in order (None: the kernel's own)
LAUNCH = ("block_r", "block_n", "num_warps", "num_stages")
LAUNCHES = (
    "--launches",
    "our launches, comma-separated: auto (the kernel's choice) or block_r x block_n x num_warps x num_stages",
    launch_grid(LAUNCH),
    (None,),
)


def _planned(b, qo, indptr, indices, last, launch):
    """A PrefillWorkspace planned on these tables (outside the timing) and what it chose."""
    from attnlab.kernels.paged_prefill import PrefillWorkspace

    hq, d, hkv = b.q.shape[1], b.q.shape[2], b.k.shape[2]
    w = PrefillWorkspace(hq, hkv, d, b.page, b.k.shape[0], b.q.dtype, b.q.device)
    how = w.plan(
        qo, indptr, indices, last, causal=b.mask is None, mask=b.mask, **dict(zip(LAUNCH, launch or ()))
    )
    return w, how


def ours(torch, c, ctx):
    """The batch in one launch (and the merge where a tile's keys are cut), a PrefillWorkspace per
    --launches entry, planned outside the timing as FlashInfer's wrapper is."""
    b = c.b
    for launch in ctx.options.launches:
        w, how = _planned(b, b.qo, b.indptr, b.indices, b.last, launch)
        yield Launch(
            "ours",
            lambda w=w: w.run(b.q, b.k, b.v)[0],
            launch=dict(zip(LAUNCH, launch)) if launch else {},
            extra={k: how[k] for k in ("items", "kv_chunk", "slots", "block_r", "block_n")},
        )


def two_launches(torch, c, ctx):
    """Ours as two launches: the chunk alone through `kernels.paged_prefill`'s workspace, the
    decodes through `kernels.decode_paged`'s, each planned outside the timing; the answer is the
    two output buffers' rows in order (no copy into one buffer is timed)."""
    b = c.b
    if b.mask is not None or len(b.q_lens) < 2 or any(n != 1 for n in b.q_lens[1:]):
        return
    from attnlab.kernels.decode_paged import DecodeWorkspace

    a, n0 = b.q_lens[0], int(b.indptr[1])
    qo = torch.tensor([0, a], dtype=torch.int32, device=b.q.device)
    wp, _ = _planned(b, qo, b.indptr[:2], b.indices[:n0], b.last[:1], None)
    hq, d, hkv = b.q.shape[1], b.q.shape[2], b.k.shape[2]
    wd = DecodeWorkspace(hq, hkv, d, b.page, b.k.shape[0], b.q.dtype, b.q.device)
    how = wd.plan((b.indptr[1:] - n0).to(torch.int32), b.indices[n0:], b.last[1:])
    q_p, q_d = b.q[:a], b.q[a:]
    yield Launch(
        "two",
        lambda: (wp.run(q_p, b.k, b.v)[0], wd.run(q_d, b.k, b.v)),
        extra={"decoder": how["decoder"]},
    )


def _fi_workspace(torch, b):
    return torch.zeros(256 << 20, dtype=torch.uint8, device=b.q.device)


def flashinfer(torch, c, ctx):
    """FlashInfer's paged prefill wrapper on the same batch, planned once outside the timing, with
    each backend that takes the batch: FA2 and FA3 (its "auto" on an H100 or H200) causal, FA2
    with a custom mask (FA3 takes none)."""
    if c.b.q.device.type != "cuda":
        return
    import flashinfer as fi

    b = c.b
    for backend in ("fa2", "fa3") if b.mask is None else ("fa2",):
        w = fi.BatchPrefillWithPagedKVCacheWrapper(_fi_workspace(torch, b), "NHD", backend=backend)
        w.plan(
            b.qo, b.indptr, b.indices, b.last, num_qo_heads=b.q.shape[1], num_kv_heads=b.k.shape[2],
            head_dim_qk=b.q.shape[2], page_size=b.page, causal=b.mask is None, custom_mask=b.mask,
            q_data_type=b.q.dtype, kv_data_type=b.k.dtype,
        )  # fmt: skip
        yield Launch(f"flashinfer-{backend}", lambda w=w: w.run(b.q, (b.k, b.v)))


def pod(torch, c, ctx):
    """FlashInfer's POD attention (`BatchPODWithPagedKVCacheWrapper`: the prefill and the decodes
    in one launch, sharing the SMs), planned once outside the timing."""
    b = c.b
    if b.q.device.type != "cuda" or b.mask is not None or any(n != 1 for n in b.q_lens[1:]):
        return
    import flashinfer as fi

    a, n0 = b.q_lens[0], int(b.indptr[1])
    i32 = dict(dtype=torch.int32, device=b.q.device)
    w = fi.BatchPODWithPagedKVCacheWrapper(_fi_workspace(torch, b), "NHD")
    w.plan(
        torch.tensor([0, a], **i32), b.indptr[:2], b.indices[:n0], b.last[:1],
        torch.arange(len(b.q_lens), **i32), (b.indptr[1:] - n0).to(torch.int32), b.indices[n0:],
        b.last[1:], b.q.shape[1], b.k.shape[2], b.q.shape[2], b.page, q_data_type=b.q.dtype,
        kv_data_type=b.k.dtype,
    )  # fmt: skip
    q_p, q_d = b.q[:a], b.q[a:]
    yield Launch("flashinfer-pod", lambda: w.run(q_p, (b.k, b.v), q_d, (b.k, b.v), causal_p=True))


SECTION = Section(
    name="mixed",
    doc=__doc__,
    fields=("chunk", "decodes"),
    cases=CASES,
    dry_cases=((7, 3), (1, 2)),
    shape=SHAPE,
    dry_shape=DRY["shape"],
    inputs=_inputs,
    impls=(
        Impl("ours", ours, ours=True),
        Impl("two", two_launches, ours=True),
        Impl("flashinfer", flashinfer, library="flashinfer"),
        Impl("pod", pod, library="flashinfer"),
    ),
    tolerance=0.05,  # max |error|, bf16 inputs against the float32 reference
    settings=lambda ctx: {"page_size": DRY["page"] if ctx.dry else PAGE, "draw": ctx.options.draw},
    options=(("--draw", "the decode lengths' seed offset", seed_arg, 0), LAUNCHES),
)


def main(argv=None) -> int:
    return section_main(SECTION, argv)


if __name__ == "__main__":
    sys.exit(main())
