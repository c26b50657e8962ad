"""The variant registry: each attention variant defined once, as an `Entry`, and everything that
runs it read from that entry.

An entry names a variant's factory (`make`: its parameter -> the numpy `Variant`, the math every
other form is checked against), how the variant explorer offers it (a dropdown label, a slider
with its stops and default, the instance composed with &), the compile-time switches of the
Triton and Gluon prefill kernels that implement it (`kernel`: its parameter -> the launchers'
keywords, causal / soft_cap / window; None where no kernel has it), and FlexAttention's form of
its logits where the numpy one calls numpy functions (`flex_logits`). The rest is derived:

    the numpy math      entry.variant(param); `compose(uses)`, several composed with &
    the explorer        notebook 05's variant gallery lists every registered entry, in order
    the kernels         `kernel_switches(uses)`: the keywords of variant_prefill,
                        flash_attention_hopper and flash_attention_gluon (kernels.variants checks them)
    FlexAttention       `flex_mods(uses, n_q, n_k)`: score_mod and mask_mod, built from the Variant's
                        own logits_mask and logits_transform (or flex_logits), which use only
                        operators and tensor methods, so torch tensors pass through them unchanged

`uses` is a sequence of (name, parameter) pairs, composed in order (a parameter is None for a
variant that takes none). Registering is one call, `register(Entry(...))`; library.py registers
the ready-made variants. Adding a variant the kernels already support is its entry plus its test
against a float64 definition. Layer 1: numpy only; torch comes in only as the tensors FlexAttention
hands the mods.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

from attnlab.core.variants.core import Variant
from attnlab.validate import short

__all__ = ["Entry", "REGISTRY", "register", "lookup", "compose", "kernel_switches", "flex_mods"]

#: every registered entry by name, in the order they were registered (the explorer's order)
REGISTRY: dict[str, "Entry"] = {}


@dataclass(frozen=True)
class Entry:
    """One attention variant, defined once.

    name         the registry's key, the factory's name ("sliding_window")
    make         the parameter -> the Variant (called with no argument when `param` is None)
    label        the variant explorer's dropdown label ("sliding window")
    param        the explorer's slider label for the parameter; None: the variant takes none
    stops        the slider's stops: values, or (label, value) pairs
    default      the slider's value when the variant is picked, and the parameter of the
                 instance the explorer composes with & ("& second variant")
    kernel       the parameter -> the prefill kernels' keywords ({"soft_cap": c}); None: no
                 kernel compiles this variant in
    flex_logits  the parameter -> logits(s, q_idx, kv_idx) for FlexAttention's score_mod, written
                 with operators and tensor methods; None: the Variant's logits_transform serves
                 (it must then use operators only)
    """

    name: str
    make: Callable
    label: str
    param: str | None = None
    stops: tuple = ()
    default: Any = None
    kernel: Callable | None = None
    flex_logits: Callable | None = None

    def __post_init__(self):
        for f in ("name", "label"):
            text = getattr(self, f)
            if not isinstance(text, str) or not text.strip():
                raise TypeError(f"{f} must be a non-empty string, got {short(text)} ({type(text).__name__})")
        if self.param is not None and not isinstance(self.param, str):
            raise TypeError(f"param must be a slider label (str) or None, got {short(self.param)}")
        for f in ("make", "kernel", "flex_logits"):
            fn = getattr(self, f)
            if not callable(fn) and (fn is not None or f == "make"):
                raise TypeError(f"{f} of entry {self.name!r} must be callable, got {short(fn)}")
        if not isinstance(self.stops, tuple):
            raise TypeError(f"stops of entry {self.name!r} must be a tuple, got {type(self.stops).__name__}")
        values = [s[1] if isinstance(s, tuple) else s for s in self.stops]
        if self.param is not None and self.default not in values:
            raise ValueError(
                f"default={self.default!r} of entry {self.name!r} is no stop of its slider; valid: {values}"
            )

    def _call(self, fn, param):
        return fn() if self.param is None else fn(param)

    def variant(self, param=None) -> Variant:
        """The numpy Variant at `param` (the factory refuses a bad one by name)."""
        v = self._call(self.make, param)
        if not isinstance(v, Variant):
            raise TypeError(f"make of entry {self.name!r} must return a Variant, got {type(v).__name__}")
        return v

    def switches(self, param=None) -> dict | None:
        """The prefill kernels' keywords for this variant at `param` (checked by its factory
        first); None where no kernel has it."""
        self.variant(param)
        if self.kernel is None:
            return None
        kw = self._call(self.kernel, param)
        if not isinstance(kw, dict):
            raise TypeError(f"kernel of entry {self.name!r} must return a dict of keywords, got {short(kw)}")
        return kw

    def mods(self, param=None):
        """(logits, mask) for FlexAttention, either None where the variant has none; None as a whole
        where FlexAttention cannot express the variant (no softmax, or a row transform)."""
        v = self.variant(param)
        rows = (v.query_transform, v.key_transform, v.value_transform, v.output_transform)
        if not v.use_softmax or any(f is not None for f in rows):
            return None
        logits = v.logits_transform if self.flex_logits is None else self._call(self.flex_logits, param)
        return logits, v.logits_mask


def register(entry: Entry) -> Entry:
    """Add `entry` to REGISTRY (after the others: the explorer lists it last); its name and its
    explorer label must be new ("none" is the explorer's plain attention)."""
    if not isinstance(entry, Entry):
        raise TypeError(f"entry must be an attnlab.core.variants.Entry, got {type(entry).__name__}")
    labels = {e.label for e in REGISTRY.values()} | {"none"}
    if entry.name in REGISTRY or entry.label in labels:
        raise ValueError(
            f"entry {entry.name!r} (label {entry.label!r}) is taken; valid: a name not in "
            f"{list(REGISTRY)} and a label not in {sorted(labels)}"
        )
    REGISTRY[entry.name] = entry
    return entry


def lookup(name: str) -> Entry:
    """The registered entry called `name`."""
    if not isinstance(name, str) or name not in REGISTRY:
        raise ValueError(f"variant={name!r} is not registered; valid: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def _resolved(uses) -> list:
    """[(Entry, parameter)] of (name, parameter) pairs, at least one."""
    if isinstance(uses, (str, bytes)) or not hasattr(uses, "__iter__"):
        raise TypeError(f"uses must be a sequence of (name, parameter) pairs, got {short(uses)}")
    out = []
    for i, u in enumerate(uses):
        if not isinstance(u, tuple) or len(u) != 2:
            raise TypeError(f"uses[{i}]={short(u)} must be a (name, parameter) pair")
        out.append((lookup(u[0]), u[1]))
    if not out:
        raise ValueError("uses is empty; valid: at least one (name, parameter) pair")
    return out


def compose(uses) -> Variant:
    """The numpy Variant of `uses`, composed with & in order."""
    return functools.reduce(lambda a, b: a & b, [e.variant(p) for e, p in _resolved(uses)])


def kernel_switches(uses) -> dict | None:
    """The prefill kernels' keywords for `uses` (each entry's, merged); None when one of them has
    no kernel. Two entries that set one switch to two values are refused."""
    merged: dict = {}
    for e, p in _resolved(uses):
        kw = e.switches(p)
        if kw is None:
            return None
        for k, v in kw.items():
            if k in merged and merged[k] != v:
                raise ValueError(
                    f"{e.name} sets the kernels' {k}={v!r}, another variant of {list(uses)} {k}={merged[k]!r};"
                    f" valid: one value a switch"
                )
            merged[k] = v
    return merged


def flex_mods(uses, n_q: int, n_k: int):
    """(score_mod, mask_mod) in FlexAttention's signatures for `uses` on n_q queries over n_k keys
    (each None where no entry has one), or None when FlexAttention cannot express one of them.
    FlexAttention counts a query's q_idx from 0; the mods add n_k - n_q, the course's
    bottom-right positions. Logits chain in order, masks are ANDed with `&`."""
    mods = [e.mods(p) for e, p in _resolved(uses)]
    if any(m is None for m in mods):
        return None
    off = int(n_k) - int(n_q)
    logits = [f for f, _ in mods if f is not None]
    masks = [m for _, m in mods if m is not None]

    def score_mod(score, b, h, q_idx, kv_idx):
        qi = q_idx + off if off else q_idx
        for f in logits:
            score = f(score, qi, kv_idx)
        return score

    def mask_mod(b, h, q_idx, kv_idx):
        qi = q_idx + off if off else q_idx
        seen = masks[0](qi, kv_idx)
        for m in masks[1:]:
            seen = seen & m(qi, kv_idx)
        return seen

    return (score_mod if logits else None), (mask_mod if masks else None)
