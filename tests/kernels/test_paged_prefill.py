"""`kernels.paged_prefill`: a ragged batch of queries (decode rows beside prefill chunks, a
speculative tree) over a shuffled paged KV cache whose unowned slots are NaN, against a float64
reference from the definition (each request's keys gathered through the table, its mask built
here: causal bottom-right, or the tree's ancestors). Outputs come from poisoned allocations, so an
element the kernel does not write shows up. Under Triton's interpreter: small odd sizes."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnlab.kernels.paged_prefill import paged_prefill, prefill_tiles  # noqa: E402
from refs.paged_reference import pools  # noqa: E402

pytestmark = pytest.mark.usefixtures("poisoned_alloc")


def _keys(k_pool, indptr, indices, last, page_size, i):
    pages = indices[indptr[i] : indptr[i + 1]]
    n = page_size * (len(pages) - 1) + last[i]
    return np.concatenate([k_pool[p] for p in pages])[:n]  # (n, kv_heads, d)


def _reference(q, q_lens, k, v, table, page_size, masks):
    """float64 o and natural-log lse; masks[i] is request i's (q_len, kv_len) boolean mask."""
    hq, hkv = q.shape[1], k.shape[2]
    o, lse = np.zeros(q.shape), np.full(q.shape[:2], -np.inf)
    starts = np.concatenate([[0], np.cumsum(q_lens)])
    for i, m in enumerate(masks):
        K, V = (_keys(p, *table, page_size, i) for p in (k, v))
        for h in range(hq):
            qi = q[starts[i] : starts[i + 1], h]
            s = qi @ K[:, h * hkv // hq].T / np.sqrt(q.shape[2])
            s = np.where(m, s, -np.inf)
            for j in range(len(qi)):
                if m[j].any():
                    w = np.exp(s[j] - s[j].max())
                    o[starts[i] + j, h] = w @ V[:, h * hkv // hq] / w.sum()
                    lse[starts[i] + j, h] = np.log(w.sum()) + s[j].max()
    return o, lse


def _causal(q_len, kv_len):
    return np.arange(kv_len)[None, :] <= (kv_len - q_len + np.arange(q_len))[:, None]


def _tree(prefix, parents):
    """A speculative tree's mask: token j sees the prefix and its ancestors (and itself)."""
    t = len(parents)
    m = np.zeros((t, prefix + t), bool)
    m[:, :prefix] = True
    for j in range(t):
        a = j
        while a >= 0:
            m[j, prefix + a] = True
            a = parents[a]
    return m


def _batch(q_lens, kv_lens, page_size, hq, hkv, d, seed):
    rng = np.random.default_rng(seed)
    k, v, table = pools(kv_lens, page_size, hkv, d, rng)
    q = rng.standard_normal((sum(q_lens), hq, d))
    return q, k, v, table


def _tensors(q, q_lens, k, v, table, dtype=torch.float32):
    t = lambda a, dt=dtype: torch.tensor(np.asarray(a), dtype=dt)  # noqa: E731
    qo = np.concatenate([[0], np.cumsum(q_lens)])
    i32 = torch.int32
    return t(q), t(k), t(v), t(qo, i32), *(t(a, i32) for a in table)


@pytest.mark.parametrize(
    "q_lens, kv_lens, page_size, hq, hkv, d, causal",
    [
        ([1, 17, 1, 5], [40, 17, 3, 12], 3, 4, 2, 24, True),  # decode rows beside a prefill chunk
        ([1, 17, 1, 5], [40, 17, 3, 12], 3, 4, 2, 24, False),
        ([9, 1, 30], [9, 70, 33], 16, 3, 1, 16, True),  # g = 3, page 16, one request all new
        ([2, 1, 4], [5, 8, 3], 1, 2, 2, 8, True),  # one-token pages; q_len > kv_len: rows see nothing
    ],
)
@pytest.mark.parametrize("kv_chunk", [None, 16, 2**20])  # automatic, keys cut into 16-key pieces, whole
def test_a_mixed_batch_is_the_reference(q_lens, kv_lens, page_size, hq, hkv, d, causal, kv_chunk):
    q, k, v, table = _batch(q_lens, kv_lens, page_size, hq, hkv, d, seed=sum(q_lens) + page_size)
    masks = [_causal(a, b) if causal else np.ones((a, b), bool) for a, b in zip(q_lens, kv_lens)]
    want, want_lse = _reference(q, q_lens, k, v, table, page_size, masks)
    args = _tensors(q, q_lens, k, v, table)
    o, lse = paged_prefill(*args, page_size=page_size, causal=causal, kv_chunk=kv_chunk)
    assert np.abs(o.numpy() - want).max() < 1e-5
    seen = np.isfinite(want_lse)
    assert (np.isneginf(lse.numpy()) == ~seen).all() and np.abs(
        lse.numpy()[seen] - want_lse[seen]
    ).max() < 1e-5
    if not seen.all():  # the rows that see no key: exactly zero
        assert (o.numpy()[~seen] == 0).all()


@pytest.mark.parametrize("seed", range(3))
def test_a_tree_mask_from_random_parent_chains(seed):
    rng = np.random.default_rng(seed)
    hq, hkv, d, page_size = 4, 1, 16, int(rng.choice([1, 3, 16]))
    q_lens, kv_lens, masks = [], [], []
    for _ in range(int(rng.integers(1, 4))):
        t, prefix = int(rng.integers(1, 12)), int(rng.integers(0, 30))
        parents = [-1] + [int(rng.integers(0, j)) for j in range(1, t)]  # each token's parent comes first
        q_lens.append(t)
        kv_lens.append(prefix + t)
        masks.append(_tree(prefix, parents))
    masks[0][0] = False  # one row that sees nothing: o = 0, lse = -inf
    q, k, v, table = _batch(q_lens, kv_lens, page_size, hq, hkv, d, seed=seed + 100)
    want, want_lse = _reference(q, q_lens, k, v, table, page_size, masks)
    flat = torch.tensor(np.concatenate([m.ravel() for m in masks]))
    args = _tensors(q, q_lens, k, v, table)
    o, lse = paged_prefill(*args, page_size=page_size, causal=True, mask=flat, kv_chunk=16 if seed else None)
    assert np.abs(o.numpy() - want).max() < 1e-5
    assert (o.numpy()[0, :] == 0).all() and np.isneginf(lse.numpy()[0, :]).all()
    seen = np.isfinite(want_lse)
    assert np.abs(lse.numpy()[seen] - want_lse[seen]).max() < 1e-5
    # the same tree's mask for the causal rows of a chain is the causal answer
    chain = _tree(0, [-1] + list(range(q_lens[0] - 1)))
    assert (chain == _causal(q_lens[0], q_lens[0])).all()


@pytest.mark.parametrize("dtype, tol", [(torch.bfloat16, 3e-2), (torch.float16, 4e-3)])
def test_half_precision_inputs(dtype, tol):
    q_lens, kv_lens = [1, 6, 3], [20, 6, 9]
    q, k, v, table = _batch(q_lens, kv_lens, 4, 4, 2, 32, seed=7)
    masks = [_causal(a, b) for a, b in zip(q_lens, kv_lens)]
    want, _ = _reference(q, q_lens, k, v, table, 4, masks)
    o, lse = paged_prefill(*_tensors(q, q_lens, k, v, table, dtype), page_size=4)
    assert o.dtype == dtype and lse.dtype == torch.float32
    assert np.abs(o.float().numpy() - want).max() < tol


@pytest.mark.parametrize("causal_end", [True, False])
def test_items_cover_every_tiles_keys_once(causal_end):
    from attnlab.kernels.paged_prefill import prefill_items

    rng = np.random.default_rng(int(causal_end))
    q_lens = rng.integers(0, 30, size=7)
    kv_lens = q_lens + rng.integers(0, 90, size=7)
    g, br, bn, chunk = 2, 16, 16, int(rng.choice([16, 40, 1000]))
    req, row, kv0, kv1, slot, slots = prefill_items(
        q_lens, kv_lens, g, br, bn, causal_end=causal_end, chunk=chunk
    )
    tiles, _ = prefill_tiles(q_lens, g, br)
    seen: dict = {}
    for r, x, a, b, j in zip(req, row, kv0, kv1, slot):
        assert a % bn == 0 and (a < b or j == 0) and j < slots
        seen.setdefault((int(r), int(x)), []).append((int(a), int(b), int(j)))
    assert len(seen) == len(tiles)  # every tile has an item
    for (r, x), parts in seen.items():
        last = min((x + br - 1) // g, q_lens[r] - 1)  # the tile's last row's token
        end = min(kv_lens[r], max(0, kv_lens[r] - q_lens[r] + last + 1)) if causal_end else kv_lens[r]
        keys = sorted(k for a, b, _ in parts for k in range(a, b))
        assert keys == list(range(end)) and len({j for *_, j in parts}) == len(parts)


def test_tiles_cover_every_row_once():
    rng = np.random.default_rng(3)
    q_lens, g, block = rng.integers(0, 40, size=9), 3, 16
    req, row = prefill_tiles(q_lens, g, block)
    covered = {
        (int(r), int(x) + j) for r, x in zip(req, row) for j in range(block) if int(x) + j < q_lens[r] * g
    }
    assert covered == {(i, j) for i, n in enumerate(q_lens) for j in range(int(n) * g)}
    assert len(req) == sum(-(-int(n) * g // block) for n in q_lens)


def test_bad_input_is_refused_by_name():
    q_lens, kv_lens = [2, 3], [4, 5]
    q, k, v, table = _batch(q_lens, kv_lens, 2, 2, 1, 8, seed=1)
    args = list(_tensors(q, q_lens, k, v, table))
    good = dict(page_size=2)

    def refused(exc, word, args=args, **kw):
        with pytest.raises(exc, match=word):
            paged_prefill(*args, **{**good, **kw})

    refused(
        ValueError,
        "qo_indptr",
        args=[args[0], *args[1:3], torch.tensor([0, 3, 2], dtype=torch.int32), *args[4:]],
    )
    refused(
        ValueError,
        "qo_indptr",
        args=[args[0], *args[1:3], torch.tensor([0, 2, 4], dtype=torch.int32), *args[4:]],
    )
    refused(ValueError, "qo_indptr", args=[args[0], *args[1:3], args[3].long(), *args[4:]])
    refused(TypeError, "causal", causal="False")
    refused(TypeError, "mask", mask=torch.ones(2 * 4 + 3 * 5, dtype=torch.uint8))
    refused(ValueError, "mask", mask=torch.ones(7, dtype=torch.bool))
    refused(ValueError, "q must be", args=[args[0][0], *args[1:]])
    refused(TypeError, "dtype", args=[args[0].double(), *args[1:]])
    refused(ValueError, "page_size", page_size=3)
    three = [p.expand(-1, -1, 3, -1).contiguous() for p in args[1:3]]  # 2 query heads over 3 KV heads
    refused(ValueError, "kv_heads", args=[args[0], *three, *args[3:]])
    refused(ValueError, "block_r", block_r=24)
    # strided index and mask tensors: the kernel reads entry i at pointer + i, so they are refused
    strided = torch.zeros(2 * args[3].numel(), dtype=torch.int32)[::2]
    strided.copy_(args[3])
    refused(ValueError, "qo_indptr must be contiguous", args=[*args[:3], strided, *args[4:]])
    flat = torch.ones(2 * (2 * 4 + 3 * 5), dtype=torch.bool)[::2]
    refused(ValueError, "contiguous", mask=flat)
    kv = torch.zeros(2 * args[4].numel(), dtype=torch.int32)[::2]
    kv.copy_(args[4])
    refused(ValueError, "kv_indptr must be contiguous", args=[*args[:4], kv, *args[5:]])


def test_a_workspace_plans_once_and_its_runs_launch_only(monkeypatch):
    """PrefillWorkspace.plan does the host's work once; each run (new queries on the same tables)
    launches only, so a CUDA graph can capture it: the host-side builders are made to fail after
    the plan, and the runs still give the reference (and paged_prefill's answer, bit for bit)."""
    import attnlab.kernels.paged_prefill as pp

    q_lens, kv_lens, page, hq, hkv, d = [1, 9, 1], [30, 12, 7], 4, 4, 2, 16
    q, k, v, table = _batch(q_lens, kv_lens, page, hq, hkv, d, seed=11)
    args = _tensors(q, q_lens, k, v, table)
    w = pp.PrefillWorkspace(hq, hkv, d, page, args[1].shape[0], torch.float32, "cpu")
    with pytest.raises(RuntimeError, match="nothing planned"):
        w.run(*args[:3])
    how = w.plan(*args[3:], kv_chunk=16)
    assert how["slots"] > 1 and how["items"] > how["tiles"]  # keys cut into pieces: the merge runs
    rng = np.random.default_rng(5)
    steps = [rng.standard_normal(q.shape) for _ in range(2)]
    f32 = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    one_shot = paged_prefill(f32(steps[-1]), *args[1:], page_size=page, kv_chunk=16)[0].clone()

    def boom(*a, **kw):
        raise AssertionError("a run did host-side work")

    for name in ("prefill_items", "prefill_tiles", "tile_ends", "_host_qo", "_check"):
        monkeypatch.setattr(pp, name, boom)
    monkeypatch.setattr(torch, "from_numpy", boom)
    masks = [_causal(a, b) for a, b in zip(q_lens, kv_lens)]
    for qs in steps:
        o, lse = w.run(f32(qs), *args[1:3])
        want, want_lse = _reference(qs, q_lens, k, v, table, page, masks)
        assert np.abs(o.numpy() - want).max() < 1e-5 and np.abs(lse.numpy() - want_lse).max() < 1e-5
    assert torch.equal(o, one_shot)
    with pytest.raises(ValueError, match=r"the plan is for \(11, 4, 16\)"):
        w.run(f32(steps[0][:-1]), *args[1:3])
    with pytest.raises(ValueError, match="q_heads=3 must be a multiple of kv_heads=2"):
        pp.PrefillWorkspace(3, 2, d, page, 9, torch.float32, "cpu")
    with pytest.raises(TypeError, match="page_size"):
        pp.PrefillWorkspace(hq, hkv, d, 4.0, 9, torch.float32, "cpu")


def test_a_batch_without_query_rows_plans_and_runs():
    """Every request with q_len 0 (its cache alone): nothing to attend, empty outputs, no launch."""
    q, k, v, table = _batch([0, 0], [4, 3], 2, 2, 1, 8, seed=2)
    o, lse = paged_prefill(*_tensors(q, [0, 0], k, v, table), page_size=2)
    assert o.shape == (0, 2, 8) and lse.shape == (0, 2)
