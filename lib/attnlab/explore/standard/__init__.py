"""Notebook 02 (standard attention's IO): Algorithm 0's traffic and what it costs a prefill."""
from attnlab.explore.standard import prefill, prefill_explorer, traffic
from attnlab.explore.standard.prefill import *  # noqa: F401,F403
from attnlab.explore.standard.prefill_explorer import *  # noqa: F401,F403
from attnlab.explore.standard.traffic import *  # noqa: F401,F403

__all__ = [*traffic.__all__, *prefill.__all__, *prefill_explorer.__all__]
