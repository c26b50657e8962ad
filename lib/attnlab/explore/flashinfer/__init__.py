"""Notebook 05 (lecture §5, FlashInfer): paged KV as block-sparse rows, composable formats,
attention variants, tile sizes, the load-balanced scheduler and its fixed-size workspace.
Modules are imported in notebook order (the registry lists explorers in that order)."""
from . import checks, scheduler, tile_size, workspace
from .checks import *  # noqa: F401,F403
from .tile_size import *  # noqa: F401,F403
from .scheduler import *  # noqa: F401,F403
from .workspace import *  # noqa: F401,F403

__all__: list[str] = [*tile_size.__all__, *scheduler.__all__, *workspace.__all__, *checks.__all__]
