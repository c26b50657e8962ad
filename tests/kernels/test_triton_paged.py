"""The Triton paged decode kernel against an independent float64 reference that gathers each
request's K/V through the page table, and against `attnlab.core.paged.bsr_attention` on a
PagedKVCache's layout. Without a GPU it runs under Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1), so sizes stay small; `python -m attnlab.gpubench.paged` checks real sizes.

Every test poisons what the kernel must write (the output, and the partial-state workspace where
the split count is fixed) and every pool slot no request owns with NaN: an element left unwritten,
a page read that is not the request's, or an unmasked tail slot shows up as NaN. `poisoned_alloc`
(tests/conftest.py) does the same for what the kernel allocates itself (torch.empty: the workspace
when splits=None, the fp32 staging output for bf16 under the interpreter). bf16 / fp16 outputs are
held to the rule of tests/refs/kernel_rule.py (at most 2x torch SDPA's own max-abs error); fp32 to 1e-5.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnlab.kernels.decode import workspace  # noqa: E402
from attnlab.kernels.paged import paged_decode  # noqa: E402
from attnlab.kernels.tuning import auto_splits  # noqa: E402
from attnlab.core.paged import PagedKVCache, bsr_attention, to_bsr  # noqa: E402
from refs.paged_reference import attention as _reference, pools as _pools  # noqa: E402

from refs.kernel_rule import assert_within_rule  # noqa: E402

pytestmark = pytest.mark.usefixtures("poisoned_alloc")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
NAN = float("nan")


def _gathered(tk, tv, table, page_size):
    """Each request's K and V gathered through the page table, in the pool's dtype, as SDPA takes
    them: lists of (kv_heads, n_i, d) (the rule's per-request yardstick)."""
    indptr, indices, last = table
    ks, vs = [], []
    for i in range(len(last)):
        pages = torch.as_tensor(indices[indptr[i] : indptr[i + 1]], dtype=torch.long)
        n = page_size * (len(pages) - 1) + int(last[i])
        ks.append(tk[pages].flatten(0, 1)[:n].transpose(0, 1))
        vs.append(tv[pages].flatten(0, 1)[:n].transpose(0, 1))
    return ks, vs


def _run(tq, tk, tv, table, page_size, splits, **kw):
    """paged_decode into a NaN-filled output (and NaN-filled partial states when splits is fixed)."""
    n_req, hq, d = tq.shape
    out = torch.full((n_req, hq, d), NAN, dtype=tq.dtype, device=DEVICE)
    ws = None
    if splits is not None:
        ws = workspace(n_req, hq, d, splits, DEVICE)
        for t in ws.values():
            if isinstance(t, torch.Tensor):
                t.fill_(NAN)
    i32 = [torch.tensor(np.array(a), dtype=torch.int32, device=DEVICE) for a in table]
    o, lse = paged_decode(
        tq, tk, tv, *i32, page_size=page_size, splits=splits, out=out, ws=ws, return_lse=True, **kw
    )
    assert o is out and o.dtype == tq.dtype
    o, lse = o.double().cpu().numpy(), lse.double().cpu().numpy()
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    return o, lse


# Every page size with every split choice (the kernel's page walk and its split/merge paths), and
# every pair of any two of (page size, splits, group, dtype) at least once: 9 cases instead of the
# 36 of the full product, whose other 27 ran the same code paths again under the interpreter.
PAIRWISE = [
    (1, 1, 1, "fp32"),
    (1, 3, 1, "fp32"),
    (1, None, 4, "bf16"),
    (3, 1, 1, "fp32"),
    (3, 3, 1, "bf16"),
    (3, None, 4, "fp32"),
    (16, 1, 4, "bf16"),
    (16, 3, 4, "fp32"),
    (16, None, 1, "fp32"),
]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@pytest.mark.parametrize(
    "page_size, splits, group, dtype_name", PAIRWISE, ids=[f"{p}-g{g}-s{s}-{d}" for p, s, g, d in PAIRWISE]
)
def test_matches_reference(page_size, group, splits, dtype_name):
    dtype = DTYPES[dtype_name]
    # lengths 1, 17, 203 and 2*ps (last page full), 2*ps + 1 (last page of one token)
    lens = [1, 17, 203, 2 * page_size, 2 * page_size + 1]
    hkv, d = 2, 16
    rng = np.random.default_rng(100 * page_size + 10 * group + (splits or 0))
    k, v, table = _pools(lens, page_size, hkv, d, rng)
    q = rng.standard_normal((len(lens), hkv * group, d))
    tq, tk, tv = (torch.tensor(x, dtype=dtype, device=DEVICE) for x in (q, k, v))
    # the reference sees the inputs as the kernel does (rounded to dtype)
    rq, rk, rv = (t.double().cpu().numpy() for t in (tq, tk, tv))
    ro, rl = _reference(rq, rk, rv, *table, page_size)
    o, lse = _run(tq, tk, tv, table, page_size, splits)
    if dtype == torch.float32:
        assert np.abs(o - ro).max() < 1e-5  # fp32: accumulation-order rounding only
        assert np.abs(lse - rl).max() < 1e-5
    else:  # the rule: at most twice torch SDPA's own error
        assert_within_rule(
            o,
            ro,
            tq,
            *_gathered(tk, tv, table, page_size),
            lse=lse,
            label=f"paged ps={page_size} g={group} splits={splits}",
        )
        assert np.abs(lse - rl).max() < 1e-4  # lse stays fp32 from bf16 inputs


@pytest.mark.parametrize("splits", [3, None], ids=["s3", "sNone"])
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"]
)
def test_long_ragged_requests(dtype, splits):
    """Requests of 1023 and 1025 tokens (neither a whole number of 16-token pages or tiles) beside
    a 5-token one."""
    lens, ps, hkv, g, d = [1023, 1025, 5], 16, 1, 4, 16
    rng = np.random.default_rng(1023 + (splits or 0))
    k, v, table = _pools(lens, ps, hkv, d, rng)
    q = rng.standard_normal((len(lens), hkv * g, d))
    tq, tk, tv = (torch.tensor(x, dtype=dtype, device=DEVICE) for x in (q, k, v))
    ro, rl = _reference(*(t.double().cpu().numpy() for t in (tq, tk, tv)), *table, ps)
    o, lse = _run(tq, tk, tv, table, ps, splits)
    if dtype == torch.float32:
        assert np.abs(o - ro).max() < 1e-5 and np.abs(lse - rl).max() < 1e-5
    else:
        assert_within_rule(o, ro, tq, *_gathered(tk, tv, table, ps), lse=lse, label=f"paged {dtype}")
        assert np.abs(lse - rl).max() < 1e-4


