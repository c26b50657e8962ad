"""FlashAttention explorers (notebook 03): online softmax step by step, and the tile grid.

`softmax_steps` and `tile_schedule` are the pure parts; `online_softmax` and `tile_grid` draw them.
The tile grid replays the trace of the real kernel (`flash_attention(..., hbm=HBM(trace=True))`),
so what it shows in SRAM is what the kernel loaded, not a separate drawing of the algorithm.
"""
from __future__ import annotations

from functools import lru_cache

import ipywidgets as widgets
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Rectangle

from .._check import as_int, choice
from ..attention import ORDERS, causal_mask, flash_attention, standard_attention
from ..hbm import HBM
from ..softmax import online_softmax, online_softmax_trace, softmax
from . import style
from ._base import Explorer, checkbox, slider, steps, toggle

__all__ = ["parse_vector", "softmax_steps", "online_softmax_explorer", "tile_schedule", "tile_grid",
           "TILE_N", "TILE_BLOCKS"]

LECTURE_X = "1, 3, 2, 5, 4"
MAX_VALUES = 32


def parse_vector(text: str) -> np.ndarray:
    """'1, 3, 2, 5, 4' -> array([1., 3., 2., 5., 4.]); commas or spaces; '-inf' allowed (masked)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string of numbers, got {type(text).__name__}")
    parts = [p for p in text.replace(",", " ").split() if p]
    if not parts:
        raise ValueError("text holds no numbers; type e.g. '1, 3, 2, 5, 4'")
    if len(parts) > MAX_VALUES:
        raise ValueError(f"text holds {len(parts)} numbers; valid: 1 to {MAX_VALUES}")
    try:
        x = np.array([float(p) for p in parts])
    except ValueError:
        raise ValueError(f"text={text!r} is not a list of numbers") from None
    return x


def softmax_steps(x, chunk: int = 2) -> dict:
    """The online pass over x in chunks: per-step table, final probabilities and their largest
    difference from the one-pass softmax."""
    x = np.asarray(x, dtype=np.float64)
    trace = online_softmax_trace(x, chunk)
    p = online_softmax(x, chunk)
    return {"x": x, "steps": trace, "p": p, "error": float(np.abs(p - softmax(x)).max())}


def online_softmax_explorer(text: str = LECTURE_X, chunk: int = 2) -> Explorer:
    """Edit the vector, move the chunk size; see the running max m and sum l after each chunk."""
    fig = style.new_figure(2, height=3.2)
    ax_x, ax_l = fig.axes
    controls = {
        "text": widgets.Text(value=text, description="x =", style={"description_width": "40px"},
                             continuous_update=False, layout=widgets.Layout(width="420px")),
        "chunk": slider("numbers per step", chunk, 1, 8),
    }

    state = {"x": None}

    def rebuild(x):
        """New vector: new bars and axes limits (a chunk-size change only recolours them)."""
        ax_x.clear(); ax_l.clear()
        idx = np.arange(x.size)
        state["bars"] = ax_x.bar(idx, np.where(np.isfinite(x), x, 0.0), alpha=0.6,
                                 color=style.COLORS["fa1"], label="x (colour = chunk)")
        state["m_line"], = ax_x.step([], [], where="post", color=style.COLORS["standard"], lw=2,
                                     label="running max m")
        masked = np.flatnonzero(~np.isfinite(x))
        if masked.size:
            ax_x.plot(masked, np.zeros(masked.size), "x", color=style.COLORS["bound"], ms=9, mew=2,
                      label="masked entry (-inf)")
        finite = x[np.isfinite(x)]
        lo, hi = (min(finite.min(), 0), max(finite.max(), 0)) if finite.size else (0, 1)
        ax_x.set_ylim(lo - 0.1 * (hi - lo + 1), hi + 0.15 * (hi - lo + 1))
        ax_x.set_xlim(-0.6, x.size - 0.4)
        ax_x.set_xlabel("position i in x")
        ax_x.set_ylabel("value")
        ax_x.legend(fontsize=8, loc="best")
        state["l_line"], = ax_l.plot([], [], "-o", color=style.COLORS["fa1"], label="running sum l")
        state["r_line"], = ax_l.plot([], [], "s:", color=style.COLORS["memory"],
                                     label="rescale e^(m_old - m_new)")
        ax_l.set_xlabel("step (chunks seen)")
        ax_l.set_ylabel("l  (sum of e^(x - m)),  rescale factor")
        ax_l.set_title("running sum l after each step", fontsize=10)
        ax_l.legend(fontsize=8, loc="upper left")
        ax_l.grid(True, alpha=0.25)
        state["x"] = x

    def update(text, chunk):
        try:
            x = parse_vector(text)
            r = softmax_steps(x, chunk)
        except ValueError as e:
            return f"<span style='color:#d62728'>{e}</span>"
        if state["x"] is None or not np.array_equal(state["x"], x, equal_nan=True):
            rebuild(x)
        trace = r["steps"]
        for i, bar in enumerate(state["bars"]):
            bar.set_color(style.COLORS["fa1"] if (i // chunk) % 2 == 0 else style.COLORS["fa2"])
        ends = [s.stop - 0.5 for s in trace]
        state["m_line"].set_data([s.start - 0.5 for s in trace] + [ends[-1]],
                                 [s.m for s in trace] + [trace[-1].m])
        k = np.arange(1, len(trace) + 1)
        state["l_line"].set_data(k, [s.l for s in trace])
        state["r_line"].set_data(k, [s.rescale for s in trace])
        ax_l.set_xlim(0.5, len(trace) + 0.5)
        ax_l.set_xticks(k if len(trace) <= 16 else k[::4])
        ax_l.set_ylim(-0.05, max(1.05, max(s.l for s in trace) * 1.1))
        ax_x.set_title(f"x and the running max m ({chunk} number(s) per step)", fontsize=10)
        rows = "".join(
            f"<tr><td>{i}</td><td>{', '.join(f'{v:g}' for v in s.chunk)}</td><td>{s.m_chunk:g}</td>"
            f"<td>{s.l_chunk:.4f}</td><td>{s.m:g}</td><td>{s.rescale:.4f}</td>"
            f"<td>{s.chunk_scale:.4f}</td><td>{s.l:.4f}</td></tr>"
            for i, s in enumerate(trace, 1))
        return ("<table><tr><th>step</th><th>chunk</th><th>chunk max</th><th>chunk sum</th>"
                "<th>new m</th><th>× old l</th><th>× chunk sum</th><th>new l</th></tr>"
                f"{rows}</table>"
                f"softmax = [{', '.join(f'{v:.4f}' for v in r['p'])}]; "
                f"largest difference from the one-pass softmax: {r['error']:.1e}")

    ex = Explorer("online_softmax", controls, fig, update,
                  compute=lambda text, chunk: softmax_steps(parse_vector(text), chunk))
    return ex


# ------------------------------------------------------------------------------------------------
TILE_N = [16, 24, 33, 48, 64, 100, 128, 200, 256]
TILE_BLOCKS = [4, 8, 16, 32, 64]


@lru_cache(maxsize=64)
def _trace(N: int, block_r: int, block_c: int, order: str, causal: bool):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((N, 16)) for _ in range(3))
    hbm = HBM(trace=True)
    flash_attention(q, k, v, causal=causal, block_r=block_r, block_c=block_c, order=order, hbm=hbm)
    return tuple(hbm.events), hbm.total


def tile_schedule(N: int = 64, block_r: int = 16, block_c: int = 16, order: str = "fa1",
                  causal: bool = False) -> dict:
    """Replay the kernel's trace (head dim 16): for every computed block, the Q rows and K/V rows
    resident in SRAM and the HBM elements moved so far.

    Returns 'blocks' (list of ((r0, r1), (c0, c1))), 'q_tile' and 'kv_tile' per step, 'moved'
    (elements moved by the end of each step: its loads, and the stores that follow its compute),
    'total' (whole kernel; equals moved[-1]), 'skipped' (block pairs never computed) and 'steps'.
    """
    N = as_int("N", N, 1, 4096)
    block_r = as_int("block_r", block_r, 1, None)
    block_c = as_int("block_c", block_c, 1, None)
    order = choice("order", order, ORDERS)
    events, total = _trace(N, block_r, block_c, order, bool(causal))
    blocks, q_tile, kv_tile, moved = [], [], [], []
    cur_q = cur_kv = None
    count = 0
    open_step = False                   # a block was computed; its stores may still follow
    for e in events:
        if e.kind == "compute":
            if open_step:
                moved.append(count)
            blocks.append((e.rows, e.cols)); q_tile.append(cur_q); kv_tile.append(cur_kv)
            open_step = True
            continue
        if e.kind == "read" and open_step:  # the next step's loads begin
            moved.append(count)
            open_step = False
        count += e.elements
        if e.kind == "read" and e.tensor == "Q":
            cur_q = e.rows
        elif e.kind == "read" and e.tensor == "K":
            cur_kv = e.rows
    if open_step:
        moved.append(count)
    tr, tc = -(-N // block_r), -(-N // block_c)
    computed = {(r[0] // block_r, c[0] // block_c) for r, c in blocks}
    skipped = [(i, j) for i in range(tr) for j in range(tc) if (i, j) not in computed]
    return {"N": N, "block_r": block_r, "block_c": block_c, "order": order, "causal": bool(causal),
            "blocks": blocks, "q_tile": q_tile, "kv_tile": kv_tile, "moved": np.array(moved),
            "total": total, "skipped": skipped, "steps": len(blocks)}


_TILE_CMAP = ListedColormap(["#e3e8f0", "#6baed6", "#ffbf00", "#bdbdbd", "#ffffff"])
# 0 not yet computed, 1 computed, 2 current block, 3 skipped block, 4 masked entry


def _grid_image(s: dict, step: int) -> np.ndarray:
    N, br, bc = s["N"], s["block_r"], s["block_c"]
    img = np.zeros((N, N), dtype=np.int8)
    for i, j in s["skipped"]:
        img[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = 3
    for (r0, r1), (c0, c1) in s["blocks"][:step]:
        img[r0:r1, c0:c1] = 1
    (r0, r1), (c0, c1) = s["blocks"][step]
    img[r0:r1, c0:c1] = 2
    if s["causal"]:                     # masked entries inside blocks the kernel computes
        img[~causal_mask(N, N) & (img != 3)] = 4
    return img


def tile_grid(N: int = 64, block_r: int = 16, block_c: int = 16, order: str = "fa1",
              causal: bool = False, step: int = 0) -> Explorer:
    """The score matrix S as a grid of blocks: which block is being computed, which Q and K/V
    tiles are in SRAM at that step, which blocks causal masking skips, and HBM traffic so far."""
    fig = style.new_figure(2, height=4.2)
    ax_g, ax_t = fig.axes
    ax_g.set_box_aspect(1)
    image = ax_g.imshow(np.zeros((4, 4)), cmap=_TILE_CMAP, vmin=-0.5, vmax=4.5,
                        interpolation="nearest", extent=(0, 4, 4, 0))
    q_rect = Rectangle((0, 0), 1, 1, color=style.COLORS["fa1"], alpha=0.9)
    kv_rect = Rectangle((0, 0), 1, 1, color=style.COLORS["fa2"], alpha=0.9)
    for r in (q_rect, kv_rect):
        ax_g.add_patch(r)
    q_text = ax_g.text(0, 0, "Q", ha="center", va="center", fontsize=8, color="white", rotation=90)
    kv_text = ax_g.text(0, 0, "K,V", ha="center", va="center", fontsize=8, color="white")
    ax_g.set_xlabel("key index j  (K/V tiles: green strip)")
    ax_g.set_ylabel("query index i  (Q tiles: blue strip)")
    moved_line, = ax_t.plot([], [], color=style.COLORS["fa1"], lw=1.5)
    moved_dot, = ax_t.plot([], [], "o", color=style.COLORS["highlight"], ms=8, mec="k")
    ax_t.set_xlabel("step (one block computed per step)")
    ax_t.set_ylabel("HBM elements moved (cumulative)")
    ax_t.grid(True, alpha=0.25)
    key = [Rectangle((0, 0), 1, 1, color=_TILE_CMAP(i), ec="k", lw=0.5) for i in (2, 1, 0, 3, 4)]
    ax_t.legend(key, ["current block (in SRAM)", "computed", "not yet computed",
                      "skipped: fully masked block", "masked entry (of a block that is computed)"],
                fontsize=8, loc="lower right", title="left panel", title_fontsize=8)

    controls = {
        "N": steps("N (tokens)", TILE_N, N),
        "block_r": steps("B_r (Q rows)", TILE_BLOCKS, block_r),
        "block_c": steps("B_c (K/V rows)", TILE_BLOCKS, block_c),
        "order": toggle("loop order", list(ORDERS), order),
        "causal": checkbox("causal", causal),
        "step": slider("step", step, 0, 1000),
    }

    def update(N, block_r, block_c, order, causal, step):
        s = tile_schedule(N, block_r, block_c, order, causal)
        last = s["steps"] - 1
        if controls["step"].max != last or step > last:
            step = min(step, last)
            with controls["step"].hold_trait_notifications():
                controls["step"].max = last
                controls["step"].value = step
        strip = max(N / 10, 1.5)
        image.set_data(_grid_image(s, step))
        image.set_extent((0, N, N, 0))
        ax_g.set_xlim(-strip, N)
        ax_g.set_ylim(N, -strip)
        (r0, r1), (c0, c1) = s["q_tile"][step], s["kv_tile"][step]
        q_rect.set_bounds(-strip, r0, strip * 0.9, r1 - r0)
        kv_rect.set_bounds(c0, -strip, c1 - c0, strip * 0.9)
        q_text.set_position((-strip * 0.55, (r0 + r1) / 2))
        kv_text.set_position(((c0 + c1) / 2, -strip * 0.55))
        x = np.arange(s["steps"])
        moved_line.set_data(x, s["moved"])
        moved_dot.set_data([step], [s["moved"][step]])
        ax_t.set_xlim(-0.5, max(last, 1) + 0.5)
        ax_t.set_ylim(0, max(s["moved"].max(), 1) * 1.08)
        loop = "K/V outer, Q inner" if order == "fa1" else "Q outer, K/V inner"
        ax_g.set_title(f"S = QKᵀ in blocks, {order} order ({loop})\n"
                       f"N={N}, B_r={block_r}, B_c={block_c}" + (", causal" if causal else ""),
                       fontsize=9)
        ax_t.set_title(f"HBM traffic by the end of step {step} (steps 0–{last}, d=16)", fontsize=10)
        held = (f"Q rows {r0}–{r1 - 1}" + (" with O, l, m of those rows (read from HBM)" if order == "fa1"
                else " with their O, l, m accumulators (kept on chip)"))
        return (f"Step {step} of 0–{last}: SRAM holds {held}, and K, V rows {c0}–{c1 - 1}. "
                f"In all, the kernel computes {s['steps']} blocks; the causal mask skips "
                f"{len(s['skipped'])}. HBM elements moved by the end of this step: "
                f"{s['moved'][step]:,} of {s['total']:,}.")

    dynamic = [image, q_rect, kv_rect, q_text, kv_text, moved_line, moved_dot, ax_g.title, ax_t.title]
    return Explorer("tile_grid", controls, fig, update, compute=tile_schedule, dynamic=dynamic)


def accuracy_rows(Ns=(64, 257, 1000), blocks=((16, 16), (32, 64), (None, None)), d: int = 64,
                  dtype=np.float32, seed: int = 0) -> list[dict]:
    """Max |flash - standard| for fp32 inputs over N, block sizes (None = the paper's rule at
    M = 100,000), both loop orders, causal and not: the lecture's "FlashAttention changes the
    order of computation, not the math" check."""
    rng = np.random.default_rng(seed)
    rows = []
    for N in Ns:
        q, k, v = (rng.standard_normal((N, d)).astype(dtype) for _ in range(3))
        for causal in (False, True):
            ref = standard_attention(q, k, v, causal=causal)
            for br, bc in blocks:
                errs = {o: float(np.abs(flash_attention(q, k, v, causal=causal, block_r=br,
                                                        block_c=bc, order=o) - ref).max())
                        for o in ORDERS}
                rows.append({"N": N, "causal": causal, "blocks": "rule" if br is None else f"{br}x{bc}",
                             "fa1": errs["fa1"], "fa2": errs["fa2"]})
    return rows


def softmax_table(trace) -> str:
    """The online pass as a text table: one row per step (chunk, its max and sum, rescale, m, l)."""
    from .style import table
    rows = [{"step": i, "chunk": ", ".join(f"{v:g}" for v in s.chunk), "m_chunk": s.m_chunk,
             "l_chunk": s.l_chunk, "rescale": s.rescale, "chunk_scale": s.chunk_scale, "m": s.m,
             "l": s.l} for i, s in enumerate(trace, 1)]
    return table(rows, {"step": "step", "chunk": "chunk", "m_chunk": "chunk max", "l_chunk": "chunk sum",
                        "m": "new m", "rescale": "x old l", "chunk_scale": "x chunk sum",
                        "l": "new l"},
                 {"m_chunk": "g", "l_chunk": ".4f", "rescale": ".4f", "chunk_scale": ".4f",
                  "m": "g", "l": ".4f"})
