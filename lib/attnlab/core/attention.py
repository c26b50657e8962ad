"""Standard attention (three kernels, S and P in HBM) and tiled FlashAttention, counting HBM traffic.

Conventions (tests rely on them):
- one head is (N, d); batched is (batch, heads, N, d). With GQA, query head h reads KV head
  h // (Hq // Hkv).
- causal masks are aligned bottom-right when N_q != N_k: query i sees keys j <= i + N_k - N_q,
  as in FlashAttention and FlashInfer. For N_q = 3, N_k = 5 (x = visible):
      q0: x x x . .
      q1: x x x x .
      q2: x x x x x
  A query row that sees no key outputs 0 and lse = -inf, never NaN.
- lse is the natural-log log-sum-exp of the scaled logits.
- `sram` (M) is in elements, as in the paper. Two tile rules set the blocks that are not given
  (`block_sizes`): rule="fa1", the paper's and the lecture's, B_c = ceil(M / 4d),
  B_r = min(ceil(M / 4d), d) (the default, for either loop order); rule="fa2", FlashAttention-2's
  shape, the same budget with the roles swapped: B_r = ceil(M / 4d), B_c = min(ceil(M / 4d), d).

What this leaves out on purpose: dropout and real SRAM capacity checks for explicit block sizes:
the accounting follows the paper's dataflow. The backward pass is `attnlab.core.backward`.
What the kernels take (tile sizes, causal mask, q, k, v checked) is `attnlab.core.inputs`.

This file is long because Algorithm 0, the two tiled loop orders and the two tile rules that size
them share their checks, their load/store accounting and the `Tiles` hook; each part is short.
"""
from __future__ import annotations

import functools

import numpy as np

from attnlab.validate import as_array, as_bool, as_int, choice
from attnlab.core.hbm import HBM
from attnlab.core import inputs
from attnlab.core.inputs import as_hbm, causal_mask, prepare_qkv, query_heads
from attnlab.core.softmax import _overflow, softmax

__all__ = ["standard_attention", "flash_attention", "fa2_head", "Tiles", "block_sizes",
           "causal_mask", "ORDERS", "RULES", "prepare_qkv", "query_heads", "MAX_SCORES"]

ORDERS = ("fa1", "fa2")
RULES = ("fa1", "fa2")
#: the most score entries (batch x heads x N_q x N_k) standard_attention builds: 2^27, 1 GiB of float64
MAX_SCORES = 1 << 27


def block_sizes(d: int, sram: int = 100_000, rule: str = "fa1") -> tuple[int, int]:
    """(B_r, B_c): query rows and key rows of one tile, from the SRAM size M (elements).

    rule="fa1" (the default): the FlashAttention paper's rule, the lecture's §3.3,
        B_c = ceil(M / 4d), B_r = min(ceil(M / 4d), d).
      The K/V block, which stays on chip while every query block passes (FA1's inner loop), takes
      half of M (K_j and V_j, B_c x d each); the streamed Q block is capped at d rows so that the
      score tile B_r x B_c stays within M / 4.
    rule="fa2": FlashAttention-2's tile shape, the same budget with the roles swapped,
        B_r = ceil(M / 4d), B_c = min(ceil(M / 4d), d).
      In FA2's loop the Q block stays on chip while K and V stream past, so the tall block is Q's:
      Q_i and the accumulator O_i (B_r x d each) take half of M, the streamed K_j, V_j are capped
      at d rows, and the score tile is again at most d x ceil(M / 4d), about M / 4.

    SRAM budget, the same for both rules: on chip at once are the resident block pair
    (2 d ceil(M/4d), about M/2), the streamed pair (2 d min(ceil(M/4d), d) <= 2 d^2), the score tile
    (<= d ceil(M/4d), about M/4) and m, l of the B_r rows: 2d(B_r + B_c) + B_r B_c + 2 B_r
    elements, 84,046 for rule "fa2" at d = 64, M = 100,000. Like the paper's rule it is a budget in
    order, not a capacity check: it fits in M while 2 d^2 stays below about M/4 (d <= 64 at
    M = 100,000); at d = 128 it is 8 % over.

    The SRAM must hold at least one row each of Q, K, V and O (M >= 4d), else ValueError.

    >>> block_sizes(64, 100_000), block_sizes(64, 100_000, rule="fa2")
    ((64, 391), (391, 64))
    >>> block_sizes(256, 100_000, "fa2")     # ceil(M / 4d) = 98 < d: both rules give 98 x 98
    (98, 98)
    """
    rule = choice("rule", rule, RULES)
    br, bc = inputs.block_sizes(d, sram)
    return (br, bc) if rule == "fa1" else (bc, br)


