"""The merge operator in floating point (notebook 04, §4.3): split the keys, compute each chunk's
attention state (o, lse), fold the states with ⊕ in some order, and compare with the float64
one-pass output. In float64 every order agrees to ~1e-16; in float32 a different order of the
same additions changes the last bits: why deterministic kernels fix the merge order.

Pure part: `merge_errors(splits, dtype, order, seed)` -> MergeErrors. The states and the merge are
`attnlab.core.decode.split_kv_attention` and `attnlab.core.softmax.merge_states`.

This file is long because the explorer's curve and its ringed point must come from the same folds,
bit for bit: the cached chunk states, the lockstep fold over every split count (`_grid_merged`) and
`merge_errors` share one set of caches; apart, the ring could sit off its line.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from attnlab.validate import as_bool, as_int, choice
from attnlab.core.decode import split_bounds
from attnlab.core.softmax import attention_state, merge, merge_states
from attnlab.explore import style
from attnlab.explore._base import Explorer, readonly
from attnlab.explore._controls import slider, toggle

__all__ = [
    "merge_data",
    "MergeErrors",
    "merge_errors",
    "MergeExplorer",
    "MERGE_ORDERS",
    "MERGE_DTYPES",
    "MERGE_GRID",
    "MERGE_BOUNDS",
]

MERGE_ORDERS = ("forward", "reverse", "random")
MERGE_DTYPES = ("float32", "float64")
MERGE_KEYS, MERGE_D = 10_000, 64
MERGE_MAX_SPLITS = 256
MERGE_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # split counts of the error curve
ERR_FLOOR = 1e-19  # an exact 0 is drawn here on log axes
#: The bound the merge table asserts, absolute, per dtype: 16 units of roundoff u (2^-53, 2^-24).
#: The inputs are of order 1 and the output is a convex combination of the values, so its error
#: is a few u; the digits below that bound move with the CPU's BLAS kernel and SIMD width.
MERGE_BOUNDS = {"float64": 16 * 2.0**-53, "float32": 16 * 2.0**-24}


@dataclass(frozen=True)
class MergeErrors:
    """Merged split states against the float64 one-pass output o_ref (absolute differences)."""

    splits: int
    dtype: str
    order: str
    seed: int
    fwd: np.ndarray  # per output element: forward merge vs o_ref
    other: np.ndarray  # `order` merge vs o_ref
    diff: np.ndarray  # forward vs `order`
    curve: tuple | None  # (splits grid, fwd max, other max, diff max) over MERGE_GRID

    @property
    def fwd_max(self) -> float:
        return float(self.fwd.max())

    @property
    def other_max(self) -> float:
        return float(self.other.max())

    @property
    def diff_max(self) -> float:
        return float(self.diff.max())


@functools.lru_cache(maxsize=16)
def merge_data(seed: int = 0, n_keys: int = MERGE_KEYS, d: int = MERGE_D):
    """One query and n_keys keys and values (standard normal, float64) from `seed`, plus the
    float64 one-pass output o_ref: (q, k, v, o_ref), read-only arrays."""
    seed = as_int("seed", seed, 0, None)
    n_keys = as_int("n_keys", n_keys, 1, None)
    d = as_int("d", d, 1, None)
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(d)
    k = rng.standard_normal((n_keys, d))
    v = rng.standard_normal((n_keys, d))
    o_ref, _ = attention_state(q, k, v)
    for a in (q, k, v, o_ref):
        a.setflags(write=False)
    return q, k, v, o_ref


@functools.lru_cache(maxsize=16)
def _cast(dtype: str, seed: int, n_keys: int, d: int) -> tuple:
    q, k, v, _ = merge_data(seed, n_keys, d)
    return tuple(x.astype(dtype) for x in (q, k, v))


@functools.lru_cache(maxsize=1024)
def _states(dtype: str, seed: int, splits: int, n_keys: int, d: int) -> tuple:
    """The chunk states of `split_kv_attention` (the same calls: `attention_state` on each chunk
    of `split_bounds`), without its merge: the explorer merges them itself, in lockstep."""
    q, k, v = _cast(dtype, seed, n_keys, d)
    return tuple(attention_state(q, k[a:b], v[a:b]) for a, b in split_bounds(n_keys, splits))


def _order(order: str, splits: int, seed: int):
    if order == "random":
        return np.random.default_rng([seed, splits]).permutation(splits)
    return order


def _indices(order: str, splits: int, seed: int) -> list[int]:
    """The fold order of `merge_states(states, _order(order, splits, seed))` as indices."""
    if order == "forward":
        return list(range(splits))
    if order == "reverse":
        return list(range(splits - 1, -1, -1))
    return [int(i) for i in _order(order, splits, seed)]


@functools.lru_cache(maxsize=2048)
def _merged(dtype: str, seed: int, splits: int, order: str, n_keys: int, d: int) -> np.ndarray:
    o, _ = merge_states(_states(dtype, seed, splits, n_keys, d), _order(order, splits, seed))
    o = np.asarray(o, dtype=np.float64)
    o.setflags(write=False)
    return o


def _grid(n_keys: int) -> tuple:
    return tuple(s for s in MERGE_GRID if s <= n_keys)


@functools.lru_cache(maxsize=64)
def _grid_merged(dtype: str, seed: int, order: str, n_keys: int, d: int) -> tuple:
    """The forward and the `order` merge at every split count of MERGE_GRID, as two read-only
    float64 arrays (grid, d). What a dtype, seed or order change costs: one `softmax.merge` call
    per step for all the folds at once (merge is elementwise over leading dims), each fold padded
    with the identity state (0, -inf), which leaves a state unchanged bit for bit. Equal, bit for
    bit, to `merge_states` on each split count's states (tests/explore/test_decode_explore.py)."""
    folds = []
    for s in _grid(n_keys):
        states = _states(dtype, seed, s, n_keys, d)
        for o in ("forward", order):
            folds.append([states[i] for i in _indices(o, s, seed)])
    steps = max(len(f) for f in folds)
    ident = (np.zeros(d, dtype=dtype), np.asarray(-np.inf, dtype=dtype))
    column = lambda j: tuple(np.stack(x) for x in zip(*(f[j] if j < len(f) else ident for f in folds)))  # noqa: E731
    acc = column(0)
    for j in range(1, steps):
        acc = merge(acc, column(j))
    o = np.asarray(acc[0], dtype=np.float64)
    return readonly(o[0::2], o[1::2])


