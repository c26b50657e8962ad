"""Cascade attention (notebook 04, §4.4): n requests share a prefix; read it once for all of them
(one matrix pass, n g queries per KV element) and each request's own tokens separately, then merge
the two states with ⊕. KV tokens read and the prefix part's intensity.

Pure part: `cascade_numbers(n, prefix, unique, g, gpu)` -> CascadeNumbers, from
`attnlab.core.decode.cascade_intensity`; `cascade_check` runs `attnlab.core.decode.cascade_attention`.

This file is long because §4.4's count (`cascade_numbers`), its table, its float64 check against
per-request attention and the explorer that draws the count sit together, as in every section of
notebook 04; the explorer's two panels are most of the lines.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnlab.validate import as_int
from attnlab.core.decode import cascade_attention, cascade_intensity, intensity
from attnlab.machine.hardware import get_gpu, gpus, ridge_point
from attnlab.core.softmax import attention_state
from attnlab.explore import style
from attnlab.explore._base import Explorer, readonly
from attnlab.explore._controls import dropdown, slider, steps
from attnlab.explore.decode.intensity import I_LIM
from attnlab.explore.decode.merge import MERGE_BOUNDS

__all__ = [
    "CascadeNumbers",
    "cascade_numbers",
    "CascadeCheck",
    "cascade_run",
    "cascade_check",
    "cascade_table",
    "CascadeExplorer",
]

N_GRID = readonly(np.unique(np.round(np.geomspace(1, 256, 41)).astype(np.int64)))


@dataclass(frozen=True)
class CascadeNumbers:
    """KV tokens read by n requests sharing a prefix, naive against cascade, and intensities."""

    n: int
    prefix: int
    unique: int
    g: int
    gpu: str
    tokens_naive: int  # n (prefix + unique)
    tokens_cascade: int  # prefix + n unique
    saving: float  # 1 - cascade / naive
    i_prefix: float  # the prefix part: n g queries per KV element (bf16 FLOP/byte)
    i_naive: float  # one request alone
    i_unique: float
    ridge: float  # bf16 ridge point of `gpu`
    curve_n: np.ndarray  # request counts ...
    curve_i: np.ndarray  # ... and the prefix part's intensity at each

    @property
    def naive_prefix(self) -> int:
        return self.n * self.prefix

    @property
    def naive_unique(self) -> int:
        return self.n * self.unique

    @property
    def cascade_prefix(self) -> int:
        return self.prefix

    @property
    def cascade_unique(self) -> int:
        return self.n * self.unique


def cascade_numbers(
    n: int = 64, prefix: int = 4096, unique: int = 256, g: int = 4, gpu="H100-SXM"
) -> CascadeNumbers:
    """KV tokens and intensities of cascade attention against the naive per-request kernel.

    >>> r = cascade_numbers(64, 4096, 256, 4)
    >>> r.tokens_naive, r.tokens_cascade, f"{r.saving:.1%}", round(r.i_prefix, 1)
    (278528, 20480, '92.6%', 240.9)
    """
    n = as_int("n", n, 1, None)
    prefix = as_int("prefix", prefix, 1, None)
    unique = as_int("unique", unique, 0, None)
    g = as_int("g", g, 1, None)
    ci = cascade_intensity(n, prefix, unique, g)
    G = get_gpu(gpu)
    return CascadeNumbers(
        n,
        prefix,
        unique,
        g,
        G.name,
        ci["tokens_naive"],
        ci["tokens_cascade"],
        ci["saving"],
        ci["prefix"],
        ci["naive"],
        ci["unique"],
        ridge_point(G, "bf16"),
        N_GRID,
        readonly(intensity(g, N_GRID, prefix)),
    )


@dataclass(frozen=True)
class CascadeCheck:
    """`cascade_run`'s result: the largest |cascade - per-request attention| over every output
    (float64), against the bound MERGE_BOUNDS["float64"] (16 units of roundoff), and the KV tokens
    each kernel reads. str() is the notebook's statement: the bound, not the digits, which move
    with the CPU's BLAS kernel."""

    n: int
    prefix: int
    unique: int
    d: int
    max_diff: float
    tokens_naive: int
    tokens_read: int

    @property
    def bound(self) -> float:
        return MERGE_BOUNDS["float64"]

    @property
    def within_bound(self) -> bool:
        return self.max_diff < self.bound

    def __str__(self) -> str:
        bound = f"{self.bound:.1e}".replace("e-0", "e-")
        diff = (
            f"< {bound} (16 units of float64 roundoff)"
            if self.within_bound
            else f"= {style.magnitude(self.max_diff)}, above the bound {bound}"
        )
        saving = 1 - self.tokens_read / self.tokens_naive
        return (
            f"{self.n} requests, shared prefix {self.prefix:,} + {self.unique:,} unique tokens each, "
            f"d = {self.d}, float64\n"
            f"max |cascade - per-request attention| {diff}\n"
            f"KV tokens read: naive {self.tokens_naive:,}, cascade {self.tokens_read:,} "
            f"({saving:.1%} fewer)"
        )


