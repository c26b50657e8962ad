"""The report of your model, notebook 00's "your own model" cells: what the course's models say
about a model (a Hugging Face config as `machine.configs.from_config` reads it, a `Model` or a
models.json name) on a GPU you pick.

The numbers are the course's own models, not new ones: decode intensity from `decode.intensity`,
the roofline's ridge point from `hardware.ridge_point`, MLA's decode intensity in its absorbed
form from `mla.mla_intensity` (the lecture's g = 128 view beside it), split-KV by notebook 04's
rule (`hardware.recommended_split`: the fewest splits within 1 % of the fastest), prefill from
`models.prefill_cost`, the KV cache from `configs.kv_cache_bytes`; bytes and times printed with
`attnlab.fmt`'s formats (3 significant digits), as the other notebooks print them.
"""

from __future__ import annotations

import textwrap

from dataclasses import dataclass

from attnlab.fmt import binary_bytes, seconds
from attnlab.validate import as_int
from attnlab.core.decode import intensity
from attnlab.core.mla import MLAShape, mla_intensity
from attnlab.machine.configs import as_model, kv_bytes_per_token, kv_cache_bytes, prefill_shape
from attnlab.machine.hardware import (
    DTYPE_BYTES,
    SPLIT_MARGIN,
    dtype_name,
    get_gpu,
    peak,
    recommended_split,
    ridge_point,
)
from attnlab.machine.models import Model, prefill_cost

__all__ = ["YourModel", "your_model", "your_model_summary"]


@dataclass(frozen=True)
class YourModel:
    """`your_model`'s numbers: KV bytes (per token, all layers; the whole cache at batch x
    context), decode intensity (FLOP/byte; for MLA the absorbed form, `intensity_form`, with the
    lecture's g = 128 view in `gqa_view_intensity`) against the GPU's ridge point, the recommended
    split (per layer, at the full context: the fewest splits within `split_margin` of the fastest,
    `fastest_splits`) with its time and the unsplit time, the attention of one decode step over all
    layers (each at its recommended split; a windowed layer reads at most its window), and one
    prefill of `context` tokens as `models.prefill_cost` sees it: compute time, FA1's traffic with
    the lecture's M = 100,000 elements and no L2 (`flash_io_s`, an upper bound of what a
    FlashAttention kernel moves; `flash_io_hidden`: whether even that bound fits under the
    compute time), and compute plus standard attention's extra HBM time."""

    model: Model
    gpu: str
    dtype: str
    batch: int
    context: int
    kv_bytes_per_token: float
    kv_cache_bytes: float
    hbm_bytes: int
    keys: int
    intensity: float
    intensity_form: str
    gqa_view_intensity: float
    ridge: float
    splits: int
    fastest_splits: int
    split_margin: float
    split_time_s: float
    unsplit_time_s: float
    decode_step_s: float
    prefill_flash_s: float
    prefill_standard_s: float
    flash_io_s: float
    sp_bytes_per_layer: float
    flash_io_hidden: bool
    flash_moves_more: bool

    @property
    def memory_bound(self) -> bool:
        """Decode attention sits left of the ridge point."""
        return self.intensity < self.ridge


def your_model(
    config, gpu="H100-SXM", *, batch: int = 1, context: int = 32768, dtype: str = "bf16"
) -> YourModel:
    """The course's numbers for a model (a config as `from_config` reads it, a `Model` or a
    models.json name) on `gpu` at `batch` requests of `context` tokens. Decode counts a query per
    request per head (l_qo = 1). For MLA the intensity is the absorbed form that MLA kernels run
    (`mla.mla_intensity("absorbed")`: K and V share the cached latent row); the lecture's g = 128
    view (K and V read as two tensors) is kept beside it, and the decode times still use its bytes
    (notebook 04's time model), an upper bound. Prefill takes the full causal N = context (no
    sliding window)."""
    m = as_model(config)
    g = get_gpu(gpu)
    dtype = dtype_name(dtype)
    peak(g, dtype)  # this chip has the dtype
    batch = as_int("batch", batch, 1, 1 << 20)
    context = as_int("context", context, 1, 1 << 24)
    b = DTYPE_BYTES[dtype]

    def best(n):
        splits, fastest, runs = recommended_split(
            batch, n, m.kv_heads, g, head_dim=m.head_dim, group=m.group, dtype=dtype
        )
        return splits, next(r.time for r in runs if r.splits == splits), runs[0].time, fastest

    windowed = (
        0 if m.sliding_window is None else (m.window_layers if m.window_layers is not None else m.layers)
    )
    keys = context if windowed < m.layers else min(context, m.sliding_window)
    splits, split_s, unsplit_s, fastest = best(keys)
    step = (m.layers - windowed) * split_s
    if windowed:
        step += windowed * best(min(context, m.sliding_window))[1]
    pre = prefill_cost(prefill_shape(m), g, context, dtype=dtype)
    gqa_view = intensity(m.group, 1, keys, dtype_bytes=b)
    if m.mla:
        e = m.extra
        shape = MLAShape(
            m.q_heads,
            int(e["kv_lora_rank"]),
            int(e["qk_rope_head_dim"]),
            int(e["qk_nope_head_dim"]),
            int(e["v_head_dim"]),
        )
        form, decode_i = "absorbed", mla_intensity("absorbed", keys, 1, shape, dtype_bytes=b)
    else:
        form, decode_i = "gqa" if m.group > 1 else "mha", gqa_view
    return YourModel(
        m,
        g.name,
        dtype,
        batch,
        context,
        kv_bytes_per_token(m, dtype),
        kv_cache_bytes(m, context, batch, dtype),
        g.hbm_bytes,
        keys,
        decode_i,
        form,
        gqa_view,
        ridge_point(g, dtype),
        splits,
        fastest,
        SPLIT_MARGIN,
        split_s,
        unsplit_s,
        step,
        pre.flash_s,
        pre.standard_s,
        pre.flash_io_s,
        pre.sp_bytes_per_layer,
        pre.flash_io_hidden,
        pre.flash_moves_more,
    )


