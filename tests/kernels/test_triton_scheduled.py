"""The plan-driven persistent decode (`attnlab.kernels.scheduled`) against an independent float64
reference that gathers each request's K/V through the page table, for each of the three plans.
Without a GPU it runs under Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1), so
sizes stay small; `python -m attnlab.gpubench.scheduled` checks real sizes on a GPU.

The output and both partial-state buffers are poisoned with NaN before every run, and every pool
slot no request owns is NaN: an element left unwritten or a page read that is not the request's
shows up as NaN.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnlab.machine import schedule  # noqa: E402
from attnlab.kernels.paged import paged_decode  # noqa: E402
from attnlab.kernels.scheduled import ScheduledDecoder, scheduled_decode  # noqa: E402
from refs.paged_reference import attention as _reference, pools as _pools  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
NAN = float("nan")
I32 = dict(dtype=torch.int32, device=DEVICE)


def _sdpa_error(tq, tk, tv, table, page_size, ref):
    """Max error of torch's SDPA in the same low precision on the same gathered inputs."""
    indptr, indices, last = table
    hkv, err = tk.shape[2], 0.0
    for i in range(len(last)):
        pages = torch.as_tensor(indices[indptr[i] : indptr[i + 1]], dtype=torch.long)
        n = page_size * (len(pages) - 1) + int(last[i])
        k = tk[pages].reshape(-1, hkv, tk.shape[3])[:n].transpose(0, 1)[None]
        v = tv[pages].reshape(-1, hkv, tv.shape[3])[:n].transpose(0, 1)[None]
        qi = tq[i].reshape(hkv, -1, tq.shape[2])[None]
        o = torch.nn.functional.scaled_dot_product_attention(qi, k, v)[0].reshape(tq.shape[1:])
        err = max(err, float(np.abs(o.double().cpu().numpy() - ref[i]).max()))
    return err


def _plan(kind, lens, kv_heads, group, ctas):
    pairs = [(1, n) for n in lens]
    if kind == "per_request":
        return schedule.plan_per_request(pairs, kv_heads=kv_heads, num_ctas=ctas, group=group)
    if kind == "fixed_split":
        return schedule.plan_fixed_split(pairs, chunk=13, kv_heads=kv_heads, num_ctas=ctas, group=group)
    return schedule.plan_balanced(pairs, kv_heads=kv_heads, num_ctas=ctas, group=group)


def _decoder(lens_list, page_size, hkv, group, d, dtype, ctas, num_pages, plans):
    max_items = max(int(np.bincount(p.cta).max()) for p in plans)
    return ScheduledDecoder(
        max(len(x) for x in lens_list),
        hkv * group,
        hkv,
        d,
        ctas,
        max_items,
        num_pages,
        page_size,
        dtype,
        DEVICE,
    )


def _run(dec, plan, tq, table, tk, tv):
    """load + run with the output and the partial states poisoned first; (o, lse) float64 numpy."""
    for t in (dec.out, dec.lse_out, dec.o_partial, dec.lse_partial, dec._dst):
        t.fill_(NAN)
    dec.load(plan, tq, *(torch.tensor(np.array(a), **I32) for a in table))
    o = dec.run(tk, tv)
    assert o.shape == tq.shape and o.dtype == tq.dtype
    o, lse = o.double().cpu().numpy(), dec.lse.double().cpu().numpy()
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    return o, lse


PLANS = ("per_request", "fixed_split", "balanced")


# Every page size with both group sizes, and each dtype with each page size and each group size:
# 6 cases instead of the full product's 12 (the other 6 ran the same code paths again).
PAIRWISE = [(1, 1, "fp32"), (1, 4, "bf16"), (3, 1, "bf16"), (3, 4, "fp32"), (16, 1, "fp32"), (16, 4, "bf16")]


