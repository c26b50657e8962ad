"""Your own model: configs read into Model, the shipped configs against a hand reading of their
JSON and against data/models.json, KV bytes by hand, malformed configs refused by field name."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pytest

import attnlab.machine.models as models_mod
from attnlab.machine.configs import (
    CONFIG_DIR,
    config_path,
    configs,
    from_config,
    kv_bytes_per_token,
    kv_cache_bytes,
    prefill_shape,
)
from attnlab.machine.your_model import YourModel, your_model
from attnlab.machine.your_model import your_model_summary as _summary
from attnlab.machine.hardware import get_gpu, ridge_point
from attnlab.machine.models import Model, get_model, prefill_cost

SHIPPED = ["DeepSeek-V3", "Gemma-2-9B", "Llama-3-8B", "Llama-3.1-70B", "Mistral-7B-v0.1", "Qwen2.5-7B"]

# (layers, hidden, q_heads, kv_heads, head_dim, intermediate, vocab, window, window_layers, max ctx),
# read by hand off each JSON file (DeepSeek-V3: its MLA decode form, kv 1 and 512 + 64)
BY_HAND = {
    "Llama-3-8B": (32, 4096, 32, 8, 128, 14336, 128256, None, None, 8192),
    "Llama-3.1-70B": (80, 8192, 64, 8, 128, 28672, 128256, None, None, 131072),
    "Mistral-7B-v0.1": (32, 4096, 32, 8, 128, 14336, 32000, 4096, None, 32768),
    "Qwen2.5-7B": (28, 3584, 28, 4, 128, 18944, 152064, None, None, 131072),  # use_sliding_window false
    "Gemma-2-9B": (42, 3584, 16, 8, 256, 14336, 256000, 4096, 21, 8192),
    "DeepSeek-V3": (61, 7168, 128, 1, 576, 18432, 129280, None, None, 163840),
}
# the same model in data/models.json
IN_MODELS_JSON = {
    "Llama-3-8B": "Llama-3-8B",
    "Llama-3.1-70B": "Llama-3-70B",
    "Mistral-7B-v0.1": "Mistral-7B",
    "Gemma-2-9B": "Gemma-2-9B",
    "DeepSeek-V3": "DeepSeek-V3",
}
SHAPE = ("layers", "hidden", "q_heads", "kv_heads", "head_dim", "intermediate", "vocab")

LLAMA = {
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
}


def your_model_summary(*a, **kw):
    """The report with each row's wrapped lines joined again (it wraps at 100 characters)."""
    text = _summary(*a, **kw)
    assert max(len(line) for line in text.splitlines()) <= 100
    return re.sub(r"\n {25}", " ", text)


def _json(name):
    return json.loads((CONFIG_DIR / f"{name}.json").read_text(encoding="utf-8"))


def test_shipped_list():
    assert configs() == SHIPPED
    assert not hasattr(models_mod, "from_config") and not hasattr(models_mod, "configs")  # one home


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_config_is_sourced_hf_json(name):
    raw = _json(name)
    assert raw["_source"].startswith("https://huggingface.co/") and raw["_source"].endswith("/config.json")
    assert raw["_name_or_path"] in raw["_source"]
    for f in ("num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size", "model_type"):
        assert f in raw


@pytest.mark.parametrize("name", SHIPPED)
def test_from_config_every_shipped_field_by_hand(name):
    m = from_config(name)
    assert isinstance(m, Model) and m.name == name
    got = tuple(getattr(m, f) for f in SHAPE) + (m.sliding_window, m.window_layers, m.max_context)
    assert got == BY_HAND[name]
    assert m.source == _json(name)["_source"]


def test_hand_reading_of_the_special_fields():
    ds = from_config("DeepSeek-V3")
    assert ds.mla and ds.group == 128
    assert (
        ds.extra["kv_lora_rank"],
        ds.extra["qk_rope_head_dim"],
        ds.extra["qk_nope_head_dim"],
        ds.extra["v_head_dim"],
        ds.extra["config_kv_heads"],
    ) == (512, 64, 128, 128, 128)
    assert not any(from_config(n).mla for n in SHIPPED if n != "DeepSeek-V3")
    g2 = from_config("Gemma-2-9B")
    assert g2.head_dim == 256 != g2.hidden // g2.q_heads  # given, not derived
    assert from_config("Qwen2.5-7B").group == 7


