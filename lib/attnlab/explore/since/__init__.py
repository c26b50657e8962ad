"""Notebook 06 (since then): attention backends measured, MLA decode on the roofline, FA4's third
roof, low-precision attention error, the FP8 KV cache."""

from attnlab.explore.since import backends, fa4, kvcache, lowprec, mla
from attnlab.explore.since.backends import *  # noqa: F401,F403
from attnlab.explore.since.fa4 import *  # noqa: F401,F403
from attnlab.explore.since.kvcache import *  # noqa: F401,F403
from attnlab.explore.since.lowprec import *  # noqa: F401,F403
from attnlab.explore.since.mla import *  # noqa: F401,F403

__all__ = [*backends.__all__, *mla.__all__, *fa4.__all__, *lowprec.__all__, *kvcache.__all__]
