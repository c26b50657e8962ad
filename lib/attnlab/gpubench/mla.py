"""MLA decode on DeepSeek-V3's shape: `kernels.mla.mla_decode` against FlashInfer's
`BatchMLAPagedAttentionWrapper` (its FA3 backend and its own choice, "auto") on the same paged
latent cache (issue 28; notebook 06 predicts this form compute-bound on an H200).

    python -m attnlab.gpubench.mla --out mla.json     # on a CUDA machine
    python -m attnlab.gpubench.mla --dry              # tiny sizes on a CPU: the code path

A case is (batch, kv): `batch` requests of `kv` cached tokens each, one query token each; 128
heads, latent 512, rope 64, bf16, pages of 64 tokens from a shuffled pool, scale 1/sqrt(192).
Each answer is checked against the float32 reference from the pages, then timed by CUDA-graph
replay; FlashInfer's wrappers are planned outside the timing. FLOPs count both products of the
absorbed form (q . [ckv, kpe] and p . ckv); bytes, the latent cache read once (both as
`core.mla.mla_decode_cost("absorbed")` counts them, notebook 06's numbers). Each row adds the
roofline's time at the datasheet and at the run's own ceilings, the roof that bounds it, and the
measured time over each (`_model`).
"""

from __future__ import annotations

import math
import sys
from types import SimpleNamespace


from attnlab.gpubench.cli import launch_grid, section_main
from attnlab.gpubench.declare import Impl, Launch, Section

__all__ = ["SECTION", "CASES", "LAUNCH", "main"]

CASES = tuple((b, n) for b in (1, 8, 32, 128) for n in (1024, 8192, 32768))
SHAPE = {"heads": 128, "latent": 512, "rope": 64, "page": 64}
DRY_SHAPE = {"heads": 4, "latent": 32, "rope": 16, "page": 4}
SCALE = 1 / math.sqrt(192)  # DeepSeek-V3: 128 non-rotary + 64 rotary dims before absorption


def _reference(torch, c):
    out = torch.empty(c.q_nope.shape, dtype=torch.float32, device=c.q_nope.device)
    ptr = c.indptr.tolist()
    for b, n in enumerate(c.lens):
        pages = c.indices[ptr[b] : ptr[b + 1]].long()
        ckv = c.ckv[pages].reshape(-1, c.ckv.shape[-1])[:n].float()
        kpe = c.kpe[pages].reshape(-1, c.kpe.shape[-1])[:n].float()
        s = (c.q_nope[b].float() @ ckv.T + c.q_pe[b].float() @ kpe.T) * SCALE
        out[b] = torch.softmax(s, -1) @ ckv
    return out


