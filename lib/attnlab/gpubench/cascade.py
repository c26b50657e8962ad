"""Cascade decode on a real GPU: `cascade_decode` beside `paged_decode` over each request's full KV,
and FlashInfer's cascade and plain decode wrappers.

    python -m attnlab.gpubench.cascade --out results.json          # on a CUDA machine
    TRITON_INTERPRET=1 python -m attnlab.gpubench.cascade --dry     # tiny sizes on a CPU: the code path

Llama-3-8B decode shapes (32 query heads, 8 KV heads, d = 128, bf16): n requests share a prefix of
4096 tokens and own 256 more each, in one NHD pool of page size 16. The prefix's pages come first in
the pool, in order (so `cascade_decode` reads it as a view, pool[:prefix pages].flatten(0, 1)); the
unique pages are shuffled behind them. The full tables list the same prefix pages in every request's
row: memory is not duplicated, but a plain decode kernel reads them n times. Rows:
- cascade: `cascade_decode` at splits=None ("auto", the count kept) and a few fixed prefix splits;
- paged: `paged_decode` over the full tables (splits=None); paged-unique: over the unique pages only
  (the cascade's second part alone, checked against a reference over the unique tokens);
- flashinfer-cascade: `MultiLevelCascadeAttentionWrapper` with two levels (the shared table with
  one query block of n rows, then the unique tables); flashinfer-tc, flashinfer: its
  `BatchDecodeWithPagedKVCacheWrapper` on the full tables (use_tensor_cores True / False).
Each row is checked against a float32 reference (max_err) and timed by CUDA-graph replay
(`time_per_call`). kv_bytes = K and V bytes a kernel reads: the prefix once for the cascades, n times
for the plain kernels; TB/s = kv_bytes / time; x_plain = the time of `paged` / this row's
(flashinfer-cascade: also x_fi, against flashinfer-tc); saving = `attnlab.core.decode.cascade_intensity`'s
KV tokens saved. FlashInfer (whose first plan compiles) runs last; each row is tried on its own; the
JSON is rewritten after every row.
"""

from __future__ import annotations

import sys
import time
import traceback
from types import SimpleNamespace

from attnlab.core.decode import cascade_intensity
from attnlab.gpubench.core import checked_time, header, try_peer
from attnlab.gpubench.reference import reference
from attnlab.gpubench.cli import flashinfer_version, section_main, write_json
from attnlab.gpubench.paged import SHAPE

__all__ = ["run", "main"]

CASES = [(8, 4096, 256), (64, 4096, 256)]  # (requests, prefix, unique tokens each)
PREFIX_SPLITS = (4, 16, 32)
PAGE_SIZE = 16
PEERS = ("ours", "flashinfer")
DRY = dict(cases=[(3, 32, 20), (2, 16, 1)], shape=dict(heads=8, kv_heads=2, head_dim=32), splits=(1, 2))


def _setup(torch, n, prefix, unique, shape, ps, seed):
    """The pool, the three page tables, the prefix view and the float32 references."""
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    hq, hkv, d = shape["heads"], shape["kv_heads"], shape["head_dim"]
    if prefix % ps:
        raise ValueError(f"prefix={prefix} must be a whole number of pages of {ps} tokens")
    pp, up = prefix // ps, -(-unique // ps)
    gen = torch.Generator().manual_seed(seed)
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
    c = SimpleNamespace(
        q=q,
        k_pool=pools[0],
        v_pool=pools[1],
        page_size=ps,
        n=n,
        dev=dev,
        prefix_k=pools[0, :pp].flatten(0, 1),
        prefix_v=pools[1, :pp].flatten(0, 1),
        unique=(torch.arange(0, n * up + 1, up, **i32), uniq, last),
        full=(torch.arange(0, n * (pp + up) + 1, pp + up, **i32), full, last),
        shared=(torch.tensor([0, pp], **i32), shared, torch.tensor([ps], **i32)),
    )
    c.ref, c.ref_unique = _reference(torch, q, kv_p, kv_u)
    return c