@functools.lru_cache(maxsize=64)
def _curve(dtype: str, seed: int, order: str, n_keys: int, d: int) -> tuple:
    ref = merge_data(seed, n_keys, d)[3]
    a, b = _grid_merged(dtype, seed, order, n_keys, d)
    fwd, oth, diff = (np.abs(x).max(axis=1) for x in (a - ref, b - ref, a - b))
    return readonly(np.array(_grid(n_keys)), fwd, oth, diff)


def merge_errors(
    splits: int = 64,
    dtype: str = "float32",
    order: str = "reverse",
    seed: int = 0,
    *,
    n_keys: int = MERGE_KEYS,
    d: int = MERGE_D,
    curve: bool = True,
) -> MergeErrors:
    """Split n_keys keys into `splits` chunks, compute each chunk's attention state in `dtype`,
    merge them forward and in `order` ('forward', 'reverse' or 'random': a permutation seeded by
    (seed, splits), as atomics finishing in any order would give), and compare with the float64
    one-pass output. States and merges are cached per (dtype, seed, splits, order).

    >>> e = merge_errors(8, "float64", "reverse", curve=False)
    >>> e.fwd_max < 1e-15 and e.other_max < 1e-15
    True
    >>> e = merge_errors(8, "float32", "reverse", curve=False)
    >>> 1e-9 < e.fwd_max < 1e-6
    True
    """
    splits = as_int("splits", splits, 1, None)
    n_keys = as_int("n_keys", n_keys, 1, None)
    if splits > n_keys:
        raise ValueError(f"splits={splits} is out of range; valid: 1 <= splits <= n_keys={n_keys}")
    dtype = choice("dtype", dtype, MERGE_DTYPES)
    order = choice("order", order, MERGE_ORDERS)
    seed = as_int("seed", seed, 0, None)
    d = as_int("d", d, 1, None)
    curve = as_bool("curve", curve)
    ref = merge_data(seed, n_keys, d)[3]
    grid = _grid(n_keys)
    if curve and splits in grid:  # the curve's own folds: the ring sits on its line
        a, b = (x[grid.index(splits)] for x in _grid_merged(dtype, seed, order, n_keys, d))
    else:
        a = _merged(dtype, seed, splits, "forward", n_keys, d)
        b = _merged(dtype, seed, splits, order, n_keys, d)
    errors = readonly(np.abs(a - ref), np.abs(b - ref), np.abs(a - b))
    return MergeErrors(
        splits,
        dtype,
        order,
        seed,
        *errors,
        _with_point(_curve(dtype, seed, order, n_keys, d), splits, errors) if curve else None,
    )


