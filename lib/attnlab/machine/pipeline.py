"""FlashAttention-3's schedule as a timeline: one CTA of a Hopper prefill kernel over a few K/V
tiles, as a small discrete-event model. Notebook 03's pipeline explorer draws it.

The CTA holds a 128-row block of Q, split between two consumer warpgroups of 64 rows each, and
walks the key tiles of B_c keys. Per tile:

    load   K_j and V_j (2 B_c d bf16 values) by TMA into one slot of a ring of `stages` slots
    QK     S = Q K_j^T  on the Tensor Cores (wgmma):  2 x 64 x B_c x d FLOPs per warpgroup
    soft   the online-softmax step on S: 64 B_c exp2 on the MUFU (the special-function unit),
           then SOFTMAX_FMA_OPS per score and the d-wide rescale of O per row on the FMA pipe
    PV     O += P V_j   on the Tensor Cores:          2 x 64 x B_c x d FLOPs per warpgroup

Three resources of the SM run them: the copy engine ("copy": TMA, one tile after another), the
Tensor Cores ("tensor") and the softmax units ("softmax": MUFU and FMA pipe, shared by both
warpgroups). A step holds its resource alone for its whole duration; durations are one SM's share
of the chip's rates (layer 2's specs: `hardware.peak`, `roofs.exp_rate`, `roofs.fma_rate` and
the HBM bandwidth over the SMs, divided by `reuse`, the CTAs that read each K/V tile while it
sits in L2; what L2 itself delivers is not modelled).

FA3's steps, each a switch:
- warp_specialize: a producer warp issues the loads as soon as a slot is free. Off, warpgroup 0
  issues them itself: it refills tile j - 1's slot once it has waited for its own PV of that
  tile, and waits there until the other warpgroup is done with the tile too.
- consumers: "lockstep" (one 8-warp consumer: both warpgroups issue the same step at once and
  share each unit, so every step takes twice as long), "independent" (two consumers, each unit
  serving whichever warpgroup is ready first) or "pingpong" (two consumers taking strict turns:
  one's GEMMs, then the other's, so one's softmax runs under the other's GEMMs; it needs the
  producer warp and two stages, as in FA3).
- overlap (intra-warpgroup): QK_j is issued before PV_{j-1}, so softmax j runs under PV_{j-1}.
  Off, each warpgroup runs QK, softmax, PV in turn.
- stages: slots in the ring; tile j's load waits for tile j - stages to be done (its PV). The
  overlap needs two: it issues QK^T of tile j + 1 while tile j's V is still in use.

Two properties pin it (tests/machine/test_pipeline.py): with every step off the makespan is the
sum of all step times; it is never below the largest per-resource sum (`Timeline.bound`), and
with the steps on it runs at that bound once the pipeline is full. Under `lockstep` and
`pingpong` every unit serves a fixed order, so the schedule is a longest path and more stages
never make it slower.

This file is long because the step graph, its solver and the switches' rules are one model
and read best together.

What this leaves out on purpose: latencies (a load takes its bandwidth time, a GEMM its rate
time), issue slots and register moves, the causal mask, the epilogue, and L2's own bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnlab.validate import as_bool, as_int, choice
from attnlab.machine.hardware import get_gpu, peak
from attnlab.machine.roofs import SOFTMAX_FMA_OPS, exp_rate, fma_rate

__all__ = [
    "StageTimes",
    "stage_times",
    "Step",
    "Timeline",
    "schedule",
    "CONSUMERS",
    "RESOURCES",
    "HEAD_DIMS",
    "WG_ROWS",
]

CONSUMERS = ("lockstep", "independent", "pingpong")
RESOURCES = ("copy", "tensor", "softmax")
HEAD_DIMS = (64, 128, 256)
#: query rows per consumer warpgroup (two of them: a 128-row Q block per CTA)
WG_ROWS = 64


def _block_n(d: int) -> int:
    """Keys per tile: 128 up to d = 128, 80 at d = 256 (FA3's bf16 forward tiles; the registers
    of a 64 x B_c score tile and a 64 x d output tile must fit together)."""
    return 128 if d <= 128 else 80


@dataclass(frozen=True)
class StageTimes:
    """Seconds each step of one tile takes on one SM (see the module docstring)."""

    gpu: str
    d: int
    block_n: int
    reuse: int
    load: float  # K_j and V_j: 2 block_n d x 2 bytes at the SM's share of HBM, / reuse
    qk: float  # one warpgroup's QK^T
    exp: float  # one warpgroup's exp2 on the MUFU
    fma: float  # one warpgroup's softmax arithmetic on the FMA pipe
    pv: float  # one warpgroup's PV

    @property
    def softmax(self) -> float:
        """One warpgroup's softmax step: its exps, then its FMA-pipe work."""
        return self.exp + self.fma

    @property
    def flops_per_tile(self) -> int:
        """Tensor-Core FLOPs of one tile for the whole CTA (two warpgroups, QK^T and PV)."""
        return 2 * 2 * 2 * WG_ROWS * self.block_n * self.d