def _score_size(q, k, v):
    """Refuse, by name and before anything is allocated, inputs whose dense scores (batch x query
    heads x N_q x N_k, broadcast over GQA) or output (batch x query heads x N_q x d_v) pass
    MAX_SCORES entries: a broadcast array (np.broadcast_to) has that shape without the memory."""
    if not all(isinstance(a, np.ndarray) and a.ndim in (2, 4) for a in (q, k, v)) \
            or not q.ndim == k.ndim == v.ndim:
        return                                       # prepare_qkv refuses these by name
    qs, ks, vs = ((1, 1) * (a.ndim == 2) + a.shape for a in (q, k, v))
    n = qs[0] * qs[1] * qs[2] * ks[2]
    out = qs[0] * qs[1] * qs[2] * vs[3]
    if max(n, out) > MAX_SCORES:
        raise ValueError(f"q, k, v of shapes {q.shape}, {k.shape}, {v.shape} give {n:,} score "
                         f"entries (batch x heads x N_q x N_k) and {out:,} output entries; valid: "
                         f"at most {MAX_SCORES:,} each (beyond, use flash_attention or the closed "
                         f"forms of attnlab.core.iomodel)")


def _finite_output(fn):
    """Run a kernel with numpy's overflow/underflow warnings off, then refuse a non-finite output:
    finite inputs whose weighted sums overflow the dtype raise ValueError instead of returning inf."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            out = fn(*args, **kwargs)
        o = out[0] if isinstance(out, tuple) else out
        if not np.isfinite(o).all():
            raise _overflow("v", "the output's weighted sum of v", o.dtype)
        return out
    return run


@_finite_output
def standard_attention(q, k, v, *, causal: bool = False, scale: float | None = None,
                       hbm: HBM | None = None):
    """The paper's Algorithm 0: three kernels, with S and P written to HBM and read back.

    1. read Q, K; S = scale * Q K^T; write S       (N_q d + N_k d reads, N_q N_k writes)
    2. read S; P = softmax(mask(S)); write P       (N_q N_k reads, N_q N_k writes)
    3. read P, V; O = P V; write O                 (N_q N_k + N_k d_v reads, N_q d_v writes)

    Per head: 2 N_q d + 2 N_k d + 4 N_q N_k elements when d_v = d; for N >> d the 4 N^2 term
    (write S, read S, write P, read P) dominates. Computed in the inputs' float dtype.
    q, k, v: finite real numbers; `causal` a bool; `scale` a positive finite real. The dense
    scores (batch x heads x N_q x N_k, GQA broadcast included) are limited to MAX_SCORES entries:
    larger inputs are refused by name before anything is allocated.

    >>> hbm = HBM()
    >>> _ = standard_attention(np.eye(4), np.eye(4), np.eye(4), hbm=hbm)
    >>> hbm.total == 2 * 4 * 4 + 2 * 4 * 4 + 4 * 4 * 4     # 2 N d + 2 N d + 4 N^2
    True
    """
    causal = as_bool("causal", causal)
    hbm = as_hbm(hbm)
    _score_size(q, k, v)                             # before prepare_qkv's dtype copies
    q, k, v, scale, single = prepare_qkv(q, k, v, scale)
    n_q, n_k = q.shape[2], k.shape[2]
    mask = causal_mask(n_q, n_k) if causal else None
    out = np.empty(q.shape[:3] + (v.shape[3],), dtype=q.dtype)
    for b, h, g in query_heads(q, k):
        qh, kh, vh = q[b, h], k[b, g], v[b, g]
        if hbm is not None:
            hbm.read("Q", qh); hbm.read("K", kh); hbm.write("S", n_q * n_k)
        s = (qh @ kh.T) * scale
        if not np.isfinite(s).all():
            raise _overflow("q or k", "scale * q k^T", s.dtype)
        if hbm is not None:
            hbm.read("S", n_q * n_k); hbm.write("P", n_q * n_k)
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        p = softmax(s, axis=-1)
        if hbm is not None:
            hbm.read("P", n_q * n_k); hbm.read("V", vh); hbm.write("O", n_q * vh.shape[1])
        out[b, h] = p @ vh
    return out[0, 0] if single else out


class Tiles:
    """What the tiled loops ask of a tile: is it skipped, what are its logits, and how does the
    accumulator become the output. This one is plain scaled dot-product attention with an optional
    causal mask (bottom-right); `attnlab.core.variants` subclasses it with FlashInfer's functors, so
    every variant runs the same loop (`fa2_head`) and the same HBM accounting.

    `offset` = N_k - N_q: query row i sits at position i + offset in the key sequence."""

    def __init__(self, scale: float, causal: bool, offset: int):
        self.scale, self.causal, self.offset = scale, causal, offset

    def active(self, r0: int, r1: int, c0: int, c1: int) -> bool:
        """False when every (query, key) pair of the tile is masked (the tile is skipped: no
        loads, no FLOPs). Causal: its first key lies beyond its last query's diagonal."""
        return not self.causal or c0 <= r1 - 1 + self.offset

    def scores(self, qi, kj, r0: int, c0: int, hbm=None):
        """S_ij = scale * Q_i K_j^T of one tile, masked entries -inf; marks the tile as computed on
        chip in the trace. Logits that overflow the dtype raise ValueError."""
        if hbm is not None:
            hbm.compute((r0, r0 + qi.shape[0]), (c0, c0 + kj.shape[0]))
        with np.errstate(over="ignore", invalid="ignore"):
            s = (qi @ kj.T) * self.scale
        if not np.isfinite(s).all():
            raise _overflow("q or k", "scale * q k^T", s.dtype)
        if self.causal:
            rows = np.arange(r0, r0 + qi.shape[0])[:, None]
            cols = np.arange(c0, c0 + kj.shape[0])[None, :]
            s = np.where(cols <= rows + self.offset, s, -np.inf)
        return s

    def finish(self, acc, l, m):
        """O_i from the unnormalised accumulator: acc / l (0 for a row that saw no key)."""
        return np.divide(acc, l[:, None], out=np.zeros_like(acc), where=l[:, None] > 0)


