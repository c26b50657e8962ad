"""Prefill attention on a real GPU: this course's two kernels beside the libraries, and the model.

    python -m attnlab.gpubench.prefill --out prefill.json           # on a CUDA machine
    TRITON_INTERPRET=1 python -m attnlab.gpubench.prefill --dry      # tiny sizes on a CPU: the code path

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
- standard: Algorithm 0 in eager torch (S and P go to HBM), non-causal and N <= 8192 only.
Each output is checked against a float32 reference (max_err), then timed by CUDA-graph replay
(`time_per_call`, which poisons the output with NaN before the replay; events where a capture
fails). Each of our rows gets a verdict, within_rule: max_err <= 2 x the smaller SDPA backend's
max_err on the same inputs + 1e-3 (the kernel tests' rule). flops = 4 d per visible (query, key) pair;
bytes = the model's HBM traffic: Q, K, V read and O written once for the fused kernels,
`iomodel.standard_io` for Algorithm 0; model_us = max(flops / peak, bytes / bandwidth) with the
matmul and copy ceilings measured in the same run (the run's schema adds ratio_to_best). Each row is tried on its own (a failure drops it, with
a short traceback). FlashInfer, whose first call compiles, runs last.
"""

from __future__ import annotations

import sys

from attnlab.gpubench.core import ceilings, checked_time, flashinfer_last, header, try_peer

from attnlab.gpubench.reference import compiled_flex, reference
from attnlab.gpubench.cli import flashinfer_version, section_main, write_json
from attnlab.gpubench.paged import SHAPE
from attnlab.gpubench.variants import pairs

__all__ = ["run", "main"]

CASES = [(1, 4096), (1, 8192), (1, 16384), (2, 8192), (4, 4096)]
PEERS = ("ours", "sdpa", "flex", "standard", "flashinfer")
#: Rows that are this course's kernels; every other impl is a peer.
DRY = dict(cases=[(1, 40), (2, 33)], shape=dict(heads=4, kv_heads=2, head_dim=32))


def _ours(torch, c, add):
    from attnlab.kernels.fa2 import flash_attention_triton

    add("ours-fa2", lambda: flash_attention_triton(c.q, c.k, c.v, causal=c.causal))
    try:
        from attnlab.kernels.hopper import flash_attention_hopper
    except ImportError as e:
        print(f"  ours-hopper: {e}", flush=True)
        return
    add("ours-hopper", lambda: flash_attention_hopper(c.q, c.k, c.v, causal=c.causal))
    if not c.q.is_cuda or torch.cuda.get_device_capability(c.q.device) != (9, 0):
        return  # Gluon's kernel is sm_90 only, no interpreter
    from attnlab.kernels.gluon_fa3 import flash_attention_gluon

    add("ours-gluon", lambda: flash_attention_gluon(c.q, c.k, c.v, causal=c.causal)[0])


def _sdpa(torch, c, add):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sdpa = torch.nn.functional.scaled_dot_product_attention
    if not c.q.is_cuda:
        add("sdpa", lambda: sdpa(c.q, c.k, c.v, is_causal=c.causal, enable_gqa=True))
        return
    g = c.q.shape[1] // c.k.shape[1]
    for name, backend in (
        ("sdpa-flash", SDPBackend.FLASH_ATTENTION),
        ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION),
    ):

        def fn(k=c.k, v=c.v, gqa=True, backend=backend):
            with sdpa_kernel(backend):
                return sdpa(c.q, k, v, is_causal=c.causal, enable_gqa=gqa)

        try:
            fn()
            add(name, fn)
        except Exception as e:  # noqa: BLE001 - e.g. no GQA in this backend
            print(f"  {name} with enable_gqa: {type(e).__name__}: {str(e)[:100]}; K/V repeated", flush=True)
            kr, vr = (t.repeat_interleave(g, dim=1) for t in (c.k, c.v))
            add(name, lambda kr=kr, vr=vr, fn=fn: fn(kr, vr, False), kv_repeated=True)


def _flex(torch, c, add):
    from torch.nn.attention.flex_attention import create_block_mask

    if c.flex is None:  # one compiled function for the whole run
        c.flex = compiled_flex(torch)
    n_q, n_k = c.q.shape[2], c.k.shape[2]

    def causal_mask(b, h, q_idx, kv_idx):  # bottom-right aligned, as ours
        return kv_idx <= q_idx + (n_k - n_q)

    mask = create_block_mask(causal_mask, None, None, n_q, n_k, device=c.q.device) if c.causal else None
    add("flex", lambda: c.flex(c.q, c.k, c.v, block_mask=mask, enable_gqa=True))


def _standard(torch, c, add):
    if c.causal or c.k.shape[2] > 8192:
        return
    g = c.q.shape[1] // c.k.shape[1]
    kr, vr = (t.repeat_interleave(g, dim=1) for t in (c.k, c.v))

    def fn():
        s = torch.matmul(c.q * c.q.shape[-1] ** -0.5, kr.transpose(-1, -2))  # S to HBM
        return torch.matmul(torch.softmax(s, dim=-1), vr)  # P to HBM, then PV

    add("standard", fn)


