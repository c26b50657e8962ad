"""Ready-made variants, each a named `Variant` (the name shows in plots, with its parameters), and
each registered once (`registry.Entry`, at the end of this file): the explorer's entry, the
kernels' switches and FlexAttention's form come from there."""
from __future__ import annotations

import numpy as np

from attnlab.validate import as_float, as_int
from attnlab.core.variants.core import Variant
from attnlab.core.variants.registry import Entry, register

__all__ = ["causal", "soft_cap", "sliding_window", "sigmoid", "alibi", "rope", "sink_window", "W_STOPS",
           "SINKS"]

#: Windows and sink counts are positions: int32, as FlashInfer's window_left (a window of N_k or
#: more keys is causal attention).
POS_MAX = 2**31 - 1


def _num(x: float) -> str:
    """A parameter as the name shows it: 30 not 30.0, 0.0625, -2.5."""
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    short = f"{x:g}"
    return short if float(short) == x else repr(float(x))


def _causal_mask(qi, kj):
    return kj <= qi


def causal() -> Variant:
    """Query at position q_idx sees keys kv_idx <= q_idx (bottom-right aligned)."""
    return Variant(name="causal", logits_mask=_causal_mask)


def soft_cap(c: float) -> Variant:
    """Logits squashed to (-c, c): c tanh(s / c), on the scaled logits (Gemma 2 uses c = 50 on
    attention logits; FlashInfer's `logits_soft_cap`). c in [1e-6, 1e300]: below, s / c
    overflows for ordinary logits."""
    c = as_float("c", c, 1e-6, 1e300)
    return Variant(name=f"soft_cap({_num(c)})",
                   logits_transform=lambda s, qi, kj: c * np.tanh(s / c))


def sliding_window(w: int) -> Variant:
    """Each query sees at most w keys ending at its diagonal: q_idx - w < kv_idx <= q_idx
    (FlashInfer's window_left = w - 1; Mistral-7B uses w = 4096)."""
    w = as_int("w", w, 1, POS_MAX)
    return Variant(name=f"sliding_window({w})",
                   logits_mask=lambda qi, kj: (kj <= qi) & (kj > qi - w))


def sink_window(sinks: int, w: int) -> Variant:
    """StreamingLLM: the first `sinks` keys (attention sinks) plus the last w keys up to the
    diagonal, causal: kv_idx <= q_idx and (kv_idx < sinks or kv_idx > q_idx - w)."""
    sinks = as_int("sinks", sinks, 0, POS_MAX)
    w = as_int("w", w, 1, POS_MAX)
    return Variant(name=f"sink_window({sinks}, {w})",
                   logits_mask=lambda qi, kj: (kj <= qi) & ((kj < sinks) | (kj > qi - w)))


def sigmoid(bias: float = 0.0) -> Variant:
    """Sigmoid attention: O = sum_j sigma(s_j + bias) v_j, no softmax and no normalisation.
    (Other logits transforms in a composition act on s before the sigmoid.) |bias| <= 1e4:
    beyond, sigma is 0 or 1 to every digit."""
    bias = as_float("bias", bias, -1e4, 1e4)
    return Variant(name=f"sigmoid({_num(bias)})", logits_transform=lambda s, qi, kj: s + bias,
                   use_softmax=False)


def alibi(slope: float) -> Variant:
    """ALiBi: a linear bias slope * (kv_idx - q_idx) on the scaled logits (negative for keys
    behind the query when slope > 0; heads use slopes 2^(-8h/H)). |slope| <= 1e4, so that
    slope x a distance of int32 positions stays finite."""
    slope = as_float("slope", slope, -1e4, 1e4)
    return Variant(name=f"alibi({_num(slope)})",
                   logits_transform=lambda s, qi, kj: s + slope * (kj - qi))


def _rotate(x, pos, theta):
    """Rotate dims (2i, 2i+1) of row r by pos[r] * theta^(-2i/d), counter-clockwise."""
    d = x.shape[1]
    if d % 2:
        raise ValueError(f"rope needs an even head dim, got d={d}; valid: d = 2, 4, 6, ...")
    ang = np.asarray(pos, dtype=np.float64)[:, None] * theta ** (-2.0 * np.arange(d // 2) / d)
    c, s = np.cos(ang), np.sin(ang)
    out = np.empty_like(x)
    out[:, 0::2] = x[:, 0::2] * c - x[:, 1::2] * s
    out[:, 1::2] = x[:, 0::2] * s + x[:, 1::2] * c
    return out


def rope(theta: float = 10000.0) -> Variant:
    """Rotary position embedding fused as query and key transforms: dims (2i, 2i+1) of the row at
    position p rotate by p theta^(-2i/d), so q.k depends on positions only through q_idx - kv_idx.
    (Llama and FlashInfer's default pair dims i and i + d/2 instead: the same rotation up to a
    fixed permutation of the head dims, which trained weights absorb.) theta in [1, 1e12]
    (models use 1e4 to 1e6; below 1, theta^(-2i/d) grows and the angles overflow)."""
    theta = as_float("theta", theta, 1.0, 1e12)
    return Variant(name=f"rope({_num(theta)})",
                   query_transform=lambda x, pos: _rotate(x, pos, theta),
                   key_transform=lambda x, pos: _rotate(x, pos, theta))


# -- the registry's entries: each variant above as the explorer offers it, with the kernels'
#    switches and FlexAttention's form where they have it (attnlab.core.variants.registry) --------

#: The stops of a window's slider in the variant explorer (its pictures are at most 256 keys wide).
W_STOPS = (1, 8, 16, 32, 48, 64, 96, 128, 256)
#: The attention sinks of the explorer's "sink + window" (StreamingLLM keeps 4).
SINKS = 4

for _entry in (
    Entry("causal", causal, "causal", kernel=lambda: {"causal": True}),
    Entry("sliding_window", sliding_window, "sliding window", "window w (keys)", W_STOPS, 64,
          kernel=lambda w: {"window": w}),
    Entry("sink_window", lambda w: sink_window(SINKS, w), "sink + window",
          f"window w (+ {SINKS} sink keys)", W_STOPS, 64),
    Entry("soft_cap", soft_cap, "soft-cap", "cap c (|logit| < c)", (1, 2, 3, 5, 10, 30, 50), 2,
          kernel=lambda c: {"soft_cap": c},
          flex_logits=lambda c: lambda s, qi, kj: c * (s / c).tanh()),
    Entry("alibi", alibi, "ALiBi", "ALiBi slope",
          tuple((f"1/{2**k}" if k else "1", 2.0**-k) for k in range(8, -1, -1)), 0.0625),
    Entry("sigmoid", sigmoid, "sigmoid", "bias b (weight = σ(s + b))", (-8, -6, -4, -2, 0, 2), -4),
    # short labels: the slider's readout shows five digits cut off
    Entry("rope", rope, "RoPE", "RoPE base θ",
          (("10", 10), ("100", 100), ("1e3", 1000), ("1e4", 10000), ("1e5", 100000)), 10000),
):
    register(_entry)
del _entry
