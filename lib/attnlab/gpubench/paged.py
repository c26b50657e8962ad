"""Paged decode on a real GPU: `paged_decode` beside FlashInfer's decode wrapper, SDPA and split-KV.

    python -m attnlab.gpubench.paged --out results.json          # on a CUDA machine
    TRITON_INTERPRET=1 python -m attnlab.gpubench.paged --dry     # tiny sizes on a CPU: the code path

A Llama-3-8B-shaped layer (32 query heads, 8 KV heads, d = 128, bf16). Each batch x context's K/V
is held contiguous, (batch, kv_heads, context, d), and in NHD pools of page size 16 and 1 with pages
in a shuffled order. Each implementation is checked against a float32 reference (max_err), then
timed per call by CUDA-graph replay (median; CUDA events around a loop if the capture fails):
- paged: `paged_decode` at a few split counts and at splits=None ("auto": `choose_splits` from the
  real lengths, the count it chose kept);
- contiguous: `split_kv_decode` on the contiguous copy (it writes fp32, the others bf16);
- flashinfer-tc, flashinfer: `BatchDecodeWithPagedKVCacheWrapper`, use_tensor_cores True / False,
  planned once outside the timing (plan() itself timed on the host, plan_us);
- sdpa-cudnn, sdpa-flash: torch SDPA on the contiguous copy, a KV head's g query heads as g rows.
bytes = K, V and Q read once, O written (bf16); TB/s = bytes / time (the run's schema adds
ratio_to_best). FlashInfer (whose first plan compiles) runs after the rest; every row is
tried on its own (a failure drops it, with a short traceback); the JSON is rewritten after each case.
"""
from __future__ import annotations

import sys
import time
import traceback
from types import SimpleNamespace

from attnlab.machine.models import get_model
from attnlab.gpubench.core import checked_time, flashinfer_last, header, reference, try_peer
from attnlab.gpubench.cli import flashinfer_version, section_main, write_json

__all__ = ["run", "main"]

_SHAPE = get_model("Llama-3-8B")
SHAPE = dict(heads=_SHAPE.q_heads, kv_heads=_SHAPE.kv_heads, head_dim=_SHAPE.head_dim)
CASES = [(1, 32768), (16, 8192), (64, 4096), (256, 4096)]
SPLITS = {1: (8, 16, 32), 16: (1, 2, 4), 64: (1, 2), 256: (1, 2)}
PAGE_SIZES = (16, 1)
PEERS = ("paged", "contiguous", "sdpa", "flashinfer")
DRY = dict(cases=[(2, 40), (1, 100)], shape=dict(heads=8, kv_heads=2, head_dim=32), splits=(1, 3))


