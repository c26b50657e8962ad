"""What the Triton kernels share: the online-softmax step, its finish, the dot they all take, the
merge of split states, and the launchers' argument checks.

    online_update(s, v, m, l, acc, IEEE)   fold one block of base-2 logits and values into the state
    finish(acc, m, l)                      o = acc / l and the natural-log lse (0 and -inf for no key)
    dot(a, b, IEEE)                        tl.dot, IEEE float32 when asked (the interpreter needs it)
    merge_splits_kernel                    ⊕ of a request's split states, fixed order (decode, paged)
    check_qkv(q, k, v)                     the prefill launchers' (B, H, N, d) checks
    check_paged(q, k_pool, v_pool, ...)    the paged launchers' page-table checks
    as_count, as_scale, as_block, as_warps, as_stages
                                           the launch arguments every launcher takes, checked
                                           through `attnlab.validate` before anything reaches Triton
                                           (flags: `validate.as_bool`)

`kernels.fa2` is the readable kernel that first uses them; every kernel imports them from here.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
import triton
import triton.language as tl

from attnlab.validate import as_float, as_int, short

__all__ = [
    "LOG2E",
    "DTYPES",
    "dot",
    "online_update",
    "finish",
    "merge_splits_kernel",
    "check_qkv",
    "check_paged",
    "as_count",
    "as_scale",
    "as_block",
    "as_warps",
    "as_stages",
    "WARPS",
]

LOG2E = 1.4426950408889634
#: The dtypes every kernel takes for q, k, v.
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def dot(a, b, IEEE: tl.constexpr):
    """a @ b; IEEE: full float32 precision (the interpreter's and fp32 inputs' choice)."""
    if IEEE:
        return tl.dot(a, b, input_precision="ieee")
    else:
        return tl.dot(a, b)


@triton.jit
def online_update(s, v, m_i, l_i, acc, IEEE: tl.constexpr):
    """Fold one block into the running state: logits `s` (base-2 domain, masked entries -inf)
    and values `v`. The old sum and accumulator are rescaled by 2^(m_old - m_new); a row that
    has seen no key yet keeps m = -inf, l = 0 and never produces NaN."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp2(s - m_safe[:, None])
    alpha = tl.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + dot(p.to(v.dtype), v, IEEE)
    return m_new, l_i, acc


@triton.jit
def finish(acc, m_i, l_i):
    """Normalise: o = acc / l (0 for a row that saw no key) and its natural-log lse (-inf there)."""
    safe_l = tl.where(l_i > 0, l_i, 1.0)
    o = tl.where(l_i[:, None] > 0, acc / safe_l[:, None], 0.0)
    lse = tl.where(l_i > 0, (m_i + tl.log2(safe_l)) / 1.4426950408889634, float("-inf"))
    return o, lse


@triton.jit
def split_range(length, pid_s, SPLITS, MIN_CHUNK, BLOCK_N: tl.constexpr):
    """Keys start:end of split pid_s of a `length`-key request cut into min(SPLITS,
    ceil(length / MIN_CHUNK)) chunks (at least one) of whole BLOCK_N-key tiles; start >= end is
    an empty split. The split decoders' programs each take one."""
    splits = tl.maximum(tl.minimum(SPLITS, tl.cdiv(length, MIN_CHUNK)), 1)  # 1 even if length < 1
    chunk = tl.cdiv(tl.cdiv(length, splits), BLOCK_N) * BLOCK_N
    start = pid_s * chunk
    return start, tl.minimum(start + chunk, length)


