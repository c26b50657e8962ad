"""Drawing helpers shared by notebook 05's block pictures: request colours, a panel of cells
(filled rectangles, stripes on shared blocks) and short labels, each a collection whose arrays
are set in place. Presentation only: which block belongs to whom comes from attnlab.core.paged.

Labels are glyph outlines (`TextPath`, cached per string) in one PathCollection: a few dozen
numbers draw in a few milliseconds, where as many Text artists would take ten times longer."""

from __future__ import annotations

from functools import lru_cache

import matplotlib as mpl
import numpy as np
from matplotlib.collections import LineCollection, PathCollection, PolyCollection
from matplotlib.font_manager import FontProperties
from matplotlib.path import Path
from matplotlib.textpath import TextPath
from matplotlib.transforms import IdentityTransform

__all__ = ["COLORS", "EMPTY", "FREE", "LABEL_PT", "tint", "ink", "Cells", "gap_for", "Labels", "warm"]

#: one colour per request (rows of every block picture), tab10 order
COLORS = np.array([mpl.colormaps["tab10"](i)[:3] for i in range(10)])
EMPTY = np.array([0.96, 0.96, 0.96])  # axes background: no block there
FREE = np.array([0.84, 0.84, 0.84])  # a free block of the pool
LABEL_PT = 9.5  # labels: at least style.SMALL


def tint(rgb, amount: float = 0.72) -> np.ndarray:
    """rgb faded towards white: the unused slots of a last page, in its request's colour."""
    rgb = np.asarray(rgb, dtype=float)
    return rgb + (1 - rgb) * amount


def ink(rgb) -> np.ndarray:
    """Black or white for text on cells of colour `rgb` (n, 3), whichever reads."""
    lum = np.asarray(rgb, dtype=float) @ [0.299, 0.587, 0.114]
    return np.where(lum[..., None] > 0.55, 0.0, 1.0) * np.ones(3)


def _boxes(x, y, w, h) -> np.ndarray:
    """Rectangles centred at (x, y) of width w and height h as (n, 4, 2) polygons."""
    x, y, w, h = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (x, y, w, h)))
    dx, dy = np.array([-1, 1, 1, -1]) / 2, np.array([-1, -1, 1, 1]) / 2
    xs, ys = x[..., None] + w[..., None] * dx, y[..., None] + h[..., None] * dy
    return np.stack([xs, ys], axis=-1).reshape(-1, 4, 2)


#: diagonal stripes in two corners of a unit cell (u, v in [-0.5, 0.5]), the middle left free
#: for a label: the mark of a shared block
_STRIPES = np.array(
    [[(c - 0.5, -0.5), (0.5, 0.5 - c)] for c in (0.5, 0.75)]
    + [[(-0.5, -0.5 - c), (0.5 + c, 0.5)] for c in (-0.5, -0.75)]
)


class Cells:
    """One panel's cells: each a rectangle in its colour with the unused part of its width
    faded, a small gap to the next cell, and dark stripes where `shared`."""

    GAP = 0.08

    def __init__(self, ax):
        self.fill = ax.add_collection(PolyCollection([], edgecolors="none", zorder=2))
        self.stripes = ax.add_collection(LineCollection([], colors="#1a1a1a", linewidths=1.1, zorder=4))
        self.artists = [self.fill, self.stripes]

    def set(self, x, y, color, used=1.0, shared=False, h=1.0, gap=GAP) -> None:
        """Unit-wide cells centred at (x, y), h rows tall; `used` in [0, 1]: the filled share of
        the width; `gap` the space between neighbours in x (`gap_for` drops it where a cell is a
        few pixels wide)."""
        x = np.asarray(x, dtype=float)
        y = np.broadcast_to(np.asarray(y, dtype=float), x.shape)
        used = np.broadcast_to(np.asarray(used, dtype=float), x.shape)
        color = np.broadcast_to(np.asarray(color, dtype=float), x.shape + (3,)).reshape(-1, 3)
        w, hh = 1 - gap, np.broadcast_to(np.asarray(h, dtype=float), x.shape) - self.GAP
        left = x - w / 2
        full, part = _boxes(x, y, w, hh), _boxes(left + used * w / 2, y, used * w, hh)
        self.fill.set_verts(np.concatenate([full, part]))
        self.fill.set_facecolor(np.concatenate([tint(color), color]) if x.size else "none")
        mark = np.broadcast_to(shared, x.shape)
        scale = np.c_[np.full(mark.sum(), w), hh[mark]][:, None, None] * 0.96
        centres = np.c_[x[mark], y[mark]][:, None, None]
        self.stripes.set_segments((_STRIPES[None] * scale + centres).reshape(-1, 2, 2))


#: below this many pixels per cell the gaps go: a gap thinner than a pixel lands on the pixel grid
#: unevenly (some columns lose it, others show it grey), and the cells read as one band anyway
DENSE_PX = 6.0


def gap_for(px: float) -> float:
    """The gap between cells `px` pixels wide, in cell widths: Cells.GAP while that is a pixel or
    more, one pixel down to DENSE_PX pixels per cell, none below."""
    if px * Cells.GAP >= 1:
        return Cells.GAP
    return 1 / px if px >= DENSE_PX else 0.0


@lru_cache(maxsize=2048)
def _glyphs(text: str) -> Path:
    """`text` as a path in points, centred on (0, 0)."""
    p = TextPath((0, 0), text, prop=FontProperties(size=LABEL_PT))
    (x0, y0), (x1, y1) = p.get_extents().get_points()
    return Path(p.vertices - [(x0 + x1) / 2, (y0 + y1) / 2], p.codes)


class Labels:
    """Short centred labels at data positions, all in one PathCollection."""

    def __init__(self, ax):
        self.pc = ax.add_collection(
            PathCollection(
                [],
                sizes=[1.0],
                offsets=np.zeros((0, 2)),
                offset_transform=ax.transData,
                edgecolors="none",
                transform=IdentityTransform(),
                zorder=5,
            )
        )
        self.artists = [self.pc]

    def set(self, xy, texts, colors="black") -> None:
        texts = [str(t) for t in texts]
        self.pc.set_paths([_glyphs(t) for t in texts])
        self.pc.set_offsets(np.asarray(xy, dtype=float).reshape(-1, 2))
        self.pc.set_facecolor(colors if texts else "none")


def warm(texts) -> None:
    """Build the glyph paths of `texts` ahead of time (once per process)."""
    for t in texts:
        _glyphs(str(t))
