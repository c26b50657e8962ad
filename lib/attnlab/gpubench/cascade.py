"""Cascade decode on a real GPU: `cascade_decode` beside `paged_decode` over each request's full KV,
and FlashInfer's cascade and plain decode wrappers.

    python -m attnlab.gpubench.cascade --out results.json          # on a CUDA machine
    TRITON_INTERPRET=1 python -m attnlab.gpubench.cascade --dry     # tiny sizes on a CPU: the code path

Llama-3-8B decode shapes (32 query heads, 8 KV heads, d = 128, bf16): n requests share a prefix of
4096 tokens and own 256 more each, in one NHD pool of page size 16. The prefix's pages come first in
the pool, in order (so `cascade_decode` reads it as a view, pool[:prefix pages].flatten(0, 1)); the
unique pages are shuffled behind them. The full tables list the same prefix pages in every request's
row: memory is not duplicated, but a plain decode kernel reads them n times. Rows (--peers ours:
the first three; flashinfer: the rest):
- cascade: `cascade_decode` at splits=None ("auto", the count kept) and a few fixed prefix splits;
- paged: `paged_decode` over the full tables (splits=None); paged-unique: over the unique pages only
  (the cascade's second part alone, checked against a reference over the unique tokens);
- flashinfer-cascade: `MultiLevelCascadeAttentionWrapper` with two levels (the shared table with
  one query block of n rows, then the unique tables); flashinfer-tc, flashinfer: its
  `BatchDecodeWithPagedKVCacheWrapper` on the full tables (use_tensor_cores True / False,
  gpubench.paged.flashinfer_decode).
Each row is checked against a float32 reference (max |error|) and timed by CUDA-graph replay
(gpubench.core.measure). bytes = K and V bytes a kernel reads (kv_tokens of them): the prefix once
for the cascades, n times for the plain kernels; TB/s = bytes / time; x_plain = the time of `paged`
/ this row's (flashinfer-cascade: also x_fi, against flashinfer-tc); saving = `attnlab.core.decode.
cascade_intensity`'s KV tokens saved. FlashInfer (whose first plan compiles) runs last.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import traceback
from types import SimpleNamespace

from attnlab.core.decode import cascade_intensity
from attnlab.gpubench.cli import section_main
from attnlab.gpubench.declare import Impl, Launch, Section
from attnlab.gpubench.paged import SHAPE, flashinfer_decode
from attnlab.gpubench.reference import reference

__all__ = ["SECTION", "main"]

PREFIX_SPLITS = (4, 16, 32)
DRY_SPLITS = (1, 2)
PAGE_SIZE = 16


def whole_pages(case) -> str | None:
    """What is wrong with a case (requests, prefix, unique) whose prefix is no whole number of
    pages (a sentence), or None."""
    return f"prefix must be a whole number of pages of {PAGE_SIZE} tokens" if case[1] % PAGE_SIZE else None


def _inputs(torch, case, ctx):
    """The pool, the three page tables, the prefix view and the float32 references of one case."""
    n, prefix, unique = case
    wrong = whole_pages(case)
    if wrong:
        raise ValueError(f"{wrong}; got prefix={prefix}")
    dev, ps = ctx.device, PAGE_SIZE
    hq, hkv, d = ctx.shape["heads"], ctx.shape["kv_heads"], ctx.shape["head_dim"]
    pp, up = prefix // ps, -(-unique // ps)
    gen = torch.Generator().manual_seed(ctx.seed + n)
    bf = dict(dtype=torch.bfloat16, device=dev)
    q = torch.randn(n, hq, d, generator=gen).to(**bf)
    kv_p = torch.randn(2, prefix, hkv, d, generator=gen).to(**bf)
    kv_u = torch.randn(2, n, unique, hkv, d, generator=gen).to(**bf)
    pools = torch.zeros(2, pp + n * up, ps, hkv, d, **bf)
    pools[:, :pp] = kv_p.reshape(2, pp, ps, hkv, d)
    uniq = (pp + torch.randperm(n * up, generator=gen)).to(device=dev, dtype=torch.int32)
    tok = torch.nn.functional.pad(kv_u, (0, 0, 0, 0, 0, up * ps - unique))  # whole pages
    pools[:, uniq.long()] = tok.reshape(2, n * up, ps, hkv, d)
    i32 = dict(dtype=torch.int32, device=dev)
    shared = torch.arange(pp, **i32)
    full = torch.cat([torch.cat([shared, uniq[i * up : (i + 1) * up]]) for i in range(n)])
    last = torch.full((n,), unique - ps * (up - 1), **i32)
    cost = cascade_intensity(n, prefix, unique, hq // hkv)
    c = SimpleNamespace(
        q=q,
        k_pool=pools[0],
        v_pool=pools[1],
        page_size=ps,
        n=n,
        prefix_k=pools[0, :pp].flatten(0, 1),
        prefix_v=pools[1, :pp].flatten(0, 1),
        unique=(torch.arange(0, n * up + 1, up, **i32), uniq, last),
        full=(torch.arange(0, n * (pp + up) + 1, pp + up, **i32), full, last),
        shared=(torch.tensor([0, pp], **i32), shared, torch.tensor([ps], **i32)),
        splits=DRY_SPLITS if ctx.dry else PREFIX_SPLITS,
        case={"n": n, "prefix": prefix, "unique": unique},
        flop=None,
        bytes=None,  # each launch says what it reads
        tokens={True: prefix + n * unique, False: n * (prefix + unique), None: n * unique},
        tok_bytes=2 * hkv * d * q.element_size(),  # K and V of one token
        extra={k: cost[k] for k in ("saving", "tokens_cascade", "tokens_naive")},
    )
    c.ref, c.ref_unique = _reference(torch, q, kv_p, kv_u)
    yield c


def _reference(torch, q, kv_p, kv_u):
    """gpubench.reference over prefix + own tokens, concatenated (the prefix repeated for a few
    requests at a time), and over the own tokens alone."""
    n = q.shape[0]
    own = kv_u.transpose(2, 3)  # (2, n, hkv, u, d)
    full = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    step = max(1, (1 << 26) // (kv_p.shape[2] * (kv_p.shape[1] + kv_u.shape[2]) * q.shape[2]))
    for i in range(0, n, step):
        b = min(step, n - i)
        pre = kv_p.transpose(1, 2)[:, None].expand(2, b, -1, -1, -1)  # (2, b, hkv, prefix, d)
        kv = torch.cat([pre, own[:, i : i + b]], 3)
        full[i : i + b] = reference(torch, q[i : i + b], kv[0], kv[1])
    return full, reference(torch, q, own[0], own[1])


def _reads(c, prefix_once) -> dict:
    """A launch's KV tokens and bytes: the prefix once (True), n times (False), or none (None)."""
    tokens = c.tokens[prefix_once]
    return {"kv_tokens": tokens, "bytes": tokens * c.tok_bytes}


