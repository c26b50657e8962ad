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
from .roofline import (attention_share, fusion_rows, fusion_table, fusion_traffic,  # noqa: E402
                       memory_levels, memory_table, operator_table, operators, paper_a100,
                       ridge_table, roofline, roofline_points, share_table, spec_sources)

EXPLORERS["roofline"] = roofline
__all__ += ["attention_share", "fusion_rows", "fusion_table", "fusion_traffic", "memory_levels",
            "memory_table", "operator_table", "operators", "paper_a100", "ridge_table", "roofline",
            "roofline_points", "share_table", "spec_sources"]
# --- end notebook 01 ----------------------------------------------------------------------------

# --- notebook 02 (standard attention) -----------------------------------------------------------
from .standard import (algorithm0_traffic, max_fitting_n, prefill_cost_explorer,  # noqa: E402
                       prefill_curves, prefill_table, standard_traffic, traffic_curves,
                       traffic_table)

EXPLORERS.update({"standard_traffic": standard_traffic, "prefill_cost": prefill_cost_explorer})
__all__ += ["algorithm0_traffic", "max_fitting_n", "prefill_cost_explorer", "prefill_curves",
            "prefill_table", "standard_traffic", "traffic_curves", "traffic_table"]
# --- end notebook 02 ----------------------------------------------------------------------------

# --- notebook 04 (decode attention) -------------------------------------------------------------
from .decode import (batch_table, cascade_check, cascade_explorer, cascade_numbers,  # noqa: E402
                     cascade_table, decode_intensity, intensity_explorer, intensity_table,
                     merge_data, merge_errors, merge_explorer, merge_table, split_kv_explorer,
                     split_kv_plan, split_rows_table, split_table, split_vs_context,
                     wave_tail)

EXPLORERS.update({"intensity": intensity_explorer, "split_kv": split_kv_explorer,
                  "merge": merge_explorer, "cascade": cascade_explorer})
__all__ += ["batch_table", "cascade_check", "cascade_explorer", "cascade_numbers", "cascade_table",
            "decode_intensity", "intensity_explorer", "intensity_table", "merge_data", "merge_errors",
            "merge_explorer", "merge_table", "split_kv_explorer", "split_kv_plan", "split_rows_table",
            "split_table", "split_vs_context", "wave_tail"]
# --- end notebook 04 ----------------------------------------------------------------------------
