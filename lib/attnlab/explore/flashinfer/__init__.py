"""Notebook 05 (lecture §5, FlashInfer): paged KV as block-sparse rows, composable formats,
attention variants, tile sizes, the load-balanced scheduler and its fixed-size workspace."""
from . import variant_gallery
from .variant_gallery import *  # noqa: F401,F403

__all__: list[str] = [*variant_gallery.__all__]
