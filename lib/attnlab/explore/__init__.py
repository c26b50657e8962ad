"""Presentation layer: one module per notebook topic. Each explorer is a pure function
(parameters -> numbers), a figure whose artists it updates in place, and thin widget glue.

    from attnlab import explore
    explore.io_vs_n()            # sliders: SRAM size, head dim, N range, loop order, causal
"""
from .flash import online_softmax_explorer, softmax_steps, tile_grid, tile_schedule
from .io import io_curves, io_vs_n

EXPLORERS = {
    "online_softmax": online_softmax_explorer,
    "tile_grid": tile_grid,
    "io_vs_n": io_vs_n,
}

__all__ = ["EXPLORERS", "io_curves", "io_vs_n", "online_softmax_explorer", "softmax_steps",
           "tile_grid", "tile_schedule"]
