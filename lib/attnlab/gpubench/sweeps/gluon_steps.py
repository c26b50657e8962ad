"""The Gluon sweep's three declarations, run by `gpubench.core.measure`, the loop every section
shares, on the step sets and cases of `sweeps.gluon_sets`: SMOKE (small odd shapes and the
variants' edges, every set checked), FULL (every set beside `kernels.hopper` and SDPA's cuDNN and
flash backends) and LADDER (FA3's steps added one at a time beside cuDNN, each case's launches
timed round-robin REPEATS times, so that the run measures its own noise). The table of step sets
a run measures is its option `sets` (`TABLES[mode][name]`).

Every launch is checked against the float32 reference of `gpubench.reference` (o) and against
`lse_reference` (`lse_error`: the same lse where a row sees a key, -inf exactly where it sees
none); the kernel runs twice for its check, its first output poisoned with NaN, so that the
second must write every element. In FULL and LADDER each of our rows gets the prefill section's
verdict (`gpubench.prefill.verdicts`), extra["within_rule"]: its error within 2 x the smaller SDPA
backend's error on the same case + 1e-3 (the kernel tests' rule); SDPA's launches are the prefill
section's too. flop = 4 B H N_q N_k d, halved when causal (the recorded step files' count). Gluon
kernels run on an sm_90 GPU only: elsewhere (a dry run on a CPU) the gluon implementation has no
launches and the peers run alone.
"""

from __future__ import annotations

from types import SimpleNamespace

from attnlab.gpubench.declare import Impl, Launch, Section
from attnlab.gpubench.prefill import sdpa_prefill, verdicts
from attnlab.gpubench.reference import reference
from attnlab.gpubench.sweeps.gluon_sets import FULL_CASES, LADDER_CASES, REPEATS, SMOKE_CASES, TABLES

__all__ = [
    "LSE_TOLERANCE",
    "lse_reference",
    "lse_error",
    "SMOKE",
    "FULL",
    "LADDER",
]

#: the largest |lse - reference| a launch may have where its row sees a key
LSE_TOLERANCE = 1e-2


