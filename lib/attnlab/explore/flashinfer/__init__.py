"""Notebook 05 (lecture §5, FlashInfer): paged KV as block-sparse rows, composable formats,
attention variants, tile sizes, the load-balanced scheduler and its fixed-size workspace."""
__all__: list[str] = []