def cascade_run(
    n: int = 64, prefix: int = 4096, unique: int = 256, d: int = 64, seed: int = 0
) -> CascadeCheck:
    """Run `attnlab.core.decode.cascade_attention` on random float64 data (seeded) and compare it with
    each request's own attention over prefix + unique keys.

    >>> c = cascade_run(8, 300, 20, d=16)
    >>> c.within_bound, c.tokens_naive, c.tokens_read
    (True, 2560, 460)
    """
    n = as_int("n", n, 1, None)
    prefix = as_int("prefix", prefix, 0, None)
    unique = as_int("unique", unique, 0, None)
    if prefix + unique == 0:
        raise ValueError(
            "prefix=0 and unique=0 leave each request no key to attend to; valid: prefix + unique >= 1"
        )
    d = as_int("d", d, 1, None)
    seed = as_int("seed", seed, 0, None)
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n, d))
    pk, pv = rng.standard_normal((prefix, d)), rng.standard_normal((prefix, d))
    uniq = [(rng.standard_normal((unique, d)), rng.standard_normal((unique, d))) for _ in range(n)]
    res = cascade_attention(q, pk, pv, uniq)
    ref = np.stack(
        [attention_state(q[i], np.vstack([pk, k]), np.vstack([pv, v]))[0] for i, (k, v) in enumerate(uniq)]
    )
    return CascadeCheck(
        n, prefix, unique, d, float(np.abs(res.o - ref).max()), int(res.tokens_naive), int(res.tokens_read)
    )


def cascade_check(n: int = 64, prefix: int = 4096, unique: int = 256, d: int = 64, seed: int = 0) -> str:
    """`cascade_run` as the notebook's text: the difference against its bound and the KV tokens
    each way."""
    return str(cascade_run(n, prefix, unique, d, seed))


def cascade_table(
    ns=(1, 8, 64, 256), prefix: int = 4096, unique: int = 256, g: int = 4, gpu="H100-SXM"
) -> str:
    """`cascade_numbers` for several request counts: tokens read, saving, intensities."""
    rows = [vars(cascade_numbers(n, prefix, unique, g, gpu)) for n in ns]
    head = (
        f"prefix {prefix:,} + {unique:,} unique tokens per request, g = {g}; "
        f"{rows[0]['gpu']} bf16 ridge point {rows[0]['ridge']:.0f} FLOP/byte\n"
    )
    return head + style.table(
        rows,
        {
            "n": "requests",
            "tokens_naive": "KV tokens naive",
            "tokens_cascade": "cascade",
            "saving": "saving",
            "i_naive": "naive FLOP/byte",
            "i_prefix": "prefix part FLOP/byte",
        },
        {"tokens_naive": ",", "tokens_cascade": ",", "saving": ".1%", "i_naive": ".1f", "i_prefix": ".1f"},
    )