def stage_times(gpu="H200", d: int = 128, *, reuse: int = 8) -> StageTimes:
    """Each step's duration on one SM, from the chip's rates. O(1).

    H100 or H200 at d = 128 (B_c = 128): a warpgroup's QK^T is 2 x 64 x 128 x 128 FLOPs at
    989.4e12 / 132 FLOP/s, 0.280 us; its 8,192 exp2 at 16 a clock at 1.83 GHz take the same.

    >>> t = stage_times("H200", 128)
    >>> f"{t.qk * 1e6:.3f} {t.exp * 1e6:.3f} {t.pv * 1e6:.3f}"
    '0.280 0.280 0.280'
    """
    g = get_gpu(gpu)
    d = choice("d", d, HEAD_DIMS)
    reuse = as_int("reuse", reuse, 1, 1024)
    bn = _block_n(d)
    sm_tensor = peak(g, "bf16") / g.sms
    sm_exp = exp_rate(g) / g.sms
    sm_fma = fma_rate(g) / g.sms
    gemm = 2 * WG_ROWS * bn * d / sm_tensor
    return StageTimes(
        gpu=g.name,
        d=d,
        block_n=bn,
        reuse=reuse,
        load=2 * bn * d * 2 / (g.hbm_bandwidth / g.sms) / reuse,
        qk=gemm,
        exp=WG_ROWS * bn / sm_exp,
        fma=(SOFTMAX_FMA_OPS * WG_ROWS * bn + WG_ROWS * d) / sm_fma,
        pv=gemm,
    )


@dataclass(frozen=True)
class Step:
    """One step of the timeline: what ("load", "qk", "softmax", "pv"), whose ("producer" for a
    load, else warpgroup 0 or 1), which tile, on which resource, and when (seconds)."""

    kind: str
    who: object
    tile: int
    resource: str
    start: float
    end: float


@dataclass(frozen=True)
class Timeline:
    """A schedule: its steps, the switches and stage times that made it, and what they add to."""

    steps: tuple
    times: StageTimes
    tiles: int
    warp_specialize: bool
    consumers: str
    overlap: bool
    stages: int

    @property
    def makespan(self) -> float:
        return max(s.end for s in self.steps)

    def busy(self, resource: str) -> float:
        """Seconds the resource works (in lockstep, both warpgroups' work once)."""
        choice("resource", resource, RESOURCES)
        return sum(
            s.end - s.start
            for s in self.steps
            if s.resource == resource and (self.consumers != "lockstep" or s.who in ("producer", 0))
        )

    @property
    def total(self) -> float:
        """The sum of every step's time: the makespan with nothing overlapped."""
        return sum(self.busy(r) for r in RESOURCES)

    @property
    def bound(self) -> float:
        """The largest per-resource sum: no schedule of these steps is shorter."""
        return max(self.busy(r) for r in RESOURCES)

    @property
    def tensor_share(self) -> float:
        """The share of the makespan the Tensor Cores are busy."""
        return self.busy("tensor") / self.makespan

    @property
    def tflops(self) -> float:
        """The chip's predicted TFLOP/s: the tensor share of its dense bf16 peak."""
        return self.tensor_share * peak(self.times.gpu, "bf16") / 1e12