def _inputs(torch, case, ctx):
    batch, n = case
    sh = ctx.shape
    gen = torch.Generator().manual_seed(ctx.seed + batch + n)
    page = sh["page"]
    pages = -(-n // page)
    num = batch * pages + 2
    bf, i32 = dict(dtype=torch.bfloat16, device=ctx.device), dict(dtype=torch.int32, device=ctx.device)
    c = SimpleNamespace(
        case={"batch": batch, "kv": n},
        lens=[n] * batch,
        page=page,
        q_nope=torch.randn(batch, sh["heads"], sh["latent"], generator=gen).to(**bf),
        q_pe=torch.randn(batch, sh["heads"], sh["rope"], generator=gen).to(**bf),
        ckv=torch.randn(num, page, sh["latent"], generator=gen).to(**bf),
        kpe=torch.randn(num, page, sh["rope"], generator=gen).to(**bf),
        indices=torch.randperm(num, generator=gen)[: batch * pages].to(**i32),
        indptr=torch.arange(0, batch * pages + 1, pages, **i32),
        last=torch.full((batch,), n - page * (pages - 1), **i32),
        qo=torch.arange(batch + 1, **i32),
        kv_len=torch.full((batch,), n, **i32),
    )
    c.ref = _reference(torch, c)
    h, L, R = sh["heads"], sh["latent"], sh["rope"]
    c.flop = batch * n * h * (2 * (L + R) + 2 * L)
    c.bytes = batch * n * (L + R) * 2 + 2 * c.q_nope.numel() * 2 + c.q_pe.numel() * 2
    c.extra = {"heads": h}
    yield c


#: the datasheet the model reads (notebook 06's verdict is this GPU's)
GPU = "H200-SXM"


def _model(c, launch, us, ctx) -> dict:
    """What an MLA row adds: the roofline's time, max(FLOPs / peak, bytes / bandwidth), at the
    datasheet and at the run's own ceilings (its bf16 matmul rate and copy bandwidth), which roof
    bounds it there, and the measured time over each."""
    from attnlab.machine.hardware import get_gpu, peak

    g, ceil = get_gpu(GPU), ctx.ceilings
    sheet = (c.flop / peak(g, "bf16"), c.bytes / g.hbm_bandwidth)
    run = (c.flop / ceil["bf16_matmul_flops"], c.bytes / ceil["copy_bytes_per_s"])
    return {
        "model_us": max(sheet) * 1e6,
        "model_bound": "compute" if sheet[0] >= sheet[1] else "memory",
        "model_us_measured": max(run) * 1e6,
        "model_bound_measured": "compute" if run[0] >= run[1] else "memory",
        "over_model": us / (max(sheet) * 1e6),
        "over_model_measured": us / (max(run) * 1e6),
    }


#: our launch choices a --launches entry names, in order (None: the kernel's own)
LAUNCH = ("block_h", "block_n", "num_warps", "num_stages")


def _ours(torch, c, ctx):
    """An MLAWorkspace per --launches entry, planned outside the timing as FlashInfer's is."""
    from attnlab.kernels.mla import MLAWorkspace

    h, L, R = c.q_nope.shape[1], c.q_nope.shape[2], c.q_pe.shape[2]
    for launch in ctx.options.launches:
        w = MLAWorkspace(h, L, R, c.page, c.ckv.shape[0], c.q_nope.dtype, c.q_nope.device, scale=SCALE)
        how = w.plan(c.indptr, c.indices, c.last, **dict(zip(LAUNCH, launch or ())))
        yield Launch(
            "ours",
            lambda w=w: w.run(c.q_nope, c.q_pe, c.ckv, c.kpe)[0],
            launch=dict(zip(LAUNCH, launch)) if launch else {},
            extra=how,
        )


def _flashinfer(torch, c, ctx):
    """BatchMLAPagedAttentionWrapper with the FA3 backend and with "auto", each planned once (the
    CSR form of its plan: qo_indptr, kv_indptr, kv_indices, kv_len_arr)."""
    if c.q_nope.device.type != "cuda":
        return
    import flashinfer

    for backend in ("fa3", "auto"):
        buf = torch.zeros(256 << 20, dtype=torch.uint8, device=c.q_nope.device)
        w = flashinfer.mla.BatchMLAPagedAttentionWrapper(buf, backend=backend)
        w.plan(
            qo_indptr=c.qo, kv_indptr=c.indptr, kv_indices=c.indices, kv_len_arr=c.kv_len,
            num_heads=c.q_nope.shape[1], head_dim_ckv=c.ckv.shape[-1], head_dim_kpe=c.kpe.shape[-1],
            page_size=c.page, causal=False, sm_scale=SCALE, q_data_type=c.q_nope.dtype,
            kv_data_type=c.ckv.dtype,
        )  # fmt: skip
        yield Launch(
            f"flashinfer-{backend}",
            lambda w=w: w.run(q_nope=c.q_nope, q_pe=c.q_pe, ckv_cache=c.ckv, kpe_cache=c.kpe),
        )


SECTION = Section(
    name="mla",
    doc=__doc__,
    fields=("batch", "kv"),
    cases=CASES,
    dry_cases=((2, 9), (1, 20)),
    shape=SHAPE,
    dry_shape=DRY_SHAPE,
    inputs=_inputs,
    impls=(Impl("ours", _ours, ours=True), Impl("flashinfer", _flashinfer, library="flashinfer")),
    extra=_model,
    tolerance=0.05,  # max |error|, bf16 inputs against the float32 reference
    settings=lambda ctx: {"scale": "1/sqrt(192)", "page_size": ctx.shape["page"], "model_gpu": GPU},
    options=(
        (
            "--launches",
            "our launches, comma-separated: auto (the kernel's choice) or block_h x block_n x "
            "num_warps x num_stages",
            launch_grid(LAUNCH),
            (None,),
        ),
    ),
)


def main(argv=None) -> int:
    return section_main(SECTION, argv)


if __name__ == "__main__":
    sys.exit(main())
