"""The calls each Nsight Compute group of `gpubench.ncu` profiles (GROUPS), declared as launches
of the sections and sweeps that measure the same kernels: a `Call` names a declared Section, one
of its implementations, a case and the launch parameters it picks; `calls(group, torch, dry)`
builds the section's inputs and the implementation's Launches as `core.measure` does and keeps
those that match, so a kernel is called the way its benchmark calls it. `gpubench.ncu`'s
docstring says what each group is for and which recorded profile it made."""

from __future__ import annotations

from dataclasses import dataclass, field

from attnlab.gpubench import mixed, mla, paged, prefill, prefill_fa3
from attnlab.gpubench.core import context
from attnlab.gpubench.declare import Section
from attnlab.gpubench.sweeps import gluon_sets, gluon_steps, ragged
from attnlab.gpubench.sweeps import paged as paged_sweep
from attnlab.kernels.tuning import MIN_CHUNK, WAVES

__all__ = ["Call", "GROUPS", "calls"]


@dataclass(frozen=True)
class Call:
    """The launches of implementation `impl` (one of `section`'s names) on `case` whose launch name is `launch` (None: any) and whose case and launch parameters include
    `where` (a value None: the launch has no such parameter); `options` the section's options for them; `shape` the layer (None: the section's).
    `name` is each call's name in the report, formatted with the case's and launch's parameters
    and the launch's extra; `kernels` how many kernels one call launches; `dry` the (case, where)
    of a --dry run, on the section's dry shape (None: not made there)."""

    name: str
    section: Section
    impl: str
    case: tuple
    kernels: int = 1
    launch: str | None = None
    where: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    shape: dict | None = None
    dry: tuple | None = None

    def __post_init__(self):
        if not isinstance(self.section, Section):
            raise TypeError(f"section must be a gpubench.declare.Section; got {type(self.section).__name__}")
        if self.impl not in self.section.impl_names():
            raise ValueError(f"impl must be one of {self.section.impl_names()}; got {self.impl!r}")


def _matching(torch, call: Call, dry: bool):
    """(parameters, fn) of every launch of `call` (its timed function where it has one)."""
    case, where = call.dry if dry else (call.case, call.where)
    impl = {i.name: i for i in call.section.impls}[call.impl]
    ctx = context(call.section, [case], dry=dry, options=call.options, shape=None if dry else call.shape)
    for c in call.section.inputs(torch, case, ctx):
        for launch in impl.launches(torch, c, ctx):
            params = {**c.case, **launch.launch}
            if call.launch in (None, launch.name) and all(
                k not in params
                if v is None
                else k in params and params[k] == v and type(params[k]) is type(v)
                for k, v in where.items()
            ):
                yield {**params, **launch.extra}, launch.timed or launch.fn


def calls(group: str, torch, dry: bool = False) -> list[tuple[str, int, object]]:
    """(name, kernels it launches, fn) for every call of `group` that can run here; a call that
    cannot (a library missing, no such launch on this machine) is left out, and says so."""
    if group not in GROUPS:
        raise ValueError(f"group must be one of {tuple(GROUPS)}, got {group!r}")
    out = []
    for call in GROUPS[group]:
        if dry and call.dry is None:
            continue
        case = call.dry[0] if dry else call.case
        what = f"{call.launch or call.impl} of {call.section.name} at {case}"
        try:
            made = [(call.name.format(**p), call.kernels, fn) for p, fn in _matching(torch, call, dry)]
        except Exception as e:  # noqa: BLE001 - e.g. FlashInfer absent
            print(f"left out: {what} ({type(e).__name__}: {str(e)[:200]})", flush=True)
            continue
        if not made:
            print(f"left out: {what} (no such launch here)", flush=True)
        out += made
    return out


#: the recorded profiles' prefill layer: 32 heads for Q, K and V (no GQA), d = 128
_MHA = dict(heads=32, kv_heads=32, head_dim=128)
_PS16 = {"page_sizes": (16,)}