def _with_point(curve, splits, errors):
    """The curve over MERGE_GRID with the current split count inserted, so the ring that marks
    it sits on the line even between grid points."""
    grid, fwd, oth, diff = curve
    if splits in grid:
        return curve
    i = int(np.searchsorted(grid, splits))
    pt = (splits, *(e.max() for e in errors))
    return readonly(*(np.insert(arr, i, v) for arr, v in zip(curve, pt)))


class MergeExplorer(Explorer):
    """Controls: number of splits, dtype, merge order, seed.

    Left: max |o - o_ref| against the number of splits (log-log) for the forward order and your
    order, and the difference between the two (what a rerun with another order would change);
    your split count ringed. Right: the same three differences per output element (d = 64) at
    your split count. An exact 0 is drawn at the bottom of the axis.
    """

    name = "merge"
    size = (style.WIDTH, 4.4)

    def __init__(self, splits: int = 8, dtype: str = "float32", order: str = "reverse", seed: int = 0):
        super().__init__(splits=splits, dtype=dtype, order=order, seed=seed)
        # The other dtype's curve at the opening seed and order, computed now (about as long as one
        # change): the dtype toggle is the first control a reader tries here, and a curve not yet
        # cached costs a chunk state per split of every grid point (511 of them) before it draws.
        other = MERGE_DTYPES[1 - MERGE_DTYPES.index(self.values["dtype"])]
        _curve(other, self.values["seed"], self.values["order"], MERGE_KEYS, MERGE_D)

    def controls(self):
        return {
            "splits": slider("splits", 8, 1, MERGE_MAX_SPLITS),
            "dtype": toggle("dtype", MERGE_DTYPES, "float32"),
            "order": toggle("merge order", MERGE_ORDERS, "reverse"),
            "seed": slider("seed", 0, 0, 9),
        }

    def compute(self, splits, dtype, order, seed):
        return merge_errors(splits, dtype, order, seed)

    def build(self, fig):
        ax_c, ax_e = self.ax_c, self.ax_e = fig.subplots(1, 2)
        c = style.COLORS
        exp_label = lambda y, _p: "0" if y < ERR_FLOOR * 1.5 else f"1e{int(round(np.log10(y)))}"  # noqa: E731
        ticks = [10.0**e for e in range(-19, -4, 2)]
        style.log_axis(ax_c, "x", 0.8, 320, ticks=MERGE_GRID)
        for ax in (ax_c, ax_e):
            style.log_axis(ax, "y", ERR_FLOOR / 2, 1e-5, ticks=ticks, formatter=exp_label)
            ax.grid(True, alpha=0.25)
            ax.axhspan(1.1e-16 / 2, 1.1e-16 * 2, color=c["fa2"], alpha=0.12, lw=0)
            ax.axhspan(6e-8 / 2, 6e-8 * 2, color=c["fa1"], alpha=0.12, lw=0)
        ax_c.set_xlabel("number of splits (chunks of 10,000 keys)")
        ax_c.set_ylabel("max |o - o_ref| over the output")
        ax_e.set_xlabel("output element (of d = 64)")
        ax_e.set_ylabel("|o - o_ref| per element")
        ax_e.set_xlim(-1, MERGE_D)
        ax_c.text(0.9, 1.1e-16 * 2.5, "float64 unit roundoff, 1.1e-16", fontsize=style.SMALL, color=c["fa2"])
        ax_c.text(0.9, 6e-8 * 2.5, "float32 unit roundoff, 6e-8", fontsize=style.SMALL, color=c["fa1"])
        styles = {"fwd": ("-o", c["fa2"]), "other": ("-s", c["fa1"]), "diff": ("-^", c["standard"])}
        self.lines = {
            k: ax_c.plot([], [], fmt, ms=4, color=col, lw=1.3)[0] for k, (fmt, col) in styles.items()
        }
        self.marks = {
            k: ax_c.plot([], [], "o", ms=10, mfc="none", mec=c["highlight"], mew=2)[0] for k in styles
        }
        self.vline = ax_c.axvline(1, color=c["highlight"], lw=2, alpha=0.7)
        self.pts = {
            k: ax_e.plot([], [], fmt[1:], ms=4, color=col, alpha=0.8, ls="none")[0]
            for k, (fmt, col) in styles.items()
        }
        fig.legend(
            [self.lines["fwd"], self.lines["other"], self.lines["diff"], self.marks["fwd"]],
            [
                "forward order vs the fp64 one-pass output",
                "your order vs the fp64 one-pass output",
                "forward vs your order (what a rerun in your order changes)",
                "your split count",
            ],
            loc="outside lower center",
            ncol=2,
            frameon=False,
        )
        return [
            *self.lines.values(),
            *self.marks.values(),
            self.vline,
            *self.pts.values(),
            ax_c.title,
            ax_e.title,
        ]

    def draw(self, r: MergeErrors) -> str:
        floor = lambda x: np.maximum(np.asarray(x, dtype=float), ERR_FLOOR)  # noqa: E731
        grid, fwd, oth, diff = r.curve
        same_order = r.order == "forward"  # your order is forward: one line, no difference
        for k, ys in (("fwd", fwd), ("other", oth), ("diff", diff)):
            self.lines[k].set_data(grid, floor(ys))
            self.marks[k].set_data([r.splits], [max(getattr(r, k + "_max"), ERR_FLOOR)])
            self.pts[k].set_data(np.arange(MERGE_D), floor(getattr(r, k)))
            for art in (self.lines[k], self.marks[k], self.pts[k]):
                art.set_visible(k == "fwd" or not same_order)
        self.vline.set_xdata([r.splits, r.splits])
        self.ax_c.set_title(f"merged vs one pass\n{r.dtype}, {r.order} order, seed {r.seed}")
        self.ax_e.set_title(f"per output element\n{r.splits} splits, {r.dtype}, {r.order} order")
        same = r.diff_max == 0
        return (
            f"{r.splits} split(s), {r.dtype}: forward merge vs the fp64 one-pass output "
            f"{style.magnitude(r.fwd_max)}; {r.order} merge {style.magnitude(r.other_max)}; "
            f"forward vs {r.order}: <b>{'identical bits' if same else style.magnitude(r.diff_max)}</b>"
            + (
                ""
                if same or r.dtype == "float64"
                else " &mdash; same inputs, same math, a different order of additions, different last bits."
            )
        )
