"""Low-precision attention error as an explorer (notebook 06, §6): FP8 e4m3 or FP4 e2m1 rounding
of Q, K, V, per tensor against per block of rows, with or without FA3's random orthogonal
transform, on keys with outlier channels.

Pure part: `lowprec_numbers(fmt, block, strength, transform)` -> LowPrecNumbers from
`attnlab.core.lowprec` (errors are cached there, so moving back to a setting costs nothing).
"""

from __future__ import annotations

import textwrap

from dataclasses import dataclass

import numpy as np

from attnlab.core import lowprec as lp
from attnlab.validate import as_int
from attnlab.explore import style
from attnlab.explore._base import Explorer, readonly
from attnlab.explore._controls import checkbox, steps, toggle

__all__ = [
    "LOWPREC_DEFAULTS",
    "LowPrecNumbers",
    "lowprec_numbers",
    "lowprec_table",
    "LowPrecExplorer",
    "N_EXPLORE",
    "D_EXPLORE",
]

N_EXPLORE, D_EXPLORE = 256, 64  # small enough for < 100 ms per change
BLOCKS = (("per tensor", 0), ("128 rows", 128), ("64 rows", 64), ("16 rows", 16), ("1 row", 1))
STRENGTHS = (1, 3, 10, 30, 100)
FMTS = (("FP8 e4m3", "fp8_e4m3"), ("FP4 e2m1", "fp4_e2m1"))
#: The explorer opens where its N shows the lesson: FP4, a scale per 16 rows, outliers x30, the
#: transform on. At N = 256 a tensor is only four blocks of 64 rows, so a scale per 64 rows is
#: hardly finer than the tensor's (`block_headroom`) and its gain drowns in the scatter.
LOWPREC_DEFAULTS = {"fmt": "fp4_e2m1", "block": 16, "strength": 30, "transform": True}


@dataclass(frozen=True)
class LowPrecNumbers:
    fmt: str
    block: int  # 0 = per tensor
    strength: float
    transform: bool
    rmse: float  # this setting
    baseline: float  # per tensor, no transform, same format
    bf16: float  # bf16 rounding of Q, K, V, for scale
    amax: np.ndarray  # per-channel max |k| the quantiser sees (after the transform if on)
    outliers: np.ndarray  # the outlier channels


def lowprec_numbers(
    fmt="fp8_e4m3",
    block: int = 64,
    strength: float = 30.0,
    transform: bool = True,
    n: int = N_EXPLORE,
    d: int = D_EXPLORE,
    seed: int = 0,
) -> LowPrecNumbers:
    b = None if block == 0 else block
    e = lp.attention_error(fmt, b, transform, strength, n, d, seed=seed)
    base = lp.attention_error(fmt, None, False, strength, n, d, seed=seed)
    bf = lp.attention_error("bf16", None, False, strength, n, d, seed=seed)
    _, k, _, chans = lp.outlier_inputs(n, d, strength, seed=seed)
    if transform:
        k = k @ lp.random_orthogonal(d, seed)
    return LowPrecNumbers(
        fmt,
        block,
        float(strength),
        bool(transform),
        e.rmse,
        base.rmse,
        bf.rmse,
        readonly(np.abs(k).max(axis=0)),
        readonly(np.sort(chans)),
    )


def lowprec_table(
    fmts=("fp8_e4m3", "fp4_e2m1"),
    strengths=(0, 30),
    block: int = 64,
    n: int = 2048,
    d: int = 64,
    seed: int = 0,
) -> str:
    """RMSE against float64 attention of the three METHODS per format and outlier strength."""
    rows = []
    for fmt in fmts:
        for s in strengths:
            for r in lp.compare_methods(fmt, s, block, n=n, d=d, seed=seed):
                rows.append({"fmt": fmt, "strength": float(s), **r})
    head = (
        f"N = {n:,} queries and keys, d = {d}, 4 outlier key channels of the given strength, seed {seed}; "
        f"Q, K, V rounded, attention in float64; blocks of {block} rows; 'gain' = per-tensor RMSE / this RMSE"
    )
    head = textwrap.fill(head, 100) + "\n"
    return head + style.table(
        rows,
        {
            "fmt": "format",
            "strength": "outlier",
            "method": "method",
            "rmse": "RMSE",
            "relative": "relative",
            "amax": "max |q|,|k|",
            "gain": "gain",
        },
        {"strength": ".0f", "rmse": ".2e", "relative": ".1%", "amax": ".1f", "gain": ".2f"},
    )


def _stems(heights, keep):
    """x, y of vertical segments from the axis floor to each kept height, NaN-separated: one
    artist for all channels instead of one bar each."""
    ch = np.flatnonzero(keep).astype(float)
    x = np.repeat(ch, 3)
    y = np.column_stack([np.full(len(ch), 0.5), heights[keep], np.full(len(ch), np.nan)]).ravel()
    x[2::3] = np.nan
    return x, y


