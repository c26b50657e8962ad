"""Attention variants as FlashInfer builds them (lecture §5.4): one tiled kernel, functors filled in.

A `Variant` bundles the functors FlashInfer's `AttentionVariant` exposes; any of them may be None:

    query_transform(q, q_idx)          rows of Q after loading (RoPE fused into the kernel)
    key_transform(k, kv_idx)           rows of K after loading
    value_transform(v, kv_idx)         rows of V after loading
    logits_transform(s, q_idx, kv_idx) s is already scale * q k^T (soft-cap, ALiBi, a bias)
    logits_mask(q_idx, kv_idx) -> bool which (query, key) pairs exist (causal, windows, sinks)
    use_softmax                        False: sum sigma(s) V without normalising (sigmoid attention)
    output_transform(o, q_idx)         rows of O before the store

Positions follow the course's bottom-right convention: query row i sits at q_idx = i + N_k - N_q
in the key sequence, key j at kv_idx = j. Masks and logits get q_idx as a column (rows, 1) and
kv_idx as a row (1, cols) of one tile, so numpy broadcasting gives the tile's (rows, cols); the
row transforms get 1-D position vectors. `a & b` composes two variants: transforms in order (a's
first), masks ANDed, softmax only if both use it.

`variant_attention` is the FlashAttention-2 loop of `attention.fa2_head` itself (not a copy):
the variant enters through an `attention.Tiles` subclass that supplies the tile's logits and mask,
decides which tiles are skipped (every pair masked: no loads, no FLOPs) and how the accumulator
becomes O. `tile_mask` classifies every tile as empty / partial / full, FlexAttention's BlockMask
distinction; the HBM counter of `variant_attention` agrees with it (tested), and `tile_io` turns
the classification into the elements that counter reports, without running the kernel.

Without softmax the same loop runs on log-weights: the tile's logit becomes log sigma(s), the
online max m and the rescaling keep every exponent <= 0, and `finish` returns acc * e^m instead of
acc / l, which is sum_j sigma(s_j) v_j exactly (up to rounding), with no normalisation.

The row transforms run on whole tensors before the loop; a kernel runs them on each tile right
after loading it. The arithmetic and the HBM traffic are the same.

This file is long because the functors' checks (every parameter and every returned array refused
by the functor's name) sit beside the loop they guard; the loop itself is the short part. The
tile classification (`variant_mask`, `tile_mask`, `tile_io`) shares the mask helper that
`_VariantTiles`, printed in notebook 05, calls by its private name: apart, the two would import
each other.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from attnlab.validate import as_bool, as_int, as_sequence, check_bytes, short
from attnlab.core.attention import Tiles, fa2_head
from attnlab.core.inputs import prepare_qkv, query_heads
from attnlab.core.hbm import HBM

__all__ = ["Variant", "variant_attention", "variant_of", "tile_mask", "tile_io", "variant_mask", "TILE_KINDS"]

TILE_KINDS = ("empty", "partial", "full")
#: Sequence lengths of the tile classification: positions are int64, with room for a window.
POS_LIMIT = 1 << 62
_FUNCTORS = ("query_transform", "key_transform", "value_transform", "logits_transform",
             "logits_mask", "output_transform")


@dataclass(frozen=True)
class Variant:
    """A named bundle of functors (see the module docstring); None means "leave as is"."""
    name: str
    query_transform: Callable | None = None
    key_transform: Callable | None = None
    value_transform: Callable | None = None
    logits_transform: Callable | None = None
    logits_mask: Callable | None = None
    use_softmax: bool = True
    output_transform: Callable | None = None

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a non-empty string, got {short(self.name)} ({type(self.name).__name__})")
        if not self.name.strip():
            raise ValueError(f"name={self.name!r} is empty; valid: a non-empty string (it labels plots)")
        for f in _FUNCTORS:
            fn = getattr(self, f)
            if fn is not None and not callable(fn):
                raise TypeError(f"{f} must be callable or None, got {short(fn)} ({type(fn).__name__})")
        as_bool("use_softmax", self.use_softmax)

    def __and__(self, other: "Variant") -> "Variant":
        if not isinstance(other, Variant):
            return NotImplemented
        return Variant(
            name=f"{self.name} & {other.name}",
            **{f: _then(getattr(self, f), getattr(other, f)) for f in _FUNCTORS if f != "logits_mask"},
            logits_mask=_both(self.logits_mask, other.logits_mask),
            use_softmax=self.use_softmax and other.use_softmax)


def _then(f, g):
    """f, then g, on the same positions (either may be None)."""
    if f is None or g is None:
        return f or g
    return lambda x, *pos: g(f(x, *pos), *pos)


def _both(f, g):
    if f is None or g is None:
        return f or g
    return lambda qi, kj: np.logical_and(f(qi, kj), g(qi, kj))


def _combine(variants) -> Variant:
    for i, v in enumerate(variants):
        if not isinstance(v, Variant):
            raise TypeError(f"variants[{i}]={short(v)} must be an attnlab.core.variants.Variant "
                            f"(e.g. causal(), soft_cap(30)), got {type(v).__name__}")
    return functools.reduce(lambda a, b: a & b, variants) if variants else Variant(name="plain")


def _mask_of(variant: Variant, q_idx, kv_idx):
    """The variant's mask on a (q_idx column, kv_idx row) grid as a bool array of the grid's shape;
    None when it has no mask. A mask that is not boolean is refused (NaN is not "masked")."""
    if variant.logits_mask is None:
        return None
    try:
        m = np.asarray(variant.logits_mask(q_idx, kv_idx))
    except OverflowError:                   # e.g. a window of 2^70 positions against int64 indices
        raise ValueError(f"logits_mask of {variant.name!r} overflows int64 positions; valid: "
                         f"windows and sink counts below 2^62") from None
    if m.dtype != bool:
        raise TypeError(f"logits_mask of {variant.name!r} must return booleans, got dtype {m.dtype}")
    shape = (q_idx.shape[0], kv_idx.shape[1])
    try:
        return np.broadcast_to(m, shape)
    except ValueError:
        raise ValueError(f"logits_mask of {variant.name!r} returned shape {m.shape}; valid: the "
                         f"tile's {shape} (or a shape that broadcasts to it)") from None


def _as_values(variant, f: str, y, dtype, shape):
    """A functor's result as an array of `dtype` and `shape`, finite, else an error naming it."""
    try:
        y = np.asarray(y, dtype=dtype)
    except (TypeError, ValueError):
        raise TypeError(f"{f} of {variant.name!r} must return real numbers, got "
                        f"{type(y).__name__}") from None
    if shape is None:                       # the caller checks shape and finiteness
        return y
    if y.shape != shape or not np.isfinite(y).all():
        raise ValueError(f"{f} of {variant.name!r} must return finite values of shape {shape}, "
                         f"got shape {y.shape}")
    return y


