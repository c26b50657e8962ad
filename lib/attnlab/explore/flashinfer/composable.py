"""Composable formats (notebook 05, §5.3): n requests forked from one prefix share its pages, so
"these n rows x the prefix pages" is a dense sub-matrix. Stored with (n, page_size) blocks it is
ONE block row, read once for all n queries; each request's own pages keep (1, page_size)
blocks; the two states merge with ⊕. The single format reads the prefix once per request.

Pure part: `composable_numbers(...)` -> ComposableNumbers. It builds the forked requests in a
PagedKVCache and runs `attnlab.core.paged.composable_attention` (its `reads` are the counts shown)
against `bsr_attention` on random float32 data; `composable_text(...)` prints the result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.colors import to_rgb

from attnlab.validate import as_int, choice
from attnlab.core.paged import BSRLayout, PagedKVCache, bsr_attention, composable_attention, to_bsr
from attnlab.explore import style
from attnlab.explore._base import Explorer
from attnlab.explore._controls import slider, steps
from attnlab.explore.flashinfer._cells import EMPTY, Cells, Labels, gap_for, ink

__all__ = [
    "ComposableNumbers",
    "composable_numbers",
    "composable_text",
    "ComposableExplorer",
    "PAGE_SIZES",
    "CHECK_HEAD_DIM",
]

PAGE_SIZES = (1, 2, 4, 8, 16)
#: head dim of the equality check: the outputs' agreement does not depend on it, the time does
CHECK_HEAD_DIM = 16
PREFIX, OWN = np.array(to_rgb(style.COLORS["fa1"])), np.array(to_rgb(style.COLORS["fa2"]))
MATRIX_PT = 217  # a matrix panel's width as laid out, in points (pixels per column)
PANEL_PT = 300  # width of a matrix panel in points (does a label fit the prefix?)


@dataclass(frozen=True)
class ComposableNumbers:
    """KV pages read by the single and the composable format (from composable_attention's
    reads), the layout they were read through, and the two outputs' largest difference."""

    n: int
    prefix: int  # shared prefix, in blocks (full pages)
    own: int  # blocks of its own per request (the last one partly filled)
    page_size: int
    layout: BSRLayout  # the n requests' block tables
    single: int  # KV pages read, one (1, page_size) block per request and page
    composable: int  # the shared pages once plus every request's own pages
    shared: int  # pages in the shared block row (shared_prefix)
    max_diff: float  # max |composable - bsr_attention|, float32, head dim CHECK_HEAD_DIM

    @property
    def saving(self) -> float:
        return 1 - self.composable / self.single


def composable_numbers(
    n: int = 4, prefix: int = 15, own: int = 4, page_size: int = 16, seed: int = 0
) -> ComposableNumbers:
    """n requests forked from a prefix of `prefix` full blocks; request i then appends
    own * page_size - (i % page_size) tokens (`own` blocks, the last partly filled; none when
    own = 0). Without a prefix the requests are independent. The lecture's case:

    >>> r = composable_numbers(4, 15, 4, 16)
    >>> r.single, r.composable, r.shared, f"{r.saving:.0%}", r.max_diff < 1e-6
    (76, 31, 15, '59%', True)
    """
    n = as_int("n", n, 1, 64)
    prefix = as_int("prefix", prefix, 0, 256)
    own = as_int("own", own, 0, 256)
    ps = choice("page_size", page_size, PAGE_SIZES)
    if prefix == 0 and own == 0:
        raise ValueError(
            "prefix=0 and own=0 leave every request empty; valid: at least one block of prefix or of its own"
        )
    seed = as_int("seed", seed, 0, None)
    d, rng = CHECK_HEAD_DIM, np.random.default_rng(seed)
    cache = PagedKVCache(prefix + n * own + 1, ps, d, dtype=np.float32, seed=seed)
    kv = lambda t: rng.standard_normal((2, t, d), dtype=np.float32)  # noqa: E731
    own_tokens = [own * ps - (i % ps) if own else 0 for i in range(n)]
    if prefix:
        base = cache.add(*kv(prefix * ps))
        rids = [cache.fork(base) for _ in range(n)]
        for r, t in zip(rids, own_tokens):
            if t:
                cache.append(r, *kv(t))
    else:
        rids = [cache.add(*kv(t)) for t in own_tokens]
    q = rng.standard_normal((n, d), dtype=np.float32)
    out, reads = composable_attention(q, cache, rids)
    layout = to_bsr(cache, rids)
    diff = float(np.abs(out - bsr_attention(q, cache, layout)).max())
    return ComposableNumbers(
        n, prefix, own, ps, layout, reads["single"], reads["composable"], reads["shared"], diff
    )


