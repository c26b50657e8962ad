"""Notebook 03 (FlashAttention): online softmax, the tile grid, HBM traffic vs N and M, FA3's pipeline."""

from attnlab.explore.flash.checks import accuracy_bound, accuracy_rows, counter_vs_formula
from attnlab.explore.flash.io import IOCurves, IOExplorer, io_curves
from attnlab.explore.flash.pipeline import PipelineExplorer, PipelineNumbers, pipeline_numbers
from attnlab.explore.flash.online_softmax import (
    OnlineSoftmaxExplorer,
    SoftmaxSteps,
    parse_vector,
    softmax_steps,
    softmax_table,
)
from attnlab.explore.flash.tile_grid import TileGridExplorer, TileSchedule, tile_schedule

__all__ = [
    "accuracy_bound",
    "accuracy_rows",
    "counter_vs_formula",
    "IOCurves",
    "IOExplorer",
    "io_curves",
    "PipelineExplorer",
    "PipelineNumbers",
    "pipeline_numbers",
    "OnlineSoftmaxExplorer",
    "SoftmaxSteps",
    "parse_vector",
    "softmax_steps",
    "softmax_table",
    "TileGridExplorer",
    "TileSchedule",
    "tile_schedule",
]
