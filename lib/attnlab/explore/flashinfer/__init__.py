"""Notebook 05 (lecture §5, FlashInfer): paged KV as block-sparse rows, composable formats,
attention variants, tile sizes, the load-balanced scheduler and its fixed-size workspace."""
from . import scheduler, workspace
from .scheduler import *  # noqa: F401,F403
from .workspace import *  # noqa: F401,F403

__all__: list[str] = [*scheduler.__all__, *workspace.__all__]
