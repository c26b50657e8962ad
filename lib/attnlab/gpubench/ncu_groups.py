"""The calls each Nsight Compute group of `gpubench.ncu` profiles: (name, kernels it launches, fn)
for every call that can run here, one function a group (BUILDERS). `gpubench.ncu`'s docstring
says what each group is for and which recorded profile it made."""

from __future__ import annotations

__all__ = ["BUILDERS", "recorded_calls", "gluon_calls", "scheduled_calls", "gap_calls", "prefill_peers"]


def recorded_calls(torch, dry: bool = False) -> list:
    """The 2026-12-01 profile: decode (contiguous and paged, with and without the prefetch, beside
    FlashInfer) and the Hopper prefill beside FlashInfer's FA3 template and cuDNN."""
    from attnlab.gpubench.paged import pool
    from attnlab.kernels.decode import split_kv_decode, workspace
    from attnlab.kernels.hopper import flash_attention_hopper
    from attnlab.kernels.paged import paged_decode

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    hq, hkv, d = (4, 2, 32) if dry else (32, 8, 128)
    bf16 = dict(device=dev, dtype=torch.bfloat16)
    out = []
    decode = [(1, 64, 4, 2, 16)] if dry else [(1, 32768, 32, 32, 128), (16, 8192, 2, 4, 64)]
    for B, n, s_contig, s_paged, block_n in decode:
        torch.manual_seed(0)
        q = torch.randn(B, hq, d, **bf16)
        k, v = (torch.randn(B, hkv, n, d, **bf16) for _ in "kv")
        p = pool(torch, k, v, 16, 0)
        wc, wp, o = workspace(B, hq, d, s_contig, dev), workspace(B, hq, d, s_paged, dev), torch.empty_like(q)
        out.append(
            (
                f"contiguous {B}x{n} s{s_contig}",
                2,
                lambda q=q, k=k, v=v, s=s_contig, w=wc: split_kv_decode(q, k, v, s, ws=w),
            )
        )
        for pf in (False, True):
            out.append(
                (
                    f"paged ps16 {B}x{n} s{s_paged} bn{block_n} pf{int(pf)}",
                    2,
                    lambda q=q, p=p, s=s_paged, w=wp, o=o, bn=block_n, pf=pf: paged_decode(
                        q,
                        p.k_pool,
                        p.v_pool,
                        p.indptr,
                        p.indices,
                        p.last,
                        page_size=16,
                        splits=s,
                        out=o,
                        ws=w,
                        block_n=bn,
                        num_stages=None if dry else 2,
                        prefetch=pf,
                    ),
                )
            )
        if dev == "cuda":
            try:
                import flashinfer

                wrap = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                    torch.zeros(128 << 20, dtype=torch.uint8, device=dev), "NHD", use_tensor_cores=True
                )
                wrap.plan(
                    p.indptr,
                    p.indices,
                    p.last,
                    hq,
                    hkv,
                    d,
                    16,
                    pos_encoding_mode="NONE",
                    q_data_type=q.dtype,
                    kv_data_type=q.dtype,
                )
                out.append(
                    (
                        f"flashinfer-tc ps16 {B}x{n}",
                        2,
                        lambda w=wrap, q=q, p=p: w.run(q, (p.k_pool, p.v_pool)),
                    )
                )
            except Exception as e:  # noqa: BLE001 - FlashInfer absent
                print(f"left out: flashinfer decode ({type(e).__name__}: {str(e)[:100]})", flush=True)
    torch.manual_seed(0)
    N = 64 if dry else 4096
    q, k, v = (torch.randn(1, hq, N, d, **bf16) for _ in range(3))
    out.append((f"hopper 1x{N} non-causal", 1, lambda: flash_attention_hopper(q, k, v)))
    out.append((f"hopper 1x{N} causal", 1, lambda: flash_attention_hopper(q, k, v, causal=True)))
    if dev == "cuda":
        out += prefill_peers(torch, q, k, v, False, f"1x{N} non-causal")
    return out


def prefill_peers(torch, q, k, v, causal: bool, label: str, fa3: bool = True) -> list:
    """FlashInfer's FA3 template (batch 1: NHD copies made here, outside the timing; fa3=False
    leaves it out) and SDPA cuDNN (with GQA where q has more heads than k)."""
    out = []
    if fa3:
        try:
            import flashinfer

            qn, kn, vn = (t[0].transpose(0, 1).contiguous() for t in (q, k, v))
            out.append(
                (
                    f"flashinfer-fa3 {label}",
                    1,
                    lambda: flashinfer.single_prefill_with_kv_cache(qn, kn, vn, causal=causal, backend="fa3"),
                )
            )
        except Exception as e:  # noqa: BLE001 - FlashInfer absent
            print(f"left out: flashinfer prefill ({type(e).__name__}: {str(e)[:100]})", flush=True)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1]
            )

    out.append((f"sdpa-cudnn {label}", 1, cudnn))
    return out


