"""Notebook 02 (standard attention's IO): Algorithm 0's traffic and what it costs a prefill."""
from . import prefill, prefill_explorer, traffic
from .prefill import *  # noqa: F401,F403
from .prefill_explorer import *  # noqa: F401,F403
from .traffic import *  # noqa: F401,F403

__all__ = [*traffic.__all__, *prefill.__all__, *prefill_explorer.__all__]
