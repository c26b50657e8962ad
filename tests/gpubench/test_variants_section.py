"""gpubench.variants without a GPU: a dry run keeps its rows in the schema, and the Gluon kernel's
rows, refused off an sm_90 GPU, drop with the refusal printed as their reason."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
from attnlab.gpubench import variants  # noqa: E402
from attnlab.runfile import section_rows  # noqa: E402


def _sdpa_as(name):
    """A cheap stand-in for one of our kernels (the interpreter's are slow): SDPA under its name."""

    def peer(torch, c, add):
        kw = variants._kwargs(c.variant, c.window)
        add(
            name,
            lambda: torch.nn.functional.scaled_dot_product_attention(
                c.q, c.k, c.v, is_causal=kw.get("causal", False), enable_gqa=True
            ),
        )

    return peer


def test_dry_run_drops_the_gluon_rows_with_their_reason(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(variants, "_ours", _sdpa_as("ours"))
    monkeypatch.setattr(variants, "_ours_hopper", _sdpa_as("ours-hopper"))
    monkeypatch.setattr(variants, "_flex", lambda torch, c, add: None)
    res = variants.run(
        cases=[(1, 40)], variants=("causal", "soft_cap(30)"), dry=True, out=str(tmp_path / "v.json")
    )
    printed = capsys.readouterr().out
    assert "ours-gluon" in variants.OURS and printed.count("ours-gluon: failed") == 2
    assert "not supported by the Gluon kernel" in printed  # the dry shape's d = 32, refused by name
    assert {r["impl"] for r in res["rows"]} == {"ours", "ours-hopper", "sdpa"}
    assert all(
        ("speedup" in r) == (r["impl"] in variants.OURS) for r in res["rows"] if r["variant"] == "causal"
    )
    assert [r["ours"] for r in section_rows("variants", res["rows"])] == [
        r["impl"] != "sdpa" for r in res["rows"]
    ]


def test_the_gluon_rows_call_the_kernel_with_the_variant(monkeypatch):
    from attnlab.kernels import gluon_fa3

    seen = []
    monkeypatch.setattr(
        gluon_fa3, "flash_attention_gluon", lambda q, k, v, **kw: (seen.append(kw) or q, None)
    )
    c = type("Case", (), {"q": torch.zeros(1), "k": None, "v": None, "window": 7})()
    for c.variant in variants.VARIANTS:
        variants._ours_gluon(torch, c, lambda impl, fn: fn())
    assert seen == [{"causal": True}, {"soft_cap": 30.0}, {"causal": True, "soft_cap": 30.0}, {"window": 7}]