#: the two formats agree below this (float32 unit roundoff 6e-8 times a few merges per output; the
#: exact difference depends on the CPU's BLAS kernel, so the text states the verdict, not the digits)
SAME = 1e-6


def composable_text(n: int = 4, prefix: int = 15, own: int = 4, page_size: int = 16) -> str:
    """The counts and the check as text, for a notebook's static output.

    >>> print(composable_text())
    4 requests forked from a 15-block prefix, 4 blocks of their own each, page size 16
    KV blocks read: single format 76, composable 31 (59% fewer; shared block row: 15 pages)
    composable = single to float32 roundoff: max difference below 1e-06 (random data, head dim 16)
    """
    r = composable_numbers(n, prefix, own, page_size)
    return (
        f"{r.n} requests forked from a {r.prefix}-block prefix, {r.own} blocks of their own each, "
        f"page size {r.page_size}\nKV blocks read: single format {r.single}, composable "
        f"{r.composable} ({r.saving:.0%} fewer; shared block row: {r.shared} pages)\n"
        + (
            f"composable = single to float32 roundoff: max difference below {SAME:g}"
            if r.max_diff < SAME
            else f"composable and single DIFFER: max difference {r.max_diff:.3g}"
        )
        + f" (random data, head dim {CHECK_HEAD_DIM})"
    )