@_finite_output
def flash_attention(q, k, v, *, causal: bool = False, scale: float | None = None,
                    sram: int = 100_000, block_r: int | None = None, block_c: int | None = None,
                    order: str = "fa2", hbm: HBM | None = None, return_lse: bool = False,
                    rule: str = "fa1"):
    """Tiled exact attention with online softmax; S and P live only "on chip".

    order="fa1" (the FlashAttention paper's Algorithm 1): the outer loop runs over K/V blocks
    (each read once), the inner loop over Q blocks; every visit reads Q_i, O_i, l_i, m_i and
    writes O_i, l_i, m_i back, so HBM traffic is 2 N_k d + T_c N_q (3d + 4) without masking.
    order="fa2" (FlashAttention-2, `fa2_head` for each head): the outer loop runs over Q blocks;
    O_i, l_i, m_i stay on chip and O_i is written once, but K and V are re-read for every Q
    block: N_q d + T_r 2 N_k d + N_q d (+ N_q for lse when return_lse).

    Causal: a block whose every entry is masked is skipped (no loads, no compute); partial
    blocks are masked element-wise. N need not divide by the block sizes.
    The initialisation of O, l, m in HBM (fa1) is not counted, as in the paper's analysis.
    In fa1, lse = m + log l is derived from the statistics it already stored (no extra traffic).
    `sram` (elements, an int >= 4d) sets the block sizes that are not given explicitly, by the
    tile rule `rule` ("fa1", the paper's, the default; "fa2", FlashAttention-2's tall Q block:
    see `block_sizes`); it is checked even when both are given. q, k, v: finite real numbers;
    flags are bools.

    Returns O, or (O, lse) with return_lse=True.

    Example: at N = 257, d = 64, block_r = block_c = 32, fp32 inputs, the result differs from
    `standard_attention` by ~1e-7; in float64 by ~1e-16, and one head of it is `fa2_head`:

    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((50, 8)) for _ in range(3))
    >>> o = flash_attention(q, k, v, causal=True, block_r=16, block_c=16)
    >>> bool(np.abs(o - standard_attention(q, k, v, causal=True)).max() < 1e-14)
    True
    >>> bool(np.all(o == fa2_head(q, k, v, block_r=16, block_c=16, causal=True)))
    True
    """
    order = choice("order", order, ORDERS)
    rule = choice("rule", rule, RULES)
    causal = as_bool("causal", causal)
    return_lse = as_bool("return_lse", return_lse)
    hbm = as_hbm(hbm)
    sram = as_int("sram", sram, 1, None)
    q, k, v, scale, single = prepare_qkv(q, k, v, scale)
    n_q, n_k, d = q.shape[2], k.shape[2], q.shape[3]
    if block_r is None or block_c is None:
        br, bc = block_sizes(d, sram, rule)
        block_r = br if block_r is None else block_r
        block_c = bc if block_c is None else block_c
    block_r = as_int("block_r", block_r, 1, None)
    block_c = as_int("block_c", block_c, 1, None)
    out = np.zeros(q.shape[:3] + (v.shape[3],), dtype=q.dtype)
    lse = np.full(q.shape[:3], -np.inf, dtype=q.dtype)
    for b, h, g in query_heads(q, k):
        if order == "fa1":
            out[b, h], lse[b, h] = _fa1_head(q[b, h], k[b, g], v[b, g], Tiles(scale, causal, n_k - n_q),
                                             block_r, block_c, hbm)
        else:
            res = fa2_head(q[b, h], k[b, g], v[b, g], scale=scale, block_r=block_r, block_c=block_c,
                           causal=causal, hbm=hbm, return_lse=return_lse)
            if return_lse:
                out[b, h], lse[b, h] = res
            else:
                out[b, h] = res
    if single:
        out, lse = out[0, 0], lse[0, 0]
    return (out, lse) if return_lse else out


