"""Notebook 02 (standard attention's IO): Algorithm 0's traffic and what it costs a prefill; and
the backward pass with S and P stored against recomputed (notebook 07, exercise 5)."""

from attnlab.explore.standard import backward, prefill, prefill_explorer, traffic
from attnlab.explore.standard.backward import *  # noqa: F401,F403
from attnlab.explore.standard.prefill import *  # noqa: F401,F403
from attnlab.explore.standard.prefill_explorer import *  # noqa: F401,F403
from attnlab.explore.standard.traffic import *  # noqa: F401,F403

__all__ = [*traffic.__all__, *prefill.__all__, *prefill_explorer.__all__, *backward.__all__]
