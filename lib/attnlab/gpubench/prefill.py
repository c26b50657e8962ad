"""Prefill attention on a real GPU: this course's kernels beside the libraries, and the model.

    python -m attnlab.gpubench.prefill --out prefill.json           # on a CUDA machine
    python -m attnlab.gpubench.prefill --dry                         # tiny sizes on a CPU: the code path

A Llama-3-8B-shaped layer (32 query heads, 8 KV heads, d = 128, bf16), causal and not, for each
batch x N. Implementations, all on the same inputs in the same run:
- ours-fa2: `kernels.fa2.flash_attention_triton`, notebook 03's readable FlashAttention-2 kernel;
- ours-hopper: `kernels.hopper.flash_attention_hopper`, the same algorithm with Hopper's tricks;
- ours-gluon: `kernels.gluon_fa3.flash_attention_gluon`, FA3's structure written in Gluon (sm_90
  only: Gluon kernels do not run under the interpreter, so this row is the kernel's GPU check);
- sdpa-flash, sdpa-cudnn: torch SDPA with that backend forced (enable_gqa; K/V repeated outside the
  timing where a backend refuses GQA, marked kv_repeated);
- flex: `torch.compile(flex_attention)`, causal as a BlockMask built once outside the timing;
- flashinfer-fa2, flashinfer-fa3: `flashinfer.single_prefill_with_kv_cache` with that backend
  (batch 1 only: it is a single-request API), NHD copies made outside the timing;
- flashinfer-batch-fa3: `flashinfer.BatchPrefillWithRaggedKVCacheWrapper(backend="fa3")`, planned
  outside the timing, at every batch: FlashInfer's FA3 as a server calls it on a batch, the
  strongest peer above batch 1;
- standard: Algorithm 0 in eager torch (S and P go to HBM), non-causal and N <= 8192 only; kept
  beside the others but not ranked.
Each output is checked against a float32 reference (error), then timed by CUDA-graph replay
(gpubench.core.measure, the loop every section shares). Each of our rows gets a verdict,
within_rule: error <= 2 x the smaller SDPA backend's error on the same inputs + 1e-3 (the kernel
tests' rule). flop = 4 d per visible (query, key) pair; bytes = the model's HBM traffic: Q, K, V
read and O written once for the fused kernels, `iomodel.standard_io` for Algorithm 0; model_us =
max(flop / peak, bytes / bandwidth) with the matmul and copy ceilings measured in the same run.
FlashInfer, whose first call compiles, runs last.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

from attnlab.gpubench.cli import section_main
from attnlab.gpubench.declare import Impl, Launch, Section
from attnlab.gpubench.paged import SHAPE
from attnlab.gpubench.reference import compiled_flex, reference
from attnlab.gpubench.variants import pairs

__all__ = [
    "SECTION",
    "inputs",
    "masked_pair",
    "sdpa_prefill",
    "flashinfer_prefill",
    "flashinfer_batch_prefill",
    "model_columns",
    "verdicts",
    "main",
]

DRY_SHAPE = dict(heads=4, kv_heads=2, head_dim=32)


def masked_pair(torch, seed: int, shape: tuple, device, case: dict):
    """bf16 Q (batch, hq, n, d) and K, V (batch, hkv, n, d) drawn from `seed`, as two cases: without
    a mask, then causal, each with its float32 reference, its FLOPs (4 d per visible pair) and a
    fused kernel's bytes (Q, O, K, V once); `case` names the shape, its "causal" added."""
    batch, hq, hkv, n, d = shape
    torch.manual_seed(seed)
    q = torch.randn(batch, hq, n, d, device=device, dtype=torch.bfloat16)
    k, v = (torch.randn(batch, hkv, n, d, device=device, dtype=torch.bfloat16) for _ in "kv")
    for causal in (False, True):
        yield SimpleNamespace(
            q=q,
            k=k,
            v=v,
            causal=causal,
            case={**case, "causal": causal},
            ref=reference(torch, q, k, v, causal=causal),
            flop=4 * d * batch * hq * pairs(n, n, causal),
            bytes=2 * batch * d * (2 * hq * n + 2 * hkv * n),
        )


