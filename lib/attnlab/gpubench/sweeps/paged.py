"""Sweep `paged_decode`'s launch parameters on a real GPU, beside FlashInfer's tensor-core decode
in the same run: which split count, KV tile (block_n), warps and pipeline stages are fastest for
each batch x context and page size, and how far the best is from FlashInfer.

    python -m attnlab.gpubench.sweeps.paged --out sweep.json        # on a CUDA machine, ~2 minutes

Same shapes, data, pools and timer as `gpubench.paged` (Llama-3-8B decode, bf16, shuffled NHD pages,
CUDA-graph replay); each configuration is checked against the float32 reference before timing.
"""

from __future__ import annotations

import itertools
import json
import sys
import traceback

from attnlab.gpubench.core import time_per_call
from attnlab.gpubench.reference import reference
from attnlab.gpubench.paged import CASES, PAGE_SIZES, SHAPE, pool

__all__ = ["sweep", "main"]

SPLITS = {1: (16, 32, 64, 128), 16: (2, 4, 8, 16), 64: (1, 2, 4), 256: (1, 2, 4)}
BLOCK_N = (32, 64, 128)
WARPS = (4, 8)
STAGES = (2, 3)


def _flashinfer_us(torch, q, p):
    import flashinfer

    B, hq, d = q.shape
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        torch.zeros(128 << 20, dtype=torch.uint8, device=q.device), "NHD", use_tensor_cores=True
    )
    w.plan(
        p.indptr,
        p.indices,
        p.last,
        hq,
        p.k_pool.shape[2],
        d,
        p.page_size,
        pos_encoding_mode="NONE",
        q_data_type=q.dtype,
        kv_data_type=p.k_pool.dtype,
    )
    out = w.run(q, (p.k_pool, p.v_pool))
    return time_per_call(lambda: w.run(q, (p.k_pool, p.v_pool)), out)[0]


def sweep(cases=CASES, page_sizes=PAGE_SIZES, seed: int = 0) -> list[dict]:
    import torch

    from attnlab.kernels.paged import paged_decode

    rows = []
    hq, hkv, d = SHAPE["heads"], SHAPE["kv_heads"], SHAPE["head_dim"]
    for batch, ctx in cases:
        torch.manual_seed(seed)
        q = torch.randn(batch, hq, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, hkv, ctx, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        ref = reference(torch, q, k, v)
        for ps in page_sizes:
            p = pool(torch, k, v, ps, seed)
            try:
                fi = _flashinfer_us(torch, q, p)
            except Exception:  # noqa: BLE001
                print(traceback.format_exc(limit=2), flush=True)
                fi = None
            best = None
            out = torch.empty_like(q)
            for s, bn, nw, st in itertools.product(SPLITS.get(batch, (1, 2, 4)), BLOCK_N, WARPS, STAGES):

                def fn(s=s, bn=bn, nw=nw, st=st):
                    return paged_decode(
                        q,
                        p.k_pool,
                        p.v_pool,
                        p.indptr,
                        p.indices,
                        p.last,
                        page_size=ps,
                        splits=s,
                        out=out,
                        block_n=bn,
                        num_warps=nw,
                        num_stages=st,
                    )

                try:
                    o = fn()
                    err = float((o.float() - ref).abs().max())
                    if not err < 5e-2:
                        raise ValueError(f"max error {err}")
                    us = time_per_call(fn, o.clone())[0]
                except Exception as e:  # noqa: BLE001
                    print(
                        f"  {batch}x{ctx} ps={ps} splits={s} block_n={bn} warps={nw} stages={st}: {e}",
                        flush=True,
                    )
                    continue
                row = dict(
                    batch=batch,
                    context=ctx,
                    page_size=ps,
                    splits=s,
                    block_n=bn,
                    num_warps=nw,
                    num_stages=st,
                    us=us,
                    max_err=err,
                    flashinfer_tc_us=fi,
                )
                rows.append(row)
                if best is None or us < best["us"]:
                    best = row
            if best:
                ratio = f"{fi / best['us']:.3f}" if fi else "-"
                print(
                    f"{batch:>4} x {ctx:>6} ps={ps:>2}: best {best['us']:8.1f} us (splits {best['splits']}, "
                    f"block_n {best['block_n']}, warps {best['num_warps']}, stages {best['num_stages']}); "
                    f"flashinfer-tc {fi or float('nan'):8.1f} us; flashinfer / ours = {ratio}",
                    flush=True,
                )
    return rows


def main(argv=None) -> int:
    from attnlab.gpubench.cli import Parser, describe, need_gpu, out_path

    ap = Parser(prog="python -m attnlab.gpubench.sweeps.paged", description=describe(__doc__))
    ap.add_argument("--out", type=out_path, help="write every timed configuration as JSON here")
    args = ap.parse_args(argv)
    need_gpu(ap, False, "no CUDA GPU here: this sweep times the kernels on one and has no CPU path")
    rows = sweep()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
