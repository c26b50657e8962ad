"""The answers every section checks against: `reference`, float32 attention of the (rounded)
inputs, decode or prefill, causal, soft-capped or windowed as the variants define them; and
`compiled_flex`, FlexAttention compiled once per process the way a practitioner calls it."""

from __future__ import annotations

import math

__all__ = ["reference", "compiled_flex"]


def reference(torch, q, k, v, causal=False, soft_cap=None, window=0):
    """float32 attention of the (rounded) inputs. k, v: (B, hkv, n_k, d). q: (B, hq, d), one
    decode query per request over all its keys (a few requests at a time), or (B, hq, n_q, d),
    prefill (one KV head's query group and query chunk at a time; causal, soft cap and sliding
    window as the variants define them, the queries the last n_q positions)."""
    if q.dim() not in (3, 4) or k.dim() != 4 or k.shape != v.shape:
        raise ValueError(
            f"q must be (B, hq, d) or (B, hq, n_q, d) and k, v (B, hkv, n_k, d); got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.dim() == 3:
        if causal or soft_cap or window:
            raise ValueError("causal, soft_cap and window apply to a prefill q (B, hq, n_q, d) only")
        B, hq, d = q.shape
        hkv, n = k.shape[1], k.shape[2]
        ref = torch.empty(B, hq, d, dtype=torch.float32, device=q.device)
        step = max(1, (1 << 26) // (hkv * n * d))
        for i in range(0, B, step):
            qf = q[i : i + step].float().view(-1, hkv, hq // hkv, d)
            s = torch.einsum("bhgd,bhnd->bhgn", qf, k[i : i + step].float()) / math.sqrt(d)
            ref[i : i + step] = torch.einsum(
                "bhgn,bhnd->bhgd", torch.softmax(s, -1), v[i : i + step].float()
            ).reshape(-1, hq, d)
        return ref
    B, hq, n_q, d = q.shape
    hkv, n_k = k.shape[1], k.shape[2]
    g = hq // hkv
    ref = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    rows = max(1, (1 << 26) // (g * n_k))
    kv_idx = torch.arange(n_k, device=q.device)[None, :]
    for b in range(B):
        for h in range(hkv):
            kf, vf = k[b, h].float(), v[b, h].float()
            for i in range(0, n_q, rows):
                qf = q[b, h * g : (h + 1) * g, i : i + rows].float()
                s = qf @ kf.T / math.sqrt(d)
                if soft_cap:
                    s = soft_cap * torch.tanh(s / soft_cap)
                q_idx = torch.arange(i, i + qf.shape[1], device=q.device)[:, None] + n_k - n_q
                vis = torch.ones_like(s[0], dtype=torch.bool)
                if causal or window:
                    vis &= kv_idx <= q_idx
                if window:
                    vis &= kv_idx > q_idx - window
                p = torch.nan_to_num(torch.softmax(s.masked_fill(~vis, float("-inf")), -1))
                ref[b, h * g : (h + 1) * g, i : i + rows] = p @ vf
    return ref


def compiled_flex(torch):
    """`torch.compile(flex_attention, dynamic=False)` on CUDA (the eager function elsewhere), with
    dynamo's recompile limit raised to 64 first: every shape and mask of a run compiles once, and
    past the default limit of 8 dynamo would fall back, silently, to the unfused implementation
    (which materialises the scores: a wrong timing, and at 16K tokens an out-of-memory error)."""
    from torch.nn.attention.flex_attention import flex_attention
    import torch._dynamo.config as dc

    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(dc, name):
            setattr(dc, name, max(getattr(dc, name), 64))
    return torch.compile(flex_attention, dynamic=False) if torch.cuda.is_available() else flex_attention
