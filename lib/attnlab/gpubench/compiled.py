"""What the compiler makes of our kernels' launches, without a GPU: each Triton launch of a call
caught instead of run, compiled for an H100 / H200 (sm_90, by the ptxas Triton ships), and read
back: registers, spilled bytes, shared memory, whether the products became wgmma, how many loads
became asynchronous copies, and the CTA barriers in the SASS.

    python -m attnlab.gpubench.compiled mla --launches auto,64x16x8x2
    python -m attnlab.gpubench.compiled mixed --launches auto,64x64x4x3
    python -m attnlab.gpubench.compiled decode --launches auto,64x4x3x2
    PYTHONPATH=DIR:lib python -m attnlab.gpubench.compiled gluon    # DIR: triton==3.6.0 alone

A launch compiles as the JIT would compile it on the GPU: the arguments specialised the same way
(pointers and integers divisible by 16 marked so, integers equal to 1 made constants), so a
launch that spills or stays on Ampere's mma here does so there, given the same Triton. It is a
filter before a GPU run, not a measurement: a launch that spills is dropped from a sweep, one
whose loads stay synchronous says why its loop cannot overlap copy and compute. The probes build
each kernel's inputs on the CPU at the section's real head shapes and a small batch (only the
shapes, dtypes and alignment reach the compiler).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile

from attnlab.gpubench.cli import Parser, launch_grid

__all__ = ["caught_launches", "compile_launch", "report", "PROBES", "main"]

#: an H100 / H200
SM = 90


@contextlib.contextmanager
def caught_launches():
    """Within: every `kernel[grid](*args, **kwargs)` of a Triton JIT function is recorded in the
    yielded list as (kernel, grid, args, kwargs) and not run (so a CPU can step through a
    launcher with real tensors and no interpreter)."""
    from triton.runtime.jit import JITFunction

    seen: list = []
    old = JITFunction.__getitem__

    def catch(self, grid):
        return lambda *args, **kwargs: seen.append((self, grid, args, kwargs))

    JITFunction.__getitem__ = catch
    try:
        yield seen
    finally:
        JITFunction.__getitem__ = old


def compile_launch(kernel, args, kwargs, sm: int = SM):
    """The compiled kernel of one caught launch, for sm_<sm>, specialised as the JIT specialises."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", sm, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, spec, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, spec, options)
    source = ASTSource
    if getattr(kernel, "is_gluon", lambda: False)():  # a Gluon kernel is lowered by its own source
        from triton.experimental.gluon._runtime import GluonASTSource as source
    return compile(source(kernel, signature, constexprs, attrs), target=target, options=options.__dict__)