@triton.jit
def merge_splits_kernel(OP, LP, O, LSE, SPLITS, HEAD_DIM, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    """One program per (request, query head): fold its SPLITS partial states (o fp32, lse) with
    the merge ⊕, lse-weighted, all at once and in a fixed order (deterministic); an empty chunk
    (lse = -inf) weighs 0, and no key at all gives o = 0, lse = -inf."""
    pid = tl.program_id(0).to(tl.int64)  # (request, query head)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    s_ok = offs_s < SPLITS
    d_ok = offs_d < HEAD_DIM
    lse = tl.load(LP + pid * SPLITS + offs_s, mask=s_ok, other=float("-inf"))
    m = tl.max(lse, 0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp(lse - m_safe)  # 0 for empty chunks
    total = tl.sum(w, 0)
    o = tl.load(
        OP + (pid * SPLITS + offs_s)[:, None] * HEAD_DIM + offs_d[None, :],
        mask=s_ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    safe_total = tl.where(total > 0, total, 1.0)
    out = tl.sum(o * (w / safe_total)[:, None], 0)
    tl.store(O + pid * HEAD_DIM + offs_d, out, mask=d_ok)
    tl.store(LSE + pid, tl.where(total > 0, m_safe + tl.log(safe_total), float("-inf")))


#: The warp counts a Triton launch takes.
WARPS = (1, 2, 4, 8, 16)


def as_count(name: str, value, lo: int | None = None, hi: int | None = None) -> int:
    """An integer launch argument (a Python or numpy integer) in [lo, hi] as an int: a float (even
    2.0), a bool or a string is a TypeError, outside the range a ValueError (`validate.as_int`).

    >>> as_count("splits", np.int64(3), 1)
    3
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {short(value)} ({type(value).__name__})")
    return as_int(name, value, lo, hi)


def as_scale(scale, d: int) -> float:
    """The softmax scale: None is 1 / sqrt(d); else a finite real > 0 (a string is a TypeError,
    NaN, inf, 0 and negatives a ValueError)."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    return as_float("scale", scale, 0.0, None, lo_open=True)


def as_block(name: str, value, lo: int = 16, hi: int = 256) -> int | None:
    """A block size: None (the launcher chooses) or a power of two in [lo, hi]; tl.dot needs 16
    rows at least, tl.arange a power of two.

    >>> as_block("block_m", 3)
    Traceback (most recent call last):
    ...
    ValueError: block_m=3 is out of range; valid: a power of two in [16, 256], or None
    """
    if value is None:
        return None
    value = as_count(name, value)
    if not lo <= value <= hi or value & (value - 1):
        raise ValueError(f"{name}={value} is out of range; valid: a power of two in [{lo}, {hi}], or None")
    return value


def as_warps(value, name: str = "num_warps") -> int | None:
    """Warps per program: None (the launcher chooses) or one of WARPS."""
    if value is None:
        return None
    value = as_count(name, value)
    if value not in WARPS:
        raise ValueError(f"{name}={value} is out of range; valid: {', '.join(map(str, WARPS))}, or None")
    return value


def as_stages(value, lo: int = 1, hi: int = 8, name: str = "num_stages") -> int | None:
    """Software-pipeline stages: None (the launcher chooses) or an integer in [lo, hi]."""
    if value is None:
        return None
    value = as_count(name, value)
    if not lo <= value <= hi:
        raise ValueError(f"{name}={value} is out of range; valid: {lo} <= {name} <= {hi}, or None")
    return value


def check_qkv(q, k, v):
    """Refuse what a prefill kernel cannot take: q (B, Hq, N_q, d), k, v (B, Hkv, N_k, d) torch
    tensors of one dtype of DTYPES, Hq a multiple of Hkv, 1 <= d <= 256, N >= 1."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be (batch, heads, N, d), got shape {tuple(t.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must have the same shape")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must agree in batch and head dim")
    if q.shape[0] < 1 or q.shape[1] < 1:
        raise ValueError(f"batch={q.shape[0]} and query heads={q.shape[1]} must be >= 1")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"query heads {q.shape[1]} must be a multiple of KV heads {k.shape[1]}")
    if not (1 <= q.shape[3] <= 256):
        raise ValueError(f"head dim d={q.shape[3]} is out of range; valid: 1 <= d <= 256")
    if q.shape[2] < 1 or k.shape[2] < 1:
        raise ValueError(f"N_q={q.shape[2]} and N_k={k.shape[2]} must be >= 1")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in DTYPES:
        raise TypeError(
            f"q, k, v must share one dtype of float16, bfloat16, float32; got {q.dtype}, {k.dtype}, {v.dtype}"
        )


def check_paged(q, k_pool, v_pool, kv_indptr, kv_indices, kv_last_page_len, page_size):
    """Refuse what a paged decode cannot take: q (batch, q_heads, d), NHD pools (pages, page_size,
    kv_heads, d) of q's dtype, FlashInfer's int32 page table on q's device; page_size an integer
    (Python or numpy) equal to the pool's; the table's contents are checked
    (`attnlab.core.paged.BSRLayout`) only when on the CPU (on a GPU that would sync).
    Returns (batch, q_heads, d, kv_heads, page_size), page_size as an int."""
    for name, t in (
        ("q", q),
        ("k_pool", k_pool),
        ("v_pool", v_pool),
        ("kv_indptr", kv_indptr),
        ("kv_indices", kv_indices),
        ("kv_last_page_len", kv_last_page_len),
    ):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if q.dim() != 3:
        raise ValueError(f"q must be (batch, q_heads, d), got shape {tuple(q.shape)}")
    if k_pool.dim() != 4:
        raise ValueError(
            f"k_pool must be NHD (pages, page_size, kv_heads, d), got shape {tuple(k_pool.shape)}"
        )
    if v_pool.shape != k_pool.shape:
        raise ValueError(f"v_pool {tuple(v_pool.shape)} must have k_pool's shape {tuple(k_pool.shape)}")
    if q.dtype not in DTYPES or not (q.dtype == k_pool.dtype == v_pool.dtype):
        raise TypeError(
            f"q, k_pool, v_pool must share one dtype of float16, bfloat16, float32; "
            f"got {q.dtype}, {k_pool.dtype}, {v_pool.dtype}"
        )
    B, hq, d = q.shape
    pages, ps, hkv, dk = k_pool.shape
    page_size = as_count("page_size", page_size, 1)
    if page_size != ps:
        raise ValueError(f"page_size={page_size} does not match the pool: k_pool.shape[1] = {ps}")
    if dk != d or not 1 <= d <= 256:
        raise ValueError(f"head dim: q has d={d}, k_pool d={dk}; they must be equal, 1 <= d <= 256")
    if B < 1 or pages < 1 or hkv < 1 or hq % hkv:
        raise ValueError(
            f"q_heads={hq} must be a multiple of kv_heads={hkv} (k_pool.shape[2]), "
            f"with batch={B} >= 1 and pages={pages} >= 1"
        )
    for name, t, n in (
        ("kv_indptr", kv_indptr, B + 1),
        ("kv_last_page_len", kv_last_page_len, B),
        ("kv_indices", kv_indices, None),
    ):
        if t.dtype != torch.int32:
            raise TypeError(f"{name} must be int32 (FlashInfer's index type), got {t.dtype}")
        if t.dim() != 1 or (n is not None and t.numel() != n):
            want = (
                f"{n} entries (batch + 1 = {B + 1})"
                if name == "kv_indptr"
                else (f"{n} entries (batch = {B})" if n is not None else "one dimension")
            )
            raise ValueError(f"{name} has shape {tuple(t.shape)}; it must be 1-D with {want}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; put them on one device")
        if not t.is_contiguous():  # the kernels read entry i at pointer + i
            raise ValueError(f"{name} must be contiguous, got stride {t.stride()}; pass {name}.contiguous()")
    for name, t in (("k_pool", k_pool), ("v_pool", v_pool)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; put them on one device")
    if kv_indices.numel() < B:
        raise ValueError(f"kv_indices has {kv_indices.numel()} pages for batch={B}; every request owns >= 1")
    if q.device.type == "cpu":  # contents: free to check here, a sync on a GPU
        from attnlab.core.paged import BSRLayout

        BSRLayout(kv_indptr.numpy(), kv_indices.numpy(), kv_last_page_len.numpy(), ps, pages)
    return B, hq, d, hkv, ps