@pytest.mark.parametrize("page_size", [3, 16])
def test_matches_bsr_attention_on_a_paged_cache(page_size):
    """One PagedKVCache per KV head, all with the same seed: the same shuffled block tables, so
    stacking their pools gives an NHD pool. Forked requests share pages; the append after a fork
    copies a shared partial page (copy-on-write). bsr_attention is the layer-1 answer."""
    hkv, g, d = 2, 4, 32
    rng = np.random.default_rng(page_size)
    caches = [PagedKVCache(160, page_size, d, seed=7) for _ in range(hkv)]
    kv = {n: rng.standard_normal((hkv, 2, n, d)) for n in (1, 17, 203)}
    rids = [[c.add(kv[n][h, 0], kv[n][h, 1]) for h, c in enumerate(caches)] for n in kv]
    rids.append([c.fork(r) for c, r in zip(caches, rids[1])])
    more = rng.standard_normal((hkv, 2, 5, d))
    for h, c in enumerate(caches):
        c.append(rids[-1][h], more[h, 0], more[h, 1])
    layouts = [to_bsr(c, [r[h] for r in rids]) for h, c in enumerate(caches)]
    lay = layouts[0]
    assert all(np.array_equal(x.kv_indices, lay.kv_indices) for x in layouts)
    q = rng.standard_normal((lay.num_requests, hkv * g, d))
    ref = np.stack([bsr_attention(q[:, h * g : (h + 1) * g], c, lay) for h, c in enumerate(caches)], 1)
    t = lambda x: torch.tensor(x, dtype=torch.float32, device=DEVICE)  # noqa: E731
    tk = t(np.stack([c.k_pool for c in caches], axis=2))  # (pages, page_size, kv_heads, d)
    tv = t(np.stack([c.v_pool for c in caches], axis=2))
    table = (lay.kv_indptr, lay.kv_indices, lay.kv_last_page_len)
    for splits in (1, 3):
        o, _ = _run(t(q), tk, tv, table, page_size, splits)
        assert np.abs(o - ref.reshape(o.shape)).max() < 1e-5