@pytest.mark.parametrize("name", sorted(IN_MODELS_JSON))
def test_shipped_config_agrees_with_models_json(name):
    m, ref = from_config(name), get_model(IN_MODELS_JSON[name])
    assert tuple(getattr(m, f) for f in SHAPE) == tuple(getattr(ref, f) for f in SHAPE)
    if ref.mla:
        for f in (
            "kv_lora_rank",
            "qk_rope_head_dim",
            "qk_nope_head_dim",
            "v_head_dim",
            "config_kv_heads",
            "mla_equivalent_group",
        ):
            assert m.extra[f] == ref.extra[f], f
        assert m.params == pytest.approx(ref.params, rel=1e-3)  # 671.03e9 vs the paper's 671e9
        assert m.active_params == pytest.approx(ref.active_params, rel=0.02)  # 37.6e9 vs 37e9
    else:
        assert m.params == ref.params and m.active_params == m.params  # counted from the shapes


def test_qwen_params_count_qkv_biases():
    # Qwen2.5-7B's safetensors total: 7,615,616,512 (q, k, v carry biases)
    assert from_config("Qwen2.5-7B").params == 7_615_616_512


def test_params_override_and_name_rules():
    assert from_config(LLAMA, params=8_000_000_000).params == 8_000_000_000
    assert from_config(LLAMA).name == "my-model"
    assert from_config({**LLAMA, "model_type": "llama"}).name == "llama"
    assert from_config({**LLAMA, "_name_or_path": "org/My-LM-8B/"}).name == "My-LM-8B"
    assert from_config({**LLAMA, "_name_or_path": "org/x"}, name="mine").name == "mine"
    assert from_config("Llama-3-8B", name="copy").name == "copy"
    assert from_config(LLAMA).source == "config dict"


def test_defaults_kv_heads_and_head_dim():
    m = from_config({k: v for k, v in LLAMA.items() if k != "num_key_value_heads"})
    assert (m.kv_heads, m.group, m.head_dim) == (32, 1, 128)
    assert from_config({**LLAMA, "sliding_window": None}).sliding_window is None
    assert from_config({**LLAMA, "sliding_window": 1024, "use_sliding_window": False}).sliding_window is None
    lt = ["sliding_attention", "full_attention"] * 16
    assert from_config({**LLAMA, "sliding_window": 512, "layer_types": lt}).window_layers == 16


def test_text_config_is_read():
    m = from_config({"model_type": "wrapper", "text_config": dict(LLAMA)})
    assert (m.layers, m.kv_heads) == (32, 8)


def test_lookup_by_name_is_case_insensitive():
    assert from_config("llama 3 8b") == from_config("Llama-3-8B")
    assert config_path("deepseek_v3").name == "DeepSeek-V3.json"
    with pytest.raises(ValueError, match="Llama-3-8B"):
        from_config("Llama-9")


def test_dict_and_path_agree(tmp_path):
    raw = _json("Mistral-7B-v0.1")
    p = tmp_path / "config.json"
    p.write_text(json.dumps(raw), encoding="utf-8")
    a, b, c = from_config(raw, name="m"), from_config(p, name="m"), from_config(str(p), name="m")
    assert a == b == c
    assert a.extra == b.extra
    assert from_config(CONFIG_DIR / "Mistral-7B-v0.1.json") == from_config("Mistral-7B-v0.1")


def test_file_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="not valid JSON"):
        from_config(bad)
    arr = tmp_path / "arr.json"
    arr.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(TypeError, match="JSON object"):
        from_config(arr)
    with pytest.raises(ValueError, match="not a file"):
        from_config(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="not a file"):
        from_config(str(tmp_path))


@pytest.mark.parametrize(
    "bad", [None, 32, 3.5, [LLAMA], (1, 2), b"config.json", True, object()], ids=lambda v: type(v).__name__
)
def test_non_dict_non_path_refused(bad):
    with pytest.raises(TypeError, match="config must be a dict"):
        from_config(bad)


def _without(field):
    return {k: v for k, v in LLAMA.items() if k != field}