def _safe(m):
    """Max used as exponent base: -inf (no visible key yet) becomes 0 so exp() gives 0, not NaN."""
    return np.where(np.isfinite(m), m, 0.0)


def _load(hbm, name, a, r0, r1):
    """Rows r0:r1 of tensor `a`, loaded from HBM into SRAM (counted when `hbm` is given)."""
    if hbm is not None:
        hbm.read(name, a[r0:r1], rows=(r0, r1))
    return a[r0:r1]


def _store(hbm, name, a, r0, r1):
    """Rows r0:r1 of tensor `a` stored from SRAM back to HBM (counted when `hbm` is given)."""
    if hbm is not None:
        hbm.write(name, a[r0:r1], rows=(r0, r1))


def _head_args(q, k, v, scale, block_r, block_c, causal, hbm, return_lse, tiles):
    """fa2_head's checks: q (N_q, d), k (N_k, d), v (N_k, d_v) as float arrays, block sizes >= 1,
    bool flags, an HBM counter or None; the tile rules (plain scaled dot-product with the causal
    flag unless `tiles`, a Tiles, is given: it then carries its own scale and mask)."""
    given = scale
    q, k, v, scale, _ = prepare_qkv(as_array("q", q, ndim=2, shape="(N_q, d)"),
                                 as_array("k", k, ndim=2, shape="(N_k, d)"),
                                 as_array("v", v, ndim=2, shape="(N_k, d_v)"), scale)
    causal = as_bool("causal", causal)
    if tiles is None:
        tiles = Tiles(scale, causal, k.shape[2] - q.shape[2])
    elif not isinstance(tiles, Tiles):
        raise TypeError(f"tiles must be an attnlab.core.attention.Tiles or None, got {type(tiles).__name__}")
    elif causal or given is not None:
        raise ValueError(f"causal={causal}, scale={given} with tiles given: the tiles carry their own "
                         f"mask and scale; valid: causal=False, scale=None")
    return (q[0, 0], k[0, 0], v[0, 0], as_int("block_r", block_r, 1, None),
            as_int("block_c", block_c, 1, None), tiles, as_hbm(hbm), as_bool("return_lse", return_lse))


