"""FlashInfer's query tile rule, in its two modes (lecture §5.5): per batch, from the batch's
integer average packed length, and under a CUDA graph, from the worst case the captured batch
allows. `pieces.split` cuts a batch with it."""

from __future__ import annotations

import numpy as np

from attnlab.validate import as_float, as_int, as_sequence, choice, short
from attnlab.machine.schedule.batch import INT32_MAX

__all__ = ["TILE_MODES", "query_tile"]

TILE_MODES = ("batch", "cuda_graph")


def query_tile(
    l_qo, head_dim: int = 128, *, group: int = 1, mode: str = "batch", captured_rows=None, uniform_q_len=None
) -> int:
    """FlashInfer's query tile T_q (`PrefillSplitQOKVIndptr` in scheduler.cuh, its step 2, and
    `FA2DetermineCtaTileQ` in utils.cuh): a packed length p above 64 with head dim below 256 gets
    128 rows, above 16 gets 64, else 16. Which p the rule reads depends on the mode:

    mode="batch"       the batch's average packed length in integer arithmetic,
                       p = sum_i l_qo(i) x group // n (an average of 16.5 reads as 16: 16 rows)
    mode="cuda_graph"  the worst case a captured graph must allow, since replays keep its kernel:
                       one request holding every row but one per other request,
                       p = (captured_rows - n + 1) x group, captured_rows being the query rows
                       of the batch the graph was captured with (default: this batch's); or,
                       when the caller promises every request exactly `uniform_q_len` queries,
                       p = uniform_q_len x group (a request of another length is refused)

    l_qo: the batch's query lengths (a list of integers >= 1), or, in mode "batch" only, one
    number > 0: the average packed length itself (its integer part is read; group stays 1). head_dim >= 1, group
    >= 1; captured_rows an integer >= sum(l_qo) (a batch with more rows than the capture is
    refused, as FlashInfer's plan() refuses it); uniform_q_len an integer >= 1.

    >>> [query_tile(n) for n in (1, 16, 16.5, 17, 64, 64.5, 65)], query_tile(65, head_dim=256)
    ([16, 16, 16, 64, 64, 64, 128], 64)
    >>> query_tile([1] * 7 + [12], group=4), query_tile([1] * 7 + [12], group=4, mode="cuda_graph")
    (16, 64)
    >>> query_tile([3] * 8, group=4, mode="cuda_graph", uniform_q_len=3)
    16
    """
    head_dim = as_int("head_dim", head_dim, 1, None)
    group = as_int("group", group, 1, INT32_MAX)
    mode = choice("mode", mode, TILE_MODES)
    if isinstance(l_qo, (int, float, np.integer, np.floating, np.bool_)):  # bools: refused below
        if mode != "batch" or captured_rows is not None or uniform_q_len is not None or group != 1:
            raise ValueError(
                f"l_qo={short(l_qo)} is one average packed length; mode={mode!r}, group, "
                f"captured_rows and uniform_q_len need the batch's query lengths; valid: "
                f"a list of l_qo, or the average alone in mode='batch'"
            )
        avg = as_float("avg_packed_qo_len", l_qo, 0.0, None, lo_open=True)  # bools refused
        return _tile(int(avg), head_dim)
    qo = np.array(
        [
            as_int(f"l_qo[{i}]", n, 1, INT32_MAX)
            for i, n in enumerate(as_sequence("l_qo", l_qo, "a list of query lengths"))
        ],
        np.int64,
    )
    if not len(qo):
        raise ValueError("l_qo is empty; valid: at least one request")
    n, rows = len(qo), int(qo.sum())
    if mode == "batch":
        if captured_rows is not None or uniform_q_len is not None:
            raise ValueError(
                "captured_rows and uniform_q_len belong to mode='cuda_graph'; valid: None in mode='batch'"
            )
        return _tile(rows * group // n, head_dim)
    if uniform_q_len is not None:
        u = as_int("uniform_q_len", uniform_q_len, 1, INT32_MAX)
        bad = np.flatnonzero(qo != u)
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"l_qo[{i}]={int(qo[i])}, but uniform_q_len={u} promises every request "
                f"exactly {u} queries; valid: l_qo all {u}, or uniform_q_len=None"
            )
        return _tile(u * group, head_dim)
    cap = rows if captured_rows is None else as_int("captured_rows", captured_rows, rows, None)
    return _tile((cap - n + 1) * group, head_dim)


def _tile(packed: int, head_dim: int = 128) -> int:
    """FA2DetermineCtaTileQ below head dim 512, on an integer packed length."""
    if packed > 64 and head_dim < 256:
        return 128
    return 64 if packed > 16 else 16