def _tool(name: str) -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def report(compiled) -> dict:
    """What one compiled kernel is: its name, warps and stages, registers a thread, the stack
    bytes a thread (spills live there), shared memory (bytes), wgmma, mma or none (no product),
    asynchronous copies
    (cp.async) and TMA copies in its loop, and CTA barriers (BAR.SYNC) in its SASS."""
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(compiled.asm["cubin"])
    try:
        res = subprocess.run([_tool("cuobjdump"), "-res-usage", f.name], capture_output=True, text=True)
        sass = subprocess.run([_tool("cuobjdump"), "-sass", f.name], capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    use = re.search(r"REG:(\d+).*?STACK:(\d+)", res.stdout, re.S)
    if use is None:
        raise RuntimeError(f"cuobjdump gave no resource usage: {res.stdout[:200]} {res.stderr[:200]}")
    ir, md = compiled.asm["ttgir"], compiled.metadata
    return {
        "kernel": md.name,
        "num_warps": md.num_warps,
        "num_stages": md.num_stages,
        "registers": int(use.group(1)),
        "stack_bytes": int(use.group(2)),
        "shared_bytes": int(md.shared),
        "product": "wgmma" if "warp_group_dot" in ir else ("mma" if "tt.dot" in ir else "none"),
        "async_copies": ir.count("async_copy_global_to_local"),
        "tma_copies": len(re.findall(r"async_tma_copy|async_tma_gather", ir)),
        "barriers": len(re.findall(r"\bBAR\.SYNC", sass)),
    }


def _mla(launch):
    import torch

    from attnlab.gpubench import mla
    from attnlab.kernels.mla import MLAWorkspace

    sh, batch, n = mla.SHAPE, 2, 2048
    page, pages = sh["page"], 2 * -(-2048 // sh["page"])
    bf = dict(dtype=torch.bfloat16)
    w = MLAWorkspace(
        sh["heads"], sh["latent"], sh["rope"], page, pages, torch.bfloat16, "cpu", scale=mla.SCALE
    )
    i32 = dict(dtype=torch.int32)
    w.plan(
        torch.arange(0, pages + 1, pages // batch, **i32), torch.arange(pages, **i32),
        torch.full((batch,), n - page * (n // page - 1), **i32), **dict(zip(mla.LAUNCH, launch or ())),
    )  # fmt: skip
    q = lambda *s: torch.zeros(*s, **bf)  # noqa: E731
    w.run(q(batch, sh["heads"], sh["latent"]), q(batch, sh["heads"], sh["rope"]),
          q(pages, page, sh["latent"]), q(pages, page, sh["rope"]))  # fmt: skip


def _mixed(launch):
    import torch

    from attnlab.gpubench import mixed

    sh, page = mixed.SHAPE, mixed.PAGE
    q_lens, kv_lens = [512, 1, 1, 1], [512 + mixed.CACHED, 700, 3000, 90]
    b = mixed.paged_batch(torch, q_lens, kv_lens, sh, page, "cpu", seed=0)
    w, _ = mixed._planned(b, b.qo, b.indptr, b.indices, b.last, launch)
    w.run(b.q, b.k, b.v)


def _decode(launch):
    import torch

    from attnlab.gpubench import mixed
    from attnlab.kernels.paged import paged_decode

    sh = mixed.SHAPE
    b = mixed.paged_batch(torch, [1] * 4, [900, 5000, 130, 2400], sh, mixed.PAGE, "cpu", seed=0)
    block_n, num_warps, num_stages, loads = launch or (None,) * 4
    paged_decode(
        b.q, b.k, b.v, b.indptr, b.indices, b.last, page_size=b.page, block_n=block_n,
        num_warps=num_warps, num_stages=num_stages, prefetch=None if loads is None else loads == 2,
        ahead=loads == 3,
    )  # fmt: skip


def _gluon(launch):
    """flash_attention_gluon's causal launch of its default steps on 2 x 2K, 32 heads, d = 128;
    its device check is what stops a CPU, so it is passed by for the compile. The kernel is
    written against Triton 3.6's Gluon (the H200's); another Triton is refused by name."""
    import torch
    import triton

    if not triton.__version__.startswith("3.6."):
        raise RuntimeError(
            f"the Gluon kernel is written against Triton 3.6's Gluon API (the lent H200's); this is "
            f"Triton {triton.__version__}: install triton==3.6.0 into a folder of its own (pip install "
            f"--target DIR) and put DIR first on PYTHONPATH"
        )

    from attnlab.kernels import gluon_fa3

    q, k, v = (torch.zeros(2, 32, 2048, 128, dtype=torch.bfloat16) for _ in range(3))
    check, gluon_fa3._check_device = gluon_fa3._check_device, lambda *a: None
    try:
        stages, block_n, causal = launch or (None, None, 1)
        gluon_fa3.flash_attention_gluon(q, k, v, causal=bool(causal - 1) if launch else True,
                                        num_stages=stages, block_n=block_n)  # fmt: skip
    finally:
        gluon_fa3._check_device = check


#: name -> (what it compiles, the launch fields of --launches, a call of one launch (None: auto))
PROBES = {
    "mla": ("kernels.mla's MLA decode, DeepSeek-V3's shape", ("block_h", "block_n", "num_warps", "num_stages"), _mla),
    "mixed": ("kernels.paged_prefill on a mixed batch, Llama-3-8B's layer", ("block_r", "block_n", "num_warps", "num_stages"), _mixed),
    "gluon": ("kernels.gluon_fa3's prefill, its default steps, d = 128 (causal 1: off, 2: on)", ("num_stages", "block_n", "causal"), _gluon),
    "decode": ("kernels.paged's split-KV decode, Llama-3-8B's layer (loads 1: Triton's pipeline, 2: page ids a tile ahead, 3: ahead, by hand)", ("block_n", "num_warps", "num_stages", "loads"), _decode),
}  # fmt: skip


def main(argv=None) -> int:
    ap = Parser(prog="python -m attnlab.gpubench.compiled", description=__doc__.split("\n\n")[0])
    ap.add_argument("probe", choices=sorted(PROBES), help="what to compile")
    ap.add_argument(
        "--launches", default="auto", help="auto or the probe's launch fields joined by x, comma-separated"
    )
    args = ap.parse_args(argv)
    what, fields, call = PROBES[args.probe]
    try:
        launches = launch_grid(fields)(args.launches)
    except Exception as e:  # noqa: BLE001 - a usage error, said as argparse says it
        ap.error(f"argument --launches: {e}")
    print(f"{args.probe}: {what}; compiled for sm_{SM}, no GPU")
    for launch in launches:
        with caught_launches() as seen:
            try:
                call(launch)
            except RuntimeError as e:  # a probe that cannot compile here says why
                print(f"python -m attnlab.gpubench.compiled: error: {e}", file=sys.stderr)
                return 1
        for kernel, grid, a, kw in seen:
            r = report(compile_launch(kernel, a, kw))
            name = "auto" if launch is None else "x".join(map(str, launch))
            print(
                f"  {name:<12} {r['kernel']:<22} warps {r['num_warps']:>2} stages {r['num_stages']}  "
                f"regs {r['registers']:>3}  stack {r['stack_bytes']:>5} B  smem {r['shared_bytes'] // 1024:>3} KiB  "
                f"{r['product']:<5}  cp.async {r['async_copies']:>2}  tma {r['tma_copies']}  bar.sync {r['barriers']}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
