"""The checks notebook 05 prints reproduce the lecture's numbers (block tables as BSR, 76 vs 31
blocks, variants equal to their definitions, bitwise-reproducible merges) and can fail: each
number is parsed back out of the text and compared with what the lecture states."""

from __future__ import annotations

import re

import numpy as np
import pytest

from attnlab.explore.flashinfer import (
    bsr_check,
    composable_check,
    determinism_check,
    paper_table,
    variants_check,
)


def _floats(text, label):
    m = re.search(re.escape(label) + r"\s*=?\s*([0-9.e+-]+)", text)
    assert m, f"{label!r} not in {text!r}"
    return float(m.group(1))


def test_bsr_check_is_the_lecture_example():
    text = bsr_check()
    assert "kv_indptr        = [0, 5, 8, 16]" in text
    assert "kv_last_page_len = [3, 2, 1]" in text
    assert "indptr and indices equal" in text
    tables = [eval(t) for t in re.findall(r"block table (\[[^\]]*\])", text)]
    assert [len(t) for t in tables] == [5, 3, 8]
    indices = eval(re.search(r"kv_indices\s*= (\[[^\]]*\])", text).group(1))
    assert indices == tables[0] + tables[1] + tables[2]
    assert sorted(indices) != indices  # a shuffled pool, not 0, 1, 2, ...
    assert "contiguous attention (float64, decode): bitwise identical" in text
    assert text.ok and text.measured == {"bsr": 0.0}


@pytest.mark.parametrize("n, prefix, own", [(4, 15, 4), (3, 2, 0), (5, 1, 7)])
def test_composable_check_counts_blocks(n, prefix, own):
    text = composable_check(n, prefix, own)
    single, comp = map(int, re.search(r"single format (\d+), composable (\d+)", text).groups())
    assert (single, comp) == (n * (prefix + own), prefix + n * own)
    bound = _floats(text, "rounding bound")
    assert text.ok and text.endswith(": yes")
    assert 0 <= text.measured["composable"] <= bound < 1e-2  # the bound is worst case, not loose


def test_composable_check_lecture_numbers():
    assert "single format 76, composable 31" in composable_check()


def test_variants_check_agrees_with_definitions_and_differs_from_plain():
    text = variants_check(n=97, d=16)
    rows = re.findall(r"^([a-z]\S+)\s+([0-9.e+-]+)\s+(yes|NO)\s+([0-9.e+-]+)$", text, re.M)
    assert [r[0] for r in rows] == ["soft_cap(5)", "sliding_window(64)", "sigmoid(-2)"]
    assert text.ok
    for name, bound, verdict, plain in rows:
        assert verdict == "yes" and text.measured[name] <= float(bound) < 1e-6 and float(plain) > 0.1


def test_attention_bound_holds_and_a_wrong_kernel_breaks_it():
    """The bound covers two float32 computations of one attention, and not a kernel that drops
    one key (an error of a different kind than rounding)."""
    from attnlab.explore.flashinfer.checks import attention_bound
    from attnlab.core.softmax import attention_state

    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((40, 32)).astype(np.float32) for _ in range(3))
    exact = attention_state(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))[0]
    b32 = attention_bound(q, k, v, u=2.0**-24)
    assert np.abs(attention_state(q, k, v)[0] - exact).max() <= b32
    dropped = attention_state(q, k[1:], v[1:])[0]
    assert np.abs(dropped - exact).max() > 2 * b32
    assert attention_bound(q, k, v) < b32 * 1e-8  # float64's u is 2^29 smaller


def test_determinism_check_fixed_order_is_bitwise_and_random_is_not():
    text = determinism_check(batch=3, d=64)
    assert "3 runs: bitwise identical" in text and "3 of 3 differ from the fixed order" in text
    bound = _floats(text, "rounding bound")
    assert text.ok and len(text.measured) == 3
    assert all(0 < x <= bound < 1e-3 for x in text.measured.values())


def test_paper_table_names_its_figures():
    text = paper_table()
    for figure in ("29-69 %", "28-30 %", "13-17 %"):
        assert figure in text


def test_paged_summary_reads_the_recorded_run_and_its_ratios():
    from attnlab.explore import measured

    res = measured.section(measured.newest_run(), "paged")
    text = measured.paged_summary(res)
    assert res["device"] in text and res["flashinfer"] in text
    assert max(len(line) for line in text.splitlines()) <= 100
    first = text.split("the others")[0]  # ours beside FlashInfer TC, the ratio last
    rows = [line.split() for line in first.splitlines() if re.match(r"\s*\d+ x \d+K", line)]
    shapes = [r["shape"] for r in res["rows"]]
    assert len(rows) == len({(s["batch"], s["context"], s["page_size"]) for s in shapes if s["page_size"]})
    for cells in rows:
        b, ps = int(cells[0]), int(cells[3])
        at = [r for r in res["rows"] if r["shape"]["batch"] == b and r["shape"]["page_size"] == ps]
        ours = min(r["time_us"] for r in at if r["impl"].startswith("paged ") and not r["shape"].get("auto"))
        fi = next(r["time_us"] for r in at if r["impl"].startswith("flashinfer-tc "))
        assert float(cells[4]) == round(ours, 1) and float(cells[-1]) == round(fi / ours, 2)


