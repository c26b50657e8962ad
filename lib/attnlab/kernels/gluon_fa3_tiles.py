"""The persistent Gluon prefill's tile lists on the device: `machine.schedule.persistent_tiles`
works them out on the host with numpy, once per shape, and they are copied to the GPU once, as
FlashInfer's plan runs once per batch and its kernels every layer. Every later launch of that shape
(a CUDA-graph replay among them) reads the same two device tensors."""

from __future__ import annotations

import torch

from attnlab.kernels.tuning import sms

__all__ = ["persistent_schedule"]

_SCHEDULES: dict = {}  # (device, shape, flags) -> (tiles, indptr) on that device, oldest first
_KEEP = 64  # shapes remembered; a sweep over more drops the oldest


def persistent_schedule(device, batch, heads, num_m, n_q, n_k, causal, lpt, group, d, block_m, block_n):
    """(programs, tiles, indptr) of a persistent launch on `device`: one program per SM (fewer when
    there are fewer tiles), program p running tiles[indptr[p]:indptr[p + 1]], each coded
    bh * num_m + m; causal with lpt: longest first, in L2-sized sections of heads
    (`machine.schedule.persistent`)."""
    from attnlab.machine.schedule.persistent import l2_section, persistent_tiles

    bh = batch * heads
    programs = min(bh * num_m, sms(device))
    key = (str(device), bh, heads, num_m, n_q, n_k, causal, lpt, group, d, block_m, block_n, programs)
    if key not in _SCHEDULES:
        section = l2_section(heads, group, n_k, d) if causal and lpt else 1  # divides heads, so bh
        tiles, indptr = persistent_tiles(
            bh,
            num_m,
            n_q,
            n_k,
            causal=causal,
            programs=programs,
            section=section,
            lpt=lpt,
            block_m=block_m,
            block_n=block_n,
        )
        if len(_SCHEDULES) >= _KEEP:
            del _SCHEDULES[next(iter(_SCHEDULES))]
        _SCHEDULES[key] = (torch.from_numpy(tiles).to(device), torch.from_numpy(indptr).to(device))
    return (programs, *_SCHEDULES[key])