def _reference(torch, q, kv_p, kv_u):
    """gpubench.core.reference over prefix + own tokens, concatenated (the prefix repeated for a few
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


def _ours(torch, c, add, splits):
    from attnlab.kernels.cascade import cascade_decode, prefix_plan
    from attnlab.kernels.paged import paged_decode

    out = torch.empty_like(c.q)
    hq, hkv = c.q.shape[1], c.k_pool.shape[2]
    for s in (None, *splits):
        chosen = prefix_plan(c.n, hq, hkv, c.prefix_k.shape[0], c.q.device, splits=s)[2]
        add(
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
            prefix_once=True,
            splits=chosen,
            auto=s is None,
        )
    add(
        "paged",
        lambda: paged_decode(c.q, c.k_pool, c.v_pool, *c.full, page_size=c.page_size, out=out),
        prefix_once=False,
    )
    add(
        "paged-unique",
        lambda: paged_decode(c.q, c.k_pool, c.v_pool, *c.unique, page_size=c.page_size, out=out),
        prefix_once=None,
        ref=c.ref_unique,
    )


def _flashinfer(torch, c, add, splits):
    import flashinfer

    hq, d = c.q.shape[1:]
    hkv, kw = c.k_pool.shape[2], dict(q_data_type=c.q.dtype, kv_data_type=c.k_pool.dtype)
    kv = (c.k_pool, c.v_pool)

    def timed_plan(fn):  # host seconds, synchronised
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    try:
        buf = torch.zeros(128 << 20, dtype=torch.uint8, device=c.dev)
        w = flashinfer.MultiLevelCascadeAttentionWrapper(2, buf, "NHD")
        i32 = dict(dtype=torch.int32, device=c.dev)
        qo = [torch.tensor([0, c.n], **i32), torch.arange(c.n + 1, **i32)]
        plan = lambda: w.plan(
            qo,
            [c.shared[0], c.unique[0]],
            [c.shared[1], c.unique[1]],  # noqa: E731
            [c.shared[2], c.unique[2]],
            hq,
            hkv,
            d,
            c.page_size,
            **kw,
        )
        first = timed_plan(plan)  # the first plan compiles (JIT)
        try:
            w.prewarm_paged_kv_stride_variant()  # before graph capture, as its docs ask
        except Exception:  # noqa: BLE001 - older or newer API
            pass
        add(
            "flashinfer-cascade",
            lambda: w.run(c.q, kv),
            prefix_once=True,
            first_plan_s=first,
            plan_us=sorted(timed_plan(plan) for _ in range(3))[1] * 1e6,
        )
    except Exception:  # noqa: BLE001 - drop this row only
        print("  flashinfer-cascade: failed\n" + traceback.format_exc(limit=4), flush=True)
    for tc in (True, False):
        try:
            buf = torch.zeros(128 << 20, dtype=torch.uint8, device=c.dev)
            wd = flashinfer.BatchDecodeWithPagedKVCacheWrapper(buf, "NHD", use_tensor_cores=tc)
            plan = lambda wd=wd: wd.plan(*c.full, hq, hkv, d, c.page_size, pos_encoding_mode="NONE", **kw)  # noqa: E731
            first = timed_plan(plan)
            add(
                "flashinfer-tc" if tc else "flashinfer",
                lambda wd=wd: wd.run(c.q, kv),
                prefix_once=False,
                first_plan_s=first,
                plan_us=sorted(timed_plan(plan) for _ in range(3))[1] * 1e6,
            )
        except Exception:  # noqa: BLE001
            print(f"  flashinfer use_tensor_cores={tc}: failed\n" + traceback.format_exc(limit=4), flush=True)


def _derive(res):
    """x_plain, x_fi: speed-ups of each row over `paged` and over flashinfer-tc of the same case."""
    for r in res["rows"]:
        same = {x["impl"]: x["us"] for x in res["rows"] if x["n"] == r["n"] and not x.get("splits_fixed")}
        r["x_plain"] = same["paged"] / r["us"] if "paged" in same else None
        if r["impl"] == "flashinfer-cascade":
            r["x_fi"] = same["flashinfer-tc"] / r["us"] if "flashinfer-tc" in same else None


def run(cases=CASES, peers=PEERS, *, dry: bool = False, out: str | None = None, seed: int = 0) -> dict:
    import torch

    shape = DRY["shape"] if dry else SHAPE
    res = header(torch, shape)
    res["page_size"] = PAGE_SIZE
    print(f"{res['device']}: torch {res['torch']}, triton {res['triton']}", flush=True)

    def save():
        _derive(res)
        write_json(out, res)

    for peer in peers:  # FlashInfer's JIT last: ours survive a timeout
        if peer == "flashinfer":
            ok, res["flashinfer"] = flashinfer_version()
            if not ok:
                print(f"flashinfer: {res['flashinfer']}", flush=True)
                save()
                continue
        for n, prefix, unique in cases:
            print(f"n {n} x (prefix {prefix} + unique {unique}): {peer}", flush=True)
            try:
                c = _setup(torch, n, prefix, unique, shape, PAGE_SIZE, seed + n)
            except Exception:  # noqa: BLE001
                print("  setup failed\n" + traceback.format_exc(limit=4), flush=True)
                continue
            cost = cascade_intensity(n, prefix, unique, shape["heads"] // shape["kv_heads"])
            tok_bytes = 2 * shape["kv_heads"] * shape["head_dim"] * 2  # K and V, bf16

            def add(impl, fn, prefix_once, ref=None, **extra):
                ref = c.ref if ref is None else ref
                got = checked_time(fn, ref, f"{impl} {extra}")
                if got is None:
                    return
                err, us, how = got
                tokens = {True: prefix + n * unique, False: n * (prefix + unique), None: n * unique}[
                    prefix_once
                ]
                if impl == "cascade" and not extra.get("auto"):
                    extra["splits_fixed"] = True
                res["rows"].append(
                    {
                        "n": n,
                        "prefix": prefix,
                        "unique": unique,
                        "impl": impl,
                        **extra,
                        "us": us,
                        "timing": how,
                        "kv_tokens": tokens,
                        "kv_bytes": tokens * tok_bytes,
                        "tb_per_s": tokens * tok_bytes / us * 1e-6,
                        "max_err": err,
                        "saving": cost["saving"],
                        "tokens_cascade": cost["tokens_cascade"],
                        "tokens_naive": cost["tokens_naive"],
                    }
                )
                print(
                    f"  {impl:18s} {extra} {us:10.1f} us  {tokens * tok_bytes / us * 1e-6:5.2f} TB/s  "
                    f"err {err:.1e}  {how}",
                    flush=True,
                )
                save()

            try_peer(
                peer,
                _ours if peer == "ours" else _flashinfer,
                torch,
                c,
                add,
                DRY["splits"] if dry else PREFIX_SPLITS,
                limit=4,
            )
            del c
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    save()
    return res


def main(argv=None) -> int:
    def whole_pages(case):
        pages = f"prefix must be a whole number of pages of {PAGE_SIZE} tokens"
        return pages if case[1] % PAGE_SIZE else None

    return section_main(
        "cascade",
        argv,
        __doc__,
        ("requests", "prefix", "unique"),
        CASES,
        DRY["cases"],
        lambda a, cases, peers: run(cases, peers, dry=a.dry, out=a.out),
        ("--peers", PEERS),
        check=whole_pages,
    )


if __name__ == "__main__":
    sys.exit(main())
