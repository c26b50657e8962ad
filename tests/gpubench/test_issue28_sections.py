"""gpubench.mixed, gpubench.tree and gpubench.mla without a GPU: each section as a declaration run
by the one loop on its dry cases (our kernels under the interpreter, checked against the section's
float32 reference), the rows in the run file's schema, and the FLOPs each case declares counted
here another way (visible (query, key) pairs by formula; MLA's two products)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from attnlab.gpubench import mixed, mla, tree  # noqa: E402
from attnlab.gpubench.core import context, measure  # noqa: E402


@pytest.mark.parametrize("section", [mixed.SECTION, tree.SECTION, mla.SECTION], ids=lambda s: s.name)
def test_dry_run_rows_are_ours_and_correct(section):
    res = measure(section, dry=True)
    rows = res["rows"]
    ours = ("ours", "two") if section is mixed.SECTION else ("ours",)  # mixed: also our two launches
    assert sorted(r["impl"] for r in rows) == sorted(ours * len(section.dry_cases))
    assert all(r["error"] < section.tolerance for r in rows) and not res["dropped"]


def test_each_launch_is_its_own_row_and_two_launches_are_the_batch():
    """--launches gives one row of ours per entry (auto: the kernel's choice, recorded in extra);
    the two-launch row's parts (the chunk's rows, then the decodes') joined are the answer."""
    from attnlab.gpubench.core import joined

    res = measure(mixed.SECTION, [(7, 3)], dry=True, options={"launches": (None, (16, 16, 4, 2))})
    ours = [r for r in res["rows"] if r["impl"].startswith("ours")]
    assert len(ours) == 2 and len({r["impl"] for r in ours}) == 2, [r["impl"] for r in ours]
    c, ctx = _case(mixed.SECTION, (7, 3))
    one = next(iter(mixed.ours(torch, c, ctx)))
    two = next(iter(mixed.two_launches(torch, c, ctx)))
    parts = two.fn()
    assert isinstance(parts, tuple) and parts[0].shape[0] == 7 and parts[1].shape[0] == 3
    assert (joined(parts).view(c.ref.shape).float() - one.fn().float()).abs().max() < 1e-2
    with pytest.raises(TypeError, match="a tensor or a tuple of tensors"):
        joined((parts[0], "rows"))


def _case(section, case):
    ctx = context(section, [case], dry=True)
    return next(iter(section.inputs(torch, case, ctx))), ctx


def test_mixed_flops_count_the_causal_pairs():
    c, ctx = _case(mixed.SECTION, (7, 3))
    b = c.b
    # causal bottom-right: query j of a request with a new tokens over n keys sees n - a + j + 1 keys
    pairs = sum(sum(max(0, min(n, n - a + j + 1)) for j in range(a)) for a, n in zip(b.q_lens, b.kv_lens))
    hq, d = ctx.shape["heads"], ctx.shape["head_dim"]
    assert c.flop == 4 * pairs * hq * d and b.q_lens[0] == 7 and b.q_lens[1:] == [1, 1, 1]
    assert b.kv_lens[0] == mixed.DRY["cached"] + 7


def test_tree_flops_count_each_tokens_ancestors():
    c, ctx = _case(tree.SECTION, (2, 5, 9))
    masks = c.b.mask.view(2, 5, 14).numpy()
    for m in masks:  # every token sees the prefix and itself; its ancestors form a chain to a root
        assert m[:, :9].all() and m[:, 9:].diagonal().all() and not np.triu(m[:, 9:], 1).any()
    depth = masks[:, :, 9:].sum(-1)  # the ancestors with itself: its depth in the tree
    pairs = int((9 + depth).sum())
    assert c.flop == 4 * pairs * ctx.shape["heads"] * ctx.shape["head_dim"]
    chain = np.hstack([np.ones((3, 2), bool), np.tril(np.ones((3, 3), bool))])  # a chain is causal
    assert (tree.tree_mask(2, [-1, 0, 1]) == chain).all()


def test_mla_flops_are_both_products_of_the_absorbed_form():
    c, ctx = _case(mla.SECTION, (2, 9))
    h, L, R = (ctx.shape[k] for k in ("heads", "latent", "rope"))
    # scores: 2 (L + R) per head and token; output: 2 L per head and token
    assert c.flop == 2 * 9 * h * (2 * (L + R) + 2 * L)
    assert c.bytes == 2 * 9 * (L + R) * 2 + 2 * c.q_nope.numel() * 2 + c.q_pe.numel() * 2


def test_mla_counts_are_notebook_06s_and_the_model_says_which_roof():
    """The section's FLOPs and bytes at DeepSeek-V3's shape are core.mla's absorbed form (the
    count notebook 06 shows), and its model hook reads them against both roofs."""
    from types import SimpleNamespace

    from attnlab.core.mla import mla_decode_cost

    sh, n, batch = mla.SHAPE, 8192, 3
    # the section's formulas on full-size shapes, without building the tensors
    q_nope = SimpleNamespace(numel=lambda: batch * sh["heads"] * sh["latent"])
    q_pe = SimpleNamespace(numel=lambda: batch * sh["heads"] * sh["rope"])
    flop = batch * n * sh["heads"] * (2 * (sh["latent"] + sh["rope"]) + 2 * sh["latent"])
    nbytes = batch * n * (sh["latent"] + sh["rope"]) * 2 + 2 * q_nope.numel() * 2 + q_pe.numel() * 2
    f1, b1 = mla_decode_cost("absorbed", n)
    assert (flop, nbytes) == (batch * f1, batch * b1)
    c = SimpleNamespace(flop=flop, bytes=nbytes)
    got = mla._model(
        c, None, 1000.0, SimpleNamespace(ceilings={"bf16_matmul_flops": 700e12, "copy_bytes_per_s": 4.2e12})
    )
    # 234.8 FLOP/byte: above the H200's datasheet ridge (989.4 / 4.8 = 206) and the run's (700 / 4.2 = 167)
    assert got["model_bound"] == got["model_bound_measured"] == "compute"
    assert got["model_us_measured"] == pytest.approx(flop / 700e12 * 1e6, rel=1e-12)
    assert got["over_model_measured"] == pytest.approx(1000.0 / got["model_us_measured"], rel=1e-12)
    slow = mla._model(
        c, None, 1000.0, SimpleNamespace(ceilings={"bf16_matmul_flops": 700e12, "copy_bytes_per_s": 2e12})
    )
    assert slow["model_bound_measured"] == "memory"  # a ridge of 350 puts it below
    assert slow["model_us_measured"] == pytest.approx(nbytes / 2e12 * 1e6, rel=1e-12)
