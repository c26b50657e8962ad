"""GPU specifications (from `data/gpus.json`) and the roofline model.

A kernel that does F FLOPs and moves B bytes between HBM and the chip takes at least
max(F / peak, B / bandwidth) seconds: whichever of compute and memory is slower bounds it
(`roofline_time`). Its arithmetic intensity I = F / B decides which: below the ridge point
I* = peak / bandwidth the kernel is memory-bound and reaches I x bandwidth FLOP/s, above it
compute-bound at peak (`attainable`).

Conventions:
- peaks are dense (no 2:4 sparsity) Tensor Core FLOP/s per dtype ("fp32" is the CUDA-core rate);
- `sram_per_sm` is the combined L1 + shared-memory pool of one SM, in bytes;
- sizes in bytes, bandwidth in bytes/s, time in seconds. The IO model counts elements:
  bytes = elements x DTYPE_BYTES[dtype].

Example: the H100 SXM's bf16 ridge point is 989.4e12 / 3.35e12 = 295 FLOP/byte, so standard
attention's softmax (a few FLOPs per byte of S) sits far left of it, deep in the memory-bound
region.

What this leaves out on purpose: clocks below boost, power limits, L2 hits, and the fact that
real kernels reach 60-80 % of either roof. Every number has its source in the JSON file.

This file is long because the GPU catalogue, the roofline and the SM-sharing decode time model
read the same GPU record; each part is short. The decode time model (decode_time, best_split,
recommended_split) would split off by idea, but notebooks 04, 05 and 07 import it from here by
name, and a re-export from here would make the two modules import each other.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

import numpy as np

from attnlab.catalog import find, freeze, load
from attnlab.validate import as_float, as_int, as_reals, short

__all__ = [
    "GPU",
    "DTYPE_BYTES",
    "gpus",
    "get_gpu",
    "dtype_name",
    "peak",
    "ridge_point",
    "sm_share_time",
    "WaveTime",
    "decode_time",
    "DecodeTime",
    "best_split",
    "SPLITS",
    "attainable",
    "roofline_time",
    "recommended_split",
    "SPLIT_MARGIN",
]

#: Bytes per element of each dtype the course uses (fp4 packs two elements per byte).
DTYPE_BYTES: Mapping[str, float] = MappingProxyType(
    {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp4": 0.5}
)


@dataclass(frozen=True)
class GPU:
    """One GPU's specifications. `peak_flops` maps dtype -> dense FLOP/s; `sources` holds the
    documents every number comes from; `extra` keeps the JSON fields not named here
    (aliases, smem_max_per_sm, sram_bandwidth, ...)."""

    name: str
    sms: int
    hbm_bytes: int
    hbm_bandwidth: float
    sram_per_sm: int
    l2_bytes: int
    peak_flops: Mapping[str, float] = field(hash=False)
    sources: tuple = field(default=(), hash=False, repr=False)
    notes: str = field(default="", repr=False)
    extra: Mapping[str, object] = field(default_factory=dict, hash=False, compare=False, repr=False)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty string, got {self.name!r}")
        for f in ("sms", "hbm_bytes"):
            as_int(f, getattr(self, f), 1, None)
        for f in ("sram_per_sm", "l2_bytes"):
            as_int(f, getattr(self, f), 0, None)
        as_float("hbm_bandwidth", self.hbm_bandwidth, 0.0, None, lo_open=True)
        if not isinstance(self.peak_flops, Mapping) or not self.peak_flops:
            raise TypeError(
                f"peak_flops must be a non-empty mapping dtype -> FLOP/s, got {self.peak_flops!r}"
            )
        for k, v in self.peak_flops.items():
            dtype_name(k)
            as_float(f"peak_flops[{k!r}]", v, 0.0, None, lo_open=True)

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The dtypes this chip has a peak for, e.g. ('fp32', 'tf32', 'fp16', 'bf16', 'fp8')."""
        return tuple(self.peak_flops)


