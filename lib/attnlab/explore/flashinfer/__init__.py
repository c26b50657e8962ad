"""Notebook 05 (lecture §5, FlashInfer): paged KV as block-sparse rows, composable formats,
attention variants, tile sizes, the load-balanced scheduler and its fixed-size workspace."""
from .checks import *  # noqa: F401,F403
from .checks import __all__ as _checks

__all__: list[str] = [*_checks]