def _recorded() -> tuple:
    """The 2026-12-01 profile: decode (contiguous and paged, the launch pinned, without and with the
    page-id prefetch, beside FlashInfer) and the Hopper prefill beside FlashInfer's FA3 template
    and cuDNN."""
    out = []
    # batch, context, contiguous splits, paged splits, paged KV tile; a dry run makes the first
    for b, n, s_contig, s_paged, bn, dry in ((1, 32768, 32, 32, 128, True), (16, 8192, 2, 4, 64, False)):
        out += [
            Call(
                "contiguous {batch}x{context} s{splits}",
                paged.SECTION,
                "contiguous",
                (b, n),
                2,
                where={"splits": s_contig},
                options=_PS16,
                dry=((1, 64), {"splits": 3}) if dry else None,
            ),
            Call(
                "paged ps{page_size} {batch}x{context} s{splits} bn{block_n} pf{prefetch:d}",
                paged_sweep.SECTION,
                "paged",
                (b, n),
                2,
                where={"splits": s_paged, "block_n": bn, "num_warps": 4, "num_stages": 2},
                options={**_PS16, "prefetch": (False, True)},
                dry=((1, 64), {"splits": 2}) if dry else None,
            ),
            Call(
                "flashinfer-tc ps{page_size} {batch}x{context}",
                paged.SECTION,
                "flashinfer",
                (b, n),
                2,
                launch="flashinfer-tc",
                options=_PS16,
            ),
        ]
    for causal, word in ((False, "non-causal"), (True, "causal")):
        out.append(
            Call(
                f"hopper 1x{{N}} {word}",
                prefill.SECTION,
                "ours",
                (1, 4096),
                launch="ours-hopper",
                where={"causal": causal},
                shape=_MHA,
                dry=((1, 64), {"causal": causal}),
            )
        )
    for impl, launch in (("flashinfer", "flashinfer-fa3"), ("sdpa", "sdpa-cudnn")):
        out.append(
            Call(
                f"{launch} 1x{{N}} non-causal",
                prefill.SECTION,
                impl,
                (1, 4096),
                launch=launch,
                where={"causal": False},
                shape=_MHA,
            )
        )
    return tuple(out)


def _gluon() -> tuple:
    """The FA3 steps of `kernels.gluon_fa3` at 1 x 4K, 32 heads, d = 128, as the Gluon sweep runs
    them (`sweeps.gluon_steps.FULL`): the first step (no warp specialisation), the defaults and the
    last step, without and with the causal mask, beside FlashInfer's FA3 template and cuDNN on
    that shape. Not under the interpreter."""
    sets = {"no_ws": gluon_sets.VARIANTS["no_ws"], "default": gluon_sets.FINAL["default"]}
    sets["split_pp_ov"] = gluon_sets.VARIANTS["split_pp_ov"]
    case, out = (1, 32, 4096, 128), []
    for causal, word in ((False, "non-causal"), (True, "causal")):
        label, on = f"1x{{N}} {word}", {"causal": causal}
        out += [
            Call(f"gluon {{steps}} {label}", gluon_steps.FULL, "gluon", case, where=on, options={"sets": sets}),
            Call(f"flashinfer-fa3 {label}", prefill.SECTION, "flashinfer", (1, 4096), launch="flashinfer-fa3",
                 where=on, shape=_MHA),
            Call(f"sdpa-cudnn {label}", gluon_steps.FULL, "sdpa", case, launch="sdpa-cudnn", where=on,
                 options={"sets": sets}),
        ]  # fmt: skip
    return tuple(out)


def _scheduled() -> tuple:
    """The plan-driven decoder's two kernels (items, merge) at batches 1 and 8 of the long-tailed
    recorded batches (1 and 3 on a dry run), the balanced plan without and with the 128-token
    floor, its own launch choice, the merge a kernel of its own; eager launches."""
    return tuple(
        Call(
            f"sched {plan} batch {{batch}} ({{items}} items)",
            ragged.SECTION,
            "scheduled",
            (b,),
            2,
            where={"min_chunk": floor, "fused": False},
            options={"floors": (floor,), "launches": (None,)},
            dry=((dry_b,), {"min_chunk": floor, "fused": False}),
        )
        for b, dry_b in ((1, 1), (8, 3))
        for plan, floor in (("balanced", 1), ("balanced-128", 128))
    )


