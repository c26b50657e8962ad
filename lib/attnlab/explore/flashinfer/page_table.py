"""Paged KV as a block-sparse matrix (notebook 05, §5.2): requests of given lengths are stored
in a pool of blocks handed out shuffled; each request's block table (logical block -> physical
block) is one row of a BSR matrix with (1, page_size) blocks, and FlashInfer's three arrays
kv_indptr, kv_indices, kv_last_page_len are that matrix's indptr, indices and last-block fill.

Pure part: `page_table_numbers(...)` -> PageTable (a PagedKVCache with a fixed seed, `to_bsr`,
`BSRLayout.to_scipy`); `page_table_text(...)` prints the tables and the three arrays.

This file is long because the explorer's four panels (the pool, the BSR matrix, the block tables,
the three arrays) draw one `PageTable` on one physical-block axis, and fitting their labels into the
cells is most of the lines; the numbers come from `core.paged`.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.patches import Patch

from attnlab.validate import as_int, short
from attnlab.core.paged import BSRLayout, OutOfBlocks, PagedKVCache, to_bsr
from attnlab.explore import style
from attnlab.explore._base import Explorer, readonly
from attnlab.explore._controls import slider, text
from attnlab.explore.flashinfer._cells import COLORS, EMPTY, FREE, Cells, Labels, ink, tint, warm

__all__ = [
    "parse_lengths",
    "PageTable",
    "page_table_numbers",
    "blocks_needed",
    "page_table_text",
    "PageTableExplorer",
    "LECTURE_LENGTHS",
]

LECTURE_LENGTHS = "19, 10, 29"
MAX_REQUESTS = 6  # typed requests; with MAX_FORKS, at most 10 rows (one colour each)
MAX_FORKS = 4
MAX_POOL = 64
MAX_TOKENS = MAX_POOL * 16  # a request longer than the largest pool can hold is refused
ID_CELLS = 48  # physical ids are written into cells while a row has at most this many
STRIP_PT = 690  # the kv_indices strip's width in points (which labels fit)


def parse_lengths(lengths) -> tuple[int, ...]:
    """Request lengths from the text a learner typed ('19, 10, 29': commas or spaces) or a
    sequence of integers; each 1 to MAX_TOKENS, 1 to MAX_REQUESTS of them.

    >>> parse_lengths("19, 10 29")
    (19, 10, 29)
    """
    if isinstance(lengths, str):
        parts = lengths.replace(",", " ").split()
        try:
            values = [int(p) for p in parts]
        except ValueError:
            raise ValueError(
                f"lengths={short(lengths)} is not a list of whole numbers; type e.g. {LECTURE_LENGTHS!r}"
            ) from None
    elif isinstance(lengths, (list, tuple, np.ndarray)):
        values = list(lengths)
    else:
        raise TypeError(
            f"lengths must be a string such as {LECTURE_LENGTHS!r} or a list of "
            f"integers, got {short(lengths)} ({type(lengths).__name__})"
        )
    if not 1 <= len(values) <= MAX_REQUESTS:
        raise ValueError(f"lengths holds {len(values)} requests; valid: 1 to {MAX_REQUESTS}")
    return tuple(as_int("lengths", v, 1, MAX_TOKENS) for v in values)


@dataclass(frozen=True)
class PageTable:
    """The requests' block tables in a shuffled pool, as FlashInfer's BSR arrays (`layout`)."""

    page_size: int
    pool: int  # blocks in the pool
    lengths: tuple  # tokens of each row's request: the typed ones, then the forks
    forks: int  # the last `forks` rows are forks of request 0, appended 1, 2, ... tokens
    tables: tuple  # block table of each row: physical block ids, logical order
    layout: BSRLayout  # kv_indptr, kv_indices, kv_last_page_len (int32, read-only)
    tokens: np.ndarray  # (rows, pool * page_size): the BSR matrix, 1 where a token is stored
    users: np.ndarray  # requests holding each physical block (0 = free, >1 = shared)

    @property
    def rows(self) -> int:
        return len(self.lengths)


def page_table_numbers(
    page_size: int = 4, lengths=LECTURE_LENGTHS, forks: int = 0, pool: int = 32, seed: int = 0
) -> PageTable:
    """Add requests of `lengths` tokens to a PagedKVCache(pool, page_size, seed=seed), fork
    request 0 `forks` times (fork j appends j tokens: copy-on-write copies a shared partial last
    page first), and read the tables back through `to_bsr`.

    >>> r = page_table_numbers()
    >>> r.layout.kv_indptr.tolist(), r.layout.kv_last_page_len.tolist(), int(r.users.sum())
    ([0, 5, 8, 16], [3, 2, 1], 16)
    """
    page_size = as_int("page_size", page_size, 1, 16)
    lengths = parse_lengths(lengths)
    forks = as_int("forks", forks, 0, MAX_FORKS)
    pool = as_int("pool", pool, 1, MAX_POOL)
    try:
        cache, rids = _filled(pool, page_size, lengths, forks, seed)
    except OutOfBlocks:
        need = blocks_needed(page_size, lengths, forks)
        valid = (
            f"pool {need} to {MAX_POOL} blocks, or a larger page size"
            if need <= MAX_POOL
            else f"a larger page size or fewer tokens (no pool up to {MAX_POOL} blocks holds them)"
        )
        raise ValueError(
            f"pool={pool} blocks is too small at page_size={page_size}: these requests "
            f"need {need} blocks; valid: {valid}."
        ) from None
    layout = to_bsr(cache, rids)
    return PageTable(
        page_size,
        pool,
        tuple(cache.seq_len(r) for r in rids),
        forks,
        tuple(tuple(cache.block_table(r)) for r in rids),
        layout,
        readonly(layout.to_scipy().toarray()),
        readonly(np.bincount(layout.kv_indices, minlength=pool)),
    )


def _filled(pool: int, page_size: int, lengths: tuple, forks: int, seed: int):
    """A PagedKVCache(pool, page_size) holding `lengths` and `forks` forks of request 0 (fork j
    appends j tokens), and the requests' ids; OutOfBlocks if the pool runs out."""
    cache = PagedKVCache(pool, page_size, 1, seed=seed)
    tokens = lambda n: (np.zeros((n, 1)), np.zeros((n, 1)))  # noqa: E731  the layout needs no data
    rids = [cache.add(*tokens(n)) for n in lengths]
    for j in range(1, forks + 1):
        rids.append(cache.fork(rids[0]))
        cache.append(rids[-1], *tokens(j))
    return cache, rids


