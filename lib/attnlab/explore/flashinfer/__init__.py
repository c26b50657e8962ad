"""Notebook 05 (lecture §5, FlashInfer): paged KV as block-sparse rows, composable formats,
attention variants, tile sizes, the load-balanced scheduler and its fixed-size workspace."""
from . import composable, page_table
from .composable import *  # noqa: F401,F403
from .page_table import *  # noqa: F401,F403

__all__: list[str] = [*page_table.__all__, *composable.__all__]
