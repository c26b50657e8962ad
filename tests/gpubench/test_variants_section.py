"""gpubench.variants without a GPU: the section as a declaration run by the one loop (its dry rows
in the schema, the Gluon kernel's rows dropped with the kernel's refusal printed as their reason),
its rows named as the recorded runs name them, and every form of a variant read from its registry
entry: FlexAttention's mods equal the numpy functors, and an entry registered here reaches the
numpy math, the explorer, our kernel and the Flex peer."""

from __future__ import annotations

import dataclasses
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from refs import throwaway_variant

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
from attnlab.catalog import data_path  # noqa: E402
from attnlab.core.variants import (  # noqa: E402
    REGISTRY,
    compose,
    flex_mods,
    variant_attention,
)
from attnlab.gpubench import variants  # noqa: E402
from attnlab.gpubench.core import measure  # noqa: E402
from attnlab.gpubench.declare import Impl, Launch  # noqa: E402
from attnlab.runfile import case_text, read  # noqa: E402


def _sdpa_as(name):
    """A cheap stand-in for one of our kernels (the interpreter's are slow): SDPA under its name."""

    def launches(torch, c, ctx):
        causal = c.kw.get("causal", False) or "window" in c.kw
        yield Launch(
            name,
            lambda: torch.nn.functional.scaled_dot_product_attention(
                c.q, c.k, c.v, is_causal=causal, enable_gqa=True
            ),
        )

    return launches


