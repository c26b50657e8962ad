"""Notebook 04 (decode attention): intensity, split-KV, the merge in floating point, cascade."""
from . import cascade, intensity, merge, merge_bounds, split_kv, split_tables
from .cascade import *  # noqa: F401,F403
from .intensity import *  # noqa: F401,F403
from .merge import *  # noqa: F401,F403
from .merge_bounds import *  # noqa: F401,F403
from .split_kv import *  # noqa: F401,F403
from .split_tables import *  # noqa: F401,F403

__all__ = [*intensity.__all__, *split_kv.__all__, *split_tables.__all__, *merge.__all__, *merge_bounds.__all__, *cascade.__all__]