def test_any_strides_and_odd_head_dim():
    """Pools that are views: FlashInfer's 5-D (pages, 2, page_size, kv_heads, d) cache split into
    K and V, an HND pool permuted to NHD, a d stride of 2; q transposed; d = 24."""
    ps, hkv, g, d = 3, 2, 2, 24
    lens = [5, 40, 1]
    rng = np.random.default_rng(5)
    k, v, table = _pools(lens, ps, hkv, d, rng)
    q = rng.standard_normal((len(lens), hkv * g, d))
    ro, rl = _reference(q, k, v, *table, ps)
    t = lambda x: torch.tensor(x, dtype=torch.float32, device=DEVICE)  # noqa: E731
    tq = t(q.transpose(1, 0, 2).copy()).transpose(0, 1)  # strides (d, B*d, 1)
    five = t(np.stack([k, v], axis=1))  # FlashInfer's 5-D
    hnd_k = t(k.transpose(0, 2, 1, 3).copy()).permute(0, 2, 1, 3)  # HND storage
    wide = torch.zeros(k.shape[:3] + (2 * d,), dtype=torch.float32, device=DEVICE)
    wide[..., ::2] = t(v)
    for tk, tv in ((five[:, 0], five[:, 1]), (hnd_k, wide[..., ::2])):
        assert not tk.is_contiguous() or not tv.is_contiguous()
        for splits in (1, 2):
            o, lse = _run(tq, tk, tv, table, ps, splits)
            assert np.abs(o - ro).max() < 1e-5 and np.abs(lse - rl).max() < 1e-5


def test_block_smaller_than_page_and_auto_splits():
    """BLOCK_N = 16 inside pages of 32 tokens, and the splits=None rule on the interpreter."""
    lens = [70, 3]
    rng = np.random.default_rng(9)
    k, v, table = _pools(lens, 32, 1, 16, rng)
    q = rng.standard_normal((2, 4, 16))
    ro, _ = _reference(q, k, v, *table, 32)
    t = lambda x: torch.tensor(x, dtype=torch.float32, device=DEVICE)  # noqa: E731
    for splits in (1, 4, None):
        o, _ = _run(t(q), t(k), t(v), table, 32, splits, block_n=16)
        assert np.abs(o - ro).max() < 1e-5
    if DEVICE == "cpu":
        assert auto_splits(1, 1, 1000, "cpu", min_chunk=16) == 8  # 2 blocks on each of 4 pretend SMs
        assert auto_splits(1, 1, 20, "cpu", min_chunk=16) == 2  # no chunk under 16 tokens
        assert auto_splits(8, 2, 10**6, "cpu") == 1  # more blocks than SMs


def test_auto_launch_refuses_what_no_launch_has():
    from attnlab.kernels.tuning import auto_launch

    with pytest.raises(ValueError, match="programs=0 is out of range"):
        auto_launch(0, 16, DEVICE)
    with pytest.raises(TypeError, match="page_size must be an integer"):
        auto_launch(8, True, DEVICE)
    assert auto_launch(np.int64(8), 16, DEVICE)["block_n"] >= 16


