"""Notebook 05 (lecture §5, FlashInfer): paged KV as block-sparse rows, composable formats,
attention variants, tile sizes, the load-balanced scheduler and its fixed-size workspace.
Modules are imported in notebook order (the registry lists explorers in that order)."""

from attnlab.explore.flashinfer import (
    page_table,
    composable,
    variant_gallery,
    variant_tables,
    tile_size,
    scheduler,
    workspace,
    checks,
)  # isort: skip
from attnlab.explore.flashinfer.page_table import *  # noqa: F401,F403
from attnlab.explore.flashinfer.composable import *  # noqa: F401,F403
from attnlab.explore.flashinfer.variant_gallery import *  # noqa: F401,F403
from attnlab.explore.flashinfer.variant_tables import *  # noqa: F401,F403
from attnlab.explore.flashinfer.tile_size import *  # noqa: F401,F403
from attnlab.explore.flashinfer.scheduler import *  # noqa: F401,F403
from attnlab.explore.flashinfer.workspace import *  # noqa: F401,F403
from attnlab.explore.flashinfer.checks import *  # noqa: F401,F403

__all__: list[str] = [
    *page_table.__all__,
    *composable.__all__,
    *variant_gallery.__all__,
    *variant_tables.__all__,
    *tile_size.__all__,
    *scheduler.__all__,
    *workspace.__all__,
    *checks.__all__,
]