@functools.lru_cache(maxsize=None)
def _load() -> tuple[dict[str, GPU], dict[str, str]]:
    """(GPUs by name, lookup key -> name), read once."""
    named = (
        "name",
        "sms",
        "hbm_bytes",
        "hbm_bandwidth",
        "sram_per_sm",
        "l2_bytes",
        "peak_flops",
        "sources",
        "notes",
    )

    def build(entry):
        return GPU(
            name=entry["name"],
            sms=int(entry["sms"]),
            hbm_bytes=int(entry["hbm_bytes"]),
            hbm_bandwidth=float(entry["hbm_bandwidth"]),
            sram_per_sm=int(entry["sram_per_sm"]),
            l2_bytes=int(entry["l2_bytes"]),
            peak_flops=MappingProxyType({k: float(v) for k, v in entry["peak_flops"].items()}),
            sources=freeze(entry.get("sources", [])),
            notes=entry.get("notes", ""),
            extra=freeze({k: v for k, v in entry.items() if k not in named}),
        )

    return load("gpus.json", "gpus", build)


def gpus() -> list[str]:
    """Names of the GPUs in data/gpus.json, e.g. ['A100-80GB-SXM', 'H100-SXM', 'H200-SXM', 'B200']."""
    return list(_load()[0])


def get_gpu(gpu) -> GPU:
    """The `GPU` called `gpu` (case-insensitive; aliases such as "H100" or "h100 sxm" work);
    a `GPU` is returned as is.

    >>> get_gpu("h100").name, get_gpu("h100").hbm_bandwidth
    ('H100-SXM', 3350000000000.0)
    """
    return find("gpu", gpu, GPU, _load())


def dtype_name(dtype) -> str:
    """The canonical name of `dtype` ("BF16 " -> "bf16"): one of DTYPE_BYTES, else ValueError
    listing them; TypeError for a non-string.

    >>> dtype_name(" FP8"), DTYPE_BYTES[dtype_name("fp4")]
    ('fp8', 0.5)
    """
    if not isinstance(dtype, str):
        raise TypeError(f"dtype must be a string such as 'bf16', got {short(dtype)} ({type(dtype).__name__})")
    key = dtype.strip().lower()
    if key not in DTYPE_BYTES:
        raise ValueError(f"dtype={short(dtype)} is not known; valid: {', '.join(DTYPE_BYTES)}")
    return key


def peak(gpu, dtype: str = "bf16") -> float:
    """Dense peak FLOP/s of `gpu` for `dtype`.

    ValueError if the chip has no such dtype (the A100 has no fp8, only the B200 has fp4).

    >>> peak("H100-SXM", "bf16")
    989400000000000.0
    """
    g = get_gpu(gpu)
    if not isinstance(dtype, str):
        raise TypeError(f"dtype must be a string such as 'bf16', got {dtype!r} ({type(dtype).__name__})")
    key = dtype.strip().lower()
    if key not in g.peak_flops:
        raise ValueError(f"dtype={dtype!r} has no peak on {g.name}; valid: {', '.join(g.peak_flops)}")
    return g.peak_flops[key]


def ridge_point(gpu, dtype: str = "bf16") -> float:
    """Arithmetic intensity (FLOP/byte) where the roofline turns: peak / HBM bandwidth.

    >>> round(ridge_point("H100-SXM"), 1)         # 989.4e12 / 3.35e12
    295.3
    """
    g = get_gpu(gpu)
    return peak(g, dtype) / g.hbm_bandwidth


def _nonneg(name: str, value) -> np.ndarray:
    """`value` (a real number or an array of them) as float64, finite and >= 0, checked by name."""
    return np.asarray(as_reals(name, value, 0.0)[0], dtype=np.float64)


def _out(arr: np.ndarray):
    return float(arr) if arr.ndim == 0 else arr


def attainable(intensity, gpu, dtype: str = "bf16"):
    """Attainable FLOP/s at arithmetic intensity `intensity` (FLOP/byte):
    min(peak, intensity x bandwidth). Works elementwise on arrays; a scalar gives a float.

    Example: on the H100 SXM, intensity 10 gives 10 x 3.35e12 = 33.5e12 FLOP/s; 1000 gives the
    989.4e12 peak.

    >>> attainable(10, "H100"), attainable([10, 1000], "H100").tolist()
    (33500000000000.0, [33500000000000.0, 989400000000000.0])
    """
    g = get_gpu(gpu)
    p = peak(g, dtype)
    i = _nonneg("intensity", intensity)
    with np.errstate(over="ignore"):  # intensity x bandwidth beyond 1.8e308: the peak
        return _out(np.minimum(p, i * g.hbm_bandwidth))


