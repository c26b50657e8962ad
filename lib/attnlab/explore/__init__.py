"""Presentation layer: one explorer (or one small topic) per file, grouped by notebook.

    roofline/   notebook 01   numbers, tables, RooflineExplorer
    standard/   notebook 02   Algorithm 0's traffic, prefill cost; StandardTrafficExplorer, PrefillCostExplorer
    flash/      notebook 03   OnlineSoftmaxExplorer, TileGridExplorer, IOExplorer, PipelineExplorer
    decode/     notebook 04   IntensityExplorer, SplitKVExplorer, MergeExplorer, CascadeExplorer
    flashinfer/ notebook 05   paged KV, composable formats, variants, tile sizes, the scheduler
    since/      notebook 06   backends measured, MLA decode, FA4RoofExplorer, LowPrecExplorer
    measured/                 the one reader of the recorded GPU runs (through attnlab.runfile) and its views

Every explorer subclasses `Explorer` (`_base.py`, which states the contract) and registers
itself under its `name`: `EXPLORERS[name]()` builds it at the lecture's defaults.

    from attnlab import explore
    explore.IOExplorer()        # controls: SRAM size, head dim, N range, loop order, FA2's tiles, causal
"""

# Imported in notebook order: the registry (and `make bench`) list explorers in that order.
from attnlab.explore._base import REGISTRY, Explorer  # isort: skip
from attnlab.explore.roofline import *  # noqa: F401,F403  isort: skip
from attnlab.explore.standard import *  # noqa: F401,F403  isort: skip
from attnlab.explore.flash import *  # noqa: F401,F403  isort: skip
from attnlab.explore.decode import *  # noqa: F401,F403  isort: skip
from attnlab.explore.flashinfer import *  # noqa: F401,F403  isort: skip
from attnlab.explore.since import *  # noqa: F401,F403  isort: skip
from attnlab.explore.decode import __all__ as _decode
from attnlab.explore.flash import __all__ as _flash
from attnlab.explore.flashinfer import __all__ as _flashinfer
from attnlab.explore.roofline import __all__ as _roofline
from attnlab.explore.since import __all__ as _since
from attnlab.explore.standard import __all__ as _standard

#: name -> explorer class, in notebook order.
EXPLORERS: dict[str, type[Explorer]] = dict(REGISTRY)

__all__ = ["EXPLORERS", "Explorer", *_roofline, *_standard, *_flash, *_decode, *_flashinfer, *_since]
