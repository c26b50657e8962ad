"""Notebook 05's variant gallery (attnlab.explore.flashinfer.variant_gallery) against checks written
out here: tile kinds from dense masks built from each variant's definition, HBM traffic from a
counted run of the real kernel, weights from a dense float64 softmax (or sigmoid) of the logits
with the variant written out by hand. Nothing below takes an expected value from tile_mask,
tile_io or dense_weights."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from attnlab.core.attention import flash_attention
from attnlab.explore import EXPLORERS
from attnlab.explore._controls import options_of
from attnlab.explore.flashinfer import variant_gallery as vg
from attnlab.explore.flashinfer import variant_tables
from attnlab.core.hbm import HBM
from attnlab.core.variants import (
    alibi,
    causal,
    rope,
    sigmoid,
    sink_window,
    sliding_window,
    soft_cap,
    variant_attention,
)


def _pos(n):
    return np.arange(n)[:, None], np.arange(n)[None, :]


def m_causal(n):
    qi, kj = _pos(n)
    return kj <= qi


def m_window(n, w):
    qi, kj = _pos(n)
    return (kj <= qi) & (kj > qi - w)


def m_sink(n, sinks, w):
    qi, kj = _pos(n)
    return (kj <= qi) & ((kj < sinks) | (kj > qi - w))


def everything(n):
    return np.ones((n, n), bool)


# (variant, dense mask) pairs; transforms alone mask nothing
CASES = {
    "causal": (lambda: [causal()], m_causal),
    "window 64": (lambda: [sliding_window(64)], lambda n: m_window(n, 64)),
    "window 1": (lambda: [sliding_window(1)], lambda n: m_window(n, 1)),
    "sink 4 + 48": (lambda: [sink_window(4, 48)], lambda n: m_sink(n, 4, 48)),
    "soft-cap": (lambda: [soft_cap(2)], everything),
    "alibi & causal": (lambda: [alibi(0.0625), causal()], m_causal),
    "cap & sink": (lambda: [soft_cap(5), sink_window(4, 64)], lambda n: m_sink(n, 4, 64)),
    "window & window": (lambda: [sliding_window(96), sliding_window(32)], lambda n: m_window(n, 32)),
    "plain": (lambda: [], everything),
}


def classify(mask, t):
    """0 empty / 1 partial / 2 full per t x t tile (the last ones cut short), one tile at a time."""
    n = len(mask)
    starts = range(0, n, t)
    return np.array(
        [
            [2 if mask[r : r + t, c : c + t].all() else int(mask[r : r + t, c : c + t].any()) for c in starts]
            for r in starts
        ]
    )


@pytest.mark.parametrize("N, tile", [(256, 32), (192, 128), (64, 16), (256, 16), (192, 64)])
@pytest.mark.parametrize("case", list(CASES))
def test_tile_kinds_equal_a_dense_classification(case, N, tile):
    make, mask = CASES[case]
    r = vg.variant_gallery_numbers(make(), N, tile)
    want = classify(mask(N), tile)
    assert r.kinds.tolist() == want.tolist()
    assert r.counts == {
        "empty": int((want == 0).sum()),
        "partial": int((want == 1).sum()),
        "full": int((want == 2).sum()),
    }
    assert r.skipped == pytest.approx((want == 0).mean())


@pytest.mark.parametrize("N, tile", [(256, 32), (192, 128), (128, 16)])
@pytest.mark.parametrize("case", ["causal", "window 64", "sink 4 + 48", "soft-cap", "cap & sink", "plain"])
def test_traffic_equals_the_hbm_counter_of_a_real_run(case, N, tile):
    """The bars: a counted run of variant_attention at d = 128 (empty tiles skipped) and of
    FlashAttention-2 with every tile (plain attention)."""
    r = vg.variant_gallery_numbers(CASES[case][0](), N, tile)
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((N, vg.TRAFFIC_D)) for _ in range(3))
    hbm, plain = HBM(), HBM()
    variant_attention(q, k, v, *CASES[case][0](), block_r=tile, block_c=tile, hbm=hbm)
    flash_attention(q, k, v, block_r=tile, block_c=tile, order="fa2", hbm=plain)
    elements = lambda h: tuple(sum(h.by_tensor().get(t, (0, 0))) for t in ("Q", "K", "V", "O"))
    assert r.traffic == elements(hbm)
    assert r.traffic_plain == elements(plain)
    assert r.saved == pytest.approx(1 - hbm.total / plain.total)


def _rope(x, pos, theta):
    half = x.shape[1] // 2
    ang = pos[:, None] * theta ** (-np.arange(half) / half)
    out = x.copy()
    out[:, 0::2] = x[:, 0::2] * np.cos(ang) - x[:, 1::2] * np.sin(ang)
    out[:, 1::2] = x[:, 0::2] * np.sin(ang) + x[:, 1::2] * np.cos(ang)
    return out


def reference(q, k, mask, logits=lambda s, qi, kj: s, theta=None, bias=None):
    """Dense float64 weights: row-wise softmax of the visible logits (or sigma(s + bias))."""
    n = len(q)
    qi, kj = _pos(n)
    if theta is not None:
        q, k = _rope(q, np.arange(n), theta), _rope(k, np.arange(n), theta)
    s = logits(q @ k.T / math.sqrt(q.shape[1]), qi, kj)
    if bias is not None:
        return np.where(mask, 1 / (1 + np.exp(-(s + bias))), 0.0)
    e = np.where(mask, np.exp(s - np.where(mask, s, -np.inf).max(axis=1, keepdims=True)), 0.0)
    return e / e.sum(axis=1, keepdims=True)


WEIGHTS = {
    "window": ([sliding_window(48)], lambda n: m_window(n, 48), {}),
    "soft-cap": ([soft_cap(2)], everything, {"logits": lambda s, qi, kj: 2 * np.tanh(s / 2)}),
    "alibi & causal": (
        [alibi(0.125), causal()],
        m_causal,
        {"logits": lambda s, qi, kj: s + 0.125 * (kj - qi)},
    ),
    "rope & sink": ([rope(100), sink_window(4, 32)], lambda n: m_sink(n, 4, 32), {"theta": 100.0}),
    "sigmoid & causal": ([sigmoid(-4), causal()], m_causal, {"bias": -4.0}),
    "plain": ([], everything, {}),
}


@pytest.mark.parametrize("case", list(WEIGHTS))
def test_weights_are_the_definition(case):
    vs, mask, kw = WEIGHTS[case]
    r = vg.variant_gallery_numbers(vs, 192, 64)
    q, k, _ = vg._data()
    want = reference(q[:192], k[:192], mask(192), **kw)
    assert np.abs(r.weights - want).max() < 1e-13
    assert r.max_diff < 1e-13
    assert np.array_equal(r.weights == 0, ~mask(192))
    sums = want.sum(axis=1)
    assert r.row_sums == pytest.approx((sums.min(), sums.max()))
    if "bias" in kw:
        assert not r.softmax and r.row_sums[1] > 2  # sigmoid weights are not normalised
    else:
        assert r.softmax and r.row_sums == pytest.approx((1, 1))


def test_weights_do_not_depend_on_the_kernel_tiles():
    q, k, eye = (a[:256, :256] for a in vg._data())
    w = vg.variant_gallery_numbers([sink_window(4, 48)], 256, 16).weights
    assert (
        np.abs(variant_attention(q, k, eye[:256, :256], sink_window(4, 48), block_r=16, block_c=16) - w).max()
        < 1e-15
    )


def test_composition_names_show_with_and():
    assert [v.name for v in vg.make_variant("soft-cap", 5, "sliding_window(64)")] == [
        "soft_cap(5)",
        "sliding_window(64)",
    ]
    ex = EXPLORERS["variant_gallery"]()
    ex.set(variant="ALiBi", param=0.125, second="causal")
    assert "alibi(0.125) & causal" in ex.summary.value
    assert ex.ax_w.get_title().startswith("alibi(0.125) & causal")
    ex.set(variant="none", second="none")
    assert "none (plain attention)" in ex.summary.value
    ex.set(variant="none", second="rope(10000)")
    assert ex.ax_w.get_title().startswith("rope(10000)\n")


def test_slider_follows_the_variant():
    ex = EXPLORERS["variant_gallery"]()
    w = ex.widgets["param"]
    assert "window" in w.description and w.value == 64 and not w.disabled
    ex.set(variant="soft-cap")
    assert "cap" in w.description and w.value == 2 and 30 in [o for o in w.options]
    assert "soft_cap(2)" in ex.summary.value
    ex.set(param=30)
    assert "soft_cap(30)" in ex.summary.value
    ex.set(variant="RoPE")
    assert "θ" in w.description and w.value == 10000
    ex.set(variant="causal")
    assert w.disabled and "no parameter" in w.description
    before = ex.computes
    with ex.hold():
        ex.widgets["variant"].value = "sink + window"
        ex.widgets["param"].value = 8
    assert ex.computes == before + 1 and "sink_window(4, 8)" in ex.summary.value


class _Browser:
    """A SelectionSlider's view in the browser, reached through the widget's comm: it applies each
    state message whole; stops that leave its index past the end clamp it (as the slider does), and
    the clamped index is sent back once the Python code has run."""

    kernel, comm_id = True, "browser"

    def __init__(self, w):
        self.w, self.labels, self.index, self.echo = w, list(w._options_labels), w.index, []

    def on_msg(self, callback):
        pass

    def close(self, *args, **kw):
        pass

    def send(self, data=None, buffers=None, **kw):
        state = (data or {}).get("state", {})
        self.labels = list(state.get("_options_labels", self.labels))
        self.index = state.get("index", self.index)
        if self.index is not None and self.index >= len(self.labels):
            self.index = len(self.labels) - 1
            self.echo.append(self.index)

    def deliver(self):
        while self.echo:
            self.w.set_state({"index": self.echo.pop(0)})


def _pixels(png):
    from PIL import Image
    import io

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)


def _same(a, b):
    return a.shape == b.shape and (np.abs(a - b).max(axis=2) > 40).mean() < 1e-3


def test_rope_picked_first_takes_its_default_and_the_blit_stays_clean():
    """From a fresh explorer a learner picks RoPE first (the window slider stood at stop 5 of 9;
    RoPE has 5 stops), then other variants: θ must read 1e4 (not the clamped 1e5), and after every
    pick the blitted PNG equals a full redraw and a fresh explorer built at the same values (no
    title printed over an old one, no bar left at its old height)."""
    cls = EXPLORERS["variant_gallery"]
    ex = cls()
    w = ex.widgets["param"]
    browser = _Browser(w)
    w.comm = browser
    try:
        for variant in ("RoPE", "sliding window", "soft-cap", "RoPE", "causal", "sink + window", "ALiBi"):
            ex.widgets["variant"].value = variant
            browser.deliver()
            assert ex.values["param"] == vg.KINDS[variant][3], (variant, ex.values)
            fast = _pixels(ex.image.value)
            kept = dict(ex._backgrounds)
            assert _same(fast, _pixels(ex.png(full=True))), f"blit differs after {variant}"
            ex._backgrounds.update(kept)
            fresh = cls(**ex.values)
            assert _same(fast, _pixels(fresh.image.value)), f"stale artists after {variant}"
            for ax, ax0 in zip((ex.ax_w, ex.ax_t, ex.ax_h), (fresh.ax_w, fresh.ax_t, fresh.ax_h)):
                assert ax.get_title() == ax0.get_title()
            assert [b.get_height() for b in ex.skip] == [b.get_height() for b in fresh.skip]
    finally:
        w.comm = None


def test_the_theta_readout_is_short_enough_to_show_whole():
    """The slider's readout box holds about five characters: RoPE's stops are labelled 10 ... 1e5."""
    ex = EXPLORERS["variant_gallery"](variant="RoPE")
    w = ex.widgets["param"]
    assert w.value == 10000 and w.label == "1e4"
    assert options_of(w) == (10, 100, 1000, 10000, 100000)
    assert max(map(len, w._options_labels)) <= 4
    for kind, (_, _, stops, _) in vg.KINDS.items():
        labels = [o[0] if isinstance(o, tuple) else str(o) for o in stops]
        assert max(map(len, labels)) <= 12, kind  # "no parameter" is the longest


def test_constructor_takes_each_variant_at_its_default_or_a_given_stop():
    cls = EXPLORERS["variant_gallery"]
    assert "soft_cap(2)" in cls(variant="soft-cap").summary.value
    assert "soft_cap(30) & causal" in cls(variant="soft-cap", param=30, second="causal").summary.value
    with pytest.raises(ValueError, match="param"):
        cls(variant="soft-cap", param=64)
    with pytest.raises(ValueError, match="variant"):
        cls(variant="flash")


@pytest.mark.parametrize(
    "variant, param, name",
    [("sliding window", 0, "w"), ("sink + window", 0, "w"), ("soft-cap", 0, "c"), ("RoPE", 0, "theta")],
)
def test_bad_parameters_are_refused_by_the_library_and_shown(variant, param, name):
    ex = EXPLORERS["variant_gallery"]()
    with pytest.raises(ValueError, match=rf"\b{name}=0"):
        ex.compute(variant=variant, param=param, second="none", N=64, tile=16)
    ex.set(variant=variant)
    w = ex.widgets["param"]
    w.options = [("0", 0), *zip(w._options_labels, options_of(w))]  # a stop the lecture's slider lacks
    ex.set(param=0)
    assert re.search(rf"\b{name}=0", ex.error) and ex._error_text.get_visible()
    ex.set(param=options_of(w)[1])
    assert ex.error is None and not ex._error_text.get_visible()


def test_summary_and_titles_show_the_numbers():
    ex = EXPLORERS["variant_gallery"]()  # sliding_window(64), N 256, 32 x 32 tiles
    want = classify(m_window(256, 64), 32)
    e, p, f = ((want == i).sum() for i in range(3))
    s = ex.summary.value
    assert f"{e} empty, {p} partial, {f} full" in s and f"{e / 64:.1%} of the tiles skipped" in s
    assert f"{e} empty," in ex.ax_t.get_title() and f"{p} partial, {f} full" in ex.ax_t.get_title()
    saved = re.search(r"([\d.]+)% saved", ex.ax_h.get_title()).group(1)
    r = ex.compute(**ex.values)
    assert float(saved) == pytest.approx(100 * r.saved, abs=0.05)
    assert [b.get_height() for b in ex.skip] == list(r.traffic)


def test_variant_table_matches_dense_masks():
    n, t = 4096, 128
    text = variant_tables.variant_table(n, t)
    rows = {
        m.group(1).strip(): tuple(map(int, m.groups()[1:4])) + (float(m.group(5)),)
        for m in re.finditer(r"^(\S.*?)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)%$", text, re.M)
    }
    masks = {
        "causal": m_causal(n),
        "sliding_window(512)": m_window(n, 512),
        "sink_window(4, 512)": m_sink(n, 4, 512),
        "soft_cap(30)": everything(n),
        "soft_cap(30) & sliding_window(512)": m_window(n, 512),
        "sigmoid(0)": everything(n),
        "alibi(0.0625)": everything(n),
    }
    assert set(rows) == set(masks)
    for name, mask in masks.items():
        blocks = mask.reshape(n // t, t, n // t, t)
        full, some = blocks.all(axis=(1, 3)), blocks.any(axis=(1, 3))
        empty = int((~some).sum())
        assert rows[name] == (
            empty,
            int((some & ~full).sum()),
            int(full.sum()),
            pytest.approx(round(100 * empty / (n // t) ** 2, 1)),
        )


def test_sizes_outside_the_picture_are_refused_by_name():
    with pytest.raises(ValueError, match="N=512"):
        vg.variant_gallery_numbers([causal()], 512, 32)
    with pytest.raises(ValueError, match="tile=0"):
        vg.variant_gallery_numbers([causal()], 64, 0)
    with pytest.raises(TypeError, match="variants"):
        vg.variant_gallery_numbers("causal", 64, 16)