@pytest.mark.parametrize(
    "page_size, group, dtype_name", PAIRWISE, ids=[f"{p}-g{g}-{d}" for p, g, d in PAIRWISE]
)
def test_matches_reference(page_size, group, dtype_name):
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    # length 1, odd lengths, exactly 2 pages (last page full), 2 pages + 1 token
    lens = [1, 29, 2 * page_size, 2 * page_size + 1, 7]
    hkv, d, ctas = 2, 24, 4
    rng = np.random.default_rng(10 * page_size + group)
    k, v, table = _pools(lens, page_size, hkv, d, rng)
    q = rng.standard_normal((len(lens), hkv * group, d))
    tq, tk, tv = (torch.tensor(x, dtype=dtype, device=DEVICE) for x in (q, k, v))
    rq, rk, rv = (t.double().cpu().numpy() for t in (tq, tk, tv))
    ro, rl = _reference(rq, rk, rv, *table, page_size)
    plans = [_plan(kind, lens, hkv, group, ctas) for kind in PLANS]
    assert len(plans[1].work) > len(plans[0].work)  # fixed split: requests really split
    assert len(set(plans[2].cta.tolist())) == ctas  # balanced: items on every CTA
    dec = _decoder([lens], page_size, hkv, group, d, dtype, ctas, k.shape[0], plans)
    bound = 1e-5 if dtype == torch.float32 else 2 * _sdpa_error(tq, tk, tv, table, page_size, ro) + 1e-6
    for plan in plans:
        o, lse = _run(dec, plan, tq, table, tk, tv)
        assert np.abs(o - ro).max() <= bound, plan.name
        assert np.abs(lse - rl).max() < (1e-5 if dtype == torch.float32 else 1e-4), plan.name
        if plan.name == "per-request" and DEVICE == "cpu":
            # one item per output, the whole KV in the same tiles: paged_decode(splits=1)'s bits
            i32 = [torch.tensor(np.array(a), **I32) for a in table]
            po, pl = paged_decode(tq, tk, tv, *i32, page_size=page_size, splits=1, return_lse=True)
            assert torch.equal(po, dec.run(tk, tv)) and torch.equal(pl, dec.lse)


@pytest.mark.parametrize("page_size", [1, 3, 16])
def test_prefetched_page_ids_give_the_same_bits(page_size):
    """The decoder with prefetch=True (tile t+1's page ids loaded during tile t) writes the same
    bits as with prefetch=False for every plan, and both match float64."""
    lens, hkv, g, d, ctas = [1, 33, 2 * page_size + 1, 50], 2, 2, 16, 3
    rng = np.random.default_rng(page_size)
    k, v, table = _pools(lens, page_size, hkv, d, rng)
    q = rng.standard_normal((len(lens), hkv * g, d))
    ro, rl = _reference(q, k, v, *table, page_size)
    t = lambda x: torch.tensor(x, dtype=torch.float32, device=DEVICE)  # noqa: E731
    plans = [_plan(kind, lens, hkv, g, ctas) for kind in PLANS]
    max_items = max(int(np.bincount(p.cta).max()) for p in plans)
    decs = [
        ScheduledDecoder(
            len(lens),
            hkv * g,
            hkv,
            d,
            ctas,
            max_items,
            k.shape[0],
            page_size,
            torch.float32,
            DEVICE,
            block_n=16,
            prefetch=p,
        )
        for p in (False, True)
    ]
    for plan in plans:
        (o0, l0), (o1, l1) = (_run(dec, plan, t(q), table, t(k), t(v)) for dec in decs)
        assert np.array_equal(o0, o1) and np.array_equal(l0, l1), plan.name
        assert np.abs(o1 - ro).max() < 1e-5 and np.abs(l1 - rl).max() < 1e-5, plan.name


def _f32_case(lens, ps, hkv, g, d, seed):
    """float32 q, k_pool, v_pool on DEVICE, the int32 page table, and the float64 reference (o, lse)."""
    rng = np.random.default_rng(seed)
    k, v, table = _pools(lens, ps, hkv, d, rng)
    q = rng.standard_normal((len(lens), hkv * g, d))
    ro, rl = _reference(q, k, v, *table, ps)
    tensors = [torch.tensor(x, dtype=torch.float32, device=DEVICE) for x in (q, k, v)]
    return tensors, [torch.tensor(np.array(a), **I32) for a in table], ro, rl