def inputs(torch, case, ctx):
    """One batch x N's Q, K, V (seeded by the case), without a mask, then causal (`masked_pair`)."""
    batch, n = case
    hq, hkv, d = ctx.shape["heads"], ctx.shape["kv_heads"], ctx.shape["head_dim"]
    shape = (batch, hq, hkv, n, d)
    yield from masked_pair(torch, ctx.seed + batch + n, shape, ctx.device, {"batch": batch, "N": n})


def _ours(torch, c, ctx):
    from attnlab.kernels.fa2 import flash_attention_triton

    yield Launch("ours-fa2", lambda: flash_attention_triton(c.q, c.k, c.v, causal=c.causal))
    from attnlab.kernels.hopper import flash_attention_hopper  # a Triton without TMA: fa2's row stays

    yield Launch("ours-hopper", lambda: flash_attention_hopper(c.q, c.k, c.v, causal=c.causal))
    if c.q.is_cuda and torch.cuda.get_device_capability(c.q.device) == (9, 0):
        from attnlab.kernels.gluon_fa3 import flash_attention_gluon  # sm_90 only, no interpreter

        yield Launch("ours-gluon", lambda: flash_attention_gluon(c.q, c.k, c.v, causal=c.causal)[0])


def sdpa_prefill(torch, c, ctx, backends=("flash", "cudnn")):
    """torch SDPA with each of `backends` forced, as Launches (on a CPU: one "sdpa" row, torch's
    choice). A backend that refuses GQA runs on K/V repeated outside the timing, marked so."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sdpa = torch.nn.functional.scaled_dot_product_attention
    if not c.q.is_cuda:
        yield Launch("sdpa", lambda: sdpa(c.q, c.k, c.v, is_causal=c.causal, enable_gqa=True))
        return
    g = c.q.shape[1] // c.k.shape[1]
    forced = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    for name in backends:

        def fn(k=c.k, v=c.v, gqa=True, backend=forced[name]):
            with sdpa_kernel(backend):
                return sdpa(c.q, k, v, is_causal=c.causal, enable_gqa=gqa)

        try:
            fn()
            launch = Launch(f"sdpa-{name}", fn)
        except Exception as e:  # noqa: BLE001 - e.g. no GQA in this backend
            print(
                f"  sdpa-{name} with enable_gqa: {type(e).__name__}: {str(e)[:100]}; K/V repeated", flush=True
            )
            kr, vr = (t.repeat_interleave(g, dim=1) for t in (c.k, c.v))
            launch = Launch(
                f"sdpa-{name}", lambda kr=kr, vr=vr, fn=fn: fn(kr, vr, False), extra={"kv_repeated": True}
            )
        yield launch


def _flex(torch, c, ctx):
    from torch.nn.attention.flex_attention import create_block_mask

    if "flex" not in ctx.state:  # one compiled function for the whole run
        ctx.state["flex"] = compiled_flex(torch)
    flex, n_q, n_k = ctx.state["flex"], c.q.shape[2], c.k.shape[2]

    def causal_mask(b, h, q_idx, kv_idx):  # bottom-right aligned, as ours
        return kv_idx <= q_idx + (n_k - n_q)

    mask = create_block_mask(causal_mask, None, None, n_q, n_k, device=c.q.device) if c.causal else None
    yield Launch("flex", lambda: flex(c.q, c.k, c.v, block_mask=mask, enable_gqa=True))


def _standard(torch, c, ctx):
    from attnlab.core.iomodel import standard_io

    (batch, hq, n, d), g = c.q.shape, c.q.shape[1] // c.k.shape[1]
    if c.causal or n > 8192:
        return
    kr, vr = (t.repeat_interleave(g, dim=1) for t in (c.k, c.v))

    def fn():
        s = torch.matmul(c.q * d**-0.5, kr.transpose(-1, -2))  # S to HBM
        return torch.matmul(torch.softmax(s, dim=-1), vr)  # P to HBM, then PV

    yield Launch("standard", fn, extra={"bytes": batch * hq * int(standard_io(n, d)) * 2})


def flashinfer_prefill(torch, c, ctx, backends=("fa2", "fa3")):
    """`flashinfer.single_prefill_with_kv_cache` with each of `backends`, as Launches, on NHD
    copies made outside the timing; batch 1 only (a single-request API)."""
    if c.q.shape[0] != 1:
        return
    import flashinfer

    q, k, v = (t[0].transpose(0, 1).contiguous() for t in (c.q, c.k, c.v))  # NHD (N, heads, d)
    for backend in backends:

        def fn(backend=backend):
            o = flashinfer.single_prefill_with_kv_cache(q, k, v, causal=c.causal, backend=backend)
            return o.transpose(0, 1)[None]

        yield Launch(f"flashinfer-{backend}", fn)


def flashinfer_batch_prefill(torch, c, ctx, backends=("fa3",)):
    """`flashinfer.BatchPrefillWithRaggedKVCacheWrapper` with each of `backends`, as Launches: the
    batch's requests back to back in NHD rows (copies made outside the timing), planned once per
    case outside the timing, as a server plans once per batch and runs every layer."""
    import flashinfer

    batch, hq, n, d = c.q.shape
    hkv = c.k.shape[1]
    q, k, v = (
        t.transpose(1, 2).reshape(batch * t.shape[2], t.shape[1], d).contiguous() for t in (c.q, c.k, c.v)
    )
    qo = torch.arange(batch + 1, dtype=torch.int32, device=c.q.device) * n
    kv = torch.arange(batch + 1, dtype=torch.int32, device=c.q.device) * c.k.shape[2]
    for backend in backends:
        ws = torch.empty(128 << 20, dtype=torch.uint8, device=c.q.device)
        w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend=backend)
        w.plan(qo, kv, hq, hkv, d, causal=c.causal, q_data_type=c.q.dtype, kv_data_type=c.k.dtype)

        def fn(w=w):
            return w.run(q, k, v).view(batch, n, hq, d).transpose(1, 2)

        yield Launch(f"flashinfer-batch-{backend}", fn)


def _flashinfer(torch, c, ctx):
    """FlashInfer's single-request FA2 and FA3 (batch 1), then its batch wrapper's FA3."""
    yield from flashinfer_prefill(torch, c, ctx)
    yield from flashinfer_batch_prefill(torch, c, ctx)


def model_columns(c, launch, us, ctx) -> dict:
    """What a prefill row adds: the share of the matmul ceiling reached, and the model's time
    max(flop / peak, bytes / bandwidth) with the bound that sets it."""
    peak, bw = ctx.ceilings["bf16_matmul_flops"], ctx.ceilings["copy_bytes_per_s"]
    nbytes = launch.extra.get("bytes", c.bytes)
    return {
        "frac_peak": c.flop / us * 1e6 / peak,
        "model_us": max(c.flop / peak, nbytes / bw) * 1e6,
        "model_bound": "memory" if nbytes / bw > c.flop / peak else "compute",
    }


def verdicts(rows) -> None:
    """within_rule on each of our rows (in extra): error <= 2 x the smaller SDPA backend's error
    on the same case + 1e-3 (None where no SDPA row ran)."""
    for r in rows:
        if r["ours"]:
            sdpa = [x["error"] for x in rows if x["impl"].startswith("sdpa") and x["what"] == r["what"]]
            r["extra"]["within_rule"] = r["error"] <= 2 * min(sdpa) + 1e-3 if sdpa else None


SECTION = Section(
    name="prefill",
    doc=__doc__,
    fields=("batch", "N"),
    cases=((1, 4096), (1, 8192), (1, 16384), (2, 8192), (4, 4096)),
    dry_cases=((1, 40), (2, 33)),
    shape=SHAPE,
    dry_shape=DRY_SHAPE,
    inputs=inputs,
    impls=(
        Impl("ours", _ours, ours=True),
        Impl("sdpa", sdpa_prefill),
        Impl("flex", _flex),
        Impl("standard", _standard, ranked=False),
        Impl("flashinfer", _flashinfer, library="flashinfer"),
    ),
    extra=model_columns,
    timing=dict(calls=5, reps=7),
    settings=lambda ctx: {"ceilings": ctx.ceilings},
    finish=verdicts,
)


def main(argv=None) -> int:
    return section_main(SECTION, argv)


if __name__ == "__main__":
    sys.exit(main())
