"""gpubench.core, what every section shares: the float32 reference against attention written out
in numpy, its refusals, the CPU path of the timers, and no section importing another's private
names."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import attnlab.gpubench as gb

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
from attnlab.gpubench.core import header, time_per_call  # noqa: E402
from attnlab.gpubench.reference import reference  # noqa: E402


def _attention(q, k, v, visible, soft_cap=None):
    """softmax(q k^T / sqrt(d)) v in float64 numpy for one head, over the visible (query, key) pairs."""
    s = q @ k.T / np.sqrt(q.shape[-1])
    if soft_cap:
        s = soft_cap * np.tanh(s / soft_cap)
    s = np.where(visible, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def _inputs(seed, q_shape, kv_shape):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g).to(torch.bfloat16) for s in (q_shape, kv_shape, kv_shape)]


def test_decode_reference_is_attention_over_every_key_with_gqa():
    q, k, v = _inputs(0, (3, 4, 8), (3, 2, 5, 8))  # 4 query heads share 2 KV heads
    ref = reference(torch, q, k, v).numpy()
    qn, kn, vn = (t.float().double().numpy() for t in (q, k, v))
    for b in range(3):
        for h in range(4):
            want = _attention(qn[b, h][None], kn[b, h // 2], vn[b, h // 2], np.ones((1, 5), bool))[0]
            np.testing.assert_allclose(ref[b, h], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "causal, soft_cap, window", [(False, None, 0), (True, None, 0), (True, 5.0, 0), (False, None, 2)]
)
def test_prefill_reference_masks_the_last_queries_as_the_variants_do(causal, soft_cap, window):
    q, k, v = _inputs(1, (1, 2, 3, 8), (1, 1, 6, 8))  # 3 queries: positions 3, 4, 5 of 6
    ref = reference(torch, q, k, v, causal=causal, soft_cap=soft_cap, window=window).numpy()
    qn, kn, vn = (t.float().double().numpy() for t in (q, k, v))
    qi, ki = np.arange(3)[:, None] + 3, np.arange(6)[None, :]
    vis = np.ones((3, 6), bool)
    if causal or window:
        vis &= ki <= qi
    if window:
        vis &= ki > qi - window
    for h in range(2):
        np.testing.assert_allclose(
            ref[0, h], _attention(qn[0, h], kn[0, 0], vn[0, 0], vis, soft_cap), rtol=1e-5, atol=1e-6
        )


def test_bad_input_names_the_parameter():
    q, k, v = _inputs(2, (1, 2, 8), (1, 1, 4, 8))
    with pytest.raises(ValueError, match="apply to a prefill q"):
        reference(torch, q, k, v, causal=True)
    with pytest.raises(ValueError, match="q must be"):
        reference(torch, q[0], k, v)
    with pytest.raises(TypeError, match="shape must be a dict"):
        header(torch, [1, 2])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path")
def test_the_timers_on_a_cpu_call_twice_and_say_so():
    calls = []
    us, how = time_per_call(lambda: calls.append(1) or torch.zeros(1), torch.zeros(1))
    assert how == "wall" and len(calls) == 2 and us >= 0
    res = header(torch, {"heads": 2})
    assert (
        res["shape"] == {"heads": 2, "dtype": "bf16"} and res["rows"] == [] and "copy_bytes_per_s" not in res
    )


def test_no_gpubench_module_imports_a_private_name():
    for path in Path(gb.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnlab"):
                private = [a.name for a in node.names if a.name.startswith("_") and a.name != "__all__"]
                assert not private, f"{path.name}:{node.lineno} imports {private} from {node.module}"


def test_a_section_prints_its_rows_in_the_schema_columns():
    from attnlab.gpubench.core import table
    from attnlab.runfile import rank, row

    rows = rank(
        [
            row(
                "paged",
                {"batch": 1, "context": 8},
                "paged",
                {"page_size": 16, "splits": 2},
                ours=True,
                time_us=2.0,
                nbytes=4e6,
                error=1e-3,
            ),
            row(
                "paged",
                {"batch": 1, "context": 8},
                "flashinfer-tc",
                {"page_size": 16},
                ours=False,
                time_us=4.0,
                nbytes=4e6,
                error=0.0,
            ),
        ]
    )
    res = {"device": "cpu", "sms": None, "torch": "t", "triton": "tr", "commit": "c", "rows": rows}
    lines = table(res).splitlines()
    assert lines[1].split() == ["section", "case", "impl", "us", "TFLOP/s", "TB/s", "best/us", "err"]
    assert lines[3].split()[-4:] == ["2.0", "2.00", "1.00", "1.0e-03"]  # 4e6 B in 2 us: 2 TB/s
    assert lines[4].split()[-4:] == ["4.0", "1.00", "0.50", "0.0e+00"]  # twice the fastest's time


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path")
def test_eager_time_on_a_cpu_is_one_call_of_wall_clock():
    from attnlab.gpubench.core import eager_time

    calls = []
    us, how = eager_time(lambda: calls.append(1))
    assert how == "wall" and calls == [1] and us >= 0


def test_the_timers_and_the_library_probe_refuse_bad_arguments(monkeypatch):
    import sys
    import types

    from attnlab.gpubench.core import eager_time, library_version

    for bad, exc in (({"calls": 0}, ValueError), ({"reps": True}, TypeError), ({"calls": 2.5}, TypeError)):
        with pytest.raises(exc, match=f"{next(iter(bad))}"):
            time_per_call(lambda: torch.zeros(1), torch.zeros(1), **bad)
    with pytest.raises(TypeError, match="fn must be callable"):
        time_per_call(torch.zeros(1), torch.zeros(1))
    with pytest.raises(ValueError, match="rep=0 is out of range"):
        eager_time(lambda: None, rep=0)
    with pytest.raises(TypeError, match="name must be a non-empty str"):
        library_version(None)
    # a library that imports but has no __version__ is present, not "absent"
    monkeypatch.setitem(sys.modules, "versionless_library", types.ModuleType("versionless_library"))
    assert library_version("versionless_library") == (True, "unknown version")
    assert library_version("no_such_library_here")[0] is False
