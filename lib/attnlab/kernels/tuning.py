"""The automatic launch choices of the kernels, in one file, each beside the sweep that set it.

    launch_config(d, causal, steps)      flash_attention_hopper's blocks, warps, stages
    default_descriptors(causal)          flash_attention_hopper's descriptors=None
    gluon_default_steps(d, causal)       flash_attention_gluon's steps=None (GLUON_DEFAULT_STEPS)
    auto_splits(batch, kv_heads, ...)    paged_decode's splits=None when no lengths can be read
    split_from_lengths(lengths, ...)     paged_decode's splits=None from even real lengths
    fill_from_lengths(lengths, ...)      ... and from long-tailed ones (one chunk length for all)
    auto_launch(programs, page_size, .)  paged_decode's block_n, num_stages, prefetch
    auto_block_n(programs, device)       ScheduledDecoder's block_n
    choose_decoder(lengths)              decode_paged's decoder: the split kernel or the plan

The sweeps are `python -m attnlab.gpubench.sweeps.hopper`, `... .sweeps.paged` and `... .sweeps.gluon`;
their H200 runs (and the scheduled decoder's launch run) are recorded under data/measurements/, and
how each choice was reached is in docs/gpu-notes.md. Under TRITON_INTERPRET=1 every choice is small
and fixed (fast tests).

This file is long because its point is that every automatic choice sits in one place, each beside
the measurement that set it; each choice is a short function or a named constant.
"""

from __future__ import annotations

import numpy as np
import torch

from attnlab.validate import as_int
from attnlab.kernels import interpreting
from attnlab.kernels.common import as_block, as_stages, as_warps
from attnlab.kernels.hopper_checks import parse_steps

__all__ = [
    "launch_config",
    "default_descriptors",
    "gluon_default_steps",
    "GLUON_DEFAULT_STEPS",
    "auto_splits",
    "split_from_lengths",
    "fill_from_lengths",
    "FILL",
    "FILL_SKEW",
    "FILL_PER_REQUEST",
    "FILL_MAX_SPLITS",
    "token_counts",
    "auto_launch",
    "auto_block_n",
    "sms",
    "choose_decoder",
    "PLAN_FROM_BATCH",
    "PLAN_SKEW",
    "CTAS_PER_SM",
    "PLAN_MIN_CHUNK",
    "MIN_CHUNK",
    "SMALL_CHUNK",
    "WAVES",
    "INTERPRETER_SMS",
]

#: With splits=None on a GPU no chunk is cut shorter than this many tokens (the merge costs more).
MIN_CHUNK = 1024
#: ... unless the whole batch is too small to give every SM its blocks at that size: then chunks
#: shrink towards this many tokens (two 64-key tiles), so a short batch still fills the GPU.
SMALL_CHUNK = 128
#: Chunks from `split_from_lengths` are whole tiles of this many keys.
TILE = 64
#: Work blocks per SM that `auto_splits` aims for: two blocks in flight per SM hide the gathers'
#: latency better than one (the H200 sweep in data/measurements: 32 splits at batch 1 beat 16).
WAVES = 2
#: Under the interpreter splits=None pretends the machine has this many SMs (small, fast tests).
INTERPRETER_SMS = 4


def sms(device) -> int:
    """The CUDA device's SM count; INTERPRETER_SMS under the interpreter or on a CPU."""
    dev = torch.device(device)
    if dev.type == "cuda" and not interpreting():
        return torch.cuda.get_device_properties(dev).multi_processor_count
    return INTERPRETER_SMS


# -- flash_attention_hopper: set by gpubench/sweeps/hopper.py, whose H200 run is
#    data/measurements/h200-2026-12-01-hopper-steps.json (the grid of blocks x warps x stages) ------
def launch_config(
    d: int, causal: bool, steps=None, *, block_m=None, block_n=None, num_warps=None, num_stages=None
) -> dict:
    """The block sizes, warps and stages `flash_attention_hopper` launches with for these steps
    (explicit arguments win; each None or as `flash_attention_hopper` takes it)."""
    st = parse_steps(steps)
    block_m, block_n = as_block("block_m", block_m), as_block("block_n", block_n)
    num_warps, num_stages = as_warps(num_warps), as_stages(num_stages)
    big = "big_tiles" in st
    if interpreting():
        bm, bn = 16, (32 if big else 16)
    else:
        bm = 128 if d <= 128 else 64
        bn = 128 if big and d <= 128 else 64
    given = {"block_m": block_m, "block_n": block_n, "num_warps": num_warps, "num_stages": num_stages}
    chosen = {
        "block_m": bm,
        "block_n": bn,
        "num_warps": 4 if d <= 64 else 8,
        "num_stages": 3,  # the H200 sweep: 3 stages beat 2 by 10-17 % at 128 x 128
    }
    return {name: chosen[name] if given[name] is None else given[name] for name in chosen}