class ComposableExplorer(Explorer):
    """Controls: requests n, shared prefix blocks, own blocks per request, page size.

    (a) the single format: requests x KV blocks (columns: the shared prefix's blocks, then each
    request's own), one (1, page size) block per request and page, so every request reads the
    prefix. (b) the composable format on the same matrix: the prefix as ONE block row of n
    queries (one tall block per page, read once), then the (1, page size) blocks of each
    request's own pages. (c) KV blocks each reads, prefix and own parts stacked.
    """

    name = "composable"
    size = (style.WIDTH, 4.6)

    def __init__(self, n: int = 4, prefix: int = 15, own: int = 4, page_size: int = 16):
        super().__init__(n=n, prefix=prefix, own=own, page_size=page_size)

    def controls(self):
        return {
            "n": slider("requests n", 4, 1, 16),
            "prefix": slider("shared prefix (blocks)", 15, 0, 32),
            "own": slider("own blocks per request", 4, 0, 16),
            "page_size": steps("page size (tokens per block)", PAGE_SIZES, 16),
        }

    def compute(self, n, prefix, own, page_size):
        return composable_numbers(n, prefix, own, page_size)

    def build(self, fig):
        a, b, c = self.ax_a, self.ax_b, self.ax_c = fig.subplots(
            1, 3, gridspec_kw={"width_ratios": [1, 1, 0.55]}
        )
        fig.get_layout_engine().set(wspace=0.06)  # panels redrawn alone must not overlap
        self.cells = {k: Cells(ax) for k, ax in zip("ab", (a, b))}
        self.labels = {k: Labels(ax) for k, ax in zip("abc", (a, b, c))}
        for ax, title in (
            (a, "(a) single format: (1, page size) blocks"),
            (b, "(b) composable: the prefix as one block row"),
        ):
            ax.set_title(title)
            ax.set_facecolor(EMPTY)
            ax.set_xlabel("physical KV block (prefix, then own)")
            ax.set_ylabel("request (query row)")
            ax.yaxis.set_label_coords(-0.1, 0.5)  # fixed: tick labels change width with n
            ax.xaxis.get_major_locator().set_params(integer=True)
        x = np.array([0, 1])
        self.bar_p = c.bar(x, [0, 0], width=0.6, color=PREFIX, label="shared prefix pages")
        self.bar_o = c.bar(x, [0, 0], width=0.6, color=OWN, label="own pages")
        c.set_xticks(x, ["single", "composable"])
        c.set_xlim(-0.6, 1.6)
        c.set_ylim(0, 130)
        c.set_yticks([0, 25, 50, 75, 100])
        c.set_xlabel("format")
        c.set_ylabel("KV blocks read (% of single)")
        c.set_title("(c) KV blocks read")
        c.grid(True, axis="y", alpha=0.25)
        style.legend_below(c, ncol=1)
        self.head = fig.suptitle(" ", fontsize=style.RC["axes.titlesize"])
        return [
            *self.cells["a"].artists,
            *self.cells["b"].artists,
            *self.bar_p,
            *self.bar_o,
            *(x for k in "abc" for x in self.labels[k].artists),
            self.head,
        ]

    def draw(self, r: ComposableNumbers) -> str:
        lay, n, s = r.layout, r.n, r.shared
        pages = np.diff(lay.kv_indptr)
        cols = {b: k for k, b in enumerate(dict.fromkeys(lay.kv_indices.tolist()))}  # first use
        x = np.array([cols[b] for b in lay.kv_indices.tolist()])
        row = np.repeat(np.arange(n), pages)
        j = np.arange(x.size) - lay.kv_indptr[row]  # logical block
        lens = lay.seq_lens()[row]
        fill = np.minimum(r.page_size, lens - j * r.page_size) / r.page_size
        pre = j < s
        color = np.where(pre[:, None], PREFIX, OWN)
        gap = gap_for(MATRIX_PT / 72 * self.figure.dpi / len(cols))  # pixels per column
        self.cells["a"].set(x, row, color, fill, gap=gap)
        own = ~pre  # (b): prefix pages once, n tall
        self.cells["b"].set(
            np.r_[x[:s], x[own]],
            np.r_[np.full(s, (n - 1) / 2), row[own]],
            np.r_[color[:s], color[own]],
            np.r_[fill[:s], fill[own]],
            False,
            np.r_[np.full(s, n), np.ones(own.sum())],
            gap=gap,
        )
        wide = s / len(cols) * PANEL_PT > 90  # the label fits the prefix
        self.labels["a"].set([((s - 1) / 2, 0)] * wide, [f"prefix read {n}x"] * wide, ink([PREFIX]))
        self.labels["b"].set([((s - 1) / 2, (n - 1) / 2)] * wide, ["read once"] * wide, ink([PREFIX]))
        for ax in (self.ax_a, self.ax_b):
            ax.set_xlim(-0.5, len(cols) - 0.5)
            ax.set_ylim(n - 0.5, -0.5)
            ax.set_yticks(range(0, n, 1 if n <= 8 else 2))
        parts = [(n * s, r.single - n * s), (s, r.composable - s)]
        for bp, bo, (p, o) in zip(self.bar_p, self.bar_o, parts):
            bp.set_height(100 * p / r.single)
            bo.set_y(100 * p / r.single)
            bo.set_height(100 * o / r.single)
        self.labels["c"].set([(0, 100 + 7), (1, 100 * r.composable / r.single + 7)], [r.single, r.composable])
        self.head.set_text(
            f"{n} request{'s' * (n > 1)}, prefix {r.prefix} blocks, {r.own} own blocks each, "
            f"page size {r.page_size}"
        )
        note = " With one request its whole table is the block row: nothing is shared." if n == 1 else ""
        return (
            f"KV blocks read: single format <b>{r.single}</b> (every request reads its "
            f"{s} shared page(s) again), composable <b>{r.composable}</b> ({s} shared pages once "
            f"+ the own pages): <b>{r.saving:.0%} fewer</b>.{note} "
            + (
                f"Outputs equal to float32 roundoff: max |composable − single| below {SAME:g}"
                if r.max_diff < SAME
                else f"Outputs DIFFER: max |composable − single| = {r.max_diff:.3g}"
            )
            + f" (composable_attention against bsr_attention, float32 random data at head dim "
            f"{CHECK_HEAD_DIM})."
        )
