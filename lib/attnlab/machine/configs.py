"""Your own model: a Hugging Face `config.json` read into the course's `Model`, the configs shipped
in data/configs/, and the KV cache it needs. What the course's models say about that model on a
GPU you pick, the report notebook 00 prints, is `attnlab.machine.your_model`.

`from_config` reads the fields attention needs: num_attention_heads, num_key_value_heads (absent:
equal to the heads), head_dim (absent: hidden_size // num_attention_heads), num_hidden_layers,
sliding_window (null or absent: none; `use_sliding_window: false` turns it off, as in Qwen2),
max_position_embeddings, and multi-head latent attention where present (DeepSeek-V2/V3:
kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim). A config that keeps its text model
under `text_config` (multimodal checkpoints) is read from there. An MLA model becomes its
decode-time equivalent, as data/models.json stores DeepSeek-V3: every query head attends to one
shared latent of kv_lora_rank + qk_rope_head_dim dims, i.e. kv_heads 1 and that head dim.

`params` is counted from the shapes (embeddings, attention, gated MLP or mixture of experts,
norms; LM head untied unless tie_word_embeddings, which Gemma ties by default), which equals the
hub's total for the dense models shipped here; pass `params=` to use your own number.

`kv_bytes_per_token` and `kv_cache_bytes` count the cache (a window caps a windowed layer's);
`prefill_shape` is the shape prefill kernels run (MLA unabsorbed).

This file is long because one config.json is read field by field through one checked reader (`_int`,
`_flag`), and the parameter count and the windowed layers read the same fields the same way, so a
malformed field is refused alike wherever it is read.
"""

from __future__ import annotations

import json
import numbers
import os
from dataclasses import replace
from pathlib import Path

from attnlab.catalog import DATA_DIR, freeze, key
from attnlab.validate import short, as_bool, as_int
from attnlab.machine.hardware import DTYPE_BYTES, dtype_name
from attnlab.machine.models import Model, get_model

__all__ = [
    "from_config",
    "configs",
    "config_path",
    "kv_bytes_per_token",
    "kv_cache_bytes",
    "prefill_shape",
    "as_model",
]

CONFIG_DIR = DATA_DIR / "configs"

#: Each integer field's valid range: sizes beyond these are typos, not models.
LIMITS = {
    "num_hidden_layers": (1, 1024),
    "num_attention_heads": (1, 1024),
    "num_key_value_heads": (1, 1024),
    "hidden_size": (1, 1 << 17),
    "head_dim": (1, 4096),
    "intermediate_size": (1, 1 << 20),
    "vocab_size": (1, 1 << 23),
    "max_position_embeddings": (1, 1 << 27),
    "sliding_window": (1, 1 << 27),
    "kv_lora_rank": (1, 1 << 14),
    "qk_rope_head_dim": (1, 1 << 12),
    "qk_nope_head_dim": (1, 1 << 12),
    "v_head_dim": (1, 1 << 12),
    "q_lora_rank": (1, 1 << 15),
    "n_routed_experts": (1, 4096),
    "num_local_experts": (1, 4096),
    "num_experts_per_tok": (1, 4096),
    "moe_intermediate_size": (1, 1 << 20),
    "n_shared_experts": (0, 64),
    "first_k_dense_replace": (0, 1024),
    "moe_layer_freq": (1, 1024),
}
_MLA = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
_REQUIRED = object()