def pool(torch, k, v, page_size: int, seed: int):
    """NHD pools holding the same K/V, pages in a shuffled order, and FlashInfer's int32 arrays."""
    B, hkv, n, d = k.shape
    per = -(-n // page_size)
    gen = torch.Generator().manual_seed(seed)
    indices = torch.randperm(B * per, generator=gen).to(device=k.device, dtype=torch.int32)
    pools = [torch.empty(B * per, page_size, hkv, d, dtype=k.dtype, device=k.device) for _ in "kv"]
    for pool, t in zip(pools, (k, v)):                   # token t of request b: page t // ps, slot t % ps
        tok = torch.nn.functional.pad(t.transpose(1, 2), (0, 0, 0, 0, 0, per * page_size - n))
        pool[indices.long()] = tok.reshape(B * per, page_size, hkv, d)
    i32 = dict(dtype=torch.int32, device=k.device)
    return SimpleNamespace(k_pool=pools[0], v_pool=pools[1], page_size=page_size, indices=indices,
                           indptr=torch.arange(0, B * per + 1, per, **i32),
                           last=torch.full((B,), n - page_size * (per - 1), **i32))


def _paged(torch, c, add):
    from attnlab.kernels.paged import choose_splits, paged_decode
    p = c.pool
    out = torch.empty_like(c.q)
    auto = choose_splits(c.q.shape[0], p.k_pool.shape[2], p.indptr, p.indices, p.last, p.page_size, c.q.device)
    for s in (*c.splits, None):
        add("paged", lambda s=s: paged_decode(c.q, p.k_pool, p.v_pool, p.indptr, p.indices, p.last,
                                              page_size=p.page_size, splits=s, out=out),
            splits=auto["splits"] if s is None else s, auto=s is None)


def _contiguous(torch, c, add):
    from attnlab.kernels.decode import split_kv_decode, workspace
    for s in c.splits:
        ws = workspace(*c.q.shape[:2], c.q.shape[2], s, c.q.device)
        add("contiguous", lambda s=s, ws=ws: split_kv_decode(c.q, c.k, c.v, s, ws=ws), splits=s)


def _sdpa(torch, c, add):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    B, hq, d = c.q.shape
    q4 = c.q.view(B, c.k.shape[1], -1, d)                # (batch, kv_heads, g, d): g rows per KV head

    for name, backend in (("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa-flash", SDPBackend.FLASH_ATTENTION)):
        def fn(backend=backend):
            with sdpa_kernel(backend):
                return torch.nn.functional.scaled_dot_product_attention(q4, c.k, c.v).reshape(B, hq, d)
        add(name, fn)


def flashinfer_decode(torch, c, add, tensor_cores=(True, False)):
    import flashinfer
    p, (B, hq, d) = c.pool, c.q.shape
    for tc in tensor_cores:
        def plan(w):                                      # host seconds, synchronised
            t0 = time.perf_counter()
            w.plan(p.indptr, p.indices, p.last, hq, p.k_pool.shape[2], d, p.page_size,
                   pos_encoding_mode="NONE", q_data_type=c.q.dtype, kv_data_type=p.k_pool.dtype)
            torch.cuda.synchronize()
            return time.perf_counter() - t0
        try:
            buf = torch.zeros(128 << 20, dtype=torch.uint8, device=c.q.device)
            w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(buf, "NHD", use_tensor_cores=tc)
            first = plan(w)                               # the first plan compiles (JIT)
        except Exception:                                 # noqa: BLE001
            print(f"  flashinfer use_tensor_cores={tc}: failed\n" + traceback.format_exc(limit=3), flush=True)
            continue
        plans = sorted(plan(w) for _ in range(5))
        add("flashinfer-tc" if tc else "flashinfer", lambda w=w: w.run(c.q, (p.k_pool, p.v_pool)),
            plan_us=plans[2] * 1e6, first_plan_s=first)


def _case(torch, res, batch, ctx, shape, splits, page_sizes, peers, seed):
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(seed)
    hq, hkv, d = shape["heads"], shape["kv_heads"], shape["head_dim"]
    q = torch.randn(batch, hq, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(batch, hkv, ctx, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    ref = reference(torch, q, k, v)
    nbytes = (2 * k.numel() + 2 * q.numel()) * k.element_size()
    c = SimpleNamespace(q=q, k=k, v=v, splits=splits, pool=None)

    def add(impl, fn, **extra):
        got = checked_time(fn, ref, f"{impl} {extra}")
        if got is None:
            return
        err, us, how = got
        res["rows"].append({"batch": batch, "context": ctx, "impl": impl,
                            "page_size": None if c.pool is None else c.pool.page_size, **extra,
                            "us": us, "timing": how, "bytes": nbytes, "tb_per_s": nbytes / us * 1e-6,
                            "max_err": err})
        print(f"  {impl:13s} ps={res['rows'][-1]['page_size']} {extra} {us:10.1f} us  err {err:.1e}  {how}",
              flush=True)

    def peer(name, fn):
        if name in peers:
            try_peer(name, fn, torch, c, add)

    peer("contiguous", _contiguous)
    peer("sdpa", _sdpa)
    for ps in page_sizes if {"paged", "flashinfer"} & set(peers) else ():
        c.pool = pool(torch, k, v, ps, seed)
        peer("paged", _paged)
        peer("flashinfer", flashinfer_decode)
        c.pool = None
        if dev == "cuda":
            torch.cuda.empty_cache()


def run(cases=CASES, page_sizes=PAGE_SIZES, peers=PEERS, *, dry: bool = False, out: str | None = None,
        seed: int = 0) -> dict:
    import torch
    shape = DRY["shape"] if dry else SHAPE
    res = header(torch, shape)
    print(f"{res['device']}: torch {res['torch']}, triton {res['triton']}", flush=True)

    def save():
        write_json(out, res)
    for phase in flashinfer_last(peers):                    # FlashInfer's JIT last: ours survive a timeout
        if "flashinfer" in phase:                         # imported only now: a crash keeps the rest
            ok, res["flashinfer"] = flashinfer_version()
            if not ok:
                print(f"flashinfer: {res['flashinfer']}", flush=True)
                save()
                continue
        for batch, ctx in cases:
            print(f"batch {batch} x context {ctx}: {', '.join(phase)}", flush=True)
            splits = DRY["splits"] if dry else SPLITS.get(batch, (1, 2, 4))
            _case(torch, res, batch, ctx, shape, splits, page_sizes, phase, seed + batch + ctx)
            save()
    return res


def main(argv=None) -> int:
    from attnlab.gpubench.cli import int_list

    def go(a, cases, peers):
        return run(cases, a.page_sizes or PAGE_SIZES, peers, dry=a.dry, out=a.out)
    return section_main("paged", argv, __doc__, ("batch", "context"), CASES, DRY["cases"], go,
                        ("--peers", PEERS), extra=[("--page-sizes", "e.g. 16,1", int_list("page size"))])


if __name__ == "__main__":
    sys.exit(main())