def roofline_time(flops, bytes, gpu, dtype: str = "bf16"):  # noqa: A002 - the natural name
    """Lower bound on a kernel's time in seconds: max(flops / peak, bytes / bandwidth).
    Arrays broadcast; scalars give a float.

    Example: a 4096^3 bf16 matmul (2 x 4096^3 = 1.37e11 FLOPs; A, B and C of 4096^2 x 2 bytes,
    1.0e8 bytes) on the H100 SXM takes max(0.139 ms, 0.030 ms) = 0.139 ms: compute-bound.

    >>> round(roofline_time(2 * 4096**3, 3 * 4096**2 * 2, "H100") * 1e3, 3)
    0.139
    """
    g = get_gpu(gpu)
    p = peak(g, dtype)
    f = _nonneg("flops", flops)
    b = _nonneg("bytes", bytes)
    with np.errstate(under="ignore"):
        return _out(np.maximum(f / p, b / g.hbm_bandwidth))


@dataclass(frozen=True)
class WaveTime:
    """Result of the shared-bandwidth SM model: `time` in seconds, `utilization` (busy SM-time
    over SMs x time), `waves` (for equal blocks), `blocks`, `sms`, `block_time` per block."""

    time: float
    utilization: float
    waves: int
    blocks: int
    sms: int
    block_time: float