class CascadeExplorer(Explorer):
    """Controls: requests n, prefix length, unique length per request, group size g, GPU (type
    exact values into a slider's number box).

    Left: KV tokens read, naive against cascade, as a share of the naive count (prefix and unique
    parts stacked; absolute counts on the bars). Right: the prefix part's intensity against n for
    this prefix and g, the naive per-request intensity and the GPU's ridge point.
    """

    name = "cascade"
    size = (style.WIDTH, 4.4)

    def __init__(self, n: int = 64, prefix: int = 4096, unique: int = 256, g: int = 4, gpu: str = "H100-SXM"):
        super().__init__(n=n, prefix=prefix, unique=unique, g=g, gpu=get_gpu(gpu).name)

    def controls(self):
        return {
            "n": slider("requests n", 64, 1, 256),
            "prefix": slider("shared prefix (tokens)", 4096, 256, 32768),
            "unique": slider("unique tokens per request", 256, 0, 4096),
            "g": steps("group size g", (1, 2, 4, 8, 16), 4),
            "gpu": dropdown("GPU", gpus(), "H100-SXM"),
        }

    def compute(self, n, prefix, unique, g, gpu):
        return cascade_numbers(n, prefix, unique, g, gpu)

    def build(self, fig):
        ax_b, ax_i = self.ax_b, self.ax_i = fig.subplots(1, 2)
        c = style.COLORS
        x = np.array([0, 1])
        self.pre = ax_b.bar(x, [1, 1], width=0.55, color=c["fa1"], label="prefix tokens")
        self.uni = ax_b.bar(x, [0, 0], width=0.55, color=c["fa2"], label="unique tokens")
        self.tops = [ax_b.text(i, 0, "", ha="center", va="bottom", fontsize=style.SMALL) for i in x]
        ax_b.set_xticks(
            x, ["naive: each request\nreads prefix + unique", "cascade: prefix once,\nthen each unique part"]
        )
        ax_b.set_xlim(-0.6, 1.6)
        ax_b.set_ylim(0, 135)
        ax_b.set_yticks([0, 25, 50, 75, 100])
        ax_b.set_ylabel("KV tokens read (% of naive)")
        ax_b.set_xlabel("kernel")
        ax_b.grid(True, axis="y", alpha=0.25)
        ax_b.legend(loc="upper right")
        style.log_axis(ax_i, "x", 0.8, 320, ticks=[1, 4, 16, 64, 256])
        style.log_axis(ax_i, "y", *I_LIM)
        ax_i.grid(True, alpha=0.25)
        ax_i.set_xlabel("requests sharing the prefix, n")
        ax_i.set_ylabel("intensity (FLOP/byte, bf16)")
        (self.curve,) = ax_i.plot(
            [], [], color=c["fa1"], lw=2, label="prefix part (n g queries per KV element)"
        )
        self.naive = ax_i.axhline(1, color=c["standard"], ls=":", lw=1.5, label="naive: each request alone")
        self.ridge = ax_i.axhline(1, color=c["bound"], ls="--", lw=1, label="ridge point of the GPU")
        (self.dot,) = ax_i.plot([], [], "*", ms=15, color=c["highlight"], mec="k", mew=0.8)
        self.dot_txt = ax_i.text(0, 0, "", fontsize=style.SMALL, ha="left", va="top")
        ax_i.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
        return [
            *self.pre,
            *self.uni,
            *self.tops,
            self.curve,
            self.naive,
            self.ridge,
            self.dot,
            self.dot_txt,
            ax_b.title,
            ax_i.title,
        ]

    def draw(self, r: CascadeNumbers) -> str:
        tn = r.tokens_naive
        pct = [100 * r.naive_prefix / tn, 100 * r.cascade_prefix / tn]
        upct = [100 * r.naive_unique / tn, 100 * r.cascade_unique / tn]
        for i in (0, 1):
            self.pre[i].set_height(pct[i])
            self.uni[i].set_y(pct[i])
            self.uni[i].set_height(upct[i])
        self.tops[0].set_position((0, pct[0] + upct[0] + 1.5))
        self.tops[0].set_text(f"{tn:,} tokens")
        self.tops[1].set_position((1, pct[1] + upct[1] + 1.5))
        self.tops[1].set_text(f"{r.tokens_cascade:,} tokens\n({r.saving:.1%} fewer)")
        self.curve.set_data(r.curve_n, r.curve_i)
        self.naive.set_ydata([r.i_naive] * 2)
        self.ridge.set_ydata([r.ridge] * 2)
        self.dot.set_data([r.n], [r.i_prefix])
        left = r.n > 32
        self.dot_txt.set_ha("right" if left else "left")
        self.dot_txt.set_position((r.n / 1.2 if left else r.n * 1.2, r.i_prefix / 1.25))
        self.dot_txt.set_text(f"{r.i_prefix:.0f}" if r.i_prefix >= 100 else f"{r.i_prefix:.1f}")
        self.ax_b.set_title(f"KV read: n={r.n}, prefix {r.prefix:,} + unique {r.unique:,}")
        self.ax_i.set_title(f"prefix-part intensity (prefix {r.prefix:,}, g={r.g}, {r.gpu})")
        return (
            f"Naive: {r.n} × ({r.prefix:,} + {r.unique:,}) = {tn:,} KV tokens; cascade: "
            f"{r.prefix:,} + {r.n} × {r.unique:,} = {r.tokens_cascade:,}: <b>{r.saving:.1%} "
            f"fewer</b>. Prefix part: {r.n} × {r.g} = {r.n * r.g} queries share each KV element, "
            f"<b>{r.i_prefix:.1f} FLOP/byte</b> against {r.i_naive:.1f} for a request alone "
            f"(ridge {r.ridge:.0f})."
        )
