"""Notebook 05's chunked-prefill batch, speculative-decoding tree mask and the sentences read from
the recorded run: each checked against an independent route (brute-force masks, the run's rows
re-read here, FlashInfer's length formula)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from attnlab.explore import measured
from attnlab.explore.flashinfer.snippets import (
    host_costs,
    mixed_batch_check,
    paged_lesson,
    tree_check,
    tree_mask,
)
from attnlab.machine.schedule import query_tile
from attnlab.core.variants import variant_attention, variant_mask


def test_mixed_batch_arrays_tile_and_verdict():
    r = mixed_batch_check(chunk=48, cached=20, decode_lens=(33, 7, 16), page_size=8, d=16, group=2)
    assert r.ok and "each request within its rounding bound: yes" in r
    assert "qo_indptr = [0, 48, 49, 50, 51]" in r
    pages = [-(-n // 8) for n in (68, 33, 7, 16)]
    assert f"kv_indptr = {np.concatenate([[0], np.cumsum(pages)]).tolist()}" in r
    tile = query_tile((48 * 2 + 3 * 2) / 4)
    assert f"query tile {tile} rows" in r and f"fills 2 of its tile's {tile} rows" in r
    assert all(0 <= e < 1e-12 for e in r.measured.values()) and len(r.measured) == 4


def test_mixed_batch_refuses_bad_input():
    with pytest.raises(ValueError, match="chunk"):
        mixed_batch_check(chunk=0)
    with pytest.raises(TypeError, match="decode_lens"):
        mixed_batch_check(decode_lens="300")
    with pytest.raises(ValueError, match=r"decode_lens\[1\]"):
        mixed_batch_check(decode_lens=(3, -1))


def _brute(parents, prefix):
    t = len(parents)
    m = np.zeros((t, prefix + t), bool)
    for i in range(t):
        m[i, :prefix] = True
        for j in range(t):  # j is visible iff it lies on i's chain to the root
            x = i
            while x != -1 and x != j:
                x = parents[x]
            m[i, prefix + j] = x == j
    return m


@pytest.mark.parametrize("seed", range(4))
def test_tree_mask_equals_brute_force_on_random_trees(seed):
    rng = np.random.default_rng(seed)
    t = int(rng.integers(1, 12))
    parents = [-1] + [int(rng.integers(-1, i)) for i in range(1, t)]
    prefix = int(rng.integers(0, 6))
    got = variant_mask(tree_mask(parents, prefix), t, prefix + t)
    assert np.array_equal(got, _brute(parents, prefix))


def test_tree_mask_hides_siblings_and_changes_the_output():
    parents = [-1, 0, 0]
    m = variant_mask(tree_mask(parents, 3), 3, 6)
    assert not m[1, 5] and not m[2, 4] and m[1, 4] and m[2, 5]
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((3, 8)), rng.standard_normal((6, 8)), rng.standard_normal((6, 8))
    from attnlab.core.variants import causal

    assert (
        np.abs(variant_attention(q, k, v, tree_mask(parents, 3)) - variant_attention(q, k, v, causal())).max()
        > 1e-3
    )
    r = tree_check(parents, prefix=3, d=8)
    assert r.ok and "draft 2 sees the 3 cached tokens and drafts [0, 2]" in r


def test_tree_mask_refuses_bad_parents():
    with pytest.raises(ValueError, match=r"parents\[1\]"):
        tree_mask([-1, 1], 2)  # a token cannot be its own parent
    with pytest.raises(ValueError, match=r"parents\[0\]"):
        tree_mask([0], 2)
    with pytest.raises(ValueError, match="empty"):
        tree_mask([], 2)
    with pytest.raises(TypeError, match="parents"):
        tree_mask(None, 2)


def _spans(text):
    return [tuple(float(x) for x in m.split("–")) for m in re.findall(r"(\d+\.\d+(?:–\d+\.\d+)?)", text)]


def test_paged_lesson_ratios_come_from_the_rows():
    sec = measured.section(measured.newest_run(), "paged")
    rows = [r for r in sec["rows"] if r["shape"].get("page_size")]
    cases = {(r["shape"]["batch"], r["shape"]["page_size"]) for r in rows}

    def best(impl, b, ps):
        return min(
            r["time_us"]
            for r in rows
            if (r["impl"].split()[0], r["shape"]["batch"], r["shape"]["page_size"]) == (impl, b, ps)
            and not (impl == "paged" and r["shape"].get("auto"))
        )

    cc = [best("flashinfer", *c) / best("flashinfer-tc", *c) for c in cases]
    ours = [best("flashinfer-tc", *c) / best("paged", *c) for c in cases]
    lines = paged_lesson(sec).splitlines()
    assert _spans(lines[0])[0] == (round(min(cc), 2), round(max(cc), 2))
    assert _spans(lines[3])[0] == (round(min(ours), 2), round(max(ours), 2))
    assert f"all {len(cases)} cases" in lines[1]


def test_host_costs_read_the_plan_times():
    run = measured.newest_run()
    text = host_costs(run)
    fi = [r["extra"]["plan_us"] / 1e3 for r in run["sections"]["paged"]["rows"] if "plan_us" in r["extra"]]
    assert _spans(text.splitlines()[0])[0] == (round(min(fi), 2), round(max(fi), 2))
    assert f"({len(fi)} batches)" in text


# --- the CUDA-graph snippet and its buffers --------------------------------------------------


def test_cuda_graph_snippet_is_python_with_fixed_buffers_and_a_plan_before_each_replay():
    import ast
    from attnlab.explore.flashinfer.snippets import CUDA_GRAPH_SNIPPET

    tree = ast.parse(CUDA_GRAPH_SNIPPET)
    calls = {
        kw.arg: kw.value for node in ast.walk(tree) if isinstance(node, ast.Call) for kw in node.keywords
    }
    assert isinstance(calls["use_cuda_graph"], ast.Constant) and calls["use_cuda_graph"].value is True
    for name in ("paged_kv_indptr_buffer", "paged_kv_indices_buffer", "paged_kv_last_page_len_buffer"):
        assert name in calls  # FlashInfer's decode wrapper's keyword names
    loop = next(n for n in ast.walk(tree) if isinstance(n, ast.For))
    body = [ast.unparse(n) for n in loop.body]
    assert body[0].startswith("w.plan(") and body[-1] == "graph.replay()"
    assert max(map(len, CUDA_GRAPH_SNIPPET.splitlines())) <= 100


def test_cuda_graph_buffers_name_the_workspace_shapes():
    from attnlab.explore.flashinfer.snippets import cuda_graph_buffers
    from attnlab.machine.schedule import fixed_size_workspace, plan_balanced

    text = cuda_graph_buffers(max_batch=16, max_pages=4096, max_ctas=20, max_items=8, kv_heads=2, group=4)
    ws = fixed_size_workspace(plan_balanced([(1, 1024)] * 16, kv_heads=2, num_ctas=20, group=4), 20, 8, 32)
    assert "(17,)" in text and "(4,096,)" in text and "(16,)" in text
    for name in ("items", "valid", "count", "merge_indptr", "merge_slots", "merge_out"):
        assert f"{name} {tuple(getattr(ws, name).shape)}" in text
    assert f"{20 * 8:,} slots" in text and max(map(len, text.splitlines())) <= 100
    with pytest.raises(ValueError, match="max_pages"):
        cuda_graph_buffers(max_batch=16, max_pages=8)


def test_notebook_05_shows_the_cuda_graph_snippet_as_the_library_holds_it():
    import json
    from pathlib import Path
    from attnlab.explore.flashinfer.snippets import CUDA_GRAPH_SNIPPET

    path = Path(__file__).resolve().parents[2] / "notebooks" / "05_flashinfer.ipynb"
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert "```python\n" + CUDA_GRAPH_SNIPPET + "```" in text