def your_model_summary(
    config, gpu="H100-SXM", *, batch: int = 1, context: int = 32768, dtype: str = "bf16"
) -> str:
    """`your_model` as a text table, the notebook's entry point; `print` it."""
    r = your_model(config, gpu, batch=batch, context=context, dtype=dtype)
    m = r.model
    kind = (
        f"MLA: latent {m.head_dim} = {m.extra['kv_lora_rank']} + {m.extra['qk_rope_head_dim']}"
        if m.mla
        else f"GQA, group {m.group}"
        if m.group > 1
        else "MHA"
    )
    window = (
        ""
        if m.sliding_window is None
        else (
            f", window {m.sliding_window:,} in "
            + ("all" if m.window_layers is None else str(m.window_layers))
            + " layers"
        )
    )
    where = "memory-bound" if r.memory_bound else "compute-bound"
    form = (
        f" (MLA absorbed form: K and V share the latent row; the lecture's g = 128 view: "
        f"{r.gqa_view_intensity:,.1f})"
        if m.mla
        else ""
    )
    fastest = (
        "also the fastest"
        if r.fastest_splits == r.splits
        else f"the fewest within {r.split_margin:.0%} of the fastest, {r.fastest_splits} splits"
    )
    rows = [
        (
            "model",
            f"{m.name}: {m.layers} layers, {m.q_heads} query / {m.kv_heads} KV "
            f"head{'s' if m.kv_heads > 1 else ''} of "
            f"dim {m.head_dim} ({kind}){window}",
        ),
        (
            "on",
            f"{r.gpu}, {r.dtype}, batch {r.batch}, context {r.context:,}"
            + (
                f" (beyond its max context {m.max_context:,})"
                if m.max_context and r.context > m.max_context
                else ""
            ),
        ),
        ("KV bytes per token", f"{r.kv_bytes_per_token:,.0f} B (all layers)"),
        (
            "KV cache",
            f"{binary_bytes(r.kv_cache_bytes)} of {binary_bytes(r.hbm_bytes)} HBM"
            + ("" if r.kv_cache_bytes <= r.hbm_bytes else " (does not fit)"),
        ),
        ("decode intensity", f"{r.intensity:,.1f} FLOP/B vs {r.gpu} ridge {r.ridge:,.0f}: {where}{form}"),
        (
            "split (1 layer)",
            f"{r.keys:,} keys: {r.splits} split{'s' if r.splits > 1 else ''}: "
            f"{seconds(r.split_time_s)} (unsplit {seconds(r.unsplit_time_s)}; {fastest})",
        ),
        (
            "decode step (attention)",
            f"{seconds(r.decode_step_s)} over {m.layers} layers, each at that split"
            + ("; bytes of the g = 128 view, an upper bound" if m.mla else ""),
        ),
        (
            "prefill, flash",
            f"{seconds(r.prefill_flash_s)}, every kernel at its roofline"
            + (" (full causal: the window is not modelled)" if m.sliding_window else "")
            + (
                ""
                if r.flash_io_hidden
                else f"; its kernel held by FA1's traffic at the lecture's M = 100,000 elements, "
                f"no L2 ({seconds(r.flash_io_s)}): an upper bound"
            ),
        ),
        (
            "prefill, standard",
            f"{seconds(r.prefill_standard_s)} ({r.prefill_standard_s / r.prefill_flash_s:.2f}x)"
            + ("; FA1's count moves more at this head dim" if r.flash_moves_more else ""),
        ),
        (
            "S + P of one layer",
            binary_bytes(r.sp_bytes_per_layer)
            + (" (does not fit in HBM)" if r.sp_bytes_per_layer > r.hbm_bytes else ""),
        ),
    ]
    width = max(len(k) for k, _ in rows) + 2
    return "\n".join(
        textwrap.fill(
            v, 100, initial_indent=f"{k:<{width}}", subsequent_indent=" " * width, break_on_hyphens=False
        )
        for k, v in rows
    )