MLA = {
    **LLAMA,
    "num_key_value_heads": 32,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
}
MALFORMED = [
    # (config, exception, field named, a text the message must hold)
    (_without("num_hidden_layers"), ValueError, "num_hidden_layers", "lacks"),
    (_without("num_attention_heads"), ValueError, "num_attention_heads", "lacks"),
    (_without("hidden_size"), ValueError, "hidden_size", "lacks"),
    (_without("intermediate_size"), ValueError, "intermediate_size", "lacks"),
    (_without("vocab_size"), ValueError, "vocab_size", "lacks"),
    ({**LLAMA, "num_hidden_layers": None}, ValueError, "num_hidden_layers", "lacks"),
    ({**LLAMA, "num_hidden_layers": 32.5}, TypeError, "num_hidden_layers", "32.5"),
    ({**LLAMA, "num_hidden_layers": 32.0}, TypeError, "num_hidden_layers", "32.0"),
    ({**LLAMA, "num_hidden_layers": "32"}, TypeError, "num_hidden_layers", "'32'"),
    ({**LLAMA, "num_hidden_layers": True}, TypeError, "num_hidden_layers", "True"),
    ({**LLAMA, "num_hidden_layers": 0}, ValueError, "num_hidden_layers", "1 <= num_hidden_layers <= 1024"),
    ({**LLAMA, "num_hidden_layers": -4}, ValueError, "num_hidden_layers", "-4"),
    ({**LLAMA, "num_hidden_layers": 10**6}, ValueError, "num_hidden_layers", "1000000"),
    ({**LLAMA, "num_attention_heads": 0}, ValueError, "num_attention_heads", "valid"),
    ({**LLAMA, "num_attention_heads": [32]}, TypeError, "num_attention_heads", "list"),
    ({**LLAMA, "num_key_value_heads": 0}, ValueError, "num_key_value_heads", "valid"),
    ({**LLAMA, "num_key_value_heads": 8.0}, TypeError, "num_key_value_heads", "8.0"),
    ({**LLAMA, "num_key_value_heads": 5}, ValueError, "num_key_value_heads", "dividing 32"),
    ({**LLAMA, "num_key_value_heads": 64}, ValueError, "num_key_value_heads", "dividing 32"),
    ({**LLAMA, "hidden_size": 4100}, ValueError, "hidden_size", "head_dim is absent"),
    ({**LLAMA, "hidden_size": 1 << 30}, ValueError, "hidden_size", "1073741824"),
    ({**LLAMA, "hidden_size": False}, TypeError, "hidden_size", "False"),
    ({**LLAMA, "head_dim": 0}, ValueError, "head_dim", "1 <= head_dim <= 4096"),
    ({**LLAMA, "head_dim": 128.5}, TypeError, "head_dim", "128.5"),
    ({**LLAMA, "head_dim": 1 << 20}, ValueError, "head_dim", "valid"),
    ({**LLAMA, "intermediate_size": "14336"}, TypeError, "intermediate_size", "str"),
    ({**LLAMA, "vocab_size": -1}, ValueError, "vocab_size", "-1"),
    ({**LLAMA, "vocab_size": 1 << 40}, ValueError, "vocab_size", "valid"),
    ({**LLAMA, "max_position_embeddings": 0}, ValueError, "max_position_embeddings", "valid"),
    ({**LLAMA, "max_position_embeddings": 8192.0}, TypeError, "max_position_embeddings", "8192.0"),
    ({**LLAMA, "sliding_window": 0}, ValueError, "sliding_window", "valid"),
    ({**LLAMA, "sliding_window": "4096"}, TypeError, "sliding_window", "str"),
    ({**LLAMA, "sliding_window": 4096, "use_sliding_window": "yes"}, TypeError, "use_sliding_window", "bool"),
    ({**LLAMA, "tie_word_embeddings": 1}, TypeError, "tie_word_embeddings", "bool"),
    ({**LLAMA, "attention_bias": "false"}, TypeError, "attention_bias", "bool"),
    ({**LLAMA, "sliding_window": 64, "layer_types": ["full_attention"]}, ValueError, "layer_types", "32"),
    ({**MLA, "kv_lora_rank": 0}, ValueError, "kv_lora_rank", "valid"),
    ({**MLA, "kv_lora_rank": 512.5}, TypeError, "kv_lora_rank", "512.5"),
    ({k: v for k, v in MLA.items() if k != "qk_rope_head_dim"}, ValueError, "qk_rope_head_dim", "lacks"),
    ({**MLA, "qk_nope_head_dim": "128"}, TypeError, "qk_nope_head_dim", "str"),
    ({**MLA, "v_head_dim": -128}, ValueError, "v_head_dim", "valid"),
    ({**MLA, "q_lora_rank": 1.5}, TypeError, "q_lora_rank", "1.5"),
    ({**LLAMA, "n_routed_experts": 0}, ValueError, "n_routed_experts", "valid"),
    ({**LLAMA, "num_local_experts": 8, "num_experts_per_tok": 9}, ValueError, "num_experts_per_tok", "<= 8"),
    ({**LLAMA, "num_local_experts": 8, "num_experts_per_tok": 2.0}, TypeError, "num_experts_per_tok", "2.0"),
    (
        {**LLAMA, "n_routed_experts": 8, "first_k_dense_replace": 40},
        ValueError,
        "first_k_dense_replace",
        "<= 32",
    ),
]


