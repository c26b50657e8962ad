"""`kernels.mla.mla_decode`: MLA decode in the absorbed form over a shuffled paged latent cache
whose unowned slots are NaN, against a float64 reference from the definition (scores q_nope . ckv
+ q_pe . kpe, scaled; the output the softmax-weighted ckv rows). Outputs come from poisoned
allocations. Under Triton's interpreter: small odd sizes."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnlab.kernels.mla import mla_decode  # noqa: E402
from refs.paged_reference import table  # noqa: E402

pytestmark = pytest.mark.usefixtures("poisoned_alloc")


def _cache(lens, page_size, latent, rope, rng, spare=3):
    pages = sum(-(-n // page_size) for n in lens) + spare
    indptr, indices, last = table(lens, page_size, pages, rng)
    ckv, kpe = np.full((pages, page_size, latent), np.nan), np.full((pages, page_size, rope), np.nan)
    for i, n in enumerate(lens):
        for t in range(n):
            p, s = indices[indptr[i] + t // page_size], t % page_size
            ckv[p, s], kpe[p, s] = rng.standard_normal(latent), rng.standard_normal(rope)
    return ckv, kpe, (indptr, indices, last)


def _reference(qn, qp, ckv, kpe, tab, page_size, scale):
    indptr, indices, last = tab
    B, H, L = qn.shape
    o, lse = np.zeros((B, H, L)), np.zeros((B, H))
    for b in range(B):
        pages = indices[indptr[b] : indptr[b + 1]]
        n = page_size * (len(pages) - 1) + last[b]
        c, k = np.concatenate([ckv[p] for p in pages])[:n], np.concatenate([kpe[p] for p in pages])[:n]
        s = (qn[b] @ c.T + qp[b] @ k.T) * scale  # (H, n)
        w = np.exp(s - s.max(1, keepdims=True))
        o[b] = w @ c / w.sum(1, keepdims=True)
        lse[b] = np.log(w.sum(1)) + s.max(1)
    return o, lse


def _run(lens, page_size, heads, latent, rope, seed, dtype=torch.float32, **kw):
    rng = np.random.default_rng(seed)
    ckv, kpe, tab = _cache(lens, page_size, latent, rope, rng)
    qn, qp = rng.standard_normal((len(lens), heads, latent)), rng.standard_normal((len(lens), heads, rope))
    scale = 1 / np.sqrt(latent // 4 + rope)
    want = _reference(qn, qp, ckv, kpe, tab, page_size, scale)
    t = lambda a, dt=dtype: torch.tensor(a, dtype=dt)  # noqa: E731
    args = [t(qn), t(qp), t(ckv), t(kpe), *(t(a, torch.int32) for a in tab)]
    return args, want, dict(page_size=page_size, scale=scale, **kw)


@pytest.mark.parametrize(
    "lens, page_size, heads, latent, rope, splits",
    [
        ([37, 5, 60], 3, 5, 48, 16, None),  # odd heads, latent not a power of two, automatic splits
        ([37, 5, 60], 3, 5, 48, 16, 1),
        ([16, 1, 33, 70], 16, 17, 32, 32, 3),  # heads past one tile of 16
        ([9, 2], 1, 1, 64, 16, 2),  # one-token pages, one head
    ],
)
def test_mla_decode_is_the_reference(lens, page_size, heads, latent, rope, splits):
    args, (want, want_lse), kw = _run(lens, page_size, heads, latent, rope, seed=len(lens) + heads)
    o, lse = mla_decode(*args, splits=splits, **kw)
    assert o.shape == want.shape and lse.shape == want_lse.shape
    assert np.abs(o.numpy() - want).max() < 1e-5 and np.abs(lse.numpy() - want_lse).max() < 1e-5


@pytest.mark.parametrize("dtype, tol", [(torch.bfloat16, 3e-2), (torch.float16, 4e-3)])
def test_half_precision(dtype, tol):
    args, (want, _), kw = _run([20, 7], 4, 4, 32, 16, seed=5, dtype=dtype)
    o, lse = mla_decode(*args, **kw)
    assert o.dtype == dtype and lse.dtype == torch.float32
    assert np.abs(o.float().numpy() - want).max() < tol


def test_bad_input_is_refused_by_name():
    args, _, kw = _run([5, 3], 2, 2, 32, 16, seed=1)

    def refused(exc, word, a=args, **more):
        with pytest.raises(exc, match=word):
            mla_decode(*a, **{**kw, **more})

    refused(TypeError, "scale", scale="0.1")
    refused(ValueError, "scale", scale=float("nan"))
    refused(ValueError, "scale", scale=0.0)
    with pytest.raises(TypeError, match="scale"):
        mla_decode(*args, page_size=2)  # no default: the caller says it
    refused(ValueError, "latent", a=[args[0][..., :24], args[1], args[2][..., :24], *args[3:]])
    refused(ValueError, "q_pe", a=[args[0], args[1][:1], *args[2:]])
    many = [a[:, :1].expand(-1, 129, -1) for a in args[:2]]  # 129 heads
    refused(ValueError, "heads", a=[*many, *args[2:]])
    refused(TypeError, "dtype", a=[args[0].double(), *args[1:]])
    refused(ValueError, "kpe_pool", a=[*args[:3], args[3][:, :1], *args[4:]])
    refused(ValueError, "page_size", page_size=3)
    refused(ValueError, "splits", splits=0)
    refused(TypeError, "kv_indptr", a=[*args[:4], args[4].long(), *args[5:]])


def test_a_workspace_plans_once_and_its_runs_launch_only(monkeypatch):
    """MLAWorkspace.plan reads the lengths and sizes the buffers once; each run (new queries on
    the same table) launches only: the host-side rules are made to fail after the plan, and the
    runs still give the reference and mla_decode's answer, bit for bit."""
    import attnlab.kernels.paged as paged
    import attnlab.kernels.tuning as tuning
    from attnlab.kernels.mla import MLAWorkspace

    lens, page, heads, latent, rope = [37, 5, 60], 3, 5, 48, 16
    args, _, kw = _run(lens, page, heads, latent, rope, seed=4)
    w = MLAWorkspace(heads, latent, rope, page, args[2].shape[0], torch.float32, "cpu", scale=kw["scale"])
    with pytest.raises(RuntimeError, match="nothing planned"):
        w.run(*args[:4])
    assert w.plan(*args[4:])["splits"] > 1  # the fill rule cuts this batch: the merge runs
    rng = np.random.default_rng(9)
    steps = [(rng.standard_normal(args[0].shape), rng.standard_normal(args[1].shape)) for _ in range(2)]
    t = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    one_shot = mla_decode(t(steps[-1][0]), t(steps[-1][1]), *args[2:], **kw)[0].clone()

    def boom(*a, **k):
        raise AssertionError("a run did host-side work")

    monkeypatch.setattr(paged, "request_lengths", boom)
    monkeypatch.setattr(tuning, "fill_from_lengths", boom)
    ckv, kpe = args[2].numpy(), args[3].numpy()
    tab = tuple(a.numpy() for a in args[4:])
    for qn, qp in steps:
        o, lse = w.run(t(qn), t(qp), *args[2:4])
        want, want_lse = _reference(qn, qp, ckv, kpe, tab, page, kw["scale"])
        assert np.abs(o.numpy() - want).max() < 1e-5 and np.abs(lse.numpy() - want_lse).max() < 1e-5
    assert torch.equal(o, one_shot)
    with pytest.raises(ValueError, match="q_pe has shape"):
        w.run(args[0], args[1][:, :, :8], *args[2:4])
    with pytest.raises(ValueError, match="heads=0"):
        MLAWorkspace(0, latent, rope, page, 9, torch.float32, "cpu", scale=0.1)
    with pytest.raises(TypeError, match="scale"):
        MLAWorkspace(heads, latent, rope, page, 9, torch.float32, "cpu", scale="0.1")