class _VariantTiles(Tiles):
    """Tiles whose logits, mask and normalisation come from a Variant."""

    def __init__(self, variant: Variant, scale: float, offset: int):
        super().__init__(scale, False, offset)
        self.variant = variant

    def _grid(self, r0, r1, c0, c1):
        return np.arange(r0, r1)[:, None] + self.offset, np.arange(c0, c1)[None, :]

    def active(self, r0, r1, c0, c1):
        m = _mask_of(self.variant, *self._grid(r0, r1, c0, c1))
        return m is None or bool(m.any())

    def scores(self, qi, kj, r0, c0, hbm=None):
        s = super().scores(qi, kj, r0, c0, hbm)                  # scale * q k^T, checked
        q_idx, kv_idx = self._grid(r0, r0 + len(qi), c0, c0 + len(kj))
        if self.variant.logits_transform is not None:
            s = np.asarray(self.variant.logits_transform(s, q_idx, kv_idx), dtype=s.dtype)
            if s.shape != (len(qi), len(kj)) or not np.isfinite(s).all():
                raise ValueError(f"logits_transform of {self.variant.name!r} must return finite "
                                 f"logits of shape {(len(qi), len(kj))}")
        if not self.variant.use_softmax:
            s = -np.logaddexp(0.0, -s)                          # log sigma(s): sigma(s) = e^s'
        m = _mask_of(self.variant, q_idx, kv_idx)
        return s if m is None else np.where(m, s, -np.inf)

    def finish(self, acc, l, m):
        if self.variant.use_softmax:
            return super().finish(acc, l, m)
        return acc * np.exp(m)[:, None]                          # sum sigma V; 0 where m = -inf