def test_variants_summary_ratios_come_from_the_recorded_rows():
    from attnlab.explore import measured

    sec = measured.section(measured.newest_run(), "variants")
    text = measured.variants_summary(sec)
    rows = sec["rows"]
    cases = {(r["shape"]["batch"], r["shape"]["N"], r["shape"]["variant"]) for r in rows}
    ours = ("ours", "ours-hopper", "ours-gluon")
    assert {r["impl"] for r in rows} >= {*ours, "flex"} and len(cases) == 8
    assert max(len(line) for line in text.splitlines()) <= 100
    ratios = text.split("the best peer's time over ours")[-1]
    lines = [line for line in ratios.splitlines() if re.match(r"\d+ x [\d,]+\s", line)]
    assert len(lines) == len(cases)
    for b, n, var in cases:
        at = {
            r["impl"]: r["time_us"]
            for r in rows
            if (r["shape"]["batch"], r["shape"]["N"], r["shape"]["variant"]) == (b, n, var)
        }
        best = min(v for k, v in at.items() if k not in ours)  # a library's, never one of ours
        line = next(s for s in lines if s.startswith(f"{b} x {n:,} ") and f" {var} " in f" {s} ")
        assert line.split()[-3:] == [f"{best / at[k]:.2f}" for k in ours]


# --- the checks' own arguments, refused by name ----------------------------------------------


def _named(exc, word, fn, /, *args, **kwargs):
    with pytest.raises(Exception) as info:
        fn(*args, **kwargs)
    assert isinstance(info.value, exc), f"{type(info.value).__name__}: {info.value}"
    assert re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", str(info.value)), str(info.value)


def _all_checks():
    from attnlab.explore.flashinfer.snippets import mixed_batch_check, tree_check

    return [bsr_check, composable_check, variants_check, determinism_check, mixed_batch_check, tree_check]


@pytest.mark.parametrize("i", range(6))
@pytest.mark.parametrize(
    "seed, exc", [(None, TypeError), (-1, ValueError), (1.5, TypeError), (True, TypeError), ("0", TypeError)]
)
def test_checks_take_a_seed_that_is_an_integer_from_zero(i, seed, exc):
    _named(exc, "seed", _all_checks()[i], seed=seed)


@pytest.mark.parametrize(
    "call, exc, word",
    [
        (lambda: determinism_check(trials=0), ValueError, "trials"),
        (lambda: determinism_check(batch=0), ValueError, "batch"),
        (lambda: determinism_check(group=2.5), TypeError, "group"),
        (lambda: variants_check(n=0), ValueError, "n"),
        (lambda: variants_check(d="64"), TypeError, "d"),
        (lambda: composable_check(n=0), ValueError, "n"),
        (lambda: composable_check(block_size=0), ValueError, "block_size"),
        (lambda: bsr_check(lens={19, 10}), TypeError, "lens"),
        (lambda: bsr_check(block_size=0), ValueError, "block_size"),
    ],
)
def test_check_parameters_are_named(call, exc, word):
    _named(exc, word, call)


@pytest.mark.parametrize(
    "kw, exc, word",
    [
        ({"u": 20.0}, ValueError, "u"),
        ({"u": 0.0}, ValueError, "u"),
        ({"u": True}, TypeError, "u"),
        ({"u": 2.0**-6}, ValueError, "u"),
        ({"scale": -1.0}, ValueError, "scale"),
        ({"terms": 0}, ValueError, "terms"),
    ],
)
def test_attention_bound_refuses_a_roundoff_it_cannot_bound(kw, exc, word):
    from attnlab.explore.flashinfer.checks import attention_bound

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((20, 64)) for _ in range(3))
    _named(exc, word, attention_bound, q, k, v, **kw)  # 2^-6: (2 N_k + d + 8) u >= 1
    assert attention_bound(q, k, v, u=2.0**-8) > attention_bound(q, k, v, u=2.0**-24) > 0


@pytest.mark.parametrize(
    "call, exc, word",
    [
        ("composable_numbers", dict(seed=-1), "seed"),
        ("composable_numbers", dict(seed=None), "seed"),
        ("scheduler_table", dict(batches=8), "batches"),
        ("scheduler_table", dict(batches={8, 64}), "batches"),
        ("variant_table", dict(variants=3), "variants"),
        ("variant_table", dict(n=10**5000), "n"),
        ("variant_table", dict(tile=2**40), "tile"),
        ("variant_gallery_numbers", dict(tile=10**5000), "tile"),
        ("tile_size_numbers", dict(g=2**40), "g"),
        ("tile_size_numbers", dict(tile=2**40), "tile"),
        ("workspace_numbers", dict(max_items=10**5000), "max_items"),
        ("recorded_lengths", dict(dist="zipf", batch=10**5000), "batch"),
        ("page_table_numbers", dict(lengths=10**5000), "lengths"),
        ("tree_check", dict(prefix=2**40), "prefix"),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_the_explorers_numbers_name_their_parameters(call, exc, word):
    from attnlab.explore import flashinfer
    from attnlab.explore.flashinfer import snippets
    from attnlab.machine import workload

    fn = getattr(workload, call, None) or getattr(flashinfer, call, None) or getattr(snippets, call)
    with pytest.raises((TypeError, ValueError)) as info:
        fn(**exc)
    assert re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", str(info.value)), str(info.value)


def test_the_printed_checks_fit_100_characters():
    """Notebook 05 prints these; JupyterLab wraps a wider line and a table's columns stop lining up."""
    from attnlab.explore import measured
    from attnlab.explore.flashinfer.snippets import host_costs, mixed_batch_check, paged_lesson

    run = measured.newest_run()
    texts = [
        paper_table(),
        host_costs(run),
        paged_lesson(measured.section(run, "paged")),
        mixed_batch_check(chunk=40, cached=24, decode_lens=(30, 9), page_size=8, d=16),
    ]
    wide = [line for text in texts for line in text.splitlines() if len(line) > 100]
    assert not wide, wide