def blocks_needed(page_size: int, lengths, forks: int = 0) -> int:
    """The blocks these requests hold at `page_size` (the smallest pool that fits them): each
    request's pages, plus what each fork writes (copy-on-write copies a shared partial last
    page before appending), counted in a pool large enough for any of them.

    >>> blocks_needed(1, "19, 10, 29"), blocks_needed(4, "19, 10, 29", forks=2)
    (58, 19)
    """
    lengths = parse_lengths(lengths)
    roomy = sum(-(-n // page_size) for n in lengths) + forks * (forks + 1)
    cache, rids = _filled(roomy, page_size, lengths, forks, 0)
    return int(np.unique(to_bsr(cache, rids).kv_indices).size)


def _array_lines(r: PageTable, width: int = 100) -> list[str]:
    out = []
    for name in ("kv_indptr", "kv_indices", "kv_last_page_len"):
        text = f"{name:<16} = {getattr(r.layout, name).tolist()}"
        out += textwrap.wrap(text, width, subsequent_indent=" " * 20)
    return out


def page_table_text(
    page_size: int = 4, lengths=LECTURE_LENGTHS, forks: int = 0, pool: int = 32, seed: int = 0
) -> str:
    """Each request's block table, then the three BSR arrays, as text.

    >>> print(page_table_text())
    3 requests in pages of 4 tokens, from a shuffled pool of 32 blocks (seed 0)
    request 0: 19 tokens, block table [2, 11, 25, 21, 10]
    request 1: 10 tokens, block table [4, 29, 16]
    request 2: 29 tokens, block table [23, 6, 18, 26, 3, 30, 8, 0]
    kv_indptr        = [0, 5, 8, 16]
    kv_indices       = [2, 11, 25, 21, 10, 4, 29, 16, 23, 6, 18, 26, 3, 30, 8, 0]
    kv_last_page_len = [3, 2, 1]
    """
    r = page_table_numbers(page_size, lengths, forks, pool, seed)
    fork0 = r.rows - r.forks
    rows = [
        f"request {i}: {n} tokens, block table {list(t)}" + (" (fork of request 0)" if i >= fork0 else "")
        for i, (n, t) in enumerate(zip(r.lengths, r.tables))
    ]
    return "\n".join(
        [
            f"{r.rows} requests in pages of {r.page_size} tokens, from a shuffled pool of "
            f"{r.pool} blocks (seed {seed})",
            *rows,
            *_array_lines(r),
        ]
    )


class PageTableExplorer(Explorer):
    """Controls: page size, the request lengths (typed), forks of request 0, pool size.

    (a) the pool: physical blocks coloured by the request holding them (striped: shared by
    several requests; faded: a last page's unused slots; grey: free). (b) under it, on the same
    physical-block axis, the BSR matrix: requests x blocks, each nonzero block filled as far as
    `BSRLayout.to_scipy()` has tokens in it. (c) each request's block table, logical block ->
    physical id. (d) the three arrays in place: kv_indices as cells, kv_indptr at the span
    boundaries above, each request's span bracketed below with its kv_last_page_len.
    """

    name = "page_table"
    size = (style.WIDTH, 7.0)
    error_xy = (0.52, 0.434)  # inside panel (c): off (b)'s axis label and (c)'s title
    error_width = 95

    def __init__(self, page_size: int = 4, lengths: str = LECTURE_LENGTHS, forks: int = 0, pool: int = 32):
        super().__init__(page_size=page_size, lengths=lengths, forks=forks, pool=pool)

    def controls(self):
        return {
            "page_size": slider("page size (tokens per block)", 4, 1, 16),
            "lengths": text("request lengths (tokens)", LECTURE_LENGTHS, width="440px"),
            "forks": slider("forks of request 0 (fork j appends j tokens)", 0, 0, MAX_FORKS),
            "pool": slider("pool size (blocks)", 32, 8, MAX_POOL),
        }

    def compute(self, page_size, lengths, forks, pool):
        return page_table_numbers(page_size, lengths, forks, pool)

    def build(self, fig):
        warm(range(MAX_POOL))
        axes = fig.subplots(4, 1, gridspec_kw={"height_ratios": [0.36, 1.05, 1.05, 0.95]})
        a, b, c, d = self.ax_a, self.ax_b, self.ax_c, self.ax_d = axes
        self.cells = {k: Cells(ax) for k, ax in zip("abcd", axes)}
        self.labels = {k: Labels(ax) for k, ax in zip("cd", (c, d))}
        self.marks = d.add_collection(LineCollection([], colors="#333333", linewidths=1.2))
        for ax, title in zip(
            axes,
            (
                "(a) the pool: physical blocks, coloured by the request holding them",
                "(b) the BSR matrix: requests x physical blocks, (1, page size) blocks",
                "(c) block tables: logical block -> physical block id",
                "(d) kv_indices (cells), kv_indptr (above: where each request's "
                "span starts), kv_last_page_len (below)",
            ),
        ):
            ax.set_title(title)
            ax.set_facecolor(EMPTY)
            ax.xaxis.get_major_locator().set_params(integer=True)
        a.set_yticks([])
        a.set_ylim(0.5, -0.5)
        d.set_yticks([])
        d.set_ylim(1.85, -1.45)
        a.set_xlabel("physical block id")
        b.set_xlabel("physical block id")
        c.set_xlabel("logical block (position in the block table)")
        d.set_xlabel("position in kv_indices")
        for ax, label in zip(axes, ("pool", "request", "request", "arrays")):
            ax.set_ylabel(label)
        keys = [
            Patch(fc=COLORS[0]),
            Patch(fc=tint(COLORS[0])),
            Patch(fc=FREE),
            Patch(fc="white", ec="#1a1a1a", hatch="///"),
        ]
        fig.legend(
            keys,
            [
                "tokens of request i (colour = row)",
                "unused slots of a last page",
                "free block",
                "shared by several requests",
            ],
            loc="outside lower center",
            ncol=4,
            frameon=False,
        )
        self.head = fig.suptitle(" ", fontsize=style.RC["axes.titlesize"])
        return [
            *(x for k in "abcd" for x in self.cells[k].artists),
            *self.labels["c"].artists,
            self.marks,
            *self.labels["d"].artists,
            self.head,
        ]

    def draw(self, r: PageTable) -> str:
        ps, n, pool, lay = r.page_size, r.rows, r.pool, r.layout
        pages, nnz = np.diff(lay.kv_indptr), lay.kv_indices.size
        slots = r.tokens.reshape(n, pool, ps).sum(-1)  # tokens of request i in block b
        held = np.zeros((n, pool), bool)
        for i, t in enumerate(r.tables):
            held[i, list(t)] = True
        owner = held.argmax(0)  # the first request holding a block
        shared = r.users > 1
        used = r.users > 0
        self.cells["a"].set(
            np.arange(pool),
            0,
            np.where(used[:, None], COLORS[owner], FREE),
            np.where(used, slots.max(0) / ps, 1.0),
            shared,
        )
        ii, bb = np.nonzero(held)
        self.cells["b"].set(bb, ii, COLORS[ii], slots[ii, bb] / ps, shared[bb])
        row_of = np.repeat(np.arange(n), pages)  # the request of each kv_indices entry
        j = np.arange(nnz) - lay.kv_indptr[row_of]  # its logical block
        fill = np.minimum(ps, np.array(r.lengths)[row_of] - j * ps) / ps
        self.cells["c"].set(j, row_of, COLORS[row_of], fill, shared[lay.kv_indices])
        width = int(pages.max())
        row_pt = self.ax_c.get_position().height * self.figure.get_figheight() * 72 / n
        ids = width <= ID_CELLS and row_pt >= 9.5  # the ids fit the cells
        under = np.where(fill[:, None] >= 0.5, COLORS[row_of], tint(COLORS[row_of]))  # under the label
        self.labels["c"].set(
            np.c_[j, row_of][: nnz * ids], lay.kv_indices[: nnz * ids], ink(under)[: nnz * ids]
        )
        self.cells["d"].set(np.arange(nnz), 0, COLORS[row_of], 1.0, shared[lay.kv_indices])
        ids_d = nnz <= ID_CELLS
        self._arrays(lay, pages, ids_d)
        for ax, cols, rows in (
            (self.ax_a, pool, None),
            (self.ax_b, pool, n),
            (self.ax_c, width, n),
            (self.ax_d, nnz, None),
        ):
            pad = 0.5 if ax is not self.ax_d else 0.5 + 12 / (STRIP_PT / nnz)  # room for kv_indptr
            ax.set_xlim(-pad, cols - 1 + pad)
            if rows:
                ax.set_ylim(rows - 0.5, -0.5)
                ax.set_yticks(range(rows))
        typed = ", ".join(map(str, r.lengths[: n - r.forks]))
        forks = f" + {r.forks} fork(s)" if r.forks else ""
        listed = "" if ids_d else f"; (d)'s {nnz} ids are listed under the figure"
        self.head.set_text(f"lengths {typed}{forks}, page size {ps}, pool {pool}{listed}")
        arrays = "\n".join(_array_lines(r, 120))
        share = (
            f" {int(shared.sum())} block(s) are shared (striped): a fork holds its parent's blocks "
            f"by reference until it writes into one (copy-on-write)."
            if shared.any()
            else ""
        )
        return (
            f"{n} requests, {' + '.join(map(str, pages))} = {nnz} pages in {int(used.sum())} of {pool} "
            f"blocks. Request i's pages are kv_indices[kv_indptr[i]:kv_indptr[i+1]]; it holds "
            f"{ps} × (pages − 1) + kv_last_page_len[i] tokens.{share}"
            f"<pre style='margin:4px 0'>{arrays}</pre>"
        )

    def _arrays(self, lay: BSRLayout, pages, ids: bool) -> None:
        """(d): the ids in the cells, kv_indptr at the span boundaries, brackets with the last
        page's fill; labels that would not fit are left out."""
        n, nnz = pages.size, lay.kv_indices.size
        cell = STRIP_PT / nnz  # points per cell
        xy, texts, marks, last = [], [], [], -np.inf
        if ids:
            xy += [(k, 0) for k in range(nnz)]
            texts += list(lay.kv_indices)
        for k, p in enumerate(lay.kv_indptr):  # kv_indptr, at the boundaries
            x = p - 0.5
            marks.append([(x, -0.5), (x, -0.75)])
            if (x - last) * cell > 6.5 * (len(str(p)) + 1) or k == n:
                xy.append((x, -1.0))
                texts.append(p)
                last = x
        for i in range(n):  # request i's span
            a0, a1 = lay.kv_indptr[i] - 0.42, lay.kv_indptr[i + 1] - 0.58
            marks.append([(a0, 0.6), (a0, 0.78), (a1, 0.78), (a1, 0.6)])
            mid, wide = (a0 + a1) / 2, pages[i] * cell
            if wide > 52:
                xy += [(mid, 1.1), (mid, 1.5)]
                texts += [f"req {i}", f"last {lay.kv_last_page_len[i]}"]
            elif wide > 12:
                xy.append((mid, 1.1))
                texts.append(i)
        self.marks.set_segments(marks)
        row_of = np.repeat(np.arange(n), pages)
        colors = np.concatenate(
            [ink(COLORS[row_of]) if ids else np.zeros((0, 3)), np.zeros((len(texts) - nnz * ids, 3))]
        )
        self.labels["d"].set(xy, texts, colors)
