"""Presentation layer: one module per notebook topic. Each explorer is a pure function
(parameters -> numbers), a figure whose artists it updates in place, and thin widget glue.

    from attnlab import explore
    explore.io_vs_n()            # sliders: SRAM size, head dim, N range, loop order, causal
"""
from .flash import (accuracy_rows, online_softmax_explorer, softmax_steps, softmax_table, tile_grid,
                    tile_schedule)
from .io import counter_vs_formula, io_curves, io_vs_n

EXPLORERS = {
    "online_softmax": online_softmax_explorer,
    "tile_grid": tile_grid,
    "io_vs_n": io_vs_n,
}

__all__ = ["EXPLORERS", "accuracy_rows", "counter_vs_formula", "io_curves", "io_vs_n",
           "online_softmax_explorer", "softmax_steps", "softmax_table", "tile_grid", "tile_schedule"]

# --- notebook 01 (roofline) ---------------------------------------------------------------------
# --- end notebook 01 ----------------------------------------------------------------------------

# --- notebook 02 (standard attention) -----------------------------------------------------------
# --- end notebook 02 ----------------------------------------------------------------------------