def _program(t: StageTimes, tiles: int, ws: bool, consumers: str, overlap: bool, stages: int):
    """The steps as a graph: {id: (resource, duration, deps)} and, for lockstep and ping-pong, the
    fixed order in which each resource serves them."""
    wgs = (0,) if consumers == "lockstep" else (0, 1)
    k = 2 if consumers == "lockstep" else 1  # lockstep: both warpgroups share each unit
    g = {}
    order = {r: [] for r in RESOURCES}

    def top(w, j):
        """The step after which warpgroup w reaches the top of its loop for tile j."""
        if j == 0:
            return None
        return ("softmax", w, j - 1) if overlap else ("pv", w, j - 1)

    def done(j):
        """Every warpgroup is through tile j: its ring slot is free."""
        return [("pv", w, j) for w in wgs]

    # Without a producer, warpgroup 0 refills the slot of tile j - 1 with tile j - 1 + S once it has
    # waited for its PV of tile j - 1 (after that PV; with the overlap, after softmax j, where the
    # loop waits for it), and waits there for the other warpgroup to be done with that tile too.
    refill = {}
    if not ws:
        for j in range(1, tiles - stages + 1):
            refill[j - 1 + stages] = (("softmax", 0, j) if overlap else ("pv", 0, j - 1), j)
    blocked = {}  # wg 0's step that waits on a slot -> the tile
    for m, (after, j) in refill.items():
        blocked[("qk", 0, j + 1) if overlap else ("qk", 0, j)] = j - 1

    for j in range(tiles):
        deps = done(j - stages) if j >= stages else []
        if j in refill:
            deps = deps + [refill[j][0]]
        g[("load", "producer", j)] = ("copy", t.load, deps)
        order["copy"].append(("load", "producer", j))
    for w in wgs:
        for j in range(tiles):
            qk_deps = [("load", "producer", j)] + ([top(w, j)] if top(w, j) else [])
            if w == 0 and ("qk", 0, j) in blocked:
                qk_deps += done(blocked[("qk", 0, j)])
            g[("qk", w, j)] = ("tensor", k * t.qk, qk_deps)
            g[("softmax", w, j)] = (
                "softmax",
                k * t.softmax,
                [("qk", w, j)] + ([("softmax", w, j - 1)] if j else []),
            )
            g[("pv", w, j)] = (
                "tensor",
                k * t.pv,
                [("softmax", w, j), ("load", "producer", j)] + ([("pv", w, j - 1)] if j else []),
            )
    if consumers == "pingpong" or consumers == "lockstep":
        for w_round in range(tiles + 1):  # GEMM groups: between two softmaxes of a warpgroup
            for w in wgs:
                order["tensor"] += _gemm_group(w, w_round, tiles, overlap)
        for j in range(tiles):
            for w in wgs:
                order["softmax"].append(("softmax", w, j))
    else:
        order["tensor"] = order["softmax"] = None  # independent: the ready warpgroup first
    return g, order


def _gemm_group(w, r, tiles, overlap):
    """The GEMMs warpgroup w issues before its softmax of tile r (r = tiles: the last PV)."""
    if r == 0:
        return [("qk", w, 0)]
    if r == tiles:
        return [("pv", w, tiles - 1)]
    return [("qk", w, r), ("pv", w, r - 1)] if overlap else [("pv", w, r - 1), ("qk", w, r)]


