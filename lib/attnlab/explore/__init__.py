"""Presentation layer: one module per notebook topic. Each explorer is a pure function
(parameters -> numbers), a figure whose artists it updates in place, and thin widget glue.

    from attnlab import explore
    explore.io_vs_n()            # sliders: SRAM size, head dim, N range, loop order, causal
"""
from .io import io_curves, io_vs_n

EXPLORERS = {
    "io_vs_n": io_vs_n,
}

__all__ = ["EXPLORERS", "io_curves", "io_vs_n"]
