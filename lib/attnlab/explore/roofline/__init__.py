"""Notebook 01 (why attention needs special kernels): numbers, tables, the roofline explorer."""
from attnlab.explore.roofline.explorer import RooflineExplorer
from attnlab.explore.roofline.numbers import (GRID, I_MAX, I_MIN, MEMORY_FIELDS, SOFTMAX_FLOPS, Operator, RooflinePoints,
                      as_dtype, attention_share, fusion_rows, fusion_traffic, memory_levels, operators,
                      roofline_points, spec_sources)
from attnlab.explore.roofline.tables import (fusion_table, intensity_label, memory_table, operator_table, paper_a100,
                     ridge_table, share_table)

__all__ = ["RooflineExplorer", "GRID", "I_MAX", "I_MIN", "MEMORY_FIELDS", "SOFTMAX_FLOPS", "Operator",
           "RooflinePoints", "as_dtype", "attention_share", "fusion_rows", "fusion_traffic",
           "memory_levels", "operators", "roofline_points", "spec_sources", "fusion_table",
           "intensity_label", "memory_table", "operator_table", "paper_a100", "ridge_table",
           "share_table"]
