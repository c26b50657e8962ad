"""The Triton cascade decode against an independent float64 reference (each request's attention over
the prefix followed by its own tokens, concatenated, plain softmax) and against the numpy
`attnlab.core.decode.cascade_attention`. Without a GPU it runs under Triton's interpreter
(tests/conftest.py sets TRITON_INTERPRET=1), so sizes stay small; `python -m attnlab.gpubench.cascade`
checks real sizes.

The output is filled with NaN before each call, and so is every pool slot no request owns: an
element left unwritten or a slot read that is not the request's shows up as NaN. `poisoned_alloc`
(tests/conftest.py) does the same for what the kernels allocate themselves (torch.empty: the
prefix partial states, lse, the unique part's output and workspace, the fp32 staging output).
bf16 / fp16 outputs are held to the rule of tests/refs/kernel_rule.py; fp32 to 1e-5.
"""

from __future__ import annotations


import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnlab.core.decode import cascade_attention  # noqa: E402
from attnlab.kernels.cascade import cascade_decode  # noqa: E402

from refs.kernel_rule import assert_within_rule  # noqa: E402
from refs.reference import decode_attention  # noqa: E402

pytestmark = pytest.mark.usefixtures("poisoned_alloc")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
NAN = float("nan")


def _unique_pools(lens, page_size, kv_heads, d, rng, spare=3):
    """NHD pools (float64), only the requests' slots filled (the rest NaN), FlashInfer's arrays, and
    each request's own K/V as (u, kv_heads, d) arrays."""
    pages = [-(-n // page_size) for n in lens]
    num_pages = sum(pages) + spare
    indices = rng.permutation(num_pages)[: sum(pages)]
    indptr = np.concatenate([[0], np.cumsum(pages)])
    last = np.array([n - page_size * (p - 1) for n, p in zip(lens, pages)])
    k = np.full((num_pages, page_size, kv_heads, d), NAN)
    v = np.full_like(k, NAN)
    own = []
    for i, n in enumerate(lens):
        ki, vi = rng.standard_normal((2, n, kv_heads, d))
        for t in range(n):
            p, s = indices[indptr[i] + t // page_size], t % page_size
            k[p, s], v[p, s] = ki[t], vi[t]
        own.append((ki, vi))
    return k, v, (indptr, indices, last), own


def _reference(q, pk, pv, own):
    """float64 from the definition: request i attends over concat(prefix, its own tokens)."""
    return decode_attention(
        q, [np.concatenate([pk, ki]) for ki, _ in own], [np.concatenate([pv, vi]) for _, vi in own]
    )


def _gathered(c):
    """Each request's K and V, prefix then its own tokens, in the case's dtype, as SDPA takes
    them: lists of (kv_heads, P + u_i, d) (the rule's per-request yardstick)."""
    ks = [torch.cat([c["pk"], ki]).transpose(0, 1) for ki, _ in c["own"]]
    vs = [torch.cat([c["pv"], vi]).transpose(0, 1) for _, vi in c["own"]]
    return ks, vs


def _case(n, g, prefix, page_size, lens, dtype, seed, hkv=2, d=16):
    rng = np.random.default_rng(seed)
    k, v, table, own = _unique_pools(lens, page_size, hkv, d, rng)
    pk, pv = rng.standard_normal((2, prefix, hkv, d))
    q = rng.standard_normal((n, hkv * g, d))
    t = lambda x: torch.tensor(x, dtype=dtype, device=DEVICE)  # noqa: E731
    return dict(
        q=t(q),
        pk=t(pk),
        pv=t(pv),
        k=t(k),
        v=t(v),
        table=table,
        own=[(t(a), t(b)) for a, b in own],
        page_size=page_size,
    )


def _run(c, **kw):
    q = c["q"]
    out = torch.full(q.shape, NAN, dtype=q.dtype, device=DEVICE)
    i32 = [torch.tensor(np.array(a), dtype=torch.int32, device=DEVICE) for a in c["table"]]
    o, lse = cascade_decode(
        q, c["pk"], c["pv"], c["k"], c["v"], *i32, page_size=c["page_size"], out=out, return_lse=True, **kw
    )
    assert o is out and o.dtype == q.dtype
    o, lse = o.double().cpu().numpy(), lse.double().cpu().numpy()
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    return o, lse


def _f64(c):
    """The inputs as the kernel sees them (rounded to its dtype), in float64."""
    f = lambda x: x.double().cpu().numpy()  # noqa: E731
    return f(c["q"]), f(c["pk"]), f(c["pv"]), [(f(a), f(b)) for a, b in c["own"]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("prefix", [1, 37])
@pytest.mark.parametrize("group", [1, 4], ids=["g1", "g4"])
@pytest.mark.parametrize("n", [1, 3])
def test_matches_reference(n, group, prefix, page_size, dtype):
    # unique lengths 1, 2 * page_size (last page full), 2 * page_size + 3; one request: one of them
    lens = [1, 2 * page_size, 2 * page_size + 3]
    lens = lens if n == 3 else [lens[(prefix + page_size) % 3]]
    c = _case(n, group, prefix, page_size, lens, dtype, seed=1000 * n + 100 * group + prefix + page_size)
    q, pk, pv, own = _f64(c)
    ro, rl = _reference(q, pk, pv, own)
    o, lse = _run(c)
    if dtype == torch.float32:
        assert np.abs(o - ro).max() < 1e-5 and np.abs(lse - rl).max() < 1e-5
        # the numpy cascade (one query head at a time) gives the same answer
        hkv = pk.shape[1]
        for h in range(q.shape[1]):
            hk = h // group
            cr = cascade_attention(q[:, h], pk[:, hk], pv[:, hk], [(a[:, hk], b[:, hk]) for a, b in own])
            assert np.abs(o[:, h] - cr.o).max() < 1e-5 and np.abs(lse[:, h] - cr.lse).max() < 1e-5
            assert cr.tokens_read == prefix + sum(lens) and hkv == 2
    else:  # the rule: at most twice torch SDPA's own error
        assert_within_rule(o, ro, c["q"], *_gathered(c), lse=lse, label=f"cascade P={prefix} ps={page_size}")
        assert np.abs(lse - rl).max() < 1e-4


@pytest.mark.parametrize("prefix", [1023, 0])
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"]
)
def test_long_ragged(dtype, prefix):
    """A 1023-token prefix (no whole number of 16-key tiles) or none, and unique parts of 1025
    tokens and 1 token in pages of 16."""
    c = _case(2, 4, prefix, 16, [1025, 1], dtype, seed=1025 + prefix, hkv=1)
    ro, rl = _reference(*_f64(c))
    o, lse = _run(c)
    if dtype == torch.float32:
        assert np.abs(o - ro).max() < 1e-5 and np.abs(lse - rl).max() < 1e-5
    else:
        assert_within_rule(o, ro, c["q"], *_gathered(c), lse=lse, label=f"cascade {dtype} P={prefix}")
        assert np.abs(lse - rl).max() < 1e-4


@pytest.mark.parametrize("splits, unique_splits, block_m", [(1, 1, None), (3, 2, None), (2, None, 32)])
def test_fixed_splits(splits, unique_splits, block_m):
    """The prefix cut into 1 or 3 chunks (37 tokens, 16-key tiles), the unique part into 1 or 2,
    and a row block of 32 wider than the n g = 12 rows."""
    c = _case(3, 4, 37, 3, [1, 6, 20], torch.float32, seed=7)
    ro, rl = _reference(*_f64(c))
    o, lse = _run(c, splits=splits, unique_splits=unique_splits, block_m=block_m, block_n=16)
    assert np.abs(o - ro).max() < 1e-5 and np.abs(lse - rl).max() < 1e-5


def test_strided_prefix_rows_across_blocks_and_empty_prefix():
    """A prefix viewed out of a page pool (pages x page_size flattened, d stride 2), q transposed,
    n g = 40 rows over three 16-row blocks; then an empty prefix: the unique part alone."""
    c = _case(5, 8, 24, 16, [3, 16, 17, 1, 40], torch.float32, seed=11, hkv=1)
    q, pk, pv, own = _f64(c)
    ro, rl = _reference(q, pk, pv, own)
    wide = torch.full((2, 3, 8, 1, 32), NAN, dtype=torch.float32, device=DEVICE)  # (k/v, pages, ps, h, 2d)
    wide[..., ::2] = torch.stack([c["pk"], c["pv"]]).reshape(2, 3, 8, 1, 16)
    c["pk"], c["pv"] = wide[0].flatten(0, 1)[..., ::2], wide[1].flatten(0, 1)[..., ::2]
    c["q"] = c["q"].transpose(0, 1).contiguous().transpose(0, 1)
    assert not c["pk"].is_contiguous() and not c["q"].is_contiguous()
    o, lse = _run(c)
    assert np.abs(o - ro).max() < 1e-5 and np.abs(lse - rl).max() < 1e-5
    c["pk"], c["pv"] = c["pk"][:0], c["pv"][:0]
    ro, rl = _reference(q, pk[:0], pv[:0], own)
    o, lse = _run(c)
    assert np.abs(o - ro).max() < 1e-5 and np.abs(lse - rl).max() < 1e-5


def _good():
    i32 = lambda *x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    k = torch.randn(6, 3, 2, 16)
    return dict(
        q=torch.randn(2, 4, 16),
        prefix_k=torch.randn(5, 2, 16),
        prefix_v=torch.randn(5, 2, 16),
        k_pool=k,
        v_pool=k.clone(),
        kv_indptr=i32(0, 2, 3),
        kv_indices=i32(4, 0, 2),
        kv_last_page_len=i32(3, 1),
    )


@pytest.mark.parametrize(
    "change, kw, err, match",
    [
        (
            lambda a: a.update(prefix_k=a["prefix_k"].numpy()),
            {},
            TypeError,
            "prefix_k must be a torch.Tensor",
        ),
        (lambda a: a.update(prefix_v=a["prefix_v"][0]), {}, ValueError, r"prefix_v must be NHD"),
        (lambda a: a.update(prefix_k=a["prefix_k"].half()), {}, TypeError, "prefix_k must have q's dtype"),
        (lambda a: a.update(prefix_v=a["prefix_v"][:4]), {}, ValueError, "prefix_v .* prefix_k's shape"),
        (
            lambda a: a.update(prefix_k=torch.randn(5, 1, 16), prefix_v=torch.randn(5, 1, 16)),
            {},
            ValueError,
            "kv_heads",
        ),
        (lambda a: a.update(q=a["q"].numpy()), {}, TypeError, "q must be a torch.Tensor"),
        (lambda a: a["kv_last_page_len"].fill_(0), {}, ValueError, "kv_last_page_len"),
        (lambda a: None, {"page_size": 4}, ValueError, "page_size"),
        (lambda a: None, {"splits": 6}, ValueError, r"splits=6 .* prefix_len=5"),
        (lambda a: None, {"splits": True}, TypeError, "splits must be an integer, got True"),
        (lambda a: None, {"unique_splits": 0}, ValueError, "splits"),
        (lambda a: None, {"block_m": 8}, ValueError, "block_m"),
        (lambda a: None, {"out": torch.empty(2, 4, 8)}, ValueError, "out must be"),
    ],
)
def test_bad_input(change, kw, err, match):
    a = _good()
    change(a)
    with pytest.raises(err, match=match):
        cascade_decode(*a.values(), **{"page_size": 3, **kw})