def _flashinfer(torch, c, add):
    if c.q.shape[0] != 1:
        return
    import flashinfer

    q, k, v = (t[0].transpose(0, 1).contiguous() for t in (c.q, c.k, c.v))  # NHD (N, heads, d)
    for backend in ("fa2", "fa3"):

        def fn(backend=backend):
            o = flashinfer.single_prefill_with_kv_cache(q, k, v, causal=c.causal, backend=backend)
            return o.transpose(0, 1)[None]

        add(f"flashinfer-{backend}", fn)


def run(
    cases=CASES,
    peers=PEERS,
    *,
    dry: bool = False,
    out: str | None = None,
    seed: int = 0,
    ceil: dict | None = None,
) -> dict:
    import torch
    from types import SimpleNamespace

    from attnlab.core.iomodel import standard_io

    shape = DRY["shape"] if dry else SHAPE
    res = header(torch, shape)
    cuda = torch.cuda.is_available()
    res["ceilings"] = ceil or (
        ceilings(torch) if cuda else {"copy_bytes_per_s": 1e9, "bf16_matmul_flops": 1e10}
    )
    peak, bw = res["ceilings"]["bf16_matmul_flops"], res["ceilings"]["copy_bytes_per_s"]
    print(f"{res['device']}: torch {res['torch']}, triton {res['triton']}", flush=True)

    def save():
        write_json(out, res)

    c = SimpleNamespace(flex=None)
    hq, hkv, d = shape["heads"], shape["kv_heads"], shape["head_dim"]
    for phase in flashinfer_last(peers):
        if "flashinfer" in phase:
            ok, res["flashinfer"] = flashinfer_version()
            if not ok:
                print(f"flashinfer: {res['flashinfer']}", flush=True)
                continue
        for batch, n in cases:
            torch.manual_seed(seed + batch + n)
            dev = "cuda" if cuda else "cpu"
            c.q = torch.randn(batch, hq, n, d, device=dev, dtype=torch.bfloat16)
            c.k, c.v = (torch.randn(batch, hkv, n, d, device=dev, dtype=torch.bfloat16) for _ in "kv")
            for causal in (False, True):
                c.causal = causal
                flops = 4 * d * batch * hq * pairs(n, n, causal)
                fused = 2 * batch * d * (2 * hq * n + 2 * hkv * n)  # bf16 Q, O, K, V once
                ref = reference(torch, c.q, c.k, c.v, causal=causal)
                print(f"batch {batch} x N {n}, causal {causal}: {flops / 1e12:.2f} TFLOP", flush=True)

                def add(impl, fn, **extra):
                    got = checked_time(fn, ref, impl, calls=5, reps=7)
                    if got is None:
                        return
                    err, us, how = got
                    nbytes = batch * hq * int(standard_io(n, d)) * 2 if impl == "standard" else fused
                    model = max(flops / peak, nbytes / bw)
                    res["rows"].append(
                        {
                            "batch": batch,
                            "N": n,
                            "causal": causal,
                            "impl": impl,
                            **extra,
                            "us": us,
                            "timing": how,
                            "flops": flops,
                            "bytes": nbytes,
                            "tflops": flops / us * 1e-6,
                            "tb_per_s": nbytes / us * 1e-6,
                            "frac_peak": flops / us * 1e6 / peak,
                            "model_us": model * 1e6,
                            "model_bound": "memory" if nbytes / bw > flops / peak else "compute",
                            "max_err": err,
                        }
                    )
                    print(
                        f"  {impl:15s} {us:10.1f} us {flops / us * 1e-6:7.1f} TFLOP/s  err {err:.1e}  {how}",
                        flush=True,
                    )
                    save()

                for name in phase:
                    try_peer(
                        name,
                        {
                            "ours": _ours,
                            "sdpa": _sdpa,
                            "flex": _flex,
                            "standard": _standard,
                            "flashinfer": _flashinfer,
                        }[name],
                        torch,
                        c,
                        add,
                    )
                del ref
            del c.q, c.k, c.v
            if cuda:
                torch.cuda.empty_cache()
    _verdicts(res["rows"])
    save()
    return res


def _verdicts(rows) -> None:
    """within_rule on each of our rows: max_err <= 2 x the best SDPA backend's max_err on the same
    case + 1e-3 (None where no SDPA row ran)."""
    for r in rows:
        if r["impl"].startswith("ours"):
            sdpa = [
                x["max_err"]
                for x in rows
                if x["impl"].startswith("sdpa")
                and (x["batch"], x["N"], x["causal"]) == (r["batch"], r["N"], r["causal"])
            ]
            r["within_rule"] = r["max_err"] <= 2 * min(sdpa) + 1e-3 if sdpa else None


def main(argv=None) -> int:
    return section_main(
        "prefill",
        argv,
        __doc__,
        ("batch", "N"),
        CASES,
        DRY["cases"],
        lambda a, cases, peers: run(cases, peers, dry=a.dry, out=a.out),
        ("--peers", PEERS),
    )


if __name__ == "__main__":
    sys.exit(main())