@pytest.mark.parametrize("page_size, block_n", [(1, 16), (3, 16), (16, 16), (32, 16), (16, 32)])
def test_prefetched_page_ids_give_the_same_bits(page_size, block_n):
    """prefetch=True loads tile t+1's page ids during tile t, ahead=True tile t+1's K and V and
    tile t+2's ids; the ids, the tiles and the arithmetic are the same, so the output must be
    bitwise that of prefetch=False, and all match float64.
    Lengths cut tiles at every offset (1 token, a tile + 1, a page + 1, a multi-tile tail)."""
    lens = [1, block_n + 1, page_size + 1, 5 * block_n - 3]
    rng = np.random.default_rng(7 * page_size + block_n)
    k, v, table = _pools(lens, page_size, 2, 16, rng)
    q = rng.standard_normal((len(lens), 4, 16))
    ro, rl = _reference(q, k, v, *table, page_size)
    t = lambda x: torch.tensor(x, dtype=torch.float32, device=DEVICE)  # noqa: E731
    for splits in (1, 3):
        runs = [
            _run(t(q), t(k), t(v), table, page_size, splits, block_n=block_n, **kw)
            for kw in ({"prefetch": False}, {"prefetch": np.bool_(True)}, {"ahead": True})
        ]
        for r in runs[1:]:  # ahead: K and V a tile ahead and page ids two ahead, the same tiles
            assert np.array_equal(runs[0][0], r[0]) and np.array_equal(runs[0][1], r[1])
        assert np.abs(runs[1][0] - ro).max() < 1e-5 and np.abs(runs[1][1] - rl).max() < 1e-5


def _good():
    q = torch.randn(2, 4, 16)
    k = torch.randn(6, 3, 2, 16)
    i32 = lambda *x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    return dict(
        q=q,
        k_pool=k,
        v_pool=k.clone(),
        kv_indptr=i32(0, 2, 3),
        kv_indices=i32(4, 0, 2),
        kv_last_page_len=i32(3, 1),
    )


@pytest.mark.parametrize(
    "change, kw, err, match",
    [
        (lambda a: a.update(q=a["q"].numpy()), {}, TypeError, "q must be a torch.Tensor"),
        (lambda a: a.update(q=a["q"][0]), {}, ValueError, r"q must be \(batch, q_heads, d\)"),
        (lambda a: a.update(k_pool=a["k_pool"][0]), {}, ValueError, "k_pool must be NHD"),
        (lambda a: a.update(v_pool=a["v_pool"][:5]), {}, ValueError, "v_pool"),
        (lambda a: a.update(k_pool=a["k_pool"].half()), {}, TypeError, "dtype"),
        (
            lambda a: a.update(q=a["q"].double(), k_pool=a["k_pool"].double(), v_pool=a["v_pool"].double()),
            {},
            TypeError,
            "dtype",
        ),
        (lambda a: None, {"page_size": 4}, ValueError, r"page_size=4 .* k_pool.shape\[1\] = 3"),
        (lambda a: None, {"page_size": True}, TypeError, "page_size must be an integer, got True"),
        (lambda a: a.update(q=torch.randn(2, 3, 16)), {}, ValueError, "multiple of kv_heads"),
        (lambda a: a.update(q=torch.randn(2, 4, 8)), {}, ValueError, "head dim"),
        (lambda a: a.update(kv_indptr=a["kv_indptr"].long()), {}, TypeError, "kv_indptr must be int32"),
        (lambda a: a.update(kv_indptr=a["kv_indptr"][:2]), {}, ValueError, r"kv_indptr .*\(batch \+ 1 = 3\)"),
        (lambda a: a.update(kv_last_page_len=a["kv_last_page_len"][:1]), {}, ValueError, "kv_last_page_len"),
        (lambda a: a.update(kv_indices=a["kv_indices"][None]), {}, ValueError, "kv_indices"),
        (lambda a: a["kv_last_page_len"].fill_(0), {}, ValueError, "kv_last_page_len"),
        (lambda a: a["kv_indices"].fill_(6), {}, ValueError, "kv_indices"),
        (lambda a: a["kv_indptr"].add_(1), {}, ValueError, "kv_indptr"),
        (lambda a: None, {"splits": 0}, ValueError, "splits"),
        (lambda a: None, {"splits": True}, TypeError, "splits must be an integer, got True"),
        (lambda a: None, {"splits": 2.0}, TypeError, "splits must be an integer, got 2.0"),
        (lambda a: None, {"splits": 7}, ValueError, r"splits=7 .* <= 6"),
        (lambda a: None, {"out": torch.empty(2, 4, 16).half()}, ValueError, "out must be"),
        (lambda a: None, {"splits": 2, "ws": workspace(2, 4, 16, 3, "cpu")}, ValueError, "ws was made"),
        (lambda a: None, {"block_n": 8}, ValueError, "block_n"),
        (lambda a: None, {"prefetch": "False"}, TypeError, "prefetch must be True or False"),
        (lambda a: None, {"prefetch": 1}, TypeError, "prefetch must be True or False"),
        (lambda a: None, {"ahead": "True"}, TypeError, "ahead must be True or False"),
        (lambda a: None, {"return_lse": "no"}, TypeError, "return_lse must be True or False"),
        (lambda a: None, {"scale": float("nan")}, ValueError, "scale"),
        (lambda a: None, {"scale": 0.0}, ValueError, r"scale=0.0 is out of range"),
        (lambda a: None, {"scale": -1.0}, ValueError, "scale"),
        (lambda a: None, {"scale": True}, TypeError, "scale must be a real number"),
        (lambda a: None, {"scale": "0.5"}, TypeError, "scale must be a real number"),
        (
            lambda a: a.update(k_pool=a["k_pool"].to("meta")),
            {},
            ValueError,
            "k_pool is on meta but q is on cpu",
        ),
        (lambda a: None, {"ws": {}}, TypeError, "ws must be a dict from kernels.decode.workspace"),
        (lambda a: None, {"ws": 5}, TypeError, "ws must be a dict"),
    ],
)
def test_bad_input(change, kw, err, match):
    a = _good()
    change(a)
    with pytest.raises(err, match=match):
        paged_decode(*a.values(), **{"page_size": 3, **kw})