def test_dry_run_drops_the_gluon_rows_with_their_reason(capsys, tmp_path):
    real = {i.name: i for i in variants.SECTION.impls}
    section = dataclasses.replace(
        variants.SECTION,
        impls=(
            Impl("ours", _sdpa_as("ours"), ours=True),
            Impl("ours-hopper", _sdpa_as("ours-hopper"), ours=True),
            real["ours-gluon"],
            real["sdpa"],
        ),
    )
    res = measure(
        section, dry=True, out=str(tmp_path / "v.json"), options={"variants": ("causal", "soft_cap(30)")}
    )
    printed = capsys.readouterr().out
    assert printed.count("ours-gluon {}: failed") == 2
    assert "not supported by the Gluon kernel" in printed  # the dry shape's d = 32, refused by name
    rows = res["rows"]
    assert [(r["what"], r["impl"], r["ours"]) for r in rows] == [
        ("batch 1, N 40, variant causal", "ours", True),
        ("batch 1, N 40, variant causal", "ours-hopper", True),
        ("batch 1, N 40, variant causal", "sdpa", False),  # SDPA: no soft cap, no row of its own
        ("batch 1, N 40, variant soft_cap(30)", "ours", True),
        ("batch 1, N 40, variant soft_cap(30)", "ours-hopper", True),
    ]
    hq, d = section.dry_shape["heads"], section.dry_shape["head_dim"]
    assert [r["flop"] for r in rows] == [4 * d * hq * 40 * 41 // 2] * 3 + [4 * d * hq * 40 * 40] * 2
    assert res["soft_cap"] == 30.0 and res["window"] == variants.DRY_WINDOW
    assert json.loads((tmp_path / "v.json").read_text())["rows"] == rows


def test_the_rows_are_named_as_the_recorded_runs_name_them():
    """What the section writes for its full-size cases and variants: the recorded rows' texts."""
    recorded = read(data_path("gpus.json").parent / "measurements" / "h200-2026-12-02.json")["rows"]
    rows = [r for r in recorded if r["section"] == "variants"]
    whats = {
        case_text({"batch": b, "N": n, "variant": variants.label(variants.uses_of(name, variants.WINDOW))})
        for b, n in variants.SECTION.cases
        for name in variants.VARIANTS
    }
    assert {r["what"] for r in rows} == whats
    assert {r["impl"] for r in rows} == {
        "ours",
        "ours-hopper",
        "ours-gluon",
        "sdpa-flash",
        "sdpa-cudnn",
        "flex",
    }
    assert {r["shape"]["variant"] for r in rows if r["impl"].startswith("sdpa")} == {"causal"}


def test_the_kernels_get_the_registry_entries_switches(monkeypatch):
    from attnlab.kernels import gluon_fa3, hopper
    from attnlab.kernels.variants import switches

    seen = []
    monkeypatch.setattr(
        gluon_fa3, "flash_attention_gluon", lambda q, k, v, **kw: (seen.append(kw) or q, None)
    )
    monkeypatch.setattr(hopper, "flash_attention_hopper", lambda q, k, v, **kw: seen.append(kw) or q)
    c = SimpleNamespace(q=torch.zeros(1), k=None, v=None)
    for name in variants.VARIANTS:
        c.kw = switches(variants.uses_of(name, 7))
        for impl in (variants._ours_gluon, variants._ours_hopper):
            for launch in impl(torch, c, None):
                launch.fn()
    want = [{"causal": True}, {"soft_cap": 30.0}, {"soft_cap": 30.0, "causal": True}, {"window": 7}]
    assert seen == [w for w in want for _ in "gh"]


@pytest.mark.parametrize("name", [n for n in REGISTRY if REGISTRY[n].mods(REGISTRY[n].default) is not None])
def test_flex_mods_are_the_numpy_functors_on_tensors(name):
    """Each entry FlexAttention can express: its score_mod and mask_mod on torch index grids (as
    FlexAttention counts queries, from 0) equal the numpy Variant's logits and mask at the course's
    bottom-right positions, N_q != N_k."""
    e = REGISTRY[name]
    n_q, n_k = 9, 14
    v = e.variant(e.default)
    score_mod, mask_mod = flex_mods([(name, e.default)], n_q, n_k)
    qi, kj = torch.arange(n_q)[:, None], torch.arange(n_k)[None, :]
    pos = np.arange(n_q)[:, None] + n_k - n_q, np.arange(n_k)[None, :]
    s = np.random.default_rng(0).standard_normal((n_q, n_k)) * 4
    if v.logits_mask is None:
        assert mask_mod is None
    else:
        assert np.array_equal(mask_mod(0, 0, qi, kj).numpy(), np.broadcast_to(v.logits_mask(*pos), s.shape))
    if v.logits_transform is None:
        assert score_mod is None
    else:
        got = score_mod(torch.from_numpy(s), 0, 0, qi, kj).numpy()
        assert np.abs(got - v.logits_transform(s, *pos)).max() < 1e-12


def test_flex_cannot_express_no_softmax_or_a_row_transform():
    assert flex_mods([("sigmoid", 0.0)], 4, 4) is None
    assert flex_mods([("causal", None), ("rope", 100.0)], 4, 4) is None
    assert flex_mods([("causal", None)], 4, 4)[0] is None


def _dense(q, k, v, c):
    """float64 by definition: logits c tanh(s / c), each query sees itself and the 2 keys before."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    k, v = (np.repeat(t, q.shape[1] // t.shape[1], axis=1) for t in (k, v))
    n = q.shape[2]
    s = c * np.tanh(np.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(q.shape[3]) / c)
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    s = np.where((j <= i) & (j > i - 3), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhij,bhjd->bhid", p / p.sum(-1, keepdims=True), v)


@pytest.fixture
def capped_local(monkeypatch):
    """A throwaway registry entry the kernels already support, measured as "capped_local(2)"."""
    with throwaway_variant.registered() as e:
        monkeypatch.setitem(variants.VARIANTS, "capped_local(2)", lambda w: (("capped_local", 2.0),))
        yield e


@pytest.mark.usefixtures("capped_local")
def test_a_registered_entry_reaches_the_math_the_explorer_the_kernel_and_flex():
    from attnlab.explore import EXPLORERS
    from attnlab.explore.flashinfer import variant_gallery as vg

    ctx = SimpleNamespace(
        seed=0,
        dry=True,
        device="cpu",
        shape=dict(heads=2, kv_heads=1, head_dim=16),
        options=SimpleNamespace(variants=("capped_local(2)",)),
        state={},
    )
    (c,) = variants._inputs(torch, (1, 24), ctx)
    assert c.case == {"batch": 1, "N": 24, "variant": "capped_local(2)"} and c.kw == {
        "soft_cap": 2.0,
        "window": 3,
    }
    x = [t.double().numpy() for t in (c.q, c.k, c.v)]
    want = _dense(*x, 2.0)
    assert np.abs(variant_attention(*x, compose(c.uses), block_c=5) - want).max() < 1e-12
    assert c.flop == 4 * 16 * 2 * (1 + 2 + 3 * 22)  # 3 keys a row but the first two rows
    for impl in (variants._ours, variants._flex):
        (launch,) = impl(torch, c, ctx)
        o = launch.fn().double().numpy()
        assert np.abs(o - want).max() < 2e-2, launch.name  # bf16 output of the rounded inputs
        assert np.abs(o - c.ref.double().numpy()).max() < 2e-2
    assert list(vg.KINDS)[-2:] == ["capped local", "none"] and "capped_local(2)" in vg.SECOND
    ex = EXPLORERS["variant_gallery"](variant="capped local", N=64, tile=16)
    assert "capped_local(2)" in ex.summary.value
    r = vg.variant_gallery_numbers(vg.make_variant("capped local", 1.0), 64, 16)
    q, k, _ = vg._data()
    w = _dense(q[None, None, :64], k[None, None, :64], np.eye(64)[None, None], 1.0)[0, 0]
    assert np.abs(r.weights - w).max() < 1e-12
    assert r.counts["empty"] == 16 - 4 - 3  # the diagonal tiles and the three just below it are seen
