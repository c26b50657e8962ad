"""Notebook 06 (since then): attention backends measured, MLA decode on the roofline, FA4's third
roof, low-precision attention error."""
from . import backends, fa4, lowprec, mla
from .backends import *  # noqa: F401,F403
from .fa4 import *  # noqa: F401,F403
from .lowprec import *  # noqa: F401,F403
from .mla import *  # noqa: F401,F403

__all__ = [*backends.__all__, *mla.__all__, *fa4.__all__, *lowprec.__all__]
