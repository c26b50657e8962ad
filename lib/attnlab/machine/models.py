"""LLM shapes (from `data/models.json`) and the prefill cost model for standard attention.

`prefill_cost` answers the question section 1 of the lecture asks: how much longer does a whole
prefill take if attention writes S and P to HBM (Algorithm 0) instead of keeping them on chip?

Example: Llama-3-8B on an H100 SXM at N = 32,768 tokens, every kernel at its roofline: the
matmuls would take 0.82 s at bf16 peak, but FlashAttention's kernel is held by its own traffic
(no L2 counted), so its prefill takes 1.19 s; standard attention's three memory-bound kernels make
it 3.17 s, 2.66x slower; and the S matrices of one layer alone are 32 x 32768^2 x 2 bytes =
64 GiB (128 GiB with P), more than the card's 80 GB.

This file is long because the model catalogue and the prefill cost model (scalar and vectorised,
equal field by field) belong together; each part is short. Notebooks 02 and 07 import
`prefill_cost` from here by name; split off, it would come back through an import cycle.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from attnlab.catalog import find, freeze, load
from attnlab.validate import as_bool, as_counts, as_int, choice
from attnlab.machine.hardware import DTYPE_BYTES, get_gpu, peak
from attnlab.core.iomodel import flash_io, standard_io

__all__ = [
    "Model",
    "PrefillCost",
    "models",
    "get_model",
    "linear_flops_per_token",
    "attention_linear_crossover",
    "prefill_cost",
    "prefill_cost_curve",
]


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer's shape. `params` is the total parameter count; `source` the
    config.json it was copied from; `extra` keeps the other JSON fields (aliases, notes,
    active_params, MLA dimensions, ...). Optional: `sliding_window` (tokens a windowed layer
    sees; None: no window) in `window_layers` of the layers (None: all of them) and
    `max_context` (max_position_embeddings), as `configs.from_config` reads them."""

    name: str
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    params: int
    source: str
    extra: Mapping[str, object] = field(default_factory=dict, hash=False, compare=False, repr=False)
    sliding_window: int | None = None
    window_layers: int | None = None
    max_context: int | None = None

    def __post_init__(self):
        for f in ("name", "source"):
            if not isinstance(getattr(self, f), str):
                raise TypeError(f"{f} must be a string, got {getattr(self, f)!r}")
        for f in _INT_FIELDS:
            as_int(f, getattr(self, f), 1, None)
        for f, lo in (("sliding_window", 1), ("window_layers", 0), ("max_context", 1)):
            if getattr(self, f) is not None:
                as_int(f, getattr(self, f), lo, self.layers if f == "window_layers" else None)
        if self.q_heads % self.kv_heads:
            raise ValueError(f"q_heads={self.q_heads} must be a multiple of kv_heads={self.kv_heads} (GQA)")

    @property
    def group(self) -> int:
        """Query heads per KV head (GQA group size): q_heads // kv_heads. Llama-3-8B: 32 // 8 = 4."""
        return self.q_heads // self.kv_heads

    @property
    def active_params(self) -> int:
        """Parameters used per token: `params` for a dense model, fewer for a mixture of experts
        (DeepSeek-V3: 37e9 of 671e9)."""
        return int(self.extra.get("active_params", self.params))

    @property
    def mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3): stored as its decode-time equivalent,
        one shared latent of kv_lora_rank + qk_rope_head_dim dims (in `extra`) per token."""
        return "kv_lora_rank" in self.extra

    @property
    def notes(self) -> str:
        """Caveats recorded with the shape in models.json."""
        return str(self.extra.get("notes", ""))


_INT_FIELDS = ("layers", "hidden", "q_heads", "kv_heads", "head_dim", "intermediate", "vocab", "params")


@functools.lru_cache(maxsize=None)
def _load() -> tuple[dict[str, Model], dict[str, str]]:
    """(models by name, lookup key -> name), read once."""
    named = ("name", "source", *_INT_FIELDS)

    def build(entry):
        return Model(
            name=entry["name"],
            source=entry["source"],
            **{k: int(entry[k]) for k in _INT_FIELDS},
            extra=freeze({k: v for k, v in entry.items() if k not in named}),
        )

    return load("models.json", "models", build)


def models() -> list[str]:
    """Names of the models in data/models.json, e.g. ['Llama-3-8B', 'Llama-3-70B', ...]."""
    return list(_load()[0])


def get_model(model) -> Model:
    """The `Model` called `model` (case-insensitive, aliases work); a `Model` is returned as is.

    Example: `get_model("llama-3-8b").group == 4`.
    """
    return find("model", model, Model, _load())


def linear_flops_per_token(model) -> int:
    """FLOPs per token of everything except attention's QK^T and PV: 2 x parameters.

    The usual approximation: every weight takes part in one multiply-add (2 FLOPs) per token.
    It counts the input embedding too, although that is a table lookup, not a matmul: for
    Llama-3-8B that is 128,256 x 4096 = 525M of the 8.03B parameters (about 6.5 %), so the
    exact matmul count is about 15.0 GFLOP/token against the 16.06 used here. We keep the
    convention because it is the one the lecture's numbers follow (and the one most papers use);
    it also makes models with a tied embedding, such as Gemma-2, exact: their one vocab x hidden
    matrix is both the lookup and the LM head's matmul. Mixture-of-experts models use
    `active_params` (DeepSeek-V3: 37e9 of 671e9).

    Used by `prefill_cost`, `prefill_cost_curve` and `explore.roofline.attention_share`, so every
    notebook counts the linear layers the same way.

    Example: `linear_flops_per_token("Llama-3-8B") == 2 * 8_030_261_248 == 16_060_522_496`.
    """
    return 2 * get_model(model).active_params


def attention_linear_crossover(model) -> float:
    """The context length N at which causal attention's FLOPs per token equal the linear layers'.

    Per token of a causal prefill, QK^T and PV cost 4 x layers x q_heads x head_dim x N / 2
    FLOPs (a token attends to about N / 2 keys on average); setting that equal to
    `linear_flops_per_token` gives N = params / (layers x q_heads x head_dim). It is also where
    `prefill_cost`'s compute bends from slope 1 (weights) to slope 2 (attention) on log-log axes.

    Example: Llama-3-8B: 8,030,261,248 / (32 x 32 x 128) = 61,266 tokens.
    """
    m = get_model(model)
    return linear_flops_per_token(m) / (2 * m.layers * m.q_heads * m.head_dim)


@dataclass(frozen=True)
class PrefillCost:
    """Result of `prefill_cost`: times in seconds, sizes in bytes. One accounting for both
    implementations (`prefill_cost` states it): each kernel takes max(FLOPs / peak, bytes /
    bandwidth), kernels one after another.

    N                   prompt length (tokens)
    compute_s           linear layers + causal QK^T and PV at dense peak: the time FlashAttention
                        would take if its own kernel were compute-bound
    standard_s          one prefill with standard attention: linear layers + Algorithm 0's three
                        kernels per layer, each at its roofline
    flash_s             one prefill with FlashAttention: linear layers + its one kernel per layer
                        at its roofline, max(attention FLOPs / peak, flash_io_s)
    extra_io_s          what standard attention adds: max(0, standard_s - flash_s)
    total_ratio         standard_s / flash_s: below 1 where FA1's count moves more than standard
                        attention (flash_moves_more), e.g. head_dim 256 at M = 100,000
    s_bytes_per_layer   all heads' S of one layer at once
    sp_bytes_per_layer  S and P: 2 x s_bytes_per_layer
    fits                sp_bytes_per_layer <= the GPU's HBM
    standard_io_s       all of standard attention's HBM traffic (all layers and heads) / bandwidth
    flash_io_s          all of FlashAttention's HBM traffic / bandwidth: FA1 order, the lecture's
                        tile rule, causal blocks skipped (`flash_io(..., "fa1", causal=True)`)
    standard_minus_flash_io_s  standard_io_s - flash_io_s: a signed difference of traffic times
    flash_moves_more    FA1's accounting moves more elements than standard attention at this
                        head dim and SRAM (d^2 close to M: head_dim 256 at M = 100,000, Gemma-2)
    flash_io_hidden     flash_io_s <= the attention FLOPs' time: FlashAttention's kernel is
                        compute-bound, so flash_s = compute_s. Where it is not (Llama-3-8B on the
                        H100 at every N: no L2 in this count), its traffic sets its time
    """

    N: int
    compute_s: float
    extra_io_s: float
    total_ratio: float
    s_bytes_per_layer: float
    sp_bytes_per_layer: float
    fits: bool
    standard_io_s: float
    flash_io_s: float
    standard_minus_flash_io_s: float
    flash_moves_more: bool
    flash_io_hidden: bool
    standard_s: float = 0.0
    flash_s: float = 0.0


def prefill_cost(
    model,
    gpu,
    N: int,
    *,
    sram: int = 100_000,
    dtype: str = "bf16",
    order: str = "fa1",
    rule: str = "fa1",
    causal_skip: bool = True,
) -> PrefillCost:
    """Cost of one N-token prefill with standard attention and with FlashAttention.

    One accounting for both: the roofline applied to every kernel. A kernel takes
    max(its FLOPs / peak(gpu, dtype), its HBM bytes / bandwidth), and the kernels of a prefill
    run one after another (nothing overlaps across kernels). One sequence, causal attention, every
    query head of every layer, L layers of H query heads of dim d, b = DTYPE_BYTES[dtype]:

        linear layers   2 params N FLOPs (`linear_flops_per_token`), compute-bound; their weights'
                        reads (params x b once per prefill: 4.8 ms for Llama-3-8B on the H100)
                        are left out, as in notebook 01
        FlashAttention  one fused kernel per layer: the causal 2 L H N^2 d FLOPs (half of QK^T
                        and PV: the blocks above the diagonal are skipped) and
                        L H flash_io(N, d, M, "fa1", causal=True) b bytes
        standard        Algorithm 0's three kernels per layer, each head:
                          S = QK^T   2 N^2 d FLOPs (a GEMM computes the masked entries too),
                                     Q, K read, S written: 2 N d + N^2 elements
                          softmax    S read, P written: 2 N^2 (its few operations per element
                                     are not counted)
                          O = PV     2 N^2 d FLOPs; P, V read, O written: N^2 + 2 N d
                        (their elements add up to standard_io(N, d)).

        compute_s   = (2 params N + 2 L H N^2 d) / peak
        flash_s     = 2 params N / peak + max(2 L H N^2 d / peak, flash_io_s)
        standard_s  = 2 params N / peak + sum over the three kernels of max(FLOPs / peak, bytes / BW)
        extra_io_s  = max(0, standard_s - flash_s);  total_ratio = standard_s / flash_s

    s_bytes_per_layer = H N^2 b (all heads' S of one layer at once); sp_bytes_per_layer twice
    that (S and P); fits = sp_bytes_per_layer <= hbm_bytes. No L2: on a GPU many of FA1's K/V
    re-reads hit the cache, so flash_io_s is an upper bound of FlashAttention's traffic.
    `sram` M is in elements, as in `iomodel`. `order`, `rule` and `causal_skip` choose
    FlashAttention's count (defaults: FA1 order under the lecture's tile rule, masked blocks
    skipped; order="fa2", rule="fa2" is FlashAttention-2's loop with its own tiles). `model` and
    `gpu` are names or objects; N an int, 1 <= N <= 2^53 (closed forms: 16M tokens take
    microseconds).

    >>> c = prefill_cost("Llama-3-8B", "H100-SXM", 32768)
    >>> round(c.compute_s, 3), round(c.flash_s, 3), round(c.standard_s, 3), round(c.total_ratio, 2)
    (0.816, 1.193, 3.168, 2.66)
    >>> g = prefill_cost("Gemma-2-9B", "H100-SXM", 32768)    # head_dim 256: B_c = 98, no gain
    >>> g.flash_moves_more, round(g.extra_io_s, 3), round(g.total_ratio, 2)
    (False, 0.028, 1.01)
    """
    m = get_model(model)
    g = get_gpu(gpu)
    N = as_int("N", N, 1, 1 << 53)
    p = peak(g, dtype)  # validates dtype for this chip
    flash = (
        choice("order", order, ("fa1", "fa2")),
        choice("rule", rule, ("fa1", "fa2")),
        as_bool("causal_skip", causal_skip),
    )
    return PrefillCost(**_prefill(m, g, N, sram, p, DTYPE_BYTES[dtype.strip().lower()], flash))


def _float(x):
    """An exact count (a Python int, or an object array of them) as float64, rounded once."""
    return float(x) if not isinstance(x, np.ndarray) else x.astype(np.float64)


def _prefill(m: Model, g, N, sram, p: float, bpe, flash=("fa1", "fa1", True)) -> dict:
    """prefill_cost's fields for a checked model, GPU, peak and bytes per element. N is an int or
    an object array of Python ints: the counts are exact integers either way, each time is rounded
    once, so a curve equals the scalar results exactly."""
    d = m.head_dim
    heads = m.layers * m.q_heads
    bw = g.hbm_bandwidth
    scalar = not isinstance(N, np.ndarray)
    std = heads * (standard_io(N, d) if scalar else standard_io(N.astype(np.int64), d).astype(object))
    order, rule, skip = flash
    fa = heads * (
        flash_io(N, d, sram, order, skip, rule=rule)
        if scalar
        else flash_io(N.astype(np.int64), d, sram, order, skip, rule=rule).astype(object)
    )
    linear_s = _float(linear_flops_per_token(m) * N) / p
    attention_s = _float(2 * heads * N * N * d) / p  # causal QK^T and PV
    gemm_s = _float(2 * heads * N * N * d) / p  # one full GEMM of Algorithm 0
    qk_io = _float(heads * (2 * N * d + N * N) * bpe) / bw  # kernel 1: Q, K in, S out
    soft_io = _float(heads * 2 * N * N * bpe) / bw  # kernel 2: S in, P out
    pv_io = _float(heads * (N * N + 2 * N * d) * bpe) / bw  # kernel 3: P, V in, O out
    standard_io_s = _float(std * bpe) / bw
    flash_io_s = _float(fa * bpe) / bw
    compute_s = linear_s + attention_s
    flash_s = linear_s + np.maximum(attention_s, flash_io_s)
    standard_s = linear_s + np.maximum(gemm_s, qk_io) + soft_io + np.maximum(gemm_s, pv_io)
    s_bytes = m.q_heads * N * N * bpe
    out = dict(
        N=N,
        compute_s=compute_s,
        extra_io_s=np.maximum(0.0, standard_s - flash_s),
        total_ratio=standard_s / flash_s,
        s_bytes_per_layer=s_bytes,
        sp_bytes_per_layer=2 * s_bytes,
        fits=2 * s_bytes <= g.hbm_bytes,
        standard_io_s=standard_io_s,
        flash_io_s=flash_io_s,
        standard_minus_flash_io_s=_float((std - fa) * bpe) / bw,
        flash_moves_more=fa > std,
        flash_io_hidden=flash_io_s <= attention_s,
        standard_s=standard_s,
        flash_s=flash_s,
    )
    if scalar:
        return {
            k: (bool(v) if isinstance(v, (bool, np.bool_)) else float(v) if isinstance(v, np.floating) else v)
            for k, v in out.items()
        }
    return out


_MAX_N = 1 << 24


def _lengths(Ns) -> np.ndarray:
    """`Ns` as a 1-D int64 array of token counts in [1, 2^24], at least one (ValueError/TypeError
    naming bad values)."""
    if isinstance(Ns, (bool, np.bool_)):
        raise TypeError(f"Ns must be integers (token counts), got {Ns!r}")
    arr, scalar = as_counts("Ns", Ns, 1, _MAX_N)
    flat = np.atleast_1d(np.asarray(arr, dtype=np.int64)).reshape(-1)
    if flat.size == 0:
        raise ValueError(f"Ns={Ns!r} is empty; valid: at least one N, 1 <= N <= {_MAX_N}")
    return flat


def prefill_cost_curve(model, gpu, Ns, *, sram: int = 100_000, dtype: str = "bf16") -> dict:
    """`prefill_cost` over an array of lengths at once. Returns a dict with one entry per
    `PrefillCost` field, each an array with one value per N ('N' int64; 'fits',
    'flash_moves_more' and 'flash_io_hidden' bool; the rest float64):

        N, compute_s, extra_io_s, total_ratio, s_bytes_per_layer, sp_bytes_per_layer, fits,
        standard_io_s, flash_io_s, standard_minus_flash_io_s, flash_moves_more, flash_io_hidden,
        standard_s, flash_s

    Each entry equals the `prefill_cost` field at that N exactly (same integer counts, same
    rounding). `extra_io_s` is never negative: where FA1's accounting moves more than standard
    attention (d^2 close to M, e.g. head_dim 256 at M = 100,000, Gemma-2-9B) it is 0, the ratio
    is below 1 and `standard_minus_flash_io_s` keeps the signed traffic difference. 1 <= N <= 2^24.

    >>> prefill_cost_curve("Llama-3-8B", "H100", [16384, 32768])["total_ratio"].round(2)
    array([2.14, 2.66])
    """
    m = get_model(model)
    g = get_gpu(gpu)
    N = _lengths(Ns)
    p = peak(g, dtype)
    bpe = DTYPE_BYTES[dtype.strip().lower()]
    out = _prefill(m, g, N.astype(object), sram, p, bpe)
    for f in dataclasses.fields(PrefillCost):
        kind = {"N": np.int64, "fits": bool, "flash_moves_more": bool, "flash_io_hidden": bool}
        out[f.name] = np.asarray(out[f.name], dtype=kind.get(f.name, np.float64))
    return out
