"""What the Gluon sweep measures (`python -m attnlab.gpubench.sweeps.gluon`, declared in
`sweeps.gluon_steps`): the kernel's step sets, each (steps, num_stages, block_n, the head dims it
runs at), steps None being the kernel's default (`kernels.tuning.gluon_default_steps`), grouped in
the tables each mode runs; and the modes' cases."""

from __future__ import annotations

__all__ = [
    "STEP_SETS",
    "VARIANTS",
    "FINAL",
    "EARLY",
    "EARLY_SMOKE",
    "PERSISTENT",
    "LADDER",
    "LADDER_CASES",
    "LADDER_SEED",
    "REPEATS",
    "TABLES",
    "SMOKE_CASES",
    "FULL_CASES",
]

_SPLIT = ("warp_specialize", "split_warpgroups", "lpt_order", "tma_store")
STEP_SETS = {
    "split": _SPLIT,
    "split_pp": _SPLIT + ("pingpong",),
    "split_ov": _SPLIT + ("intra_overlap",),
    "split_pp_ov": _SPLIT + ("pingpong", "intra_overlap"),
    "ws": ("warp_specialize", "lpt_order", "tma_store"),
    "no_ws": ("lpt_order", "tma_store"),
}
#: every step set of STEP_SETS at both head dims, on the kernel's default ring
VARIANTS = {name: (st, None, None, (64, 128)) for name, st in STEP_SETS.items()}
#: the defaults (steps None) beside the stage counts and key tiles they were chosen over
FINAL = {
    "default": (None, None, None, (64, 128)),
    "split_s3": (_SPLIT, 3, None, (128,)),
    "split_pp_s3": (_SPLIT + ("pingpong",), 3, None, (128,)),
    "split_pp_s4": (_SPLIT + ("pingpong",), 4, None, (64,)),
    "no_ws_s4": (("lpt_order", "tma_store"), 4, None, (64,)),
    "split_pp_n256": (_SPLIT + ("pingpong",), None, 256, (64,)),
    "no_ws_n256": (("lpt_order", "tma_store"), None, 256, (64,)),
}
_EK = ("early_k_release",)
#: each consumer frees a K stage after its QK^T and a V stage after its PV, apart (FA3's two
#: pipelines), with and without ping-pong and the overlap; SMOKE checks the EARLY_SMOKE sets
EARLY = {
    "default": (None, None, None, (64, 128)),
    "split_pp_ov_s3": (_SPLIT + ("pingpong", "intra_overlap"), 3, None, (64, 128)),
    "split_ek": (_SPLIT + _EK, None, None, (64, 128)),
    "split_pp_ek": (_SPLIT + ("pingpong",) + _EK, None, None, (64, 128)),
    "split_pp_ov_ek": (_SPLIT + ("pingpong", "intra_overlap") + _EK, None, None, (64, 128)),
    "split_pp_ov_ek_s3": (_SPLIT + ("pingpong", "intra_overlap") + _EK, 3, None, (64, 128)),
}
EARLY_SMOKE = ("split_ek", "split_pp_ek", "split_pp_ov_ek")
#: one program per SM walking its list of tiles (`persistent`), beside the defaults, with O by a
#: TMA store from Q's buffer and from registers (Q's buffer freed after the last QK^T)
_REGS = ("warp_specialize", "split_warpgroups", "lpt_order")  # _SPLIT without tma_store
PERSISTENT = {
    "default": (None, None, None, (64, 128)),
    "split_pp_ov_p": (_SPLIT + ("pingpong", "intra_overlap", "persistent"), None, None, (128,)),
    "split_pp_ov_p_regs": (_REGS + ("pingpong", "intra_overlap", "persistent"), None, None, (128,)),
    "split_pp_p": (_SPLIT + ("pingpong", "persistent"), None, None, (64, 128)),
    "split_pp_p_regs": (_REGS + ("pingpong", "persistent"), None, None, (64, 128)),
    "split_ek_p": (_SPLIT + ("early_k_release", "persistent"), None, None, (64, 128)),
    "ws_p": (("warp_specialize", "lpt_order", "tma_store", "persistent"), None, None, (64, 128)),
}
#: the lesson's step table: name -> (label, steps, num_stages, base), each row one FA3 step added to
#: its base row: the cumulative steps, the third stage before the overlap, and the overlap on two
#: stages beside ping-pong on two
LADDER = {
    "no_ws": ("TMA + wgmma", ("lpt_order", "tma_store"), 2, None),
    "ws": ("+ producer warp", ("warp_specialize", "lpt_order", "tma_store"), 2, "no_ws"),
    "split": ("+ 2 consumers", _SPLIT, 2, "ws"),
    "split_pp": ("+ ping-pong", _SPLIT + ("pingpong",), 2, "split"),
    "split_pp_s3": ("+ 3rd stage", _SPLIT + ("pingpong",), 3, "split_pp"),
    "split_pp_ov_s3": ("+ overlap", _SPLIT + ("pingpong", "intra_overlap"), 3, "split_pp_s3"),
    "split_pp_ov": ("overlap on 2 stages", _SPLIT + ("pingpong", "intra_overlap"), 2, "split_pp"),
}
#: (B, H, N, d): shapes the defaults were not chosen on (those were 1-4 x 4K, 1 x 8K, 1 x 16K)
LADDER_CASES = ((2, 32, 8192, 128), (1, 32, 16384, 128), (4, 32, 8192, 64))
LADDER_SEED = 1  # the recorded ladder runs' inputs
REPEATS = 5
#: the tables of step sets a mode runs, by the name the command line gives (None: variants)
TABLES = {
    "smoke": {
        None: VARIANTS,
        "final": FINAL,
        "default": {"default": FINAL["default"]},
        "early_k": {k: EARLY[k] for k in EARLY_SMOKE},
        "persistent": PERSISTENT,
    },
    "full": {
        None: VARIANTS,
        "final": FINAL,
        "default": {"default": FINAL["default"]},
        "early_k": EARLY,
        "persistent": PERSISTENT,
    },
    "ladder": {None: {k: (st, ns, None, (64, 128)) for k, (_, st, ns, _) in LADDER.items()}},
}
#: (B, H, Hkv, N_q, N_k, d, causal, soft_cap, window): the plain cases, then the variants (odd
#: sizes, GQA, N_q != N_k, N_q > N_k so that rows see no key, window 1, a window wider than N_k)
SMOKE_CASES = (
    (1, 4, 4, 256, 256, 128, False, 0, 0),
    (1, 4, 4, 256, 256, 128, True, 0, 0),
    (2, 8, 2, 300, 500, 128, True, 0, 0),
    (1, 4, 2, 1000, 777, 64, False, 0, 0),
    (2, 4, 4, 300, 200, 64, True, 0, 0),
    (1, 2, 1, 1, 1, 128, True, 0, 0),
    (1, 4, 4, 384, 384, 64, True, 0, 0),
    (2, 8, 2, 300, 500, 128, False, 30.0, 0),
    (1, 4, 2, 1000, 777, 64, True, 30.0, 0),
    (2, 4, 4, 333, 517, 128, False, 0, 100),
    (1, 4, 2, 777, 1000, 64, False, 0, 1),
    (1, 2, 1, 300, 200, 128, False, 0, 5000),
    (2, 4, 2, 384, 384, 64, True, 30.0, 200),
    (1, 4, 4, 1000, 700, 128, False, 5.0, 129),
    (1, 2, 1, 1, 1, 64, False, 30.0, 1),
)
#: (B, H, N, d), each causal and not: the shapes the step table was measured on
FULL_CASES = (
    (1, 32, 4096, 128),
    (2, 32, 4096, 128),
    (4, 32, 4096, 128),
    (1, 32, 8192, 128),
    (1, 32, 16384, 128),
    (4, 32, 4096, 64),
)