def _guarded(variant: Variant) -> Variant:
    """The variant with its logits_transform checked: a result that is not numbers is refused by
    name (the scores' own check, in `_VariantTiles`, then refuses a wrong shape or inf)."""
    f = variant.logits_transform
    if f is None:
        return variant

    def checked(s, q_idx, kv_idx):
        return _as_values(variant, "logits_transform", f(s, q_idx, kv_idx), s.dtype, None)
    return dataclasses.replace(variant, logits_transform=checked)


def _rows(variant, f, x, pos):
    fn = getattr(variant, f)
    if fn is None:
        return x
    return _as_values(variant, f, fn(x, pos), x.dtype, x.shape)


def variant_attention(q, k, v, *variants: Variant, block_r: int | None = None, block_c: int = 64,
                      scale: float | None = None, return_lse: bool = False, hbm: HBM | None = None):
    """Attention with the variants applied (composed left to right), through `fa2_head`'s loop.

    q (N_q, d), k (N_k, d), v (N_k, d_v), or batched (batch, heads, N, d) with GQA as in
    `attention.flash_attention`. block_r: query rows per tile (None: 64), block_c: keys per tile.
    Returns O, or (O, lse) with return_lse (natural log); lse needs softmax (sigmoid attention
    has no normaliser, so return_lse is refused there). A row that sees no key outputs 0, lse -inf.

    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((40, 8)) for _ in range(3))
    >>> from attnlab.core.attention import flash_attention
    >>> from attnlab.core.variants import causal
    >>> bool(np.allclose(variant_attention(q, k, v, causal()), flash_attention(q, k, v, causal=True)))
    True
    """
    variant = _combine(variants)
    return_lse = as_bool("return_lse", return_lse)
    if return_lse and not variant.use_softmax:
        raise ValueError(f"return_lse=True, but {variant.name!r} uses no softmax (sigmoid attention "
                         f"has no log-sum-exp); valid: return_lse=False")
    block_r = 64 if block_r is None else as_int("block_r", block_r, 1, None)
    block_c = as_int("block_c", block_c, 1, None)
    q, k, v, scale, single = prepare_qkv(q, k, v, scale)
    n_q, n_k = q.shape[2], k.shape[2]
    q_idx, kv_idx = np.arange(n_q) + (n_k - n_q), np.arange(n_k)
    tiles = _VariantTiles(_guarded(variant), scale, n_k - n_q)
    out = np.zeros(q.shape[:3] + (v.shape[3],), q.dtype)
    lse = np.full(q.shape[:3], -np.inf, q.dtype)
    for b, h, g in query_heads(q, k):
        qh = _rows(variant, "query_transform", q[b, h], q_idx)
        kh = _rows(variant, "key_transform", k[b, g], kv_idx)
        vh = _rows(variant, "value_transform", v[b, g], kv_idx)
        res = fa2_head(qh, kh, vh, block_r=block_r, block_c=block_c, hbm=hbm,
                       return_lse=return_lse, tiles=tiles)
        o, lse[b, h] = res if return_lse else (res, -np.inf)
        out[b, h] = _rows(variant, "output_transform", o, q_idx)
    if single:
        out, lse = out[0, 0], lse[0, 0]
    return (out, lse) if return_lse else out


def variant_of(variants) -> Variant:
    """One Variant from a Variant or a list of them (combined in order, as `&` does)."""
    if isinstance(variants, Variant):
        return variants
    return _combine(as_sequence("variants", variants, "a Variant or a list of them (composed in order)"))


def variant_mask(variants, n_q: int, n_k: int) -> np.ndarray:
    """The dense (n_q, n_k) bool mask of a variant (or list of variants): True where query i may
    see key j, positions bottom-right aligned. For pictures and tests; kernels never build it.
    The mask, its copy and the temporaries a mask functor makes on the way (comparisons, their
    & and |, counted as 8 bytes an entry) and the int64 position grids are at most 2 GiB
    together, as `tile_mask` counts one query tile's: about 2^28 entries."""
    var = variant_of(variants)
    n_q, n_k = as_int("n_q", n_q, 1, POS_LIMIT), as_int("n_k", n_k, 1, POS_LIMIT)
    check_bytes(f"variant_mask: n_q={n_q} x n_k={n_k} (the bool mask, its copy and a mask's "
                f"temporaries, 9 bytes an entry; int64 positions)", n_q * n_k * 9 + 8 * (n_q + n_k))
    m = _mask_of(var, np.arange(n_q)[:, None] + (n_k - n_q), np.arange(n_k)[None, :])
    return np.ones((n_q, n_k), bool) if m is None else np.array(m)


