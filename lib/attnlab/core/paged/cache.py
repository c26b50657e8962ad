"""The paged KV cache itself: a pool of fixed-size blocks handed out in a shuffled order, a block
table per request, fork with copy-on-write. See `attnlab.core.paged` for the layout it feeds."""

from __future__ import annotations

from collections import deque

import numpy as np

from attnlab.validate import ARRAY_LIMIT, as_array, as_int, check_bytes, short

__all__ = ["OutOfBlocks", "PagedKVCache"]


class OutOfBlocks(ValueError):
    """The pool has too few free blocks for the request (a size that cannot be met)."""


class PagedKVCache:
    """A pool of `num_blocks` blocks of `block_size` tokens, one KV head of `head_dim`.

    Blocks are handed out in an order shuffled by a seeded generator, so block tables look like
    a real allocator's (not 0, 1, 2, ...). Full blocks can be shared between requests (`fork`);
    a shared partial last block is copied on the first write to it (copy-on-write).

    The two pools (K and V) may hold at most 2 GiB together (num_blocks x block_size x head_dim
    x the dtype's bytes x 2); values beyond the dtype's largest finite one are refused, not
    stored as inf.

    >>> cache = PagedKVCache(64, 4, 8, seed=0)
    >>> rng = np.random.default_rng(1)
    >>> a = cache.add(rng.standard_normal((10, 8)), rng.standard_normal((10, 8)))
    >>> cache.seq_len(a), len(cache.block_table(a)), cache.num_free()
    (10, 3, 61)
    """

    def __init__(self, num_blocks: int, block_size: int, head_dim: int, *, dtype=np.float64, seed: int = 0):
        self.num_blocks = as_int("num_blocks", num_blocks, 1, 1 << 24)
        self.block_size = as_int("block_size", block_size, 1, 1 << 16)
        self.head_dim = as_int("head_dim", head_dim, 1, 1 << 16)
        try:
            self.dtype = None if dtype is None else np.dtype(dtype)
        except (TypeError, ValueError):
            self.dtype = None
        if self.dtype is None or self.dtype.kind != "f":
            raise TypeError(
                f"dtype must be a float dtype (np.float16, np.float32, np.float64, ...), got {short(dtype)}"
            )
        self._max = float(np.finfo(self.dtype).max)
        check_bytes(
            f"num_blocks={self.num_blocks} x block_size={self.block_size} x head_dim="
            f"{self.head_dim} x {self.dtype.itemsize} bytes ({self.dtype}) x 2 pools",
            2 * self.num_blocks * self.block_size * self.head_dim * self.dtype.itemsize,
            ARRAY_LIMIT,
        )
        self.k_pool = np.zeros((self.num_blocks, self.block_size, self.head_dim), self.dtype)
        self.v_pool = np.zeros_like(self.k_pool)
        order = np.random.default_rng(as_int("seed", seed, 0, None)).permutation(self.num_blocks)
        self._free = order[::-1].copy()  # a stack, its top at _top: hands out
        self._top = self.num_blocks  # order[0], order[1], ... (8 bytes a block)
        self._refs = np.zeros(self.num_blocks, np.int64)  # requests using each block
        self._tables: dict[int, list[int]] = {}
        self._lens: dict[int, int] = {}
        self._next = 0

    # --- queries -------------------------------------------------------------------------
    def num_free(self) -> int:
        return self._top

    def requests(self) -> list[int]:
        return list(self._tables)

    def _rid(self, rid) -> int:
        """rid as the int id of a request of this cache: TypeError if it is not an integer (a
        float, even 0.0, a bool, a string, None), ValueError if no request has it."""
        if isinstance(rid, (bool, np.bool_)) or not isinstance(rid, (int, np.integer)):
            raise TypeError(f"rid must be a request id (an int), got {short(rid)} ({type(rid).__name__})")
        if int(rid) not in self._tables:
            ids = sorted(self._tables)  # the message stays short for any cache
            valid = (
                ", ".join(map(str, ids))
                if len(ids) <= 10
                else f"{len(ids):,} requests, {', '.join(map(str, ids[:5]))}, ..., {ids[-1]}"
            )
            raise ValueError(f"rid={short(rid)} is not a request of this cache; valid: [{valid}]")
        return int(rid)

    def block_table(self, rid) -> list[int]:
        return list(self._tables[self._rid(rid)])

    def seq_len(self, rid) -> int:
        return self._lens[self._rid(rid)]

    def gather(self, rid) -> tuple[np.ndarray, np.ndarray]:
        """The request's K and V as contiguous (seq_len, head_dim) copies."""
        rid = self._rid(rid)
        n, table = self._lens[rid], self._tables[rid]
        k = self.k_pool[table].reshape(-1, self.head_dim)[:n]
        v = self.v_pool[table].reshape(-1, self.head_dim)[:n]
        return k.copy(), v.copy()

    # --- changes -------------------------------------------------------------------------
    def _kv(self, k, v) -> tuple[np.ndarray, np.ndarray]:
        k = as_array("k", k, ndim=2, shape="(n_tokens, head_dim)")
        v = as_array("v", v, ndim=2, shape="(n_tokens, head_dim)")
        if k.shape[1] != self.head_dim or v.shape != k.shape or k.shape[0] < 1:
            raise ValueError(
                f"k and v must both be (n_tokens >= 1, head_dim={self.head_dim}); "
                f"got k {k.shape}, v {v.shape}"
            )
        for name, a in (("k", k), ("v", v)):
            top = max(float(a.max()), -float(a.min()))  # no abs: it wraps int64's min
            if top > self._max:
                raise ValueError(
                    f"{name} holds {top:.4g}, beyond dtype {self.dtype}'s largest finite "
                    f"value {self._max:.4g}; valid: |{name}| <= {self._max:.4g} (or a "
                    f"wider dtype)"
                )
        return k, v

    def _take(self, n: int, what: str) -> list[int]:
        if n > self._top:
            raise OutOfBlocks(
                f"{what} needs {n} free block(s) but the pool of num_blocks="
                f"{self.num_blocks} has {self._top} free; free requests or "
                f"make a larger cache"
            )
        blocks = self._free[self._top - n : self._top][::-1].tolist()  # popped, top first
        self._top -= n
        self._refs[blocks] = 1
        return blocks

    def _write(self, rid: int, k, v) -> None:
        """Append tokens, filling the last block first (copied first if another request shares it),
        then whole new blocks at once: linear in the tokens, whatever the page size."""
        table, n, bs = self._tables[rid], self._lens[rid], self.block_size
        used = n - bs * (len(table) - 1) if table else bs  # tokens in the last block
        room = bs - used
        shared_partial = table and room > 0 and self._refs[table[-1]] > 1
        new = -(-max(len(k) - room, 0) // bs)
        fresh = deque(self._take(new + (1 if shared_partial else 0), f"request {rid}"))  # all or nothing
        if shared_partial:  # copy-on-write of the last block
            old, copy = table[-1], fresh.popleft()
            self.k_pool[copy], self.v_pool[copy] = self.k_pool[old], self.v_pool[old]
            self._refs[old] -= 1
            table[-1] = copy
        m = min(room, len(k))
        if m:  # the rest of the last block
            self.k_pool[table[-1], used : used + m] = k[:m]
            self.v_pool[table[-1], used : used + m] = v[:m]
        if new:
            pages = list(fresh)
            table.extend(pages)
            rest_k, rest_v = k[m:], v[m:]
            full = len(rest_k) // bs  # whole pages in one assignment
            if full:
                self.k_pool[pages[:full]] = rest_k[: full * bs].reshape(full, bs, -1)
                self.v_pool[pages[:full]] = rest_v[: full * bs].reshape(full, bs, -1)
            tail = len(rest_k) - full * bs
            if tail:
                self.k_pool[pages[full], :tail] = rest_k[full * bs :]
                self.v_pool[pages[full], :tail] = rest_v[full * bs :]
        self._lens[rid] = n + len(k)

    def add(self, k, v) -> int:
        """A new request holding tokens k, v (each (n_tokens, head_dim)); returns its id."""
        k, v = self._kv(k, v)
        rid = self._next
        self._tables[rid], self._lens[rid] = [], 0
        try:
            self._write(rid, k, v)
        except OutOfBlocks:
            del self._tables[rid], self._lens[rid]
            raise
        self._next += 1
        return rid

    def append(self, rid, k, v) -> None:
        """More tokens at the end of request `rid`."""
        rid = self._rid(rid)
        k, v = self._kv(k, v)
        self._write(rid, k, v)

    def fork(self, rid) -> int:
        """A new request sharing every block of `rid` by reference (no copy until a write)."""
        rid = self._rid(rid)
        new = self._next
        self._tables[new] = list(self._tables[rid])
        self._lens[new] = self._lens[rid]
        self._refs[self._tables[new]] += 1
        self._next += 1
        return new

    def free(self, rid) -> None:
        """Release a request; a block returns to the pool when no request uses it any more."""
        rid = self._rid(rid)
        table = np.array(self._tables.pop(rid), np.int64)  # distinct blocks: one update each
        self._refs[table] -= 1
        back = table[self._refs[table] == 0]  # pushed in table order
        self._free[self._top : self._top + len(back)] = back
        self._top += len(back)
        del self._lens[rid]