def _solve(g, order):
    """Non-delay list schedule: repeatedly start the step that can start earliest (its deps done,
    its resource free, and, where a resource has a fixed order, its turn); ties go to the step
    defined first. O(steps x ready steps)."""
    rank = {sid: i for i, sid in enumerate(g)}
    waiting = {sid: len(deps) for sid, (_, _, deps) in g.items()}
    users = {sid: [] for sid in g}
    for sid, (_, _, deps) in g.items():
        for d in deps:
            users[d].append(sid)
    ready = {sid for sid, n in waiting.items() if n == 0}
    end, free, nxt, out = {}, {r: 0.0 for r in RESOURCES}, {r: 0 for r in RESOURCES}, []
    while ready:
        best = None
        for sid in ready:
            res, dur, deps = g[sid]
            seq = order[res]
            if seq is not None and seq[nxt[res]] != sid:
                continue
            key = (max([free[res]] + [end[d] for d in deps]), rank[sid])
            if best is None or key < best[0]:
                best = (key, sid)
        if best is None:
            break
        (start, _), sid = best
        res, dur, _ = g[sid]
        ready.discard(sid)
        end[sid] = free[res] = start + dur
        if order[res] is not None:
            nxt[res] += 1
        out.append((sid, res, start, start + dur))
        for u in users[sid]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.add(u)
    if len(out) != len(g):
        raise RuntimeError("the pipeline's step graph has a cycle")  # a bug, not an input
    return out


def schedule(
    times: StageTimes,
    *,
    tiles: int = 6,
    warp_specialize: bool = True,
    consumers: str = "pingpong",
    overlap: bool = True,
    stages: int = 2,
) -> Timeline:
    """One CTA's timeline over `tiles` K/V tiles with these FA3 steps on or off.

    With everything off the steps run one after another; with FA3's steps on, the Tensor Cores
    are busy once the ring is full.

    >>> t = stage_times("H200", 128, reuse=8)
    >>> off = schedule(t, warp_specialize=False, consumers="lockstep", overlap=False, stages=1)
    >>> abs(off.makespan - off.total) < 1e-15
    True
    >>> on = schedule(t, tiles=64, stages=3)
    >>> f"{off.tensor_share:.0%} -> {on.tensor_share:.0%}"
    '53% -> 100%'
    """
    if not isinstance(times, StageTimes):
        raise TypeError(f"times must be a StageTimes (from stage_times), got {type(times).__name__}")
    tiles = as_int("tiles", tiles, 1, 256)
    ws = as_bool("warp_specialize", warp_specialize)
    consumers = choice("consumers", consumers, CONSUMERS)
    overlap = as_bool("overlap", overlap)
    stages = as_int("stages", stages, 1, 8)
    if overlap and stages < 2:
        raise ValueError(
            f"overlap=True with stages={stages}: the overlap issues QK^T of tile j + 1 "
            "while tile j's V is still in use, so it needs stages >= 2."
        )
    if consumers == "pingpong" and stages < 2:
        raise ValueError(
            f"consumers='pingpong' with stages={stages}: the turns put warpgroup 1's PV of "
            "tile j - 1 after warpgroup 0's QK^T of tile j, which needs the slot that PV "
            "frees, so ping-pong needs stages >= 2."
        )
    if consumers == "pingpong" and not ws:
        raise ValueError(
            "consumers='pingpong' with warp_specialize=False: the warpgroup that refills "
            "the ring would wait for the other one's turn at every tile, so ping-pong "
            "needs the producer warp (warp_specialize=True)."
        )
    g, order = _program(times, tiles, ws, consumers, overlap, stages)
    steps = []
    for (kind, who, j), res, start, end in _solve(g, order):
        steps.append(Step(kind, who, j, res, start, end))
        if consumers == "lockstep" and who == 0:  # the second warpgroup, in step with the first
            steps.append(Step(kind, 1, j, res, start, end))
    return Timeline(
        steps=tuple(steps),
        times=times,
        tiles=tiles,
        warp_specialize=ws,
        consumers=consumers,
        overlap=overlap,
        stages=stages,
    )
