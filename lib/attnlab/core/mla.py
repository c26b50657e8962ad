"""MLA (multi-head latent attention, DeepSeek-V2/V3) in decode: FLOPs, bytes and intensity of its
two forms, from the shapes.

MLA caches one latent vector per token: `latent` = 512 compressed dimensions c plus `rope` = 64
dimensions of a key part k_r that carries the rotary position and is shared by all heads. Each of
the `heads` = 128 query heads would get its own key and value by up-projection:
k_h = [W_UK,h c ; k_r] (nope + rope = 128 + 64 = 192 wide), v_h = W_UV,h c (128 wide).

- The lecture's rough view ("gqa_view"): GQA with g = 128 over one shared head of the latent's
  width (576), K and V read as two tensors: FLOP/byte = g l_kv / (g + l_kv), about 126 at 8K.
  It counts the 128-fold reuse of the cached row; what it leaves out is that K and V are the same
  bytes (V is the first 512 dimensions of the row K is), which the absorbed form reads once.
- Materialised form: up-project and store per-head K and V, then run ordinary attention. Every
  head reads its own K and V, so it is multi-head attention with g = 1 and d_k = 192, d_v = 128:
  about 1 FLOP per byte, and a KV cache 71 times bigger than the latent one.
- Absorbed form (FlashMLA, FlashInfer's MLA kernels): fold W_UK into the query
  (q_h^T W_UK,h c = (W_UK,h^T q_h)^T c) and W_UV into the output projection. Then every head
  scores against the same 576-wide cached row [c ; k_r] and sums the same 512-wide c as its value.
  One read of 576 values per token serves all 128 heads, for both K and V: g = 128 with K and V
  sharing their bytes.

Per request and layer, one decode step (l_qo queries per head, l_kv cached tokens), b bytes per
element:

    gqa_view:     flops = 4 H l_qo l_kv w,  bytes = b (2 H l_qo w + 2 l_kv w),  w = latent + rope
    absorbed:     flops = 2 H l_qo l_kv (latent + rope) + 2 H l_qo l_kv latent
                  bytes = b (l_kv (latent + rope) + H l_qo (latent + rope) + H l_qo latent)
    materialised: flops = 2 H l_qo l_kv (nope + rope) + 2 H l_qo l_kv v_dim
                  bytes = b (H l_kv (nope + rope + v_dim) + H l_qo (nope + rope) + H l_qo v_dim)

(queries in, outputs out; the up- and down-projections of the query and output are per query,
not per cached token, and are left to the linear layers as the lecture does.)
"""

from __future__ import annotations

from typing import NamedTuple

from attnlab.validate import as_dtype_bytes, as_int, choice, short

__all__ = ["MLAShape", "DEEPSEEK_V3", "mla_decode_cost", "mla_intensity", "mla_forms", "FORMS", "FORM_LABELS"]

FORMS = ("gqa_view", "absorbed", "materialised")

#: What each form means, in the words every notebook uses.
FORM_LABELS = {
    "gqa_view": "the lecture's rough view, GQA with g = 128 (K and V read separately)",
    "absorbed": "what MLA kernels run: K and V share the 576-wide latent row, read once",
    "materialised": "per-head K and V up-projected and stored: MHA again",
}


class MLAShape(NamedTuple):
    """Head count and widths of one MLA layer."""

    heads: int = 128
    latent: int = 512  # compressed KV dimensions (kv_lora_rank)
    rope: int = 64  # shared rotary key part (qk_rope_head_dim)
    nope: int = 128  # per-head key part without rotary (qk_nope_head_dim)
    v_dim: int = 128  # per-head value width (v_head_dim)


#: DeepSeek-V3's attention (and V2's): 128 heads, latent 512 + rope 64, heads of 128 + 64 / 128.
DEEPSEEK_V3 = MLAShape()


def mla_decode_cost(
    form: str = "absorbed", l_kv: int = 8192, l_qo: int = 1, shape: MLAShape = DEEPSEEK_V3, *, dtype_bytes=2
) -> tuple[int, float]:
    """(FLOPs, bytes) of one MLA layer's decode attention for one request, in `form`
    ("gqa_view", "absorbed" or "materialised"); formulas in the module docstring. Exact for
    Python ints.

    >>> mla_decode_cost("gqa_view", 8192)
    (2415919104, 19169280)
    >>> mla_decode_cost("absorbed", 8192)
    (2281701376, 9715712)
    >>> mla_decode_cost("materialised", 8192)
    (671088640, 671170560)
    """
    choice("form", form, FORMS)
    l_kv = as_int("l_kv", l_kv, 1, None)
    l_qo = as_int("l_qo", l_qo, 1, None)
    if not isinstance(shape, MLAShape):
        raise TypeError(f"shape must be an MLAShape, got {short(shape)} ({type(shape).__name__})")
    H, lat, rope, nope, v = (as_int(f"shape.{k}", x, 1, None) for k, x in zip(MLAShape._fields, shape))
    b = as_dtype_bytes("dtype_bytes", dtype_bytes)
    q = H * l_qo
    if form == "gqa_view":
        w = lat + rope
        flops = 4 * q * l_kv * w
        elements = 2 * q * w + 2 * l_kv * w
    elif form == "absorbed":
        flops = 2 * q * l_kv * (lat + rope) + 2 * q * l_kv * lat
        elements = l_kv * (lat + rope) + q * (lat + rope) + q * lat
    else:
        flops = 2 * q * l_kv * (nope + rope) + 2 * q * l_kv * v
        elements = H * l_kv * (nope + rope + v) + q * (nope + rope) + q * v
    try:
        return flops, elements * b  # a float for sub-byte dtypes
    except OverflowError:
        raise ValueError(
            f"l_kv={short(l_kv)}, l_qo={short(l_qo)} give {short(elements)} elements, whose "
            f"bytes at dtype_bytes={b} are beyond float64 (1.8e308); valid: smaller "
            f"l_kv and l_qo, or a whole-byte dtype for exact integer bytes"
        ) from None


def mla_intensity(
    form: str = "absorbed", l_kv: int = 8192, l_qo: int = 1, shape: MLAShape = DEEPSEEK_V3, *, dtype_bytes=2
) -> float:
    """FLOP per byte of `mla_decode_cost`. Absorbed, bf16, long context: H (2 (latent + rope) +
    2 latent) / (2 (latent + rope)) = 128 x 2176 / 1152 = 241.8; the g = 128 view: about g;
    materialised: about 1.

    >>> [round(mla_intensity(f, 8192), 1) for f in ("gqa_view", "absorbed", "materialised")]
    [126.0, 234.8, 1.0]
    """
    f, b = mla_decode_cost(form, l_kv, l_qo, shape, dtype_bytes=dtype_bytes)
    return f / b


def mla_forms(l_kv: int = 8192, l_qo: int = 1, shape: MLAShape = DEEPSEEK_V3, *, dtype_bytes=2) -> dict:
    """{form: FLOP/byte} for every form of FORMS, the one place the course's MLA intensities come
    from.

    >>> {f: round(i, 1) for f, i in mla_forms(8192).items()}
    {'gqa_view': 126.0, 'absorbed': 234.8, 'materialised': 1.0}
    """
    return {f: mla_intensity(f, l_kv, l_qo, shape, dtype_bytes=dtype_bytes) for f in FORMS}
