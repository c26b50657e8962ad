"""One tolerance rule for every Triton kernel's low-precision (bf16, fp16) tests, and its helpers.

THE RULE. On the same inputs, already rounded to the low dtype, a kernel's error against a float64
reference computed from those rounded inputs is at most twice the error of torch's own SDPA
(`torch.nn.functional.scaled_dot_product_attention` run in the same low dtype, with enable_gqa,
the same mask and the same scale) against the same reference:

    max|kernel - ref|  <=  2 * max|sdpa - ref|  +  FLOOR * max|ref|,     FLOOR = 1e-6

- Error is the max-abs error over all elements, in every test of every kernel (not a relative
  Frobenius norm: one wrong row among thousands must not average away).
- The reference sees the rounded inputs, so only the kernel's own rounding is measured; SDPA's
  error on the same inputs is what a correct implementation that accumulates in fp32 and rounds
  its output to the low dtype costs. Twice that leaves room for a different summation order or
  for rounding P before the PV product; a missed key, a wrong scale or a mask off by one costs far
  more than a rounding unit.
- FLOOR * max|ref| (a thousandth of a bf16 or fp16 rounding unit of the largest output) exists only
  so that a case where SDPA happens to be exact (one visible key: the output is a row of V) does
  not turn the bound into 0 and the ratio in the failure message into a division by 0. It is far
  too small to hide any rounding difference.
- Rows that see no key are left out of both errors (SDPA's answer there is NaN or arbitrary). The
  kernel must give exactly 0 there, never NaN, and lse = -inf where it returns lse: checked here.
- Decode kernels (one query per request and head, each request its own keys): the SDPA yardstick
  is, per request, SDPA of that request's query over its gathered K/V, built densely here.
- fp32 tests keep their tight absolute tolerances (1e-5 or so): the rule is for low precision.

Poisoning: the `poisoned_alloc` fixture (tests/conftest.py) makes torch.empty, torch.empty_like
and Tensor.new_empty return NaN-filled float tensors, and tests that pass `out=` pass a NaN-filled
one (`nan_like`), so an element the kernel must write but does not shows up as NaN, which
`assert_within_rule` (and the fp32 tests) reject.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["FLOOR", "visible_mask", "sdpa_output", "sdpa_error", "assert_within_rule", "nan_like", "to_np"]

#: The absolute floor of the rule, relative to max|ref|; see the module docstring for why.
FLOOR = 1e-6
NAN = float("nan")


def to_np(x) -> np.ndarray:
    """float64 numpy copy of a tensor or array."""
    if isinstance(x, torch.Tensor):
        return x.detach().double().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def nan_like(t: torch.Tensor) -> torch.Tensor:
    """A NaN-filled tensor like `t` (contiguous), for a kernel's `out=`."""
    return torch.full(t.shape, NAN, dtype=t.dtype, device=t.device)


def visible_mask(n_q: int, n_k: int, *, causal: bool = False, window: int | None = None) -> np.ndarray:
    """(n_q, n_k) bool, True = visible, bottom-right aligned (query i sits at i + n_k - n_q);
    a window w > 0 keeps q_idx - w < kv_idx <= q_idx (it implies causal)."""
    q_idx = np.arange(n_q)[:, None] + n_k - n_q
    kv_idx = np.arange(n_k)[None, :]
    vis = np.ones((n_q, n_k), bool)
    if causal or window:
        vis &= kv_idx <= q_idx
    if window:
        vis &= kv_idx > q_idx - window
    return vis


def _is_decode(k) -> bool:
    return not isinstance(k, torch.Tensor)


def sdpa_output(q, k, v, *, mask=None, causal=False, window=None, scale=None):
    """Torch SDPA in q's dtype, returned as float64 numpy, and the rows that see a key.

    Prefill: q (B, Hq, N_q, d), k, v (B, Hkv, N_k, d); `mask` a bool (N_q, N_k) array (True =
    visible), else built from causal / window (bottom-right aligned; SDPA's own is_causal is
    top-left, so it is never used). Returns (o (B, Hq, N_q, d), seen (N_q,) bool).
    Decode: q (n, Hq, d), k and v sequences of n per-request (Hkv, n_i, d) tensors; SDPA runs per
    request on its query (1, Hq, 1, d) over its own K/V. Returns (o (n, Hq, d), seen (n,) bool).
    """
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if _is_decode(k):
        outs = []
        for i, (ki, vi) in enumerate(zip(k, v)):
            o = sdpa(q[i][None, :, None], ki[None], vi[None], scale=scale, enable_gqa=True)
            outs.append(to_np(o[0, :, 0]))
        return np.stack(outs), np.array([ki.shape[1] > 0 for ki in k])
    n_q, n_k = q.shape[2], k.shape[2]
    vis = visible_mask(n_q, n_k, causal=causal, window=window) if mask is None else np.asarray(mask, bool)
    seen = vis.any(1)
    vis = np.where(seen[:, None], vis, True)  # blind rows: any finite answer, left out below
    m = torch.as_tensor(vis, device=q.device)
    return to_np(sdpa(q, k, v, attn_mask=m, scale=scale, enable_gqa=True)), seen


