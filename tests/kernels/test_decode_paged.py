"""`kernels.decode_paged`, the one decode call for a paged batch: whichever decoder it chooses,
the answer is the float64 reference's (each request's K/V gathered through a shuffled page table
whose unowned slots are NaN); the choice follows `kernels.tuning.choose_decoder` on the table's
real lengths; bad input is refused by name. Under Triton's interpreter (tests/conftest.py), small
sizes: the thresholds are lowered for a test so the plan-driven path runs on a handful of requests."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnlab.kernels import decode_paged as dp  # noqa: E402
from attnlab.kernels import tuning  # noqa: E402
from refs.paged_reference import attention as reference, pools  # noqa: E402

pytestmark = pytest.mark.usefixtures("poisoned_alloc")


def _batch(lens, page_size, hq=4, hkv=2, d=16, seed=0):
    rng = np.random.default_rng(seed)
    k, v, (indptr, indices, last) = pools(lens, page_size, hkv, d, rng)
    q = rng.standard_normal((len(lens), hq, d))
    want, want_lse = reference(q, k, v, indptr, indices, last, page_size)
    t = lambda a, dt=torch.float32: torch.tensor(a, dtype=dt)  # noqa: E731
    i32 = torch.int32
    return (t(q), t(k), t(v), t(indptr, i32), t(indices, i32), t(last, i32)), want, want_lse


@pytest.mark.parametrize("lens, page_size", [([5, 40, 17], 3), ([33] * 4, 16), ([1, 2, 70, 9, 4], 1)])
def test_the_split_path_is_the_reference(lens, page_size):
    args, want, want_lse = _batch(lens, page_size)
    assert dp.decode_choice(args[0], args[1], *args[3:], page_size=page_size)["decoder"] == "split"
    o, lse = dp.decode_paged(*args, page_size=page_size, return_lse=True)
    assert np.abs(o.numpy() - want).max() < 1e-5 and o.dtype == torch.float32
    assert np.abs(lse.numpy() - want_lse).max() < 1e-5


def test_an_uneven_batch_past_the_threshold_takes_the_plan(monkeypatch):
    lens = [3, 4, 5, 90, 2, 6]  # longest 90, mean ~18: uneven
    monkeypatch.setattr(tuning, "PLAN_FROM_BATCH", 6)
    args, want, want_lse = _batch(lens, 4, seed=1)
    how = dp.decode_choice(args[0], args[1], *args[3:], page_size=4)
    assert how["decoder"] == "plan" and how["ctas"] == tuning.CTAS_PER_SM * tuning.INTERPRETER_SMS
    o = dp.decode_paged(*args, page_size=4)
    assert np.abs(o.numpy() - want).max() < 1e-5
    # the same batch, one request fewer than the threshold: the split kernel, the same answer
    monkeypatch.setattr(tuning, "PLAN_FROM_BATCH", 7)
    assert dp.decode_choice(args[0], args[1], *args[3:], page_size=4)["decoder"] == "split"
    assert np.abs(dp.decode_paged(*args, page_size=4).numpy() - want).max() < 1e-5


@pytest.mark.parametrize("decoder", ["split", "plan"])
def test_a_forced_decoder_gives_the_same_answer(decoder):
    args, want, want_lse = _batch([7, 30, 1, 12], 4, seed=2)
    o, lse = dp.decode_paged(*args, page_size=4, decoder=decoder, return_lse=True)
    assert np.abs(o.numpy() - want).max() < 1e-5 and np.abs(lse.numpy() - want_lse).max() < 1e-5


def test_the_rule_is_the_tuning_table():
    assert tuning.choose_decoder([4096] * 300) == "split"  # uniform: the split kernel at any size
    long_tail = [100] * (tuning.PLAN_FROM_BATCH - 1) + [int(100 * tuning.PLAN_SKEW * 3)]
    assert tuning.choose_decoder(long_tail) == "plan" and tuning.choose_decoder(long_tail[1:]) == "split"
    assert tuning.choose_decoder([0] * 80) == "split"  # nothing to read: no plan
    for bad, exc in (("4096", TypeError), ([], ValueError), ([3, -1], ValueError), ([1.5], ValueError)):
        with pytest.raises(exc, match="lengths"):
            tuning.choose_decoder(bad)


def test_bad_input_is_refused_by_name():
    args, _, _ = _batch([5, 9], 4)
    with pytest.raises(ValueError, match="decoder"):
        dp.decode_paged(*args, page_size=4, decoder="fastest")
    with pytest.raises(TypeError, match="return_lse"):
        dp.decode_paged(*args, page_size=4, return_lse="False")
    with pytest.raises((TypeError, ValueError), match="page_size"):
        dp.decode_paged(*args, page_size=0)


@pytest.mark.parametrize("decoder", ["split", "plan"])
def test_a_workspace_plans_once_and_runs_every_step(decoder):
    """plan() once for the table, then run() with each step's new queries: each step's answer is
    the reference's for its own queries; a plan that fits keeps the plan-driven decoder's buffers."""
    (q, k, v, indptr, indices, last), _, _ = _batch([6, 21, 3, 40], 4, seed=3)
    w = dp.DecodeWorkspace(4, 2, 16, 4, k.shape[0], torch.float32, "cpu")
    with pytest.raises(RuntimeError, match="nothing planned"):
        w.run(q, k, v)
    how = w.plan(indptr, indices, last, decoder=decoder)
    assert how["decoder"] == decoder
    kd, vd = (t.double().numpy() for t in (k, v))
    for step in range(2):
        qs = torch.randn(q.shape, generator=torch.Generator().manual_seed(step))
        want, want_lse = reference(
            qs.double().numpy(), kd, vd, indptr.numpy(), indices.numpy(), last.numpy(), 4
        )
        o = w.run(qs, k, v)
        assert np.abs(o.numpy() - want).max() < 1e-5 and np.abs(w.lse.numpy() - want_lse).max() < 1e-5
    if decoder == "plan":
        first = w._dec
        w.plan(indptr, indices, last, decoder="plan")  # the same table again: it fits
        assert w._dec is first
        with pytest.raises(ValueError, match="q has shape"):
            w.run(q[:2], k, v)


def test_a_workspace_refuses_bad_sizes_by_name():
    for kw, exc, name in (
        (dict(q_heads=3, kv_heads=2), ValueError, "q_heads"),
        (dict(head_dim=0), ValueError, "head_dim"),
        (dict(max_pages=0), ValueError, "max_pages"),
        (dict(dtype=torch.int8), TypeError, "dtype"),
    ):
        args = {**dict(q_heads=4, kv_heads=2, head_dim=16, page_size=4, max_pages=8), **kw}
        with pytest.raises(exc, match=name):
            dp.DecodeWorkspace(**args, device="cpu")


def test_the_workspace_launches_the_split_kernel_as_paged_decode_chooses():
    """A planned split run cuts each request as `paged_decode(splits=None)` would (the plan's
    chunk floor, not `splits` chunks for every request), so the two answers agree bit for bit."""
    from attnlab.kernels.paged import paged_decode

    args, want, _ = _batch([200, 40, 65, 3, 90, 7], 3, seed=4)
    how = dp.decode_choice(args[0], args[1], *args[3:], page_size=3)
    assert how["decoder"] == "split" and how["rule"] == "fill" and how["min_chunk"] > 1
    o, lse = dp.decode_paged(*args, page_size=3, return_lse=True)
    o2, lse2 = paged_decode(*args, page_size=3, return_lse=True)
    assert torch.equal(o, o2) and torch.equal(lse, lse2)
    assert np.abs(o.numpy() - want).max() < 1e-5
    with pytest.raises(ValueError, match="min_chunk"):
        paged_decode(*args, page_size=3, min_chunk=8)  # a cut needs the splits it cuts
    with pytest.raises(TypeError, match="min_chunk"):
        paged_decode(*args, page_size=3, splits=2, min_chunk="8")
    with pytest.raises(ValueError, match="min_chunk"):
        paged_decode(*args, page_size=3, splits=2, min_chunk=2**70)