@_finite_output
def fa2_head(q, k, v, *, block_r: int, block_c: int, scale: float | None = None, causal: bool = False,
             hbm: HBM | None = None, return_lse: bool = False, tiles: Tiles | None = None):
    """FlashAttention-2 for one head, the loop flash_attention(order="fa2") runs: q (N_q, d),
    k (N_k, d), v (N_k, d_v). Returns O, or (O, lse) with return_lse (lse then written too).
    `tiles` (a Tiles) replaces the scores, the mask and the skipping: attnlab.core.variants' hook."""
    q, k, v, block_r, block_c, tiles, hbm, return_lse = _head_args(
        q, k, v, scale, block_r, block_c, causal, hbm, return_lse, tiles)
    n_q, n_k = len(q), len(k)
    o, lse = np.zeros((n_q, v.shape[1]), q.dtype), np.full(n_q, -np.inf, q.dtype)  # in HBM
    for r0 in range(0, n_q, block_r):                 # outer loop: Q block i, held in SRAM
        r1 = min(r0 + block_r, n_q)
        cols = [(c0, min(c0 + block_c, n_k)) for c0 in range(0, n_k, block_c)
                if tiles.active(r0, r1, c0, min(c0 + block_c, n_k))]  # skip fully masked blocks
        qi = _load(hbm, "Q", q, r0, r1) if cols else q[r0:r1]      # Q_i read once: B_r x d
        m, l = np.full(r1 - r0, -np.inf, q.dtype), np.zeros(r1 - r0, q.dtype)  # running max, sum
        acc = np.zeros((r1 - r0, v.shape[1]), q.dtype)             # unnormalised O_i, in SRAM
        for c0, c1 in cols:                           # inner loop: stream K_j, V_j through SRAM
            kj, vj = _load(hbm, "K", k, c0, c1), _load(hbm, "V", v, c0, c1)   # B_c x d each
            s = tiles.scores(qi, kj, r0, c0, hbm)     # S_ij (masked: -inf), never in HBM
            m_new = np.maximum(m, s.max(axis=1))
            alpha = np.exp(m - _safe(m_new))          # rescales what was summed under the old max
            p = np.exp(s - _safe(m_new)[:, None])     # P_ij, never in HBM
            l = alpha * l + p.sum(axis=1)
            acc = alpha[:, None] * acc + p @ vj
            m = m_new
        o[r0:r1] = tiles.finish(acc, l, m)            # acc / l: the division happens once
        lse[r0:r1] = np.where(l > 0, m + np.log(np.where(l > 0, l, 1.0)), -np.inf)
        _store(hbm, "O", o, r0, r1)                   # O_i written once: B_r x d_v
        if return_lse:
            _store(hbm, "lse", lse, r0, r1)           # lse_i: B_r
    return (o, lse) if return_lse else o


def _fa1_head(q, k, v, tiles, br, bc, hbm):
    n_q, n_k, dv = q.shape[0], k.shape[0], v.shape[1]
    o = np.zeros((n_q, dv), dtype=q.dtype)          # O, l, m live in HBM between visits
    l = np.zeros(n_q, dtype=q.dtype)
    m = np.full(n_q, -np.inf, dtype=q.dtype)
    for c0 in range(0, n_k, bc):
        c1 = min(c0 + bc, n_k)
        kj, vj = k[c0:c1], v[c0:c1]
        if hbm is not None:                         # K_j, V_j stay in SRAM for the inner loop
            hbm.read("K", kj, rows=(c0, c1)); hbm.read("V", vj, rows=(c0, c1))
        for r0 in range(0, n_q, br):
            r1 = min(r0 + br, n_q)
            if not tiles.active(r0, r1, c0, c1):
                continue
            if hbm is not None:
                hbm.read("Q", q[r0:r1], rows=(r0, r1)); hbm.read("O", o[r0:r1], rows=(r0, r1))
                hbm.read("l", r1 - r0, rows=(r0, r1)); hbm.read("m", r1 - r0, rows=(r0, r1))
                hbm.compute((r0, r1), (c0, c1))
            s = tiles.scores(q[r0:r1], kj, r0, c0)
            m_blk = s.max(axis=1)
            p = np.exp(s - _safe(m_blk)[:, None])
            l_blk = p.sum(axis=1)
            m_old, l_old = m[r0:r1], l[r0:r1]
            m_new = np.maximum(m_old, m_blk)
            a_old = np.exp(m_old - _safe(m_new))    # 0 where m_old = -inf
            a_blk = np.exp(m_blk - _safe(m_new))
            l_new = a_old * l_old + a_blk * l_blk
            num = (a_old * l_old)[:, None] * o[r0:r1] + a_blk[:, None] * (p @ vj)
            o[r0:r1] = np.divide(num, l_new[:, None], out=np.zeros_like(num),
                                 where=l_new[:, None] > 0)
            l[r0:r1], m[r0:r1] = l_new, m_new
            if hbm is not None:
                hbm.write("O", o[r0:r1], rows=(r0, r1))
                hbm.write("l", r1 - r0, rows=(r0, r1)); hbm.write("m", r1 - r0, rows=(r0, r1))
    lse = np.where(l > 0, m + np.log(np.where(l > 0, l, 1.0)), -np.inf).astype(q.dtype)
    return o, lse