def default_descriptors(causal: bool) -> str:
    """descriptors=None of `flash_attention_hopper`: host descriptors when causal, device ones
    otherwise (gpubench/sweeps/hopper.py on the H200: causal 551-582 against 525 TFLOP/s at
    N = 8K-16K; non-causal 557-582 against 543-559)."""
    return "host" if causal else "device"


# -- flash_attention_gluon: set by gpubench/sweeps/gluon_sets.py's EARLY table (`python -m
#    attnlab.gpubench.sweeps.gluon full early_k`), whose H200 run is
#    data/measurements/h200-2026-12-03-gluon-early-k.json (every step set, causal and not) -----------
_SPLIT = ("warp_specialize", "split_warpgroups", "lpt_order", "tma_store")
#: flash_attention_gluon's steps=None per (d, causal): that sweep's fastest correct set (H200, Triton 3.6),
#: then, causal, the persistent scheduler with O stored from registers (Q's buffer freed after the
#: last QK^T), the fastest of four persistent sets on the FA3 table's 18 causal cases in their first
#: run (`gpubench.prefill_fa3`, data/measurements/h200-2026-12-04-persistent-first.json). On other
#: inputs (h200-2026-12-04-prefill-fa3.json, --draw 1) it is 3-35 % faster than one program per
#: tile. Without a mask the fastest persistent set ran 14 % slower to 3 % faster than these
#: defaults (slower on 13 of 18 cases), so non-causal launches stay one program per tile.
_REGS = ("warp_specialize", "split_warpgroups", "lpt_order")  # _SPLIT without tma_store
GLUON_DEFAULT_STEPS = {
    (128, False): _SPLIT + ("pingpong", "intra_overlap"),
    (128, True): _REGS + ("pingpong", "intra_overlap", "persistent"),
    (64, False): ("lpt_order", "tma_store"),
    (64, True): _REGS + ("pingpong", "persistent"),
}


def gluon_default_steps(d: int, causal: bool) -> tuple:
    """What `flash_attention_gluon(steps=None)` runs for head dim d (64 or 128) and this causal flag."""
    return GLUON_DEFAULT_STEPS[(d, bool(causal))]


def _pow2_up(x: int) -> int:
    """The least power of two >= x (1 for x <= 1)."""
    return 1 << (max(1, x) - 1).bit_length()