def _gaps() -> tuple:
    """Where targets stayed short: `paged_decode` cut by `split_from_lengths` at (WAVES, MIN_CHUNK)
    on every batch (the cut of the recorded profile, h200-2026-12-03-ncu-gaps.json; uneven batches
    are cut by the fill rule when nothing is forced) and its own launch, on the long-tailed
    recorded batches 4, 8 and 16 (1 and 3 on a dry run; split and merge kernels), and prefill at
    d = 64, batch 4 x 4K causal: the Gluon kernel's defaults, the Hopper kernel and cuDNN."""
    shipped = {"rules": ((WAVES, MIN_CHUNK),), "launches": (None,)}
    out = [
        Call(
            "paged auto ragged batch {batch}",
            ragged.SECTION,
            "paged",
            (b,),
            2,
            options=shipped,
            dry=None if dry_b is None else ((dry_b,), {}),
        )
        for b, dry_b in ((4, 1), (8, 3), (16, None))
    ]
    d64 = dict(heads=32, kv_heads=8, head_dim=64)
    for impl, launch, word in (
        ("ours", "ours-gluon", "gluon default"),
        ("ours", "ours-hopper", "hopper"),
        ("sdpa", "sdpa-cudnn", "sdpa-cudnn"),
    ):
        out.append(
            Call(
                f"{word} 4x4096 d64 causal",
                prefill.SECTION,
                impl,
                (4, 4096),
                launch=launch,
                where={"causal": True},
                shape=d64,
            )
        )
    return tuple(out)


def _persistent() -> tuple:
    """The Gluon prefill's persistent scheduler at 4 x 4K, 32 heads, d = 128 (MHA), as
    `gpubench.prefill_fa3` calls it: its causal defaults (persistent) and the same steps one
    program per tile, the defaults without the mask, beside FlashInfer's FA3 batch wrapper and
    cuDNN, causal."""
    case, dry = (4, 4096, 128, 32), (1, 40, 64, 2)
    out = [
        Call(f"gluon {word} 4x4K {mask}", prefill_fa3.SECTION, "ours", case, launch="ours-gluon",
             where={"causal": causal, "steps": steps})
        for word, causal, mask, steps in (
            ("persistent", True, "causal", None),
            ("per tile", True, "causal", "not_persistent"),
            ("default", False, "non-causal", None),
        )
    ]  # fmt: skip
    for impl, launch, word in (
        ("flashinfer", "flashinfer-batch-fa3", "flashinfer-batch"),
        ("sdpa", "sdpa-cudnn", "sdpa-cudnn"),
    ):
        out.append(
            Call(f"{word} 4x4K causal", prefill_fa3.SECTION, impl, case, launch=launch,
                 where={"causal": True}, dry=(dry, {"causal": True}) if impl == "sdpa" else None)
        )  # fmt: skip
    return tuple(out)


def _serving() -> tuple:
    """The serving kernels: MLA decode at 32 x 8K (DeepSeek-V3's shape), where the profile's
    tensor-pipe share says whether it runs compute-bound as notebook 06 predicts, and a mixed
    batch (a 2K chunk beside 64 decodes); each ours (its default launch: the split kernel, then
    the merge)."""
    return (
        Call("mla ours {batch}x{kv}", mla.SECTION, "ours", (32, 8192), 2, launch="ours", dry=((2, 9), {})),
        Call("mixed ours {chunk}+{decodes}", mixed.SECTION, "ours", (2048, 64), 2, launch="ours", dry=((7, 3), {})),
    )  # fmt: skip


def _serving_fi() -> tuple:
    """FlashInfer's FA3 calls on `_serving`'s cases, a group of their own: how many kernels each
    launches is FlashInfer's choice (one assumed; the summary refuses a report that differs)."""
    return (
        Call("mla flashinfer-fa3 {batch}x{kv}", mla.SECTION, "flashinfer", (32, 8192), launch="flashinfer-fa3"),
        Call("mixed flashinfer-fa3 {chunk}+{decodes}", mixed.SECTION, "flashinfer", (2048, 64),
             launch="flashinfer-fa3"),
    )  # fmt: skip


#: group name -> the calls it profiles, in order
GROUPS = {
    "recorded": _recorded(),
    "gluon": _gluon(),
    "scheduled": _scheduled(),
    "gaps": _gaps(),
    "persistent": _persistent(),
    "serving": _serving(),
    "serving-fi": _serving_fi(),
}
