"""Paged decode on a real GPU: `paged_decode` beside FlashInfer's decode wrapper, SDPA and split-KV.

    python -m attnlab.gpubench.paged --out results.json          # on a CUDA machine
    python -m attnlab.gpubench.paged --dry                        # tiny sizes on a CPU: the code path

A Llama-3-8B-shaped layer (32 query heads, 8 KV heads, d = 128, bf16). Each batch x context's K/V
is held contiguous, (batch, kv_heads, context, d), and in NHD pools of page size 16 and 1 with pages
in a shuffled order. Each implementation is checked against a float32 reference (error), then
timed per call by CUDA-graph replay (gpubench.core.measure, the loop every section shares):
- paged: `paged_decode` at a few split counts and at splits=None ("auto": `choose_splits` from the
  real lengths, the count it chose kept);
- contiguous: `split_kv_decode` on the contiguous copy (it writes fp32, the others bf16);
- flashinfer-tc, flashinfer: `BatchDecodeWithPagedKVCacheWrapper`, use_tensor_cores True / False,
  planned once outside the timing (plan() itself timed on the host, plan_us);
- sdpa-cudnn, sdpa-flash: torch SDPA on the contiguous copy, in both forms: a KV head's g query
  heads as g rows (a prefill of g queries), and "gqa", q (batch, q_heads, 1, d) with enable_gqa,
  the decode call as torch documents it (each library's fastest form is its best call);
- decode_paged: `kernels.decode_paged`, the one decode call, planned once outside the timing
  (its plan() on the host, plan_us), the decoder it chose in the row;
bytes = K, V and Q read once, O written (bf16); TB/s = bytes / time. FlashInfer (whose first plan
compiles) runs after the rest.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import traceback
from types import SimpleNamespace

from attnlab.gpubench.cli import int_list, section_main
from attnlab.gpubench.declare import Impl, Launch, Section
from attnlab.gpubench.reference import reference
from attnlab.machine.models import get_model

__all__ = ["SECTION", "pool", "flashinfer_decode", "decode_paged_launch", "main"]

_SHAPE = get_model("Llama-3-8B")
SHAPE = dict(heads=_SHAPE.q_heads, kv_heads=_SHAPE.kv_heads, head_dim=_SHAPE.head_dim)
#: the split counts timed beside the automatic choice, by batch (others: 1, 2, 4)
SPLITS = {1: (8, 16, 32), 16: (1, 2, 4), 64: (1, 2), 256: (1, 2)}
DRY_SPLITS = (1, 3)


def pool(torch, k, v, page_size: int, seed: int):
    """NHD pools holding the same K/V, pages in a shuffled order, and FlashInfer's int32 arrays."""
    B, hkv, n, d = k.shape
    per = -(-n // page_size)
    gen = torch.Generator().manual_seed(seed)
    indices = torch.randperm(B * per, generator=gen).to(device=k.device, dtype=torch.int32)
    pools = [torch.empty(B * per, page_size, hkv, d, dtype=k.dtype, device=k.device) for _ in "kv"]
    for pool, t in zip(pools, (k, v)):  # token t of request b: page t // ps, slot t % ps
        tok = torch.nn.functional.pad(t.transpose(1, 2), (0, 0, 0, 0, 0, per * page_size - n))
        pool[indices.long()] = tok.reshape(B * per, page_size, hkv, d)
    i32 = dict(dtype=torch.int32, device=k.device)
    return SimpleNamespace(
        k_pool=pools[0],
        v_pool=pools[1],
        page_size=page_size,
        indices=indices,
        indptr=torch.arange(0, B * per + 1, per, **i32),
        last=torch.full((B,), n - page_size * (per - 1), **i32),
    )


def _inputs(torch, case, ctx):
    """The case's contiguous K/V (pool None: the contiguous and SDPA rows), then the same K/V in a
    pool of each page size (the paged and FlashInfer rows)."""
    batch, ctx_len = case
    seed = ctx.seed + batch + ctx_len
    torch.manual_seed(seed)
    hq, hkv, d = ctx.shape["heads"], ctx.shape["kv_heads"], ctx.shape["head_dim"]
    q = torch.randn(batch, hq, d, device=ctx.device, dtype=torch.bfloat16)
    k = torch.randn(batch, hkv, ctx_len, d, device=ctx.device, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    c = SimpleNamespace(
        q=q,
        k=k,
        v=v,
        ref=reference(torch, q, k, v),
        case={"batch": batch, "context": ctx_len},
        flop=None,
        bytes=(2 * k.numel() + 2 * q.numel()) * k.element_size(),
        pool=None,
        splits=DRY_SPLITS if ctx.dry else SPLITS.get(batch, (1, 2, 4)),
    )
    yield c
    for ps in ctx.options.page_sizes:
        c.pool = pool(torch, k, v, ps, seed)
        yield c


def _paged(torch, c, ctx):
    from attnlab.kernels.paged import choose_splits, paged_decode

    if c.pool is None:
        return
    p = c.pool
    out = torch.empty_like(c.q)
    auto = choose_splits(
        c.q.shape[0], p.k_pool.shape[2], p.indptr, p.indices, p.last, p.page_size, c.q.device
    )
    for s in (*c.splits, None):
        yield Launch(
            "paged",
            lambda s=s: paged_decode(
                c.q, p.k_pool, p.v_pool, p.indptr, p.indices, p.last, page_size=p.page_size, splits=s, out=out
            ),
            launch={
                "page_size": p.page_size,
                "splits": auto["splits"] if s is None else s,
                "auto": s is None,
            },
        )


def _contiguous(torch, c, ctx):
    from attnlab.kernels.decode import split_kv_decode, workspace

    if c.pool is not None:
        return
    for s in c.splits:
        ws = workspace(*c.q.shape[:2], c.q.shape[2], s, c.q.device)
        yield Launch(
            "contiguous",
            lambda s=s, ws=ws: split_kv_decode(c.q, c.k, c.v, s, ws=ws),
            launch={"page_size": None, "splits": s},
        )


def _sdpa(torch, c, ctx):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if c.pool is not None:
        return
    B, hq, d = c.q.shape
    sdpa = torch.nn.functional.scaled_dot_product_attention
    forms = {
        # (batch, kv_heads, g, d): g query rows per KV head, no GQA (a prefill of g rows)
        False: lambda: sdpa(c.q.view(B, c.k.shape[1], -1, d), c.k, c.v).reshape(B, hq, d),
        # (batch, q_heads, 1, d) with enable_gqa: the decode call as torch documents it
        True: lambda: sdpa(c.q[:, :, None, :], c.k, c.v, enable_gqa=True)[:, :, 0, :],
    }
    for name, backend in (
        ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION),
        ("sdpa-flash", SDPBackend.FLASH_ATTENTION),
    ):
        for gqa, call in forms.items():

            def fn(backend=backend, call=call):
                with sdpa_kernel(backend):
                    return call()

            yield Launch(name, fn, launch={"page_size": None, "gqa": gqa})  # no page: the contiguous copy


def flashinfer_decode(torch, c, tensor_cores=(True, False)):
    """FlashInfer's BatchDecodeWithPagedKVCacheWrapper on pool `c.pool`, planned once outside the
    timing, as Launches: its plan() on the host (plan_us, median of 5) and its first plan, which
    compiles (first_plan_s), in each row's extra."""
    import flashinfer

    p, (_, hq, d) = c.pool, c.q.shape
    for tc in tensor_cores:

        def plan(w):  # host seconds, synchronised
            t0 = time.perf_counter()
            w.plan(
                p.indptr,
                p.indices,
                p.last,
                hq,
                p.k_pool.shape[2],
                d,
                p.page_size,
                pos_encoding_mode="NONE",
                q_data_type=c.q.dtype,
                kv_data_type=p.k_pool.dtype,
            )
            torch.cuda.synchronize()
            return time.perf_counter() - t0

        try:
            buf = torch.zeros(128 << 20, dtype=torch.uint8, device=c.q.device)
            w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(buf, "NHD", use_tensor_cores=tc)
            first = plan(w)  # the first plan compiles (JIT)
        except Exception:  # noqa: BLE001 - the other wrapper may still run
            print(f"  flashinfer use_tensor_cores={tc}: failed\n" + traceback.format_exc(limit=3), flush=True)
            continue
        plans = sorted(plan(w) for _ in range(5))
        yield Launch(
            "flashinfer-tc" if tc else "flashinfer",
            lambda w=w: w.run(c.q, (p.k_pool, p.v_pool)),
            launch={"page_size": p.page_size},
            extra={"plan_us": plans[2] * 1e6, "first_plan_s": first},
        )


def decode_paged_launch(torch, q, k_pool, v_pool, kv_indptr, kv_indices, kv_last_page_len, page_size):
    """A Launch of `kernels.decode_paged.DecodeWorkspace` on this batch (the paged section's too)."""
    import time

    from attnlab.kernels.decode_paged import DecodeWorkspace

    hq, d = q.shape[1:]
    w = DecodeWorkspace(hq, k_pool.shape[2], d, page_size, k_pool.shape[0], q.dtype, q.device)

    def plan():
        t0 = time.perf_counter()
        how = w.plan(kv_indptr, kv_indices, kv_last_page_len)
        if q.is_cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0, how

    how = plan()[1]
    plan_us = sorted(plan()[0] for _ in range(5))[2] * 1e6
    return Launch(
        "decode_paged",
        lambda: w.run(q, k_pool, v_pool),
        launch={"decoder": how.pop("decoder")},
        extra={**how, "plan_us": plan_us},
    )


def _decode_paged(torch, c, ctx):
    if c.pool is not None:
        p = c.pool
        launch = decode_paged_launch(torch, c.q, p.k_pool, p.v_pool, p.indptr, p.indices, p.last, p.page_size)
        yield dataclasses.replace(launch, launch={"page_size": p.page_size, **launch.launch})


def _flashinfer(torch, c, ctx):
    if c.pool is not None:
        yield from flashinfer_decode(torch, c)


SECTION = Section(
    name="paged",
    doc=__doc__,
    fields=("batch", "context"),
    cases=((1, 32768), (16, 8192), (64, 4096), (256, 4096)),
    dry_cases=((2, 40), (1, 100)),
    shape=SHAPE,
    dry_shape=dict(heads=8, kv_heads=2, head_dim=32),
    inputs=_inputs,
    impls=(
        Impl("paged", _paged, ours=True),
        Impl("contiguous", _contiguous, ours=True),
        Impl("sdpa", _sdpa),
        Impl("decode_paged", _decode_paged, ours=True),
        Impl("flashinfer", _flashinfer, library="flashinfer"),
    ),
    options=(("--page-sizes", "page sizes, e.g. 16,1", int_list("page size"), (16, 1)),),
)


def main(argv=None) -> int:
    return section_main(SECTION, argv)


if __name__ == "__main__":
    sys.exit(main())
