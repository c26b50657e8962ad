"""`flash_attention_gluon` without a GPU: what it refuses, and that it imports.

Gluon kernels do not run under Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1
when no GPU is present), so the numbers are checked on an H200 by `python -m
attnlab.gpubench.sweeps.gluon` and the harness's prefill section; here only the argument checks,
which run before any launch, the import, and what the launcher hands the kernel for soft_cap and
window (a recorder in the kernel's place, the device check skipped).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.kernels import gluon_fa3
from attnlab.kernels.gluon_fa3 import GLUON_STEPS, config_for, flash_attention_gluon
from attnlab.kernels.tuning import GLUON_DEFAULT_STEPS, gluon_default_steps


def _qkv(b=1, hq=4, hk=2, nq=64, nk=64, d=64, dtype=torch.bfloat16):
    return (
        torch.zeros(b, hq, nq, d, dtype=dtype),
        torch.zeros(b, hk, nk, d, dtype=dtype),
        torch.zeros(b, hk, nk, d, dtype=dtype),
    )


def test_module_imports_and_names_its_steps():
    for d in (64, 128):
        for causal in (False, True):
            assert set(gluon_default_steps(d, causal)) <= set(GLUON_STEPS)
    assert set(GLUON_DEFAULT_STEPS) == {(d, c) for d in (64, 128) for c in (False, True)}
    assert "interpreter" in gluon_fa3.__doc__ and "gpubench.sweeps.gluon" in gluon_fa3.__doc__
    from attnlab.kernels.gluon_fa3_kernel import fa3_fwd_kernel  # defining the kernel does not break here

    assert callable(getattr(fa3_fwd_kernel, "__getitem__", None))


@pytest.mark.parametrize("d", [64, 128])
def test_config_fits_shared_memory(d):
    for steps in (
        GLUON_STEPS,
        gluon_default_steps(d, False),
        gluon_default_steps(d, True),
        ("intra_overlap",),
        (),
    ):
        for stages in (None, 2, 3):
            cfg = config_for(d, frozenset(steps), stages)
            smem = cfg["block_m"] * d * 2 + cfg["stages"] * 2 * cfg["block_n"] * d * 2
            assert smem <= 232448 and cfg["num_warps"] == (4 if cfg["split"] else 8)
    with pytest.raises(ValueError, match="num_stages"):
        config_for(d, frozenset(), 1)
    with pytest.raises(ValueError, match="num_stages"):
        config_for(d, frozenset(), 4 if d == 128 else 7)


def test_wrong_dtype_is_refused():
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        flash_attention_gluon(*_qkv(dtype=torch.float32))
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="share one dtype"):
        flash_attention_gluon(q, k.half(), v)


def test_shape_mismatch_is_refused():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="same shape"):
        flash_attention_gluon(q, k, v[:, :, :32])
    with pytest.raises(ValueError, match="multiple of KV heads"):
        flash_attention_gluon(*_qkv(hq=3, hk=2))
    with pytest.raises(ValueError, match=r"\(batch, heads, N, d\)"):
        flash_attention_gluon(q[0], k, v)


@pytest.mark.parametrize("d", [32, 96, 256])
def test_unsupported_head_dim_is_refused(d):
    with pytest.raises(ValueError, match=rf"d={d}.*valid: 64, 128"):
        flash_attention_gluon(*_qkv(d=d))


def test_other_arguments_are_refused_by_name():
    with pytest.raises(TypeError, match="causal"):
        flash_attention_gluon(*_qkv(), causal=1)
    with pytest.raises(ValueError, match="scale"):
        flash_attention_gluon(*_qkv(), scale=-1.0)
    with pytest.raises(TypeError, match="report"):
        flash_attention_gluon(*_qkv(), report=[])
    with pytest.raises(ValueError, match="unknown steps"):
        flash_attention_gluon(*_qkv(), steps=("warp_specialise",))


def test_cpu_tensors_are_refused_naming_the_parameter():
    with pytest.raises((ValueError, RuntimeError), match=r"q is on cpu|sm_90"):
        flash_attention_gluon(*_qkv())


def test_non_contiguous_is_refused_before_the_device_is_looked_at():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="k must be contiguous"):
        flash_attention_gluon(q, k.transpose(1, 2).contiguous().transpose(1, 2), v)


def test_block_n_is_checked():
    assert config_for(64, frozenset(), None, 256)["block_n"] == 256
    with pytest.raises(ValueError, match="block_n"):
        config_for(128, frozenset(), None, 96)


@pytest.mark.parametrize(
    "kw, err, match",
    [
        ({"soft_cap": "30"}, TypeError, "soft_cap must be a real number"),
        ({"soft_cap": True}, TypeError, "soft_cap must be a real number, got True"),
        ({"soft_cap": -1.0}, ValueError, r"soft_cap=-1.0 is out of range"),
        ({"soft_cap": float("inf")}, ValueError, "soft_cap=inf is out of range"),
        ({"soft_cap": 2.0**70}, ValueError, r"soft_cap=.* is out of range; valid: .*10000"),
        ({"window": 2.5}, TypeError, "window must be an integer, got 2.5"),
        ({"window": True}, TypeError, "window must be an integer, got True"),
        ({"window": -3}, ValueError, "window=-3 is out of range; valid: >= 0"),
    ],
)
def test_bad_variants_are_refused_by_name_before_the_device(kw, err, match):
    with pytest.raises(err, match=match):  # not "q is on cpu": the arguments come first
        flash_attention_gluon(*_qkv(), **kw)


@pytest.fixture
def launches(monkeypatch):
    """flash_attention_gluon on a CPU up to its launch: the device check skipped, the kernel replaced
    by a recorder of its grid, arguments and compile-time switches."""
    from attnlab.kernels import gluon_fa3_kernel

    got = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **consts: got.append({"grid": grid, "args": args, "consts": consts})

    monkeypatch.setattr(gluon_fa3, "_check_device", lambda q, k, v: None)
    monkeypatch.setattr(gluon_fa3_kernel, "fa3_fwd_kernel", Recorder())
    return got


_ARGS = ("qk_scale", "cap_in", "cap_out", "n_q", "n_k", "H", "GROUP", "num_m", "window")


def _launch(launches, **kw):
    report = {}
    flash_attention_gluon(*_qkv(nq=48, nk=64), report=report, **kw)
    got = launches.pop()
    return dict(zip(_ARGS, got["args"][8:])), got["consts"], report


def test_bad_variants_never_reach_the_launch(launches):
    for kw in ({"soft_cap": "30"}, {"soft_cap": -1.0}, {"window": True}, {"window": -3}):
        with pytest.raises((TypeError, ValueError), match=next(iter(kw))):
            flash_attention_gluon(*_qkv(), **kw)
    assert launches == []


def test_soft_cap_is_compiled_in_and_capped_in_base_2(launches):
    from attnlab.kernels.common import LOG2E

    args, consts, report = _launch(launches, soft_cap=30.0, scale=0.125)
    assert consts["SOFT_CAP"] and not consts["WINDOW"] and not consts["CAUSAL"]
    assert args["qk_scale"] == 1.0  # the cap's formula is in base 2 already
    assert args["cap_in"] == pytest.approx(2 * 0.125 / 30 * LOG2E) and args["cap_out"] == pytest.approx(
        30 * LOG2E
    )
    assert report["soft_cap"] == 30.0 and report["window"] == 0
    plain, consts, report = _launch(launches, scale=0.125, soft_cap=0)  # 0 (or None) is off
    assert (
        not consts["SOFT_CAP"]
        and plain["qk_scale"] == pytest.approx(0.125 * LOG2E)
        and report["soft_cap"] == 0.0
    )


def test_window_implies_causal_and_reaches_every_key_as_causal(launches):
    args, consts, report = _launch(launches, window=np.int64(16))
    assert consts["CAUSAL"] and consts["WINDOW"] and args["window"] == 16 and report["causal"]
    assert report["steps"] == tuple(s for s in GLUON_STEPS if s in gluon_default_steps(64, True))
    for wide in (64, 10**6):  # N_k = 64 keys: the window cuts nothing
        args, consts, report = _launch(launches, window=wide)
        assert consts["CAUSAL"] and not consts["WINDOW"] and args["window"] == 0 and report["window"] == 0
    args, consts, report = _launch(launches, window=None, causal=False)
    assert not consts["CAUSAL"] and not consts["WINDOW"] and report["causal"] is False


def test_early_k_release_needs_the_producer_and_says_so(launches):
    _, consts, report = _launch(launches, steps=("warp_specialize", "split_warpgroups", "early_k_release"))
    assert consts["EARLY_K"] and consts["WS"] and "early_k_release" not in report["inactive"]
    _, consts, report = _launch(
        launches, steps=("early_k_release", "lpt_order")
    )  # no producer: nothing to free
    assert not consts["EARLY_K"] and not consts["WS"] and "early_k_release" in report["inactive"]
    _, consts, report = _launch(launches)  # the defaults leave it off
    assert not consts["EARLY_K"]


def _tiles_of(got):
    """The (bh, m) pairs each program of a recorded persistent launch runs, from its tile list."""
    tiles, indptr = got["args"][6].tolist(), got["args"][7].tolist()
    num_m = got["args"][8 + _ARGS.index("num_m")]
    return [[divmod(t, num_m) for t in tiles[a:b]] for a, b in zip(indptr, indptr[1:])]


def test_persistent_launch_runs_every_tile_once_on_one_program_per_sm(launches):
    from attnlab.kernels.tuning import INTERPRETER_SMS

    steps = ("warp_specialize", "split_warpgroups", "lpt_order", "pingpong", "persistent")
    report = {}
    q, k, v = _qkv(b=2, hq=4, hk=2, nq=300, nk=300)  # 3 query blocks of 128, the last partial
    flash_attention_gluon(q, k, v, causal=True, steps=steps, report=report)
    got = launches.pop()
    assert got["consts"]["PERSIST"] and got["grid"] == (INTERPRETER_SMS,)
    lists = _tiles_of(got)
    assert sorted(t for p in lists for t in p) == [(bh, m) for bh in range(8) for m in range(3)]
    firsts = [p[0][1] for p in lists]
    assert firsts == [2] * INTERPRETER_SMS  # longest first: every program starts on a last block
    assert "persistent" in report["steps"] and "persistent" not in report["inactive"]


def test_persistent_needs_the_producer_and_says_so(launches):
    report = {}
    flash_attention_gluon(*_qkv(), causal=True, steps=("lpt_order", "persistent"), report=report)
    got = launches.pop()
    assert not got["consts"]["PERSIST"] and len(got["grid"]) == 2 and "persistent" in report["inactive"]


def test_the_tile_lists_are_made_once_per_shape_and_the_oldest_dropped(monkeypatch):
    from attnlab.kernels import gluon_fa3_tiles as tiles

    monkeypatch.setattr(tiles, "_SCHEDULES", {})
    monkeypatch.setattr(tiles, "_KEEP", 3)
    args = dict(
        device="cpu",
        batch=1,
        heads=2,
        n_k=300,
        causal=True,
        lpt=True,
        group=1,
        d=64,
        block_m=128,
        block_n=128,
    )
    first = tiles.persistent_schedule(num_m=3, n_q=300, **args)
    assert tiles.persistent_schedule(num_m=3, n_q=300, **args)[1] is first[1]  # the same device copy
    for n_q in (10, 200, 260):
        tiles.persistent_schedule(num_m=-(-n_q // 128), n_q=n_q, **args)
    assert len(tiles._SCHEDULES) == 3 and all(k[4] != 300 for k in tiles._SCHEDULES)  # n_q 300 dropped