def _ours(torch, c, ctx):
    from attnlab.kernels.cascade import cascade_decode, prefix_plan
    from attnlab.kernels.paged import paged_decode

    out = torch.empty_like(c.q)
    hq, hkv = c.q.shape[1], c.k_pool.shape[2]
    fixed = set()  # a fixed split the prefix clips to one already timed is the same launch
    for s in (None, *c.splits):
        chosen = prefix_plan(c.n, hq, hkv, c.prefix_k.shape[0], c.q.device, splits=s)[2]
        if s is not None:
            if chosen in fixed:
                continue
            fixed.add(chosen)
        yield Launch(
            "cascade",
            lambda s=s: cascade_decode(
                c.q,
                c.prefix_k,
                c.prefix_v,
                c.k_pool,
                c.v_pool,
                *c.unique,
                page_size=c.page_size,
                splits=s,
                out=out,
            ),
            launch={"splits": chosen, "auto": s is None},
            extra=_reads(c, True),
        )
    yield Launch(
        "paged",
        lambda: paged_decode(c.q, c.k_pool, c.v_pool, *c.full, page_size=c.page_size, out=out),
        extra=_reads(c, False),
    )
    yield Launch(
        "paged-unique",
        lambda: paged_decode(c.q, c.k_pool, c.v_pool, *c.unique, page_size=c.page_size, out=out),
        extra=_reads(c, None),
        ref=c.ref_unique,
    )