def _row_select(x: np.ndarray, seen: np.ndarray, decode: bool) -> np.ndarray:
    return x[seen] if decode else x[:, :, seen]


def sdpa_error(q, k, v, ref, *, mask=None, causal=False, window=None, scale=None) -> float:
    """max|SDPA - ref| over the rows that see a key (layouts as in `sdpa_output`)."""
    o, seen = sdpa_output(q, k, v, mask=mask, causal=causal, window=window, scale=scale)
    dec = _is_decode(k)
    return float(np.abs(_row_select(o, seen, dec) - _row_select(to_np(ref), seen, dec)).max(initial=0.0))


def assert_within_rule(
    out,
    ref,
    q,
    k,
    v,
    *,
    mask=None,
    causal=False,
    window=None,
    scale=None,
    lse=None,
    sdpa_ref=None,
    label: str = "",
) -> tuple[float, float]:
    """Assert the rule (module docstring) for the kernel output `out` against the float64 `ref`.

    q, k, v are the low-precision inputs the kernel got, in `sdpa_output`'s layouts (prefill or
    decode). Also asserts: no NaN in `out` (an unwritten, poisoned element), exactly 0 in rows that
    see no key, and, if `lse` is given, lse = -inf exactly there and no NaN anywhere. `sdpa_ref`:
    the reference SDPA's error is measured against when SDPA cannot compute the kernel's function
    (soft-cap: SDPA has none, so its error on the same inputs and mask without the cap is the
    yardstick); default `ref`. Returns (kernel error, SDPA error).
    """
    o, r = to_np(out), to_np(ref)
    dec = _is_decode(k)
    assert o.shape == r.shape, f"{label}: output {o.shape} vs reference {r.shape}"
    nan = np.isnan(o)
    assert not nan.any(), (
        f"{label}: {int(nan.sum())} of {o.size} output elements are NaN (unwritten, "
        f"poisoned), first at {tuple(int(i) for i in np.argwhere(nan)[0])}"
    )
    s_out, seen = sdpa_output(q, k, v, mask=mask, causal=causal, window=window, scale=scale)
    blind = _row_select(o, ~seen, dec)
    assert np.all(blind == 0), (
        f"{label}: rows that see no key must be exactly 0, max |o| = {np.abs(blind).max()}"
    )
    if lse is not None:
        lse = to_np(lse)
        assert not np.isnan(lse).any(), f"{label}: {int(np.isnan(lse).sum())} lse entries are NaN"
        blind_lse = lse[..., ~seen] if not dec else lse[~seen]
        assert np.all(blind_lse == -np.inf), f"{label}: lse of rows that see no key must be -inf"
        seen_lse = lse[..., seen] if not dec else lse[seen]
        assert np.isfinite(seen_lse).all(), f"{label}: lse of rows that see a key must be finite"
    err = float(np.abs(_row_select(o, seen, dec) - _row_select(r, seen, dec)).max(initial=0.0))
    yard = r if sdpa_ref is None else to_np(sdpa_ref)
    s_err = float(np.abs(_row_select(s_out, seen, dec) - _row_select(yard, seen, dec)).max(initial=0.0))
    floor = FLOOR * float(np.abs(r).max(initial=0.0))
    bound = 2 * s_err + floor
    assert err <= bound, (
        f"{label}: kernel max-abs error {err:.3e} > 2 x SDPA's {s_err:.3e} + floor "
        f"{floor:.1e} (ratio kernel / SDPA = {err / max(s_err, floor, 1e-300):.2f}); "
        f"{q.dtype}, output {o.shape}"
    )
    return err, s_err