@pytest.mark.parametrize("kind", PLANS)
def test_functional_form_is_deterministic(kind):
    lens, ps, hkv, g, d = [40, 1, 16, 23], 3, 2, 4, 24
    (q, k, v), i32, ro, rl = _f32_case(lens, ps, hkv, g, d, seed=3)
    plan = _plan(kind, lens, hkv, g, 3)
    ws = schedule.fixed_size_workspace(plan, 5, 40, 20)  # larger than needed: padding
    runs = [scheduled_decode(q, k, v, *i32, p, page_size=ps, return_lse=True) for p in (plan, plan, ws)]
    for o, lse in runs:
        assert np.abs(o.double().cpu().numpy() - ro).max() < 1e-5
        assert np.abs(lse.double().cpu().numpy() - rl).max() < 1e-5
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])  # bitwise
    assert torch.equal(runs[0][0], runs[2][0])  # the padding changes nothing


def test_one_decoder_serves_batches_of_other_lengths():
    """The same buffers, loaded in turn with batches of other sizes and lengths (and, on a GPU,
    one graph captured on the first and replayed for the rest): each batch's own answer."""
    ps, hkv, g, d, ctas = 3, 2, 4, 24, 4
    rng = np.random.default_rng(8)
    batches = [[5, 40, 1], [1, 2, 30, 9, 12], [3, 30, 1]]
    num_pages = max(sum(-(-n // ps) for n in lens) for lens in batches) + 4
    t = lambda x: torch.tensor(x, dtype=torch.float32, device=DEVICE)  # noqa: E731
    cases = []
    for lens in batches:
        k, v, table = _pools(lens, ps, hkv, d, rng, num_pages=num_pages)
        q = rng.standard_normal((len(lens), hkv * g, d))
        cases.append((lens, t(q), t(k), t(v), table, _reference(q, k, v, *table, ps)))
    # one pool for all: every batch's slots written where it owns them (the batches' pages collide,
    # so each batch gets the pool rebuilt in place: same tensors, same addresses)
    tk, tv = torch.empty_like(cases[0][2]), torch.empty_like(cases[0][3])
    for kind in PLANS:
        plans = [_plan(kind, c[0], hkv, g, ctas) for c in cases]
        dec = _decoder([c[0] for c in cases], ps, hkv, g, d, torch.float32, ctas, num_pages, plans)
        for i, ((lens, tq, k, v, table, (ro, rl)), plan) in enumerate(zip(cases, plans)):
            tk.copy_(k), tv.copy_(v)
            if DEVICE == "cuda" and i == 0:
                dec.load(plan, tq, *(torch.tensor(np.array(a), **I32) for a in table))
                dec.capture(tk, tv)
            o, lse = _run(dec, plan, tq, table, tk, tv)
            if DEVICE == "cuda":
                for b in (dec.out, dec.lse_out):
                    b.fill_(NAN)
                o, lse = dec.replay().double().cpu().numpy(), dec.lse.double().cpu().numpy()
            assert o.shape == (len(lens), hkv * g, d)
            assert np.abs(o - ro).max() < 1e-5 and np.abs(lse - rl).max() < 1e-5, (kind, i)
    if DEVICE == "cpu":
        with pytest.raises(RuntimeError, match="CUDA graphs need a CUDA device.*run\\(k_pool, v_pool\\)"):
            dec.capture(tk, tv)
        with pytest.raises(RuntimeError, match="no graph captured"):
            dec.replay()


def _small():
    rng = np.random.default_rng(1)
    lens = [4, 7]
    k, v, table = _pools(lens, 3, 2, 16, rng, spare=1)
    t = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    i32 = [torch.tensor(np.array(a), dtype=torch.int32) for a in table]
    plan = _plan("balanced", lens, 2, 2, 2)
    return dict(
        q=t(rng.standard_normal((2, 4, 16))),
        k=t(np.nan_to_num(k)),
        v=t(np.nan_to_num(v)),
        table=i32,
        plan=plan,
        lens=lens,
    )


def test_refusals_of_the_decoder():
    a = _small()
    P = a["k"].shape[0]  # 6 pages
    dec = ScheduledDecoder(2, 4, 2, 16, 2, 8, P, 3, torch.float32, "cpu")
    with pytest.raises(RuntimeError, match="nothing loaded"):
        dec.run(a["k"], a["v"])
    cases = [
        (dict(max_batch=0), ValueError, "max_batch=0 is out of range"),
        (dict(max_items=True), TypeError, "max_items must be an integer, got True"),
        (dict(q_heads=3), ValueError, "q_heads=3 must be a multiple of kv_heads=2"),
        (dict(head_dim=300), ValueError, "head_dim=300 is out of range; valid: 1 <= head_dim <= 256"),
        (dict(dtype=torch.float64), TypeError, "dtype=torch.float64"),
        (dict(block_n=8), ValueError, "block_n=8"),
        (dict(prefetch="yes"), TypeError, "prefetch must be True or False"),
        (dict(max_outputs=0), ValueError, "max_outputs=0"),
        (dict(scale=-1.0), ValueError, "scale"),
    ]
    base = dict(
        max_batch=2,
        q_heads=4,
        kv_heads=2,
        head_dim=16,
        max_ctas=2,
        max_items=8,
        max_pages=5,
        page_size=3,
        dtype=torch.float32,
        device="cpu",
    )
    for kw, err, match in cases:
        with pytest.raises(err, match=match):
            ScheduledDecoder(**{**base, **kw})
    q, table, plan = a["q"], a["table"], a["plan"]
    small = ScheduledDecoder(1, 4, 2, 16, 2, 8, 10, 3, torch.float32, "cpu")
    with pytest.raises(ValueError, match="batch=2 requests; valid: batch <= max_batch=1"):
        small.load(plan, q, *table)
    with pytest.raises(ValueError, match="max_items=1 work items"):
        ScheduledDecoder(2, 4, 2, 16, 2, 1, P, 3, torch.float32, "cpu").load(plan, q, *table)
    with pytest.raises(ValueError, match="max_ctas=1 holds fewer"):
        ScheduledDecoder(2, 4, 2, 16, 1, 8, P, 3, torch.float32, "cpu").load(plan, q, *table)
    with pytest.raises(ValueError, match="max_outputs=2 holds fewer"):
        ScheduledDecoder(2, 4, 2, 16, 2, 8, P, 3, torch.float32, "cpu", max_outputs=2).load(plan, q, *table)
    with pytest.raises(ValueError, match="kv_indices has 5 pages; valid: <= max_pages=2"):
        ScheduledDecoder(2, 4, 2, 16, 2, 8, 2, 3, torch.float32, "cpu").load(plan, q, *table)
    with pytest.raises(ValueError, match=r"workspace has .* \(2, 9, 16\); this decoder's are \(2, 8, 8\)"):
        dec.load(schedule.fixed_size_workspace(plan, 2, 9, 16), q, *table)
    with pytest.raises(TypeError, match="plan must be a schedule.Plan or schedule.Workspace, got list"):
        dec.load([], q, *table)
    with pytest.raises(ValueError, match="q has 8 heads; this decoder was made for q_heads=4"):
        dec.load(plan, torch.zeros(2, 8, 16), *table)
    with pytest.raises(TypeError, match="dtype"):
        dec.load(plan, q.double(), *table)
    with pytest.raises(TypeError, match="kv_indptr must be int32"):
        dec.load(plan, q, table[0].long(), *table[1:])
    with pytest.raises(ValueError, match="kv_indices holds 9, outside the pool.*max_pages=6"):
        dec.load(plan, q, table[0], torch.full_like(table[1], 9), table[2])
    # plans that do not belong to this batch
    with pytest.raises(ValueError, match="request reaches 2; valid: request < 2"):
        dec.load(_plan("balanced", [4, 7, 1], 2, 2, 2), q, *table)
    with pytest.raises(ValueError, match="kv_head reaches 3; valid: kv_head < 2"):
        dec.load(_plan("balanced", a["lens"], 4, 1, 2), q, *table)
    with pytest.raises(ValueError, match="q_end=4; valid: q_end <= group=2"):
        dec.load(_plan("balanced", a["lens"], 2, 4, 2), q, *table)
    with pytest.raises(ValueError, match="KV positions up to 9 of request 1, which has 7 tokens"):
        dec.load(_plan("balanced", [4, 9], 2, 2, 2), q, *table)
    with pytest.raises(ValueError, match="does not cover every query head"):
        dec.load(_plan("balanced", [4, 6], 2, 2, 2), q, *table)
    dec.load(plan, q, *table)
    for k, err, match in (
        (a["k"][:4], ValueError, r"k_pool has shape \(4, 3, 2, 16\); valid: .*pages >= max_pages=6"),
        (a["k"].numpy(), TypeError, "k_pool must be a torch.Tensor"),
        (a["k"].double(), ValueError, "k_pool is torch.float64"),
    ):
        with pytest.raises(err, match=match):
            dec.run(k, a["v"])


def test_refusals_of_the_function():
    a = _small()
    q, (indptr, indices, last), plan = a["q"], a["table"], a["plan"]
    with pytest.raises(
        TypeError, match="plan_or_workspace must be a schedule.Plan or schedule.Workspace, got dict"
    ):
        scheduled_decode(q, a["k"], a["v"], indptr, indices, last, {}, page_size=3)
    with pytest.raises(ValueError, match=r"page_size=4 does not match the pool"):
        scheduled_decode(q, a["k"], a["v"], indptr, indices, last, plan, page_size=4)
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        scheduled_decode(q.numpy(), a["k"], a["v"], indptr, indices, last, plan, page_size=3)
    with pytest.raises(TypeError, match=r"return_lse must be True or False \(a bool\), got 'yes'"):
        scheduled_decode(q, a["k"], a["v"], indptr, indices, last, plan, page_size=3, return_lse="yes")
    with pytest.raises(ValueError, match=r"kv_indptr .*\(batch \+ 1 = 3\)"):
        scheduled_decode(q, a["k"], a["v"], indptr[:2], indices, last, plan, page_size=3)


def test_bench_dry_run(tmp_path, capsys):
    """The GPU harness's command line end to end at tiny sizes (eager runs stand in for the replays
    on a CPU): every plan kind and paged_decode on both dry batches, in the run file's schema."""
    import json

    from attnlab import runfile
    from attnlab.gpubench import scheduled as scheduled_bench

    if DEVICE == "cuda":
        pytest.skip("the dry run is for machines without a GPU")
    plans = ",".join((*scheduled_bench.KINDS, "paged"))
    assert scheduled_bench.main(["--dry", "--out", str(tmp_path / "r.json"), "--plans", plans]) == 0
    res = json.loads((tmp_path / "r.json").read_text())
    assert all(tuple(r) == runfile.COLUMNS for r in res["rows"])
    impls = [(r["shape"]["batch"], r["impl"]) for r in res["rows"]]
    assert sorted(impls) == sorted(
        (b, i) for b in (1, 3) for i in (*(f"sched {k}" for k in scheduled_bench.KINDS), "paged auto")
    )
    assert all(r["error"] < 0.05 for r in res["rows"])
    table = capsys.readouterr().out.split("best/us")[-1]  # the table printed last
    assert table.count("scheduled  batch 1 ") == table.count("scheduled  batch 3 ") == 7


def test_long_merges_direct_writes_and_more_outputs_than_merge_programs():
    """Outputs of 1 item (written by kernel 1 itself) beside outputs of up to 19 items (merged
    MERGE_S at a time), and more merged outputs than the persistent merge has programs."""
    from attnlab.kernels.scheduled_kernels import routes

    lens, ps, hkv, g, d, ctas = [300, 100, 1, 100, 57], 3, 2, 2, 16, 3
    (q, k, v), i32, ro, rl = _f32_case(lens, ps, hkv, g, d, seed=21)
    plan = schedule.plan_fixed_split([(1, n) for n in lens], chunk=16, kv_heads=hkv, num_ctas=ctas, group=g)
    ws = schedule.fixed_size_workspace(plan, ctas, int(np.bincount(plan.cta).max()), plan.num_outputs)
    direct, multi, owner = routes(ws)
    per = np.diff(ws.merge_indptr)
    assert per.max() > 2 * 8 and multi.size > ctas  # the interpreter's merge takes 8 at a time
    assert direct.sum() == hkv  # the 1-token request
    assert sorted(owner[owner >= 0]) == sorted(np.repeat(np.arange(per.size), per))
    for fused in (False, True):  # kernel 2, or the last item of each output merges it
        runs = [
            scheduled_decode(q, k, v, *i32, ws, page_size=ps, return_lse=True, fused_merge=fused)
            for _ in range(2)
        ]
        o, lse = (x.double().cpu().numpy() for x in runs[0])
        assert np.abs(o - ro).max() < 1e-5 and np.abs(lse - rl).max() < 1e-5
        assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])  # bitwise