def test_auto_splits_from_real_lengths_on_a_ragged_batch():
    """splits=None reads the lengths once: the long request is cut finer than the short ones, the
    answer is the reference's, the read is remembered per table and an in-place write forgets it."""
    from attnlab.kernels.paged import choose_splits, longest_first, request_lengths

    lens = [200, 5, 17, 1]
    ps, hkv, g, d = 3, 1, 2, 16
    rng = np.random.default_rng(11)
    k, v, table = _pools(lens, ps, hkv, d, rng)
    q = rng.standard_normal((len(lens), hkv * g, d))
    ro, rl = _reference(q, k, v, *table, ps)
    t = lambda x: torch.tensor(x, dtype=torch.float32, device=DEVICE)  # noqa: E731
    o, lse = _run(t(q), t(k), t(v), table, ps, None, block_n=16)
    assert np.abs(o - ro).max() < 1e-5 and np.abs(lse - rl).max() < 1e-5
    indptr, indices, last = (torch.tensor(a, dtype=torch.int32, device=DEVICE) for a in table)
    got = request_lengths(indptr, last, ps)
    assert got.tolist() == lens and request_lengths(indptr, last, ps) is got  # remembered
    assert longest_first(indptr, last, ps).tolist() == [0, 2, 1, 3]  # the launch order the answer above used
    if DEVICE == "cpu":  # long-tailed (200 > 2 x the mean): the fill rule, 4 pretend SMs x 4 blocks
        auto = choose_splits(len(lens), hkv, indptr, indices, last, ps, DEVICE, block_n=16)
        # counted by hand: 16-token chunks make 13 + 1 + 2 + 1 = 17 blocks, 32-token ones 7 + 1 + 1 + 1
        assert auto == {"splits": 7, "min_chunk": 32, "rule": "fill"}
        assert auto_splits(len(lens), hkv, ps * (indices.numel() - len(lens) + 1), DEVICE, min_chunk=16) == 2
    last[1] = 1  # in place: the version moves, lengths are read again
    assert request_lengths(indptr, last, ps).tolist() == [200, 4, 17, 1]
    from attnlab.kernels import paged

    sorted_table = [
        torch.tensor(a, dtype=torch.int32, device=DEVICE) for a in ([0, 2, 4], [0, 1, 2, 3], [3, 3])
    ]
    assert longest_first(sorted_table[0], sorted_table[2], ps) is None  # in order already: no gather
    seen = len(paged._LENGTHS)
    _run(t(q), t(k), t(v), table, ps, 2, block_n=16)  # explicit splits: nothing read from the table
    assert len(paged._LENGTHS) == seen