class LowPrecExplorer(Explorer):
    """Controls: format, block size (rows per scale), outlier strength, transform on/off.

    Left: the largest |k| of each channel the quantiser sees (log scale): a few outlier channels,
    or, with the transform, every channel at a similar height. Right: RMSE of the attention output
    against float64 for bf16 rounding, the per-tensor baseline of this format, and your setting.
    The format is a pair of buttons, so the chosen one is always readable. It opens at
    `LOWPREC_DEFAULTS`. `n` (queries and keys) is fixed per explorer: N_EXPLORE = 256 answers
    within a slider step; a static snapshot can take the table's 2,048.
    """

    name = "lowprec_error"
    size = (style.WIDTH, 4.0)

    def __init__(
        self,
        fmt: str = LOWPREC_DEFAULTS["fmt"],
        block: int = LOWPREC_DEFAULTS["block"],
        strength: float = LOWPREC_DEFAULTS["strength"],
        transform: bool = LOWPREC_DEFAULTS["transform"],
        *,
        n: int = N_EXPLORE,
    ):
        self.n = as_int("n", n, 16, 1 << 14)
        super().__init__(fmt=fmt, block=block, strength=strength, transform=transform)

    def controls(self):
        return {
            "fmt": toggle("format", FMTS, LOWPREC_DEFAULTS["fmt"]),
            "block": steps("scale per", BLOCKS, LOWPREC_DEFAULTS["block"]),
            "strength": steps("outlier strength (x)", STRENGTHS, LOWPREC_DEFAULTS["strength"]),
            "transform": checkbox("random orthogonal transform of Q, K", LOWPREC_DEFAULTS["transform"]),
        }

    def compute(self, fmt, block, strength, transform):
        return lowprec_numbers(fmt, block, strength, transform, n=self.n)

    def build(self, fig):
        ax_c, ax_e = self.ax_c, self.ax_e = fig.subplots(1, 2)
        c = style.COLORS
        (self.stems,) = ax_c.plot([], [], lw=3, color=c["fa1"], solid_capstyle="butt", label="channel")
        (self.hot,) = ax_c.plot(
            [], [], lw=3, color=c["standard"], solid_capstyle="butt", label="outlier channel"
        )
        style.log_axis(ax_c, "y", 0.5, 300)
        ax_c.set_xlim(-1, D_EXPLORE)
        ax_c.set_xlabel("key channel")
        ax_c.set_ylabel("max |k| over tokens")
        ax_c.grid(True, axis="y", alpha=0.25)
        ax_c.legend(loc="upper right", fontsize=style.SMALL)
        x = np.arange(3)
        self.bars = ax_e.bar(x, [1, 1, 1], 0.6, color=[c["muted"], c["standard"], c["fa2"]])
        self.tops = [ax_e.text(i, 1, "", ha="center", va="bottom", fontsize=style.SMALL) for i in x]
        ax_e.set_xticks(x, ["bf16", "per tensor,\nno transform", "your setting"])
        style.log_axis(ax_e, "y", 1e-4, 3)
        ax_e.set_xlim(-0.6, 2.6)
        ax_e.set_xlabel("rounding of Q, K, V")
        ax_e.set_ylabel("RMSE of the output vs float64")
        ax_e.grid(True, axis="y", alpha=0.25)
        return [self.stems, self.hot, *self.bars, *self.tops, ax_c.title, ax_e.title]

    def draw(self, r: LowPrecNumbers) -> str:
        hot = np.zeros(len(r.amax), bool)
        if not r.transform:
            hot[r.outliers] = True
        self.stems.set_data(*_stems(r.amax, ~hot))
        self.hot.set_data(*_stems(r.amax, hot))
        vals = (r.bf16, r.baseline, r.rmse)
        for b, t, v, i in zip(self.bars, self.tops, vals, range(3)):
            b.set_height(v)
            t.set_position((i, v * 1.15))
            t.set_text(f"{v:.2e}")
        fmt = dict((v, k) for k, v in FMTS)[r.fmt]
        block = (
            dict((v, k) for k, v in BLOCKS)[r.block]
            if r.block in dict((v, k) for k, v in BLOCKS)
            else f"{r.block} rows"
        )
        tr = "with" if r.transform else "without"
        self.ax_c.set_title(f"|k| per channel the quantiser sees ({tr} transform)", fontsize=9.5)
        self.ax_e.set_title(
            f"{fmt}, scale: {block}, outliers x{r.strength:g}, "
            f"{'transform' if r.transform else 'no transform'}, N = {self.n:,}",
            fontsize=9.5,
        )
        gain = r.baseline / r.rmse
        return (
            f"{fmt}, scale: {block}, {tr} the transform, key outliers x{r.strength:g}: RMSE "
            f"<b>{r.rmse:.2e}</b> against {r.baseline:.2e} per tensor (<b>{gain:.2f}x</b> "
            f"{'lower' if gain >= 1 else 'higher'}); bf16 rounding gives {r.bf16:.2e}. "
            f"N = {self.n:,}, d = {D_EXPLORE}, seed 0."
        )