@pytest.mark.parametrize(
    "cfg,exc,field,text", MALFORMED, ids=[f"{i}-{m[2]}" for i, m in enumerate(MALFORMED)]
)
def test_malformed_refused_by_field(cfg, exc, field, text):
    with pytest.raises(exc) as info:
        from_config(copy.deepcopy(cfg))
    msg = str(info.value)
    assert field in msg and text in msg, msg
    assert "valid" in msg or "must" in msg, msg


@pytest.mark.parametrize(
    "kw,exc,name",
    [
        ({"name": 3}, TypeError, "name"),
        ({"name": " "}, ValueError, "name"),
        ({"params": 0}, ValueError, "params"),
        ({"params": True}, TypeError, "params"),
    ],
)
def test_bad_arguments(kw, exc, name):
    with pytest.raises(exc, match=name):
        from_config(LLAMA, **kw)


def test_malformed_file_names_the_field(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**LLAMA, "num_attention_heads": 32.5}), encoding="utf-8")
    with pytest.raises(TypeError, match="num_attention_heads"):
        from_config(p)


# --- the numbers ----------------------------------------------------------------------------------------


def test_kv_bytes_per_token_by_hand():
    assert kv_bytes_per_token("Llama-3-8B") == 2 * 8 * 128 * 2 * 32 == 131072
    assert kv_bytes_per_token("Llama-3-8B", "fp8") == 65536
    assert kv_bytes_per_token("Llama-3.1-70B") == 2 * 8 * 128 * 2 * 80
    assert kv_bytes_per_token("Qwen2.5-7B") == 2 * 4 * 128 * 2 * 28
    assert kv_bytes_per_token("Gemma-2-9B") == 2 * 8 * 256 * 2 * 42
    assert kv_bytes_per_token("DeepSeek-V3") == (512 + 64) * 2 * 61 == 70272
    assert kv_bytes_per_token(get_model("DeepSeek-V3")) == 70272  # models.json's entry too
    assert kv_bytes_per_token(MLA) == (512 + 64) * 2 * 32


def test_kv_cache_bytes_windows():
    assert kv_cache_bytes("Llama-3-8B", 8192, batch=4) == 4 * 8192 * 131072
    assert kv_cache_bytes("Mistral-7B-v0.1", 32768) == 4096 * 131072
    assert kv_cache_bytes("Mistral-7B-v0.1", 1000) == 1000 * 131072
    per_layer = 2 * 8 * 256 * 2
    assert kv_cache_bytes("Gemma-2-9B", 32768) == per_layer * (21 * 4096 + 21 * 32768)


def test_prefill_shape_mla_is_unabsorbed():
    p = prefill_shape("DeepSeek-V3")
    assert (p.q_heads, p.kv_heads, p.head_dim) == (128, 128, 192)
    assert prefill_shape("Llama-3-8B") == from_config("Llama-3-8B")


def test_your_model_uses_the_course_models():
    r = your_model("Llama-3-8B", "H100", batch=1, context=32768)
    assert isinstance(r, YourModel) and r.gpu == "H100-SXM"
    assert r.kv_cache_bytes == 32768 * 131072
    assert r.intensity == pytest.approx(2 * 4 * 32768 / (2 * (4 + 32768)))  # ~ group 4
    assert r.ridge == ridge_point("H100") and r.memory_bound
    assert r.splits == 16  # hardware.best_split's doctest
    c = prefill_cost("Llama-3-8B", "H100-SXM", 32768)
    assert r.prefill_flash_s == c.flash_s and r.prefill_standard_s == c.standard_s
    assert r.prefill_standard_s / r.prefill_flash_s == pytest.approx(c.total_ratio)
    assert r.decode_step_s == pytest.approx(32 * r.split_time_s)
    assert r.hbm_bytes == get_gpu("H100").hbm_bytes


def test_your_model_mla_beside_gqa():
    ds, ll = (
        your_model("DeepSeek-V3", "H200", batch=64, context=8192),
        your_model("Llama-3.1-70B", "H200", batch=64, context=8192),
    )
    assert ds.intensity > 15 * ll.intensity  # group 128 against 8
    assert ds.kv_bytes_per_token < ll.kv_bytes_per_token / 4
    assert math.isclose(ds.ridge, ll.ridge)


