"""Attention variants side by side (notebook 05, §5.4): what each functor does to the attention
weights, which tiles its mask lets the kernel skip (FlexAttention's block mask: empty / partial /
full), and the HBM traffic that skipping saves.

Pure part: `variant_gallery_numbers(variants, N, tile)` -> GalleryNumbers (the long-context
table of the same counts is `variant_tables.variant_table`).
The variants offered are the registry's (attnlab.core.variants.REGISTRY: each entry's label,
slider and default). Every number comes from attnlab.core.variants: the weights are the output of `variant_attention` with
V = I (row i of O is then row i of the weight matrix), the tile kinds come from `tile_mask`, the
traffic from `tile_io` (equal to the HBM counter of a real run, tested). `dense_weights` writes the
weights from the definition through the variant's own functors; the summary shows how far the
tiled kernel is from it. Queries and keys share one direction plus noise (d = 16), as trained ones
often do: without positions every query scores the keys alike, and RoPE turns the shared part into
a function of q_idx - kv_idx (diagonal stripes).

This file is long because the explorer draws three panels (weights, tile mask, traffic) and keeps
the browser's slider in step with the variant picked; the numbers it draws are the short pure part
above it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import matplotlib as mpl
import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import ListedColormap, LogNorm
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from attnlab.validate import as_int
from attnlab.core.softmax import softmax
from attnlab.core.variants import (
    REGISTRY,
    TILE_KINDS,
    Variant,
    tile_io,
    tile_mask,
    variant_attention,
    variant_mask,
)
from attnlab.core.variants.core import variant_of
from attnlab.explore import style
from attnlab.explore._base import Explorer, readonly
from attnlab.explore._controls import dropdown, steps

__all__ = [
    "GalleryNumbers",
    "variant_gallery_numbers",
    "dense_weights",
    "VariantGalleryExplorer",
    "KINDS",
    "SECOND",
    "N_STOPS",
    "TILES",
]

D = 16  # head dim of the pattern's q and k
MAX_N = 256  # the weights are an N x N picture, from a kernel run with V = I (N columns)
WEIGHT_TILE = 32  # tiles of that run (no weight depends on them; tested): P_ij V_j stays
# small enough for one BLAS thread (threads on 2 busy cores: 3x slower)
TRAFFIC_D = 128  # head dim of the traffic panel (tile_io is exact at any d)
TENSORS = ("Q", "K", "V", "O")
N_STOPS = (64, 128, 192, 256)
TILES = (16, 32, 64, 128)
NO_PARAM = (("no parameter", 0),)


class _Live(Mapping):
    """A read-only dict made from the variant registry (attnlab.core.variants.REGISTRY) each time
    it is read, so an entry registered after this module was imported shows too."""

    def __init__(self, items):
        self._items = items

    def __getitem__(self, key):
        return self._items()[key]

    def __iter__(self):
        return iter(self._items())

    def __len__(self):
        return len(self._items())


def _kinds() -> dict:
    rows = {
        e.label: (
            lambda p, e=e: e.variant(p),
            e.param,
            e.stops if e.param is not None else NO_PARAM,
            e.default if e.param is not None else 0,
        )
        for e in REGISTRY.values()
    }
    return {**rows, "none": (lambda _: None, None, NO_PARAM, 0)}


def _second() -> dict:
    return {"none": None, **{v.name: v for v in (e.variant(e.default) for e in REGISTRY.values())}}


#: dropdown label -> (factory of the slider's value, slider label, its stops, default): one per
#: registry entry, in the registry's order, then "none" (plain attention)
KINDS = _Live(_kinds)
#: the variant composed with &, by name: each registry entry at its default
SECOND = _Live(_second)


@lru_cache(maxsize=1)
def _data():
    """(q, k, I) at MAX_N, seeded; a size N takes the first N rows."""
    rng = np.random.default_rng(0)
    u = rng.standard_normal(D)
    q, k = (u + 0.3 * rng.standard_normal((MAX_N, D)) for _ in range(2))
    return readonly(q, k, np.eye(MAX_N))


def dense_weights(variant: Variant, q, k) -> np.ndarray:
    """The (N_q, N_k) weights by definition, on the whole grid, through the variant's functors:
    rows of q and k transformed, s = q k^T / sqrt(d), the logits transform, the mask, then softmax
    per row (or sigma(s), unnormalised); 0 where masked. (Value and output transforms, which no
    ready-made variant has, are not weights.)"""
    n_q, n_k = len(q), len(k)
    qi, kj = np.arange(n_q)[:, None] + (n_k - n_q), np.arange(n_k)[None, :]
    if variant.query_transform is not None:
        q = variant.query_transform(q, qi[:, 0])
    if variant.key_transform is not None:
        k = variant.key_transform(k, kj[0])
    s = (q @ k.T) / math.sqrt(q.shape[1])
    if variant.logits_transform is not None:
        s = variant.logits_transform(s, qi, kj)
    mask = variant_mask(variant, n_q, n_k)
    if variant.use_softmax:
        return softmax(np.where(mask, s, -np.inf))
    return np.where(mask, 1.0 / (1.0 + np.exp(-s)), 0.0)


@dataclass(frozen=True)
class GalleryNumbers:
    """One variant (or a composition) at N_q = N_k = N with square tiles."""

    name: str  # the composed name ("plain" for no variant)
    N: int
    tile: int
    softmax: bool  # False: sigmoid attention (rows are not normalised)
    weights: np.ndarray  # (N, N): variant_attention(q, k, I) = the weights; 0 where masked
    kinds: np.ndarray  # (tiles, tiles): index into TILE_KINDS (0 empty, 1 partial, 2 full)
    traffic: tuple  # HBM elements of Q, K, V, O, one head at d = TRAFFIC_D, empty tiles skipped
    traffic_plain: tuple  # the same for plain attention (every tile loaded)
    max_diff: float  # max |kernel weights - dense_weights|
    row_sums: tuple  # (min, max) of the rows' sums of weights: 1 with softmax

    @property
    def counts(self) -> dict:
        return {kind: int((self.kinds == i).sum()) for i, kind in enumerate(TILE_KINDS)}

    @property
    def skipped(self) -> float:
        """Fraction of the tiles skipped (empty)."""
        return self.counts["empty"] / self.kinds.size

    @property
    def saved(self) -> float:
        return 1 - sum(self.traffic) / sum(self.traffic_plain)

    @property
    def kv_saved(self) -> float:
        return 1 - sum(self.traffic[1:3]) / sum(self.traffic_plain[1:3])


def _elements(io: dict) -> tuple:
    return tuple(sum(io[t]) for t in TENSORS)


def variant_gallery_numbers(variants=(), N: int = 256, tile: int = 32) -> GalleryNumbers:
    """Weights, tile kinds and HBM traffic of a Variant (or a list, composed with &; empty: plain).

    >>> from attnlab.core.variants import sliding_window
    >>> r = variant_gallery_numbers(sliding_window(64), N=256, tile=32)
    >>> r.counts, f"{r.skipped:.0%} of tiles skipped, {r.kv_saved:.0%} of K/V traffic saved"
    ({'empty': 43, 'partial': 14, 'full': 7}, '67% of tiles skipped, 67% of K/V traffic saved')
    """
    var = variant_of(variants)
    N, tile = as_int("N", N, 1, MAX_N), as_int("tile", tile, 1, MAX_N)
    q, k, eye = _data()
    q, k, eye = q[:N], k[:N], eye[:N, :N]
    w = variant_attention(q, k, eye, var, block_r=WEIGHT_TILE, block_c=WEIGHT_TILE)
    kinds = np.argmax(tile_mask(var, N, N, tile, tile)[..., None] == np.array(TILE_KINDS), axis=-1)
    sums = w.sum(axis=1)
    return GalleryNumbers(
        var.name,
        N,
        tile,
        var.use_softmax,
        readonly(w),
        readonly(kinds.astype(np.int8)),
        _elements(tile_io(var, N, N, tile, tile, TRAFFIC_D)),
        _elements(tile_io([], N, N, tile, tile, TRAFFIC_D)),
        float(np.abs(w - dense_weights(var, q, k)).max()),
        (float(sums.min()), float(sums.max())),
    )


_KIND_COLORS = ("#e8e8e8", "#fdae61", "#2c7bb6")  # empty, partial, full
_KIND_LABELS = ("empty: skipped (no K/V loads)", "partial: masked per element", "full: no mask needed")
_WEIGHTS = LogNorm(1e-4, 1.0)
_CMAP = mpl.colormaps["viridis"].with_extremes(bad=_KIND_COLORS[0])  # masked (weight 0): as empty


def _grid(n: int, tile: int):
    """Tile boundaries inside an n x n square, as line segments."""
    cuts = range(tile, n, tile)
    return [[(x, 0), (x, n)] for x in cuts] + [[(0, y), (n, y)] for y in cuts]


def make_variant(kind: str, param, second: str = "none") -> list:
    """The explorer's controls as variants (an empty list is plain attention); a bad value (w = 0)
    is refused by the library's factory, by name."""
    return [v for v in (KINDS[kind][0](param), SECOND[second]) if v is not None]