def sm_share_time(n_blocks: int, block_bytes: float, gpu, *, sms: int | None = None) -> WaveTime:
    """The lecture's simplified GPU for memory-bound work blocks.

    The SMs split the HBM bandwidth equally (each gets bandwidth / SMs); a work block that reads
    `block_bytes` runs on one SM for block_bytes / (bandwidth / SMs) seconds; `n_blocks` equal
    blocks run in ceil(n_blocks / SMs) waves. utilization = n_blocks / (waves x SMs).

    Example: 8 blocks of 16.8 MB on an H100 SXM (132 SMs, 3.35 TB/s): one wave of 661 us at
    8/132 = 6 % utilization; the same bytes cut into 128 blocks take 41 us at 97 %.

    >>> w = sm_share_time(8, 16.8e6, "H100")
    >>> w.waves, round(w.time * 1e6), round(w.utilization, 3)
    (1, 662, 0.061)
    """
    g = get_gpu(gpu)
    n_blocks = as_int("n_blocks", n_blocks, 1, None)
    sms = g.sms if sms is None else as_int("sms", sms, 1, None)
    block_bytes = as_float("block_bytes", block_bytes, 0.0, None)
    block_time = block_bytes / (g.hbm_bandwidth / sms)
    waves = -(-int(n_blocks) // sms)
    return WaveTime(
        time=waves * block_time,
        utilization=n_blocks / (waves * sms),
        waves=waves,
        blocks=n_blocks,
        sms=sms,
        block_time=block_time,
    )


# --- decode attention on the simplified GPU -----------------------------------------------------

SPLITS = (1, 2, 4, 8, 16, 32, 64)
_EXACT = 1 << 53  # sizes up to 2^53 stay exact in float64 seconds


@dataclass(frozen=True)
class DecodeTime:
    """One layer of decode attention on the simplified GPU: total `time` (s) = attention waves
    plus merge; `utilization` of the SMs during the attention waves; `blocks`, `waves`."""

    batch: int
    context: int
    kv_heads: int
    splits: int
    time: float
    attn_time: float
    merge_time: float
    utilization: float
    blocks: int
    waves: int


def decode_time(
    batch: int,
    context: int,
    kv_heads: int = 8,
    splits: int = 1,
    gpu="H100-SXM",
    *,
    head_dim: int = 128,
    group: int = 4,
    dtype: str = "bf16",
) -> DecodeTime:
    """The lecture's simplified GPU for one layer of decode attention.

    - One work block per (request, KV head, split); it reads K and V of its chunk:
      2 * ceil(context / splits) * head_dim * bytes(dtype).
    - The SMs share HBM bandwidth equally; blocks run in waves (`hardware.sm_share_time`).
    - Merge (splits > 1): each of the batch * kv_heads * group query heads leaves `splits` partial
      states (o: head_dim fp32, lse: 1 fp32), written by the attention kernel and read back by the
      merge kernel: merge_time = 2 * batch * kv_heads * group * splits * (head_dim + 1) * 4 bytes
      / bandwidth. It grows linearly with the number of splits.

    Example (Llama-3-8B: 8 KV heads, group 4; H100 SXM): batch 1, context 32K: 8 blocks, 6 %
    utilization, 661 us; with 16 splits 128 blocks, 97 %, ~41 us: about 16x faster.

    >>> [(r.blocks, round(r.utilization, 2), round(r.time * 1e6)) for r in
    ...  (decode_time(1, 32768), decode_time(1, 32768, splits=16))]
    [(8, 0.06, 661), (128, 0.97, 41)]
    """
    batch = as_int("batch", batch, 1, _EXACT)
    context = as_int("context", context, 1, _EXACT)
    kv_heads = as_int("kv_heads", kv_heads, 1, _EXACT)
    splits = as_int("splits", splits, 1, context)
    head_dim = as_int("head_dim", head_dim, 1, _EXACT)
    group = as_int("group", group, 1, _EXACT)
    dtype = dtype_name(dtype)
    g = get_gpu(gpu)
    chunk = -(-context // splits)
    w = sm_share_time(batch * kv_heads * splits, 2 * chunk * head_dim * DTYPE_BYTES[dtype], g)
    merge_bytes = 2 * batch * kv_heads * group * splits * (head_dim + 1) * 4 if splits > 1 else 0
    merge_time = merge_bytes / g.hbm_bandwidth
    return DecodeTime(
        batch,
        context,
        kv_heads,
        splits,
        w.time + merge_time,
        w.time,
        merge_time,
        w.utilization,
        w.blocks,
        w.waves,
    )


def best_split(
    batch: int, context: int, kv_heads: int = 8, gpu="H100-SXM", *, candidates=SPLITS, **kw
) -> tuple[int, list[DecodeTime]]:
    """The split count with the smallest `decode_time` among `candidates` (integers >= 1; those
    <= context are tried) and every run. Ties go to the earlier candidate.

    >>> best_split(1, 32768)[0]           # batch 1, 32K context, 8 KV heads on the H100
    16
    """
    batch = as_int("batch", batch, 1, _EXACT)
    context = as_int("context", context, 1, _EXACT)
    if isinstance(candidates, (str, bytes)) or not hasattr(candidates, "__iter__"):
        raise TypeError(f"candidates must be a sequence of split counts, got {candidates!r}")
    candidates = [as_int(f"candidates[{i}]", s, 1, None) for i, s in enumerate(candidates)]
    runs = [decode_time(batch, context, kv_heads, s, gpu, **kw) for s in candidates if s <= context]
    if not runs:
        raise ValueError(f"no candidate split count <= context={context}; candidates={list(candidates)}")
    return min(runs, key=lambda r: r.time).splits, runs


#: How close to the fastest split count a smaller one must come to be recommended instead: past
#: one full wave the model's times are flat, and a further split only adds merge work.
SPLIT_MARGIN = 0.01


def recommended_split(
    batch: int, context: int, kv_heads: int = 8, gpu="H100-SXM", *, margin: float = SPLIT_MARGIN, **kw
):
    """Notebook 04's rule for split-KV: the fewest splits whose `hardware.decode_time` is within
    `margin` (a fraction, default 1 %) of the fastest candidate's, so that no split is added for
    a gain the model cannot promise. Returns (splits, fastest splits, every run); `kw` goes to
    `hardware.best_split` (candidates, head_dim, group, dtype).

    >>> recommended_split(1, 32768)[:2]          # Llama-3-8B layer, batch 1, 32K: fill one wave
    (16, 16)
    >>> recommended_split(256, 32768)[:2]        # the ragged last wave: 4 splits within 1 % of 16
    (4, 16)
    """
    if isinstance(margin, bool) or not isinstance(margin, (int, float, np.integer, np.floating)):
        raise TypeError(
            f"margin must be a number, got {margin!r} ({type(margin).__name__}); valid: 0 <= margin < 1"
        )
    margin = float(margin)
    if not 0 <= margin < 1:
        raise ValueError(
            f"margin={margin!r} is out of range; valid: 0 <= margin < 1 (a fraction of the best time)"
        )
    fastest, runs = best_split(batch, context, kv_heads, gpu, **kw)
    best = min(r.time for r in runs)
    chosen = min((r for r in runs if r.time <= best * (1 + margin)), key=lambda r: r.splits)
    return chosen.splits, fastest, runs