@pytest.mark.parametrize("seed", range(8))
def test_fill_rule_is_the_shortest_chunk_that_fits(seed):
    """fill_from_lengths against a walk over every chunk length: the shortest whole-tile chunk
    (at least the floor) whose blocks fit max(blocks_per_sm x SMs, per_request x heads x requests),
    or the longest request whole."""
    from attnlab.kernels.tuning import FILL_MAX_SPLITS, fill_from_lengths, sms

    rng = np.random.default_rng(seed)
    lens = rng.lognormal(6, 1.5, size=int(rng.integers(1, 40))).astype(int).tolist()
    hkv, per_sm, per_req = int(rng.choice([1, 2, 8])), int(rng.integers(1, 9)), int(rng.integers(1, 4))
    tile, floor = int(rng.choice([16, 64])), int(rng.choice([16, 128, 200]))
    cap, longest = max(per_sm * sms("cpu"), per_req * hkv * len(lens)), max(1, max(lens))
    blocks = lambda c: hkv * sum(max(1, -(-n // c)) for n in lens)  # noqa: E731
    first = -(-floor // tile) * tile
    want = next((c for c in range(first, longest + tile, tile) if blocks(c) <= cap), None)
    if want is None:  # even the longest whole does not fit: one block per request
        want = max(first, -(-longest // tile) * tile)
    splits, chunk = fill_from_lengths(
        lens, hkv, "cpu", blocks_per_sm=per_sm, per_request=per_req, floor=floor, tile=tile
    )
    assert chunk == want and splits == min(FILL_MAX_SPLITS, max(1, -(-longest // chunk)))
    for bad in ([], [5, -1], [2**31]):
        with pytest.raises(ValueError, match="lengths must be"):
            fill_from_lengths(bad, hkv, "cpu")
    for bad in (["100", "5"], [3.7, 100.2], [True, False]):  # counts are integers, nothing else
        with pytest.raises((TypeError, ValueError), match="lengths must be"):
            fill_from_lengths(bad, hkv, "cpu")


def test_the_fill_rule_bounds_the_grid_of_a_lone_long_request():
    """255 short requests beside one of 2^17 tokens: at most FILL_MAX_SPLITS pieces each, so the
    grid and the partial states stay batch x heads x FILL_MAX_SPLITS."""
    from attnlab.kernels.tuning import FILL_MAX_SPLITS, fill_from_lengths

    splits, chunk = fill_from_lengths([100] * 255 + [1 << 17], 8, "cpu")
    assert splits == FILL_MAX_SPLITS and chunk < (1 << 17) // FILL_MAX_SPLITS
    with pytest.raises(ValueError, match="blocks_per_sm"):
        fill_from_lengths([100], 8, "cpu", blocks_per_sm=0)


@pytest.mark.parametrize("seed", range(6))
def test_lengths_rule_equals_the_shapes_rule_on_equal_lengths(seed):
    """For a batch of equal long lengths split_from_lengths is auto_splits (the swept rule)."""
    from attnlab.kernels.tuning import split_from_lengths

    rng = np.random.default_rng(seed)
    batch, hkv = int(rng.integers(1, 300)), int(rng.choice([1, 2, 8]))
    n = int(rng.integers(4096, 70000))
    splits, chunk = split_from_lengths([n] * batch, hkv, "cpu")
    assert chunk == 1024 and splits == auto_splits(batch, hkv, n, "cpu")
    with pytest.raises(ValueError, match="lengths must be"):
        split_from_lengths([], hkv, "cpu")