# -- paged_decode: set by gpubench/sweeps/paged.py, whose H200 run is
#    data/measurements/h200-2026-12-01-paged-sweep.json (splits x block_n x warps x stages) ---------
def auto_splits(
    batch: int, kv_heads: int, longest: int, device, *, min_chunk: int = MIN_CHUNK, waves: int = WAVES
) -> int:
    """Splits so that batch x kv_heads x splits work blocks come to about `waves` blocks per SM,
    and no chunk of a `longest`-token request is shorter than `min_chunk`. The SM count is the
    CUDA device's; under the interpreter (or on a CPU) a small fixed INTERPRETER_SMS. On an H200
    (132 SMs, 8 KV heads) this picks 32 splits for one 32K request, 4 at batch 16, 1 from batch 64
    (the sweep's best; 3 splits at batch 16 run 4 % slower than 4).

    >>> auto_splits(1, 1, 1000, "cpu", min_chunk=16), auto_splits(1, 1, 20, "cpu", min_chunk=16)
    (8, 2)
    """
    want = _pow2_up(-(-waves * sms(device) // (batch * kv_heads)))
    return max(1, min(want, -(-longest // min_chunk)))


def split_from_lengths(
    lengths,
    kv_heads: int,
    device,
    *,
    min_chunk: int = MIN_CHUNK,
    small_chunk: int = SMALL_CHUNK,
    waves: int = WAVES,
) -> tuple[int, int]:
    """(splits, chunk) for `paged_decode` from the requests' real lengths: the longest request is
    cut into `splits` pieces and every other request into ceil(length / chunk) pieces (at most
    `splits`), so the work blocks, kv_heads x the pieces of every request, come to about `waves`
    per SM and long requests are cut finer than short ones (a long-tailed batch is not bound by its
    longest request). splits is `auto_splits`'s power of two with batch x kv_heads replaced by
    kv_heads x total / longest (for equal lengths the same thing); chunk is `min_chunk` unless the
    batch is too small to fill the GPU at that size, then one block's share of the batch's tokens
    (rounded up to whole 64-token tiles, at least `small_chunk`). For equal lengths of 4K tokens and
    more, both are auto_splits's choice with min_chunk (the H200 sweep's).

    >>> split_from_lengths([32768], 8, "cpu", min_chunk=1024, small_chunk=16)     # 4 SMs here
    (1, 1024)
    >>> split_from_lengths([1000, 50, 50, 50], 1, "cpu", min_chunk=1024, small_chunk=16)  # 6 + 3 blocks
    (6, 192)
    """
    L = token_counts(lengths).tolist()
    kv_heads = as_int("kv_heads", kv_heads, 1)
    total, longest = max(1, sum(L)), max(1, max(L))
    blocks = waves * sms(device)
    want = _pow2_up(-(-blocks * longest // (kv_heads * total)))
    share = -(-kv_heads * total // blocks)  # one block's share of the batch's tokens
    chunk = min(min_chunk, max(small_chunk, -(-share // TILE) * TILE))
    return max(1, min(want, -(-longest // chunk))), chunk


# -- the fill rule: the H200 dev runs of 2026-12-04 on three long-tailed draws (batches 1-32) and
#    three uniform batches, data/measurements/h200-2026-12-04-decode-fill.json ---------------------
#: The fill rule (`fill_from_lengths`) aims for this many work blocks per SM, all resident at once
#: (FlashInfer's decode plan sizes its grid the same way). 4 beat 2, 3 and 6 on the geometric
#: mean and on the weakest case (the kernel holds 5 blocks of 4 warps per SM at 96 registers).
FILL = 4
#: `choose_splits` cuts a batch by the fill rule when its longest request is more than FILL_SKEW
#: times the mean length: any uneven batch. A single request or equal lengths keep
#: `split_from_lengths` (2 blocks per SM of >= 1024 tokens: 1 x 32K ran 4 % faster so).
FILL_SKEW = 1
#: ... and a large batch gets at least this many blocks per request and KV head (more than one
#: wave): with one block each its longest request would bound the launch.
FILL_PER_REQUEST = 2
#: ... and no request is cut into more pieces than this: the launch's grid and its partial states
#: are batch x KV heads x splits (a lone very long request in a large batch would make them huge).
#: The measured batches needed at most 62.
FILL_MAX_SPLITS = 64


def token_counts(lengths) -> np.ndarray:
    """`lengths` as an int64 array: a non-empty 1-D sequence of integers >= 0 (Python or numpy
    integers; a bool, a float or a string is refused, as are counts past int32)."""
    if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__len__"):
        raise TypeError(f"lengths must be a sequence of token counts, got {type(lengths).__name__}")
    L = np.asarray(lengths)
    if L.ndim != 1 or L.size == 0 or L.dtype.kind not in "iu":
        raise ValueError(f"lengths must be a non-empty 1-D sequence of integers >= 0; got {lengths!r}"[:200])
    if (L < 0).any() or (L > 2**31 - 1).any():
        raise ValueError(f"lengths must be token counts in [0, 2**31 - 1]; got {lengths!r}"[:200])
    return L.astype(np.int64)


def fill_from_lengths(
    lengths,
    kv_heads: int,
    device,
    *,
    blocks_per_sm: int = FILL,
    per_request: int = FILL_PER_REQUEST,
    floor: int = SMALL_CHUNK,
    tile: int = TILE,
) -> tuple[int, int]:
    """(splits, chunk) for `paged_decode` from the requests' real lengths, FlashInfer's way: one
    chunk length for every request, the shortest (a whole number of `tile`-token tiles, at least
    `floor`) whose blocks, kv_heads x sum over requests of ceil(length / chunk), fit
    max(blocks_per_sm x SMs, per_request x kv_heads x requests) blocks (a large batch: more than
    one wave, so its long requests still come in pieces); splits is the longest request's chunk
    count, at most FILL_MAX_SPLITS (a longer request is then cut into that many longer pieces).
    Every block then walks about the same number of keys, so no SM waits on the longest
    request's pieces.

    >>> fill_from_lengths([1000, 50, 50, 50], 1, "cpu", floor=16, tile=16)   # 4 SMs x 4: 16 blocks
    (13, 80)
    >>> fill_from_lengths([300] * 40 + [3000], 1, "cpu", floor=16, tile=16)   # 2 x 41 blocks
    (10, 304)
    """
    L = token_counts(lengths)
    kv_heads = as_int("kv_heads", kv_heads, 1)
    blocks_per_sm = as_int("blocks_per_sm", blocks_per_sm, 1, 64)
    per_request = as_int("per_request", per_request, 1, 64)
    tile, floor = as_int("tile", tile, 1, 4096), as_int("floor", floor, 1)
    cap = max(blocks_per_sm * sms(device), per_request * kv_heads * L.size)
    longest = max(1, int(L.max()))

    def fits(k: int) -> bool:  # chunk k tiles long
        return kv_heads * int(np.maximum(1, -(-L // (k * tile))).sum()) <= cap

    lo, hi = -(-floor // tile), max(-(-floor // tile), -(-longest // tile))  # hi always "fits" enough
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    chunk = lo * tile
    return min(FILL_MAX_SPLITS, max(1, -(-longest // chunk))), chunk


# -- paged_decode's tiles and prefetch: gpubench/sweeps/paged.py's grid, then the prefetch run on the
#    H200 that the docstring names, data/measurements/h200-2026-12-01-paged-prefetch.json -----------
def auto_launch(programs: int, page_size: int, device) -> dict:
    """block_n, num_stages and prefetch for `programs` work blocks over pages of `page_size`.
    While the blocks fit WAVES per SM (few, long chunks) and pages hold 16 tokens or more:
    64-key tiles, three stages and the page ids prefetched one tile ahead, which the H200 sweep
    (data/measurements/h200-2026-12-01-paged-prefetch.json) found fastest there (1 x 32K, page 16:
    40.5 us against 42.3 at 128-key tiles, two stages). With one-token pages the same choice is
    30-140 % slower, so few blocks keep 128-key tiles at two stages without prefetch. With more
    blocks: 64-key tiles at two stages, no prefetch, whose small shared-memory footprint keeps
    every block resident in one wave (three stages with the prefetch cost up to 25 % there).
    Under the interpreter: 16-key tiles, no prefetch."""
    programs = as_int("programs", programs, 1)
    page_size = as_int("page_size", page_size, 1)
    if interpreting():
        return {"block_n": 16, "num_stages": None, "prefetch": False}
    if programs > WAVES * sms(device):
        return {"block_n": 64, "num_stages": 2, "prefetch": False}
    if page_size >= 16:
        return {"block_n": 64, "num_stages": 3, "prefetch": True}
    return {"block_n": 128, "num_stages": 2, "prefetch": False}


# -- ScheduledDecoder: no sweep module; the H200 launch run of ScheduledDecoder on gpubench.scheduled's
#    batches 8, 64, 256 is data/measurements/h200-2026-12-01-scheduled-launch.json ------------------
def auto_block_n(programs: int, device) -> int:
    """The scheduled decoder's keys per tile (`paged_decode` takes `auto_launch`): 128 while the
    blocks fit WAVES per SM (few, long chunks: fewer loop steps), else 64 (the H200 sweep's best
    at batch 64 and 256); 16 under the interpreter."""
    if interpreting():
        return 16
    return 128 if programs <= WAVES * sms(device) else 64


# -- decode_paged: which decoder, set by gpubench/sweeps/ragged.py, whose H200 run is
#    data/measurements/h200-2026-12-02-ragged.json (long-tailed batches of 1 to 256 requests) ------
#: The plan-driven decoder from this many requests up, when their lengths are uneven: on the
#: recorded long-tailed batches it is ahead of the best split launch from batch 64 (by 9-17 %),
#: level at 32 and behind below; on uniform batches the split kernel is at par with FlashInfer.
PLAN_FROM_BATCH = 64
#: ... uneven: the longest request over the mean above this (the recorded long-tailed batches of
#: 64 and more: 5.5 to 19; a uniform batch: 1).
PLAN_SKEW = 2.0
#: Persistent programs per SM a plan is made for: two resident 4-warp programs keep more loads in
#: flight than one (balanced plan, batch 256: 712 µs with 264 CTAs, 1,147 with 132).
CTAS_PER_SM = 2
#: A plan's chunks are at least this many tokens (FlashInfer's decode planner's floor: fewer,
#: wider items for a small batch).
PLAN_MIN_CHUNK = 128


def choose_decoder(lengths) -> str:
    """ "plan" (the plan-driven persistent decoder) for PLAN_FROM_BATCH or more requests whose
    longest is more than PLAN_SKEW times their mean length; "split" (the split-KV kernel)
    otherwise. `lengths`: the requests' KV token counts (a sequence of non-negative integers).

    >>> choose_decoder([4096] * 256), choose_decoder([100] * 62 + [9000]), choose_decoder([100] * 63 + [9000])
    ('split', 'split', 'plan')
    """
    n = token_counts(lengths)
    mean = n.mean()
    uneven = mean > 0 and n.max() > PLAN_SKEW * mean
    return "plan" if n.size >= PLAN_FROM_BATCH and uneven else "split"
