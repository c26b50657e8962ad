"""Notebook 04 (decode attention): intensity, split-KV, the merge in floating point, cascade."""

from attnlab.explore.decode import (
    cascade,
    intensity,
    measured_tables,
    merge,
    merge_bounds,
    split_kv,
    split_tables,
)
from attnlab.explore.decode.cascade import *  # noqa: F401,F403
from attnlab.explore.decode.intensity import *  # noqa: F401,F403
from attnlab.explore.decode.measured_tables import *  # noqa: F401,F403
from attnlab.explore.decode.merge import *  # noqa: F401,F403
from attnlab.explore.decode.merge_bounds import *  # noqa: F401,F403
from attnlab.explore.decode.split_kv import *  # noqa: F401,F403
from attnlab.explore.decode.split_tables import *  # noqa: F401,F403

__all__ = [
    *intensity.__all__,
    *split_kv.__all__,
    *split_tables.__all__,
    *merge.__all__,
    *merge_bounds.__all__,
    *cascade.__all__,
    *measured_tables.__all__,
]