def test_your_model_mla_uses_the_absorbed_form():
    from attnlab.core.mla import mla_intensity

    ds = your_model("DeepSeek-V3", "H200", batch=64, context=8192)
    # absorbed: 128 heads x (2 x 576 + 2 x 512) FLOPs per token over 576 latent values read once
    flops = 128 * 8192 * (2 * 576 + 2 * 512)
    nbytes = 2 * (8192 * 576 + 128 * 576 + 128 * 512)
    assert ds.intensity_form == "absorbed" and ds.intensity == pytest.approx(flops / nbytes)
    assert ds.intensity == mla_intensity("absorbed", 8192)
    assert ds.gqa_view_intensity == pytest.approx(128 * 8192 / (128 + 8192))  # the lecture's view
    assert not ds.memory_bound  # above the H200's ridge (206) ...
    assert your_model("DeepSeek-V3", "H100", batch=64, context=8192).memory_bound  # ... below the H100's
    text = your_model_summary("DeepSeek-V3", "H200", batch=64, context=8192)
    assert "234.8 FLOP/B vs H200-SXM ridge 206: compute-bound (MLA absorbed form" in text
    assert "g = 128 view: 126.0" in text
    assert your_model("Llama-3-8B").intensity_form == "gqa"


def test_your_model_split_is_the_notebook_04_rule():
    from attnlab.machine.hardware import recommended_split

    gemma = {
        "model_type": "gemma2",
        "num_hidden_layers": 46,
        "hidden_size": 4608,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "intermediate_size": 36864,
        "vocab_size": 256000,
        "max_position_embeddings": 8192,
        "sliding_window": 4096,
    }
    r = your_model(gemma, "H100", batch=16, context=8192)
    rec, fastest, runs = recommended_split(16, 8192, 16, "H100", head_dim=128, group=2)
    assert (r.splits, r.fastest_splits) == (rec, fastest) == (1, 32)  # 32 splits gain < 1 %
    times = {x.splits: x.time for x in runs}
    assert times[1] <= times[32] * 1.01 and r.split_time_s == times[1]
    assert (
        "1 split: 331 µs (unsplit 331 µs; the fewest within 1% of the fastest, 32 splits)"
        in your_model_summary(gemma, "H100", batch=16, context=8192)
    )


def test_prefill_row_calls_fa1_traffic_an_upper_bound():
    qwen = {
        "model_type": "qwen2",
        "num_hidden_layers": 64,
        "hidden_size": 5120,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "intermediate_size": 27648,
        "vocab_size": 152064,
    }
    r = your_model(qwen, "H100", context=32768)
    assert not r.flash_io_hidden and r.flash_io_s < r.prefill_flash_s
    row = next(
        ln
        for ln in your_model_summary(qwen, "H100", context=32768).splitlines()
        if ln.startswith("prefill, flash")
    )
    assert "does not hide" not in row and "upper bound" in row and "M = 100,000" in row


def test_window_reads_at_most_the_window():
    r = your_model("Mistral-7B-v0.1", "H200", batch=64, context=32768)
    assert r.keys == 4096
    assert r.decode_step_s == pytest.approx(32 * r.split_time_s)


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("gpu", ["A100", "H100", "H200", "B200"])
def test_summary_for_every_shipped_config_and_gpu(name, gpu):
    text = your_model_summary(name, gpu, batch=8, context=4096)
    assert name in text and get_gpu(gpu).name in text
    for row in (
        "KV bytes per token",
        "decode intensity",
        "split (1 layer)",
        "prefill, flash",
        "prefill, standard",
    ):
        assert row in text


def test_summary_notes():
    assert "beyond its max context 8,192" in your_model_summary("Llama-3-8B", context=32768)
    assert "does not fit" in your_model_summary("Llama-3-8B", context=32768)
    assert "window is not modelled" in your_model_summary("Mistral-7B-v0.1")
    assert "MLA: latent 576 = 512 + 64" in your_model_summary("DeepSeek-V3")


@pytest.mark.parametrize(
    "kw,exc,name",
    [
        ({"batch": 0}, ValueError, "batch"),
        ({"context": 1.5}, TypeError, "context"),
        ({"dtype": "int4"}, ValueError, "dtype"),
        ({"gpu": "V100"}, ValueError, "gpu"),
        ({"dtype": "fp8", "gpu": "A100"}, ValueError, "dtype"),
    ],
)
def test_your_model_bad_arguments(kw, exc, name):
    with pytest.raises(exc, match=name):
        your_model("Llama-3-8B", **kw)


def test_config_files_are_the_shipped_names():
    assert sorted(p.stem for p in Path(CONFIG_DIR).glob("*.json")) == SHIPPED