def configs() -> list[str]:
    """Names of the configs shipped in data/configs/ (file names without .json), sorted:
    ['DeepSeek-V3', 'Gemma-2-9B', 'Llama-3-8B', 'Llama-3.1-70B', 'Mistral-7B-v0.1', 'Qwen2.5-7B']."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def config_path(name: str) -> Path:
    """The file of shipped config `name` (case-, space- and underscore-insensitive)."""
    return _shipped_path(name, "name")


def _shipped_path(name, param: str) -> Path:
    if not isinstance(name, str):
        raise TypeError(f"{param} must be a shipped config's name, got {short(name)} ({type(name).__name__})")
    found = {key(n): n for n in configs()}.get(key(name))
    if found is None:
        raise ValueError(
            f"{param}={short(name)} is not a shipped config; valid: {', '.join(configs())}, "
            f"a path to a config.json, or a dict"
        )
    return CONFIG_DIR / f"{found}.json"


def _read(config) -> tuple[dict, str, str | None]:
    """(the config as a dict, where it came from, the shipped name or None)."""
    shipped = None
    if (
        isinstance(config, str)
        and not config.lower().endswith(".json")
        and os.sep not in config
        and "/" not in config
    ):
        path = _shipped_path(config, "config")
        shipped = path.stem
        config = path
    if isinstance(config, (str, os.PathLike)):
        path = Path(config)
        if not path.is_file():
            raise ValueError(
                f"config={str(config)!r} is not a file; valid: a path to a config.json, "
                f"a dict, or a shipped name ({', '.join(configs())})"
            )
        try:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"config={str(config)!r} is not valid JSON ({e})") from None
        if not isinstance(raw, dict):
            raise TypeError(f"config={str(config)!r} must hold a JSON object, got {type(raw).__name__}")
        return raw, str(raw.get("_source", path)), shipped
    if isinstance(config, dict):
        return config, str(config.get("_source", "config dict")), None
    raise TypeError(
        f"config must be a dict, a path to a config.json (str or os.PathLike) or a "
        f"shipped name, got {short(config)} ({type(config).__name__})"
    )


def _int(cfg: dict, field: str, default=_REQUIRED, hi: int | None = None):
    """cfg[field] as an int in LIMITS[field] (upper bound `hi` if tighter); `default` if absent
    or null; strict: bools, floats (even 32.0) and strings are refused, naming the field."""
    lo, top = LIMITS[field]
    hi = top if hi is None else min(hi, top)
    value = cfg.get(field)
    if value is None:
        if default is _REQUIRED:
            raise ValueError(
                f"config lacks {field} (absent or null); valid: an integer, {lo} <= {field} <= {hi}"
            )
        return default
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{field} must be an integer, got {short(value)} ({type(value).__name__}); "
            f"valid: {lo} <= {field} <= {hi}"
        )
    return as_int(field, value, lo, hi)


def _flag(cfg: dict, field: str, default: bool) -> bool:
    return default if cfg.get(field) is None else as_bool(field, cfg[field])


def _window_layers(cfg: dict, layers: int, window: int | None) -> int | None:
    """How many layers use the window: `layer_types` if given, every other one for Gemma-2/3
    (layer 0 windowed), else None (all)."""
    if window is None:
        return None
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or not all(isinstance(t, str) for t in types):
            raise ValueError(
                f"layer_types={short(types)} must be a list of {layers} strings "
                f"(one per layer, e.g. 'sliding_attention', 'full_attention')"
            )
        return sum(t == "sliding_attention" for t in types)
    return (layers + 1) // 2 if str(cfg.get("model_type", "")).startswith("gemma") else None


def _params(cfg: dict, *, h, layers, q_heads, kv_heads, d, inter, vocab, mla) -> tuple[int, int]:
    """(total, active) parameters counted from the shapes: embeddings, attention, gated MLP (three
    matrices) or mixture of experts, RMSNorms, final norm, LM head unless tied."""
    mtype = str(cfg.get("model_type", ""))
    if mla:
        rank, rope, nope, v = mla
        q_lora = _int(cfg, "q_lora_rank", None)
        q = (
            h * q_heads * (nope + rope)
            if q_lora is None
            else h * q_lora + q_lora + q_lora * q_heads * (nope + rope)
        )
        attn = q + h * (rank + rope) + rank + rank * q_heads * (nope + v) + q_heads * v * h
    else:
        attn = 2 * h * q_heads * d + 2 * h * kv_heads * d
        if _flag(cfg, "attention_bias", False):
            attn += q_heads * d + 2 * kv_heads * d + h
        elif mtype.startswith("qwen2"):  # Qwen2: biases on q, k, v only
            attn += q_heads * d + 2 * kv_heads * d
    norms = (4 if mtype.startswith("gemma2") else 2) * h
    experts = _int(cfg, "n_routed_experts", None) or _int(cfg, "num_local_experts", None)
    dense = 3 * h * inter
    total = active = layers * (attn + norms + dense)
    if experts:
        width = _int(cfg, "moe_intermediate_size", inter)
        top_k = _int(cfg, "num_experts_per_tok", 2, experts)
        shared = _int(cfg, "n_shared_experts", 0)
        first = _int(cfg, "first_k_dense_replace", 0, layers)
        every = _int(cfg, "moe_layer_freq", 1)
        moe_layers = sum(1 for i in range(first, layers) if i % every == 0)
        expert = 3 * h * width
        total += moe_layers * ((experts + shared) * expert + h * experts - dense)
        active += moe_layers * ((top_k + shared) * expert + h * experts - dense)
    tied = _flag(cfg, "tie_word_embeddings", mtype.startswith("gemma"))
    emb = vocab * h * (1 if tied else 2) + h
    return total + emb, active + emb


def from_config(config, *, name: str | None = None, params: int | None = None) -> Model:
    """The course's `Model` for a Hugging Face config: a dict, a path (str or os.PathLike) to a
    config.json, or the name of a config shipped in data/configs/ (`configs()`; a string without
    '/' that does not end in .json is a name).

    The name is `name=`, else the shipped config's name, else the last part of `_name_or_path`,
    else `model_type`. Malformed configs are refused by field: missing or null required fields
    and non-integers (bools, 32.5, "32") get TypeError/ValueError naming the field, its value and
    the valid range (`LIMITS`), as do heads not divisible by KV heads and hidden_size not divisible
    by heads when head_dim is absent.

    >>> m = from_config("Llama-3-8B")
    >>> m.name, m.layers, m.q_heads, m.kv_heads, m.head_dim, m.max_context
    ('Llama-3-8B', 32, 32, 8, 128, 8192)
    >>> ds = from_config({"num_attention_heads": 128, "num_hidden_layers": 61, "hidden_size": 7168,
    ...     "intermediate_size": 18432, "vocab_size": 129280, "kv_lora_rank": 512,
    ...     "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}, name="my-mla")
    >>> ds.kv_heads, ds.head_dim, ds.group, ds.mla
    (1, 576, 128, True)
    """
    cfg, source, shipped = _read(config)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a non-empty string, got {short(name)} ({type(name).__name__})")
    if name is not None and not name.strip():
        raise ValueError(f"name={name!r} is blank; valid: a non-empty string (it labels the model)")
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    layers = _int(cfg, "num_hidden_layers")
    q_heads = _int(cfg, "num_attention_heads")
    kv_config = _int(cfg, "num_key_value_heads", q_heads)
    if q_heads % kv_config:
        raise ValueError(
            f"num_attention_heads={q_heads} is not a multiple of num_key_value_heads="
            f"{kv_config}; valid: num_key_value_heads dividing {q_heads}"
        )
    hidden = _int(cfg, "hidden_size")
    mla = tuple(_int(cfg, f) for f in _MLA) if cfg.get("kv_lora_rank") is not None else None
    if mla:
        kv_heads, head_dim = 1, mla[0] + mla[1]
    else:
        kv_heads = kv_config
        if cfg.get("head_dim") is None and hidden % q_heads:
            raise ValueError(
                f"hidden_size={hidden} is not a multiple of num_attention_heads={q_heads} "
                f"and head_dim is absent; valid: give head_dim, or hidden_size a "
                f"multiple of {q_heads}"
            )
        head_dim = _int(cfg, "head_dim", hidden // q_heads)
    inter, vocab = _int(cfg, "intermediate_size"), _int(cfg, "vocab_size")
    window = _int(cfg, "sliding_window", None) if _flag(cfg, "use_sliding_window", True) else None
    total, active = _params(
        cfg,
        h=hidden,
        layers=layers,
        q_heads=q_heads,
        kv_heads=kv_config,
        d=head_dim,
        inter=inter,
        vocab=vocab,
        mla=mla,
    )
    if params is not None:
        total = active = as_int("params", params, 1, None)
    if name is None:  # the first of these that is not blank
        path = str(cfg.get("_name_or_path") or "").strip().rstrip("/").split("/")[-1].strip()
        name = next(n for n in (shipped, path, str(cfg.get("model_type") or "").strip(), "my-model") if n)
    extra = {"model_type": cfg.get("model_type"), "active_params": active}
    if mla:
        extra |= dict(zip(_MLA, mla), config_kv_heads=kv_config, mla_equivalent_group=q_heads)
    return Model(
        name=name.strip(),
        layers=layers,
        hidden=hidden,
        q_heads=q_heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=inter,
        vocab=vocab,
        params=total,
        source=source,
        extra=freeze(extra),
        sliding_window=window,
        window_layers=_window_layers(cfg, layers, window),
        max_context=_int(cfg, "max_position_embeddings", None),
    )


def as_model(model) -> Model:
    """A `Model`, a models.json name (`get_model`) or anything `from_config` reads (a dict, a
    path, a shipped config's name); anything else is a TypeError naming `model`."""
    if isinstance(model, Model):
        return model
    if not isinstance(model, (str, os.PathLike, dict)):
        raise TypeError(
            f"model must be a Model, a model's name, a config dict or a path to a "
            f"config.json, got {short(model)} ({type(model).__name__})"
        )
    if isinstance(model, str) and not model.lower().endswith(".json") and "/" not in model:
        if key(model) in {key(n) for n in configs()}:
            return from_config(model)
        return get_model(model)
    return from_config(model)


def kv_bytes_per_token(model, dtype: str = "bf16") -> float:
    """KV-cache bytes one token adds, all layers: 2 (K and V) x kv_heads x head_dim x bytes per
    layer; MLA keeps one latent of kv_lora_rank + qk_rope_head_dim per layer instead.

    >>> kv_bytes_per_token("Llama-3-8B"), kv_bytes_per_token("DeepSeek-V3")   # 2*8*128*2*32; 576*2*61
    (131072, 70272)
    """
    m, b = as_model(model), DTYPE_BYTES[dtype_name(dtype)]
    per_layer = m.head_dim if m.mla else 2 * m.kv_heads * m.head_dim
    return m.layers * per_layer * b


def kv_cache_bytes(model, context: int, batch: int = 1, dtype: str = "bf16") -> float:
    """KV-cache bytes of `batch` requests of `context` tokens: a windowed layer keeps at most
    `sliding_window` tokens (Mistral-7B-v0.1: 4,096 in every layer; Gemma-2: in half of them).

    >>> kv_cache_bytes("Mistral-7B-v0.1", 32768) == kv_bytes_per_token("Mistral-7B-v0.1") * 4096
    True
    """
    m = as_model(model)
    context = as_int("context", context, 1, 1 << 40)
    batch = as_int("batch", batch, 1, 1 << 30)
    windowed = 0 if m.sliding_window is None else (m.layers if m.window_layers is None else m.window_layers)
    tokens = windowed * min(context, m.sliding_window or context) + (m.layers - windowed) * context
    return kv_bytes_per_token(m, dtype) / m.layers * tokens * batch


def prefill_shape(model) -> Model:
    """The shape prefill attention runs: the model itself, except MLA, which prefills without
    absorbing its up-projections: config_kv_heads (DeepSeek-V3: 128) heads of qk dim
    qk_nope_head_dim + qk_rope_head_dim (192) (its value dim, 128, is counted as 192 too)."""
    m = as_model(model)
    if not m.mla:
        return m
    e = m.extra
    return replace(
        m,
        kv_heads=int(e["config_kv_heads"]),
        head_dim=int(e["qk_nope_head_dim"]) + int(e["qk_rope_head_dim"]),
    )
