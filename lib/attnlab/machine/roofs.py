"""FlashAttention-4's third roof: per attention score, the Tensor Cores' time against the exponential
unit's, and what FA4's two counter-measures move between the units.

Per score of one query row against one key, attention does
- on the Tensor Cores: QK^T and PV, 2 d FLOPs each, so 4 d FLOPs at the dense bf16 rate;
- on the special-function units (MUFU): one exp2 of the shifted, scaled score, at
  `ex2_per_clk_per_sm` x SMs x boost clock results per second (data/gpus.json);
- on the FP32 FMA pipe: the softmax's own arithmetic, SOFTMAX_FMA_OPS per score (the fused
  scale-and-subtract of the row max, the row-sum add), plus what the counter-measures put there.

With the three units overlapped perfectly (FA4 pipelines them), the slowest one sets the time
per score; the exponential "binds" when its time exceeds the Tensor Cores'.

Counter-measure 1, a polynomial exp on the FMA pipe: a share `poly_share` of the exps skips MUFU
and costs POLY_FMA_OPS FMA-pipe operations instead (range reduction, then a degree-3 polynomial
for 2^frac by Horner's rule; see POLY_FMA_OPS).
Counter-measure 2, conditional rescaling: when a tile of `tile_n` keys raises a row's running
max, the row's output accumulator (d values) is multiplied by the correction factor: d
multiplies per row per tile, i.e. d / tile_n FMA-pipe operations per score if every tile
rescaled. A fraction `skip` of those rescales is skipped (FA4 rescales only when the max grew by
enough to matter); the model charges (1 - skip) d / tile_n per score.

What this leaves out on purpose: the correction factor's own exp (one per row per tile), the
conversions of P to bf16, register and shared-memory limits, and every latency; FMA-pipe
operations are counted as FP32 FMA instructions at half the fp32 FLOP peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.validate import as_float, as_int
from attnlab.machine.hardware import get_gpu, peak

__all__ = [
    "exp_rate",
    "fma_rate",
    "mma_flops_per_score",
    "score_times",
    "ScoreTimes",
    "POLY_FMA_OPS",
    "SOFTMAX_FMA_OPS",
    "TILE_N",
    "UNITS",
]

#: FMA-pipe operations per exp computed by polynomial: 2 for the range reduction (x = n + f: a
#: floor-to-integer and the subtraction), 3 for the degree-3 polynomial p(f) ~ 2^f by Horner's
#: rule (c3 f + c2, then x f + c1, then x f + c0). Adding n to p(f)'s exponent bits is an integer
#: shift-and-add on the ALU, not the FMA pipe, so it is not counted.
POLY_FMA_OPS = 5
#: FMA-pipe operations every score needs anyway: the fused scale-and-subtract of the row max
#: before the exp2, and the add into the row sum.
SOFTMAX_FMA_OPS = 2
#: keys per tile (FA4's tiles are 128 x 128)
TILE_N = 128
UNITS = ("tensor cores", "exp unit (MUFU)", "FMA pipe")


def _extra(g, key, field):
    try:
        return float(g.extra[key][field])
    except KeyError:
        raise ValueError(f"gpu={g.name!r} has no {key}.{field} in data/gpus.json") from None


def exp_rate(gpu) -> float:
    """Exp2 results per second of the special-function units: per SM per clock x SMs x clock.

    >>> f"{exp_rate('H100'):.4g}"                 # 16 x 132 x 1.83e9
    '3.865e+12'
    """
    g = get_gpu(gpu)
    return _extra(g, "exp_unit", "ex2_per_clk_per_sm") * g.sms * _extra(g, "boost_clock", "hz")


def fma_rate(gpu) -> float:
    """FP32 FMA instructions per second: half the fp32 FLOP peak (an FMA is 2 FLOPs).

    >>> f"{fma_rate('H100'):.4g}"
    '3.345e+13'
    """
    return peak(gpu, "fp32") / 2.0


def mma_flops_per_score(d: int) -> int:
    """Tensor-Core FLOPs per score: QK^T and PV, 2 d each.

    >>> mma_flops_per_score(128)
    512
    """
    return 4 * as_int("d", d, 1, None)


@dataclass(frozen=True)
class ScoreTimes:
    """Seconds per score on each unit (see the module docstring) and which one binds."""

    gpu: str
    d: int
    poly_share: float
    skip: float
    tile_n: int
    mma: float  # Tensor Cores: 4 d / bf16 peak
    exp_mufu: float  # (1 - poly_share) / exp_rate
    fma_softmax: float  # SOFTMAX_FMA_OPS / fma_rate
    fma_poly: float  # poly_share x POLY_FMA_OPS / fma_rate
    fma_rescale: float  # (1 - skip) d / tile_n / fma_rate
    exp_all_mufu: float  # 1 / exp_rate: every exp on MUFU (FA3's choice)

    @property
    def fma(self) -> float:
        return self.fma_softmax + self.fma_poly + self.fma_rescale

    @property
    def times(self) -> tuple[float, float, float]:
        """(tensor cores, MUFU, FMA pipe), in UNITS order."""
        return (self.mma, self.exp_mufu, self.fma)

    @property
    def total(self) -> float:
        """Seconds per score with the three units overlapped: the slowest one."""
        return max(self.times)

    @property
    def binding(self) -> str:
        return UNITS[max(range(3), key=lambda i: self.times[i])]

    @property
    def exp_binds(self) -> bool:
        """The exponential unit is slower than the Tensor Cores at these settings."""
        return self.exp_mufu > self.mma

    @property
    def tensor_utilization(self) -> float:
        """Share of the bf16 peak the Tensor Cores reach when the slowest unit sets the pace."""
        return self.mma / self.total


def score_times(
    gpu="B200", d: int = 128, poly_share: float = 0.0, skip: float = 0.0, tile_n: int = TILE_N
) -> ScoreTimes:
    """Seconds per attention score on the Tensor Cores, the exp unit and the FMA pipe. O(1).

    H100, d = 128, every exp on MUFU: the Tensor Cores need 512 / 989.4e12 = 0.517 ps per
    score, MUFU 1 / (16 x 132 x 1.83e9) = 0.259 ps: the exponential hides under the matmuls.
    On the B200 (2.25e15 bf16, 148 SMs, an estimated 1.856 GHz) the two are equal at d = 128.

    >>> t = score_times("H100", 128)
    >>> f"{t.mma * 1e12:.3f} {t.exp_mufu * 1e12:.3f} {t.binding}"
    '0.517 0.259 tensor cores'
    >>> score_times("B200", 64).binding
    'exp unit (MUFU)'
    """
    g = get_gpu(gpu)
    d = as_int("d", d, 1, 4096)
    poly_share = as_float("poly_share", poly_share, 0.0, 1.0)
    skip = as_float("skip", skip, 0.0, 1.0)
    tile_n = as_int("tile_n", tile_n, 1, 4096)
    r_exp, r_fma = exp_rate(g), fma_rate(g)
    return ScoreTimes(
        gpu=g.name,
        d=d,
        poly_share=poly_share,
        skip=skip,
        tile_n=tile_n,
        mma=mma_flops_per_score(d) / peak(g, "bf16"),
        exp_mufu=(1.0 - poly_share) / r_exp,
        fma_softmax=SOFTMAX_FMA_OPS / r_fma,
        fma_poly=poly_share * POLY_FMA_OPS / r_fma,
        fma_rescale=(1.0 - skip) * d / tile_n / r_fma,
        exp_all_mufu=1.0 / r_exp,
    )