def gluon_calls(torch, dry: bool) -> list:
    from attnlab.gpubench.sweeps.gluon import STEP_SETS
    from attnlab.kernels.gluon_fa3 import flash_attention_gluon

    if dry:
        return []  # Gluon kernels do not run under the interpreter
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 32, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = []
    for causal in (False, True):
        label = f"1x4096 {'causal' if causal else 'non-causal'}"
        for name, steps in (
            ("no_ws", STEP_SETS["no_ws"]),
            ("default", None),
            ("split_pp_ov", STEP_SETS["split_pp_ov"]),
        ):
            out.append(
                (
                    f"gluon {name} {label}",
                    1,
                    lambda c=causal, s=steps: flash_attention_gluon(q, k, v, causal=c, steps=s),
                )
            )
        out += prefill_peers(torch, q, k, v, causal, label)
    return out


def scheduled_calls(torch, dry: bool) -> list:
    """The plan-driven decoder's two kernels (items, merge) at batches 1 and 8 of the long-tailed
    recorded batches, balanced plan without and with the 128-token floor, eager launches."""
    import numpy as np

    from attnlab.gpubench import scheduled as S
    from attnlab.kernels.scheduled import ScheduledDecoder

    shape = S.DRY["shape"] if dry else S.SHAPE
    hq, hkv, d = shape["heads"], shape["kv_heads"], shape["head_dim"]
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    ctas = S.DRY["ctas"] if dry else S.CTAS_PER_SM * torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator().manual_seed(0)
    out = []
    for bsz in (1, 3) if dry else (1, 8):
        lens = S._lengths(bsz, dry)
        pages = int((-(-lens[:, 1] // S.PAGE_SIZE)).sum()) + 1
        k, v = (
            torch.randn(pages, S.PAGE_SIZE, hkv, d, generator=gen).to(device=dev, dtype=torch.bfloat16)
            for _ in "kv"
        )
        b = S._batch(torch, bsz, lens, pages, shape, dev, gen)
        for kind in ("balanced", "balanced-128"):
            plan = S._planner(kind, hkv, hq // hkv, ctas, S.CHUNK)(lens)
            dec = ScheduledDecoder(
                bsz,
                hq,
                hkv,
                d,
                ctas,
                int(np.bincount(plan.cta).max()),
                pages,
                S.PAGE_SIZE,
                torch.bfloat16,
                dev,
                max_outputs=plan.num_outputs,
            )
            dec.load(plan, b.q, b.indptr, b.indices, b.last)
            out.append(
                (
                    f"sched {kind} batch {bsz} ({len(plan.work)} items)",
                    2,
                    lambda dec=dec, k=k, v=v: dec.run(k, v),
                )
            )
    return out


def gap_calls(torch, dry: bool) -> list:
    """Where issue targets stayed short: `paged_decode` with its automatic split on the long-tailed
    recorded batches 4, 8 and 16 (split and merge kernels), and prefill at d = 64, batch 4 x 4K
    causal: the Gluon kernel's defaults, the Hopper kernel and cuDNN."""
    from attnlab.gpubench import scheduled as S
    from attnlab.kernels.paged import paged_decode

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    batches, pools, _ = S.setup(
        torch, [1, 3] if dry else [4, 8, 16], S.DRY["shape"] if dry else S.SHAPE, dev, dry=dry
    )
    out = [
        (
            f"paged auto ragged batch {b.q.shape[0]}",
            2,
            lambda b=b: paged_decode(
                b.q, pools.k, pools.v, b.indptr, b.indices, b.last, page_size=b.page_size
            ),
        )
        for b in batches
    ]
    if dry:
        return out  # Gluon kernels do not run under the interpreter
    from attnlab.kernels.gluon_fa3 import flash_attention_gluon
    from attnlab.kernels.hopper import flash_attention_hopper

    torch.manual_seed(0)
    q = torch.randn(4, 32, 4096, 64, device=dev, dtype=torch.bfloat16)
    k, v = (torch.randn(4, 8, 4096, 64, device=dev, dtype=torch.bfloat16) for _ in "kv")
    label = "4x4096 d64 causal"
    out.append((f"gluon default {label}", 1, lambda: flash_attention_gluon(q, k, v, causal=True)))
    out.append((f"hopper {label}", 1, lambda: flash_attention_hopper(q, k, v, causal=True)))
    return out + prefill_peers(torch, q, k, v, True, label, fa3=False)


#: group name -> the function that makes its calls
BUILDERS = {"recorded": recorded_calls, "gluon": gluon_calls, "scheduled": scheduled_calls, "gaps": gap_calls}