def tile_mask(variants, n_q: int, n_k: int, block_r: int, block_c: int) -> np.ndarray:
    """(query tiles, KV tiles) array of "empty" (skipped: no loads, no FLOPs), "partial" (masked
    element by element) and "full" (no mask needed). Built one query tile at a time: memory is
    block_r x n_k, never n_q x n_k.

    >>> from attnlab.core.variants import causal
    >>> tile_mask([causal()], 128, 128, 64, 64).tolist()
    [['partial', 'empty'], ['full', 'partial']]
    """
    var = variant_of(variants)
    n_q, n_k = as_int("n_q", n_q, 1, POS_LIMIT), as_int("n_k", n_k, 1, POS_LIMIT)
    block_r = min(as_int("block_r", block_r, 1, None), n_q)     # a tile past the end is the whole row
    block_c = min(as_int("block_c", block_c, 1, None), n_k)
    rows, cols = -(-n_q // block_r), -(-n_k // block_c)
    check_bytes(f"tile_mask: {rows} x {cols} tiles (n_q={n_q}, n_k={n_k}, block_r={block_r}, "
                f"block_c={block_c}; 28 bytes a label)", rows * cols * 28)
    check_bytes(f"tile_mask: a query tile's mask, block_r={min(block_r, n_q)} x n_k={n_k}",
                min(block_r, n_q) * n_k * 9)
    starts = np.arange(0, n_k, block_c)
    widths = np.diff(np.append(starts, n_k))
    out = np.empty((-(-n_q // block_r), len(starts)), dtype="<U7")
    kv_idx = np.arange(n_k)[None, :]
    for t, r0 in enumerate(range(0, n_q, block_r)):
        r1 = min(r0 + block_r, n_q)
        m = _mask_of(var, np.arange(r0, r1)[:, None] + (n_k - n_q), kv_idx)
        seen = (np.full(len(starts), (r1 - r0)) * widths if m is None
                else np.add.reduceat(m.sum(axis=0), starts))
        out[t] = np.where(seen == 0, "empty", np.where(seen == (r1 - r0) * widths, "full", "partial"))
    return out


def tile_io(variants, n_q: int, n_k: int, block_r: int, block_c: int, d: int, d_v: int | None = None,
            return_lse: bool = False) -> dict[str, tuple[int, int]]:
    """HBM elements {tensor: (reads, writes)} that one head of `variant_attention` moves, from
    `tile_mask` alone: Q_i is read once if any tile of its row is not empty, K_j and V_j once per
    tile that is not empty, O_i (and lse_i with return_lse) written once per query tile. Equal to
    its HBM counter (tested) at a cost of block_r x n_k per query tile, whatever d is.

    >>> from attnlab.core.variants import causal
    >>> tile_io([causal()], 128, 128, 64, 64, d=16)    # K, V: 3 of 4 tiles, 64 keys each
    {'Q': (2048, 0), 'K': (3072, 0), 'V': (3072, 0), 'O': (0, 2048)}
    """
    kinds = tile_mask(variants, n_q, n_k, block_r, block_c)        # checks n_q, n_k and the blocks
    block_r, block_c = min(int(block_r), int(n_q)), min(int(block_c), int(n_k))
    d = as_int("d", d, 1, None)
    d_v = d if d_v is None else as_int("d_v", d_v, 1, None)
    return_lse = as_bool("return_lse", return_lse)
    rows = np.diff(np.append(np.arange(0, n_q, block_r), n_q))      # query rows of each tile row
    cols = np.diff(np.append(np.arange(0, n_k, block_c), n_k))      # keys of each tile column
    active = kinds != "empty"
    keys = int((active * cols).sum())                               # K/V rows loaded, all tiles
    q_rows = int(rows[active.any(axis=1)].sum())
    io = {"Q": (q_rows * d, 0), "K": (keys * d, 0), "V": (keys * d_v, 0), "O": (0, n_q * d_v)}
    if return_lse:
        io["lse"] = (0, n_q)
    return io