def lse_reference(torch, q, k, causal=False, soft_cap=None, window=0):
    """float32 natural-log lse (B, hq, n_q) of q (B, hq, n_q, d) over k (B, hkv, n_k, d), -inf for
    a row that sees no key; causal (bottom-right), soft cap and window as `gpubench.reference.
    reference` applies them (a few rows of one KV head's query group at a time)."""
    B, hq, n_q, d = q.shape
    hkv, n_k = k.shape[1], k.shape[2]
    g = hq // hkv
    lse = torch.empty((B, hq, n_q), dtype=torch.float32, device=q.device)
    rows = max(1, (1 << 26) // (g * n_k))
    kv_idx = torch.arange(n_k, device=q.device)[None, :]
    for b in range(B):
        for h in range(hkv):
            kf = k[b, h].float()
            for i in range(0, n_q, rows):
                s = q[b, h * g : (h + 1) * g, i : i + rows].float() @ kf.T / d**0.5
                if soft_cap:
                    s = soft_cap * torch.tanh(s / soft_cap)
                q_idx = torch.arange(i, i + s.shape[1], device=q.device)[:, None] + n_k - n_q
                hidden = torch.zeros_like(s[0], dtype=torch.bool)
                if causal or window:
                    hidden |= kv_idx > q_idx
                if window:
                    hidden |= kv_idx <= q_idx - window
                lse[b, h * g : (h + 1) * g, i : i + rows] = torch.logsumexp(
                    s.masked_fill(hidden, -torch.inf), -1
                )
    return lse


def lse_error(lse, want, tolerance: float = LSE_TOLERANCE) -> float:
    """max |lse - want| over the rows that see a key (`want` finite), 0.0 where none does; a
    ValueError when `lse` has a NaN, when its -inf rows are not exactly `want`'s, or when the
    error is over `tolerance`."""
    lse = lse.float()
    if bool(lse.isnan().any()):
        raise ValueError("the lse has NaN")
    none = want.isneginf()
    if not bool((lse.isneginf() == none).all()):
        raise ValueError("the lse's -inf rows (rows that see no key) are not the reference's")
    err = (lse[~none] - want[~none]).abs().max().item() if bool((~none).any()) else 0.0
    if not err <= tolerance:
        raise ValueError(f"lse error {err:.2e} is over {tolerance}")
    return err


def _case(torch, ctx, shape: tuple, case: dict, qkv=None):
    """One Case of `case` (its causal flag, soft cap and window, None or absent: off): q, k, v
    (given, or drawn from one generator seeded ctx.seed: q, then k, then v), the float32 o and lse,
    the flop count."""
    B, H, hkv, nq, nk, d = shape
    if qkv is None:
        g = torch.Generator(device=ctx.device).manual_seed(ctx.seed)
        qkv = tuple(
            torch.randn((B, h, n, d), generator=g, device=ctx.device, dtype=torch.bfloat16)
            for h, n in ((H, nq), (hkv, nk), (hkv, nk))
        )
    q, k, v = qkv
    causal, cap, w = case["causal"], case.get("soft_cap"), case.get("window") or 0
    mask = dict(causal=causal or w > 0, soft_cap=cap, window=w)
    return SimpleNamespace(
        q=q,
        k=k,
        v=v,
        causal=causal,
        soft_cap=cap,
        window=w or None,
        ref=reference(torch, q, k, v, **mask),
        lse=lse_reference(torch, q, k, **mask),
        case=case,
        flop=4 * B * H * nq * nk * d / (2 if causal else 1),
        bytes=None,
    )


def _smoke_inputs(torch, case, ctx):
    B, H, hkv, nq, nk, d, causal, cap, w = case
    named = dict(batch=B, heads=H, kv_heads=hkv, N_q=nq, N_k=nk, head_dim=d)
    named.update(causal=causal, soft_cap=cap or None, window=w or None)
    yield _case(torch, ctx, (B, H, hkv, nq, nk, d), named)


def _prefill_inputs(torch, case, ctx):
    """(B, H, N, d): no GQA, N_q = N_k; the same q, k, v without a mask, then causal."""
    B, H, N, d = case
    qkv = None
    for causal in (False, True):
        c = _case(torch, ctx, (B, H, H, N, N, d), dict(batch=B, heads=H, N=N, head_dim=d, causal=causal), qkv)
        qkv = (c.q, c.k, c.v)
        yield c


def _gluon(torch, c, ctx):
    """Our kernel at each step set of the table the run was given (ctx.options.sets) that runs at
    this head dim: its check poisons the first output, holds the lse to the reference and keeps
    what ran (the steps, the ring's stages, the key tile) and the lse error in the row's extra;
    the timed call is the plain launch."""
    if c.q.device.type != "cuda" or torch.cuda.get_device_capability(c.q.device) != (9, 0):
        return  # Gluon kernels run on sm_90 only, not under the interpreter
    from attnlab.kernels.gluon_fa3 import flash_attention_gluon

    d = c.q.shape[3]
    for name, (steps, stages, block_n, dims) in ctx.options.sets.items():
        if d not in dims:
            continue
        kw = dict(causal=c.causal, soft_cap=c.soft_cap, window=c.window)
        kw.update(steps=steps, num_stages=stages, block_n=block_n)
        extra: dict = {}

        def checked(kw=kw, extra=extra):
            o, lse = flash_attention_gluon(c.q, c.k, c.v, **kw)
            o.fill_(float("nan"))
            lse.fill_(float("nan"))  # poisoned: the next call must write every element
            del o, lse
            report: dict = {}
            o, lse = flash_attention_gluon(c.q, c.k, c.v, report=report, **kw)
            extra.update(
                steps_run=list(report["steps"]),
                num_stages=report["config"]["stages"],
                block_n=report["config"]["block_n"],
                lse_error=lse_error(lse, c.lse),
            )
            return o

        yield Launch(
            "gluon",
            checked,
            launch={"steps": name},
            extra=extra,
            timed=lambda kw=kw: flash_attention_gluon(c.q, c.k, c.v, **kw)[0],
        )


def _hopper(torch, c, ctx):
    from attnlab.kernels.hopper import flash_attention_hopper

    yield Launch("hopper", lambda: flash_attention_hopper(c.q, c.k, c.v, causal=c.causal))


def _sdpa(*backends):
    return lambda torch, c, ctx: sdpa_prefill(torch, c, ctx, backends)


def _settings(ctx) -> dict:
    sets = ctx.options.sets
    return {
        "seed": ctx.seed,
        "sets": {k: {"steps": st, "num_stages": ns, "block_n": bn} for k, (st, ns, bn, _) in sets.items()},
    }


def _sets_option(mode: str) -> tuple:
    """The --sets option of a mode: a table's name (TABLES[mode]) to its step sets."""
    import argparse

    def sets(text: str) -> dict:
        if text not in TABLES[mode]:
            raise argparse.ArgumentTypeError(f"takes {', '.join(k for k in TABLES[mode] if k)}; got {text!r}")
        return TABLES[mode][text]

    return ("--sets", "the table of step sets", sets, TABLES[mode][None])


SMOKE = Section(
    name="gluon-smoke",
    doc="Every step set on small odd shapes and the variants' edges, against the float32 reference.",
    fields=("batch", "heads", "kv_heads", "N_q", "N_k", "head_dim", "causal", "soft_cap", "window"),
    cases=SMOKE_CASES,
    dry_cases=((1, 2, 1, 33, 20, 64, True, 0, 0),),
    shape={},
    dry_shape={},
    inputs=_smoke_inputs,
    impls=(Impl("gluon", _gluon, ours=True),),
    tolerance=2e-2,
    settings=_settings,
    options=(_sets_option("smoke"),),
)
FULL = Section(
    name="gluon-full",
    doc="Every step set at each shape, causal and not, timed beside kernels.hopper and SDPA.",
    fields=("batch", "heads", "N", "head_dim"),
    cases=FULL_CASES,
    dry_cases=((1, 2, 40, 64),),
    shape={},
    dry_shape={},
    inputs=_prefill_inputs,
    impls=(
        Impl("gluon", _gluon, ours=True),
        Impl("hopper", _hopper, ours=True),
        Impl("sdpa", _sdpa("cudnn", "flash")),
    ),
    tolerance=2e-2,
    timing=dict(calls=5, reps=7),
    settings=_settings,
    finish=verdicts,
    options=(_sets_option("full"),),
)
LADDER = Section(
    name="gluon-ladder",
    doc="FA3's steps added one at a time beside cuDNN, each case's launches timed round-robin.",
    fields=("batch", "heads", "N", "head_dim"),
    cases=LADDER_CASES,
    dry_cases=((1, 2, 48, 64),),
    shape={},
    dry_shape={},
    inputs=_prefill_inputs,
    impls=(Impl("gluon", _gluon, ours=True), Impl("sdpa", _sdpa("cudnn"))),
    tolerance=2e-2,
    timing=dict(calls=5, reps=7),
    settings=_settings,
    finish=verdicts,
    options=(_sets_option("ladder"),),
    repeats=REPEATS,
    untimed_rounds=1,  # one round first, untimed: the clocks and the L2 settle before the five
)