def _flashinfer_cascade(torch, c):
    """FlashInfer's two-level cascade wrapper (the shared table with one query block of n rows,
    then the unique tables), planned once outside the timing; None (printed) where it fails."""
    import flashinfer

    hq, d = c.q.shape[1:]
    hkv = c.k_pool.shape[2]
    i32 = dict(dtype=torch.int32, device=c.q.device)
    qo = [torch.tensor([0, c.n], **i32), torch.arange(c.n + 1, **i32)]
    tables = [[c.shared[i], c.unique[i]] for i in range(3)]

    def plan():  # host seconds, synchronised
        t0 = time.perf_counter()
        w.plan(qo, *tables, hq, hkv, d, c.page_size, q_data_type=c.q.dtype, kv_data_type=c.k_pool.dtype)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    try:
        buf = torch.zeros(128 << 20, dtype=torch.uint8, device=c.q.device)
        w = flashinfer.MultiLevelCascadeAttentionWrapper(2, buf, "NHD")
        first = plan()  # the first plan compiles (JIT)
        try:
            w.prewarm_paged_kv_stride_variant()  # before graph capture, as its docs ask
        except Exception:  # noqa: BLE001 - older or newer API
            pass
    except Exception:  # noqa: BLE001 - the plain wrappers may still run
        print("  flashinfer-cascade: failed\n" + traceback.format_exc(limit=4), flush=True)
        return None
    return Launch(
        "flashinfer-cascade",
        lambda: w.run(c.q, (c.k_pool, c.v_pool)),
        extra={
            **_reads(c, True),
            "first_plan_s": first,
            "plan_us": sorted(plan() for _ in range(3))[1] * 1e6,
        },
    )


def _flashinfer(torch, c, ctx):
    """FlashInfer's cascade wrapper, then its plain decode wrappers over the full tables
    (gpubench.paged.flashinfer_decode; the rows name no page size: the section has one)."""
    cascade = _flashinfer_cascade(torch, c)
    if cascade is not None:
        yield cascade
    indptr, indices, last = c.full
    pool = SimpleNamespace(
        k_pool=c.k_pool, v_pool=c.v_pool, page_size=c.page_size, indptr=indptr, indices=indices, last=last
    )
    for launch in flashinfer_decode(torch, SimpleNamespace(q=c.q, pool=pool)):
        yield dataclasses.replace(launch, launch={}, extra={**launch.extra, **_reads(c, False)})


def _speedups(rows) -> None:
    """x_plain, x_fi: each row's speed-up over `paged` and (flashinfer-cascade) over
    flashinfer-tc of the same case, in its extra."""
    us = {(r["what"], r["impl"]): r["time_us"] for r in rows}
    for r in rows:
        plain = us.get((r["what"], "paged"))
        r["extra"]["x_plain"] = plain / r["time_us"] if plain else None
        if r["impl"] == "flashinfer-cascade":
            tc = us.get((r["what"], "flashinfer-tc"))
            r["extra"]["x_fi"] = tc / r["time_us"] if tc else None


SECTION = Section(
    name="cascade",
    check=whole_pages,
    doc=__doc__,
    fields=("requests", "prefix", "unique"),
    cases=((8, 4096, 256), (64, 4096, 256)),
    dry_cases=((3, 32, 20), (2, 16, 1)),
    shape=SHAPE,
    dry_shape=dict(heads=8, kv_heads=2, head_dim=32),
    inputs=_inputs,
    impls=(Impl("ours", _ours, ours=True), Impl("flashinfer", _flashinfer, library="flashinfer")),
    tolerance=0.02,  # max |error|, bf16 against float32: 1.7e-3 recorded at most
    settings=lambda ctx: {"page_size": PAGE_SIZE},
    finish=_speedups,
)


def main(argv=None) -> int:
    return section_main(SECTION, argv)


if __name__ == "__main__":
    sys.exit(main())