class VariantGalleryExplorer(Explorer):
    """Controls: the variant and its parameter (the slider's meaning follows the variant), a second
    variant composed with &, N (= N_q = N_k) and the tile size.

    Left: the weights the kernel computes (log colour; grey where masked), the tile grid over them.
    Middle: the tile mask: empty tiles (skipped), partial (masked per element) and full ones.
    Right: HBM elements moved per tensor, every tile against empty tiles skipped (one head, d = 128).
    """

    name = "variant_gallery"
    size = (style.WIDTH, 4.4)

    def __init__(
        self, variant: str = "sliding window", param=None, second: str = "none", N: int = 256, tile: int = 32
    ):
        given = {} if param is None else {"param": param}  # None: the variant's own default
        super().__init__(variant=variant, **given, second=second, N=N, tile=tile)

    def controls(self):
        variant = dropdown("variant", list(KINDS), "sliding window")
        second = dropdown("& second variant", list(SECOND), "none")
        for w in (variant, second):  # a dropdown ends short of the slider beside it
            w.layout.width, w.layout.margin = "400px", "2px 40px 2px 2px"
        return {
            "variant": variant,
            "param": steps(*KINDS["sliding window"][1:]),
            "second": second,
            "N": steps("N = N_q = N_k (tokens)", N_STOPS, 256),
            "tile": steps("tile size B_r = B_c", TILES, 32),
        }

    def linked(self, name, value):
        if name == "variant":  # the slider takes the new variant's parameter
            _, label, stops, default = KINDS[value]
            w = self.widgets["param"]
            # One state message (hold_sync), and index 0 before the new stops: a browser slider
            # that got the new stops with the old index (5 of 9 windows) would clamp it onto the
            # new list (θ = 1e5 of 5) and send that back; the default is what it must show.
            with w.hold_sync():
                w.index = 0
                w.options = stops
                w.value = default
                w.description, w.disabled = label or "(no parameter)", label is None

    def compute(self, variant, param, second, N, tile):
        return variant_gallery_numbers(make_variant(variant, param, second), N, tile)

    def build(self, fig):
        ax_w, ax_t, ax_h = self.ax_w, self.ax_t, self.ax_h = fig.subplots(1, 3)
        for ax in (ax_w, ax_t, ax_h):
            ax.set_box_aspect(1)
        for ax in (ax_w, ax_t):
            ax.set(xlabel="key position kv_idx", ylabel="query position q_idx")
        # colours are computed in draw (an RGBA image draws 3x faster than one normed and mapped)
        self.weights_im = ax_w.imshow(np.ones((2, 2, 4)), interpolation="nearest", extent=(0, 2, 2, 0))
        self.kinds = ax_t.imshow(
            np.zeros((2, 2)),
            cmap=ListedColormap(_KIND_COLORS),
            vmin=-0.5,
            vmax=2.5,
            interpolation="nearest",
            extent=(0, 2, 2, 0),
        )
        self.lines = [
            ax.add_collection(LineCollection([], colors="white", lw=0.7, alpha=0.8)) for ax in (ax_w, ax_t)
        ]
        style.legend_below(
            ax_w,
            [Patch(fc=_CMAP(_WEIGHTS(x))) for x in (1, 0.1, 0.01, 1e-3, 1e-4)]
            + [Patch(fc=_KIND_COLORS[0], ec="0.6"), Line2D([], [], color="0.6", lw=1)],
            ["1", "0.1", "0.01", "1e-3", "≤1e-4", "masked", "tile edge"],
            ncol=4,
            title="weight (log colour)",
        )
        style.legend_below(ax_t, [Patch(fc=c, ec="0.6") for c in _KIND_COLORS], _KIND_LABELS, ncol=1)
        x = np.arange(len(TENSORS))
        self.plain = ax_h.bar(
            x - 0.2, np.ones(4), 0.4, color=style.COLORS["muted"], label="plain: every tile"
        )
        self.skip = ax_h.bar(
            x + 0.2, np.ones(4), 0.4, color=style.COLORS["fa2"], label="variant: empty tiles skipped"
        )
        self.pct = [ax_h.text(i + 0.2, 0, "", ha="center", va="bottom", fontsize=style.SMALL) for i in x]
        ax_h.set_xticks(x, TENSORS)
        ax_h.set(xlim=(-0.6, 3.6), xlabel="tensor", ylabel=f"HBM elements (one head, d = {TRAFFIC_D})")
        ax_h.yaxis.set_major_formatter(FuncFormatter(style.count))
        ax_h.yaxis.set_label_coords(-0.22, 0.5)  # fixed: tick labels change width with the limits
        ax_h.grid(True, axis="y", alpha=0.25)
        style.legend_below(ax_h, ncol=1)
        return [
            self.weights_im,
            self.kinds,
            *self.lines,
            *self.plain,
            *self.skip,
            *self.pct,
            ax_w.title,
            ax_t.title,
            ax_h.title,
        ]

    def draw(self, r: GalleryNumbers) -> str:
        n, c, name = r.N, r.counts, ("none (plain attention)" if r.name == "plain" else r.name)
        self.weights_im.set_data(_CMAP(_WEIGHTS(np.where(r.weights > 0, r.weights, np.nan)), bytes=True))
        g = math.gcd(n, r.tile)  # a last tile that is cut short stays exact
        self.kinds.set_data(r.kinds.repeat(r.tile // g, 0).repeat(r.tile // g, 1)[: n // g, : n // g])
        for ax, im, lines in (
            (self.ax_w, self.weights_im, self.lines[0]),
            (self.ax_t, self.kinds, self.lines[1]),
        ):
            im.set_extent((0, n, n, 0))
            lines.set_segments(_grid(n, r.tile))
            ax.set(xlim=(0, n), ylim=(n, 0))
        for i, (a, b) in enumerate(zip(r.traffic_plain, r.traffic)):
            self.plain[i].set_height(a)
            self.skip[i].set_height(b)
            self.pct[i].set_position((i + 0.2, b))
            self.pct[i].set_text(f"−{1 - b / a:.0%}" if b < a else "")
        self.ax_h.set_ylim(0, max(r.traffic_plain) * 1.12)
        self.ax_w.set_title(
            f"{name}\n" + ("weights: rows sum to 1" if r.softmax else "σ weights: rows not normalised")
        )
        self.ax_t.set_title(f"tile mask: {c['empty']} empty,\n{c['partial']} partial, {c['full']} full")
        self.ax_h.set_title(f"HBM traffic: {r.saved:.1%} saved\n(K and V: {r.kv_saved:.1%})")
        lo, hi = r.row_sums
        rows = "each row sums to 1" if r.softmax else f"rows sum to {lo:.3g}–{hi:.3g}, not normalised"
        return (
            f"<b>{name}</b>, N = {n}: {r.kinds.shape[0]} × {r.kinds.shape[1]} tiles of {r.tile} × "
            f"{r.tile}: {c['empty']} empty, {c['partial']} partial, {c['full']} full: <b>{r.skipped:.1%} "
            f"of the tiles skipped</b>. HBM traffic of one head at d = {TRAFFIC_D}: "
            f"{sum(r.traffic):,} of {sum(r.traffic_plain):,} elements, <b>{r.saved:.1%} saved</b> "
            f"(K/V {r.kv_saved:.1%}). The weights are the kernel's output with V = I ({rows}); they "
            f"equal the dense definition to {style.magnitude(r.max_diff)}."
        )
