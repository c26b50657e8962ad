"""Recorded GPU runs beside the model, for notebooks 03-06: one reader of run files
(`reader`, through attnlab.runfile and its schema) and the views each notebook prints.

    reader       run_files, load, newest_run, view (a run made here), provenance, section
    prefill      notebook 03: prefill_summary, prefill_figure, hopper_steps_summary, gluon_steps_summary,
                 gluon_steps_figure;  steps: the one step table with its noise band (ladder_summary);
                 persistent: the persistent scheduler beside the best peer (persistent_summary)
    decode       notebook 04: decode_figure (its tables: explore.decode.measured_tables)
    flashinfer   notebook 05: paged_summary, cascade_summary, variants_summary, schedules_*;
                 one_call: the one decode call beside FlashInfer on four draws (one_call_summary)
    serving      notebooks 05 and 06: MLA decode beside the roofline, a mixed batch beside our two
                 launches, a tree mask (mla_summary, mixed_summary, tree_summary)

The notebooks import it as `from attnlab.explore import measured`. A run made on this machine
(`attnlab.gpubench.live`, the optional GPU cells) is handed to these views through `view`.
"""

from __future__ import annotations

from attnlab.explore.measured.decode import *  # noqa: F401,F403
from attnlab.explore.measured.decode import __all__ as _decode
from attnlab.explore.measured.flashinfer import *  # noqa: F401,F403
from attnlab.explore.measured.flashinfer import __all__ as _flashinfer
from attnlab.explore.measured.one_call import *  # noqa: F401,F403
from attnlab.explore.measured.one_call import __all__ as _one_call
from attnlab.explore.measured.persistent import *  # noqa: F401,F403
from attnlab.explore.measured.persistent import __all__ as _persistent
from attnlab.explore.measured.prefill import *  # noqa: F401,F403
from attnlab.explore.measured.prefill import __all__ as _prefill
from attnlab.explore.measured.reader import *  # noqa: F401,F403
from attnlab.explore.measured.reader import __all__ as _reader
from attnlab.explore.measured.serving import *  # noqa: F401,F403
from attnlab.explore.measured.serving import __all__ as _serving
from attnlab.explore.measured.steps import *  # noqa: F401,F403
from attnlab.explore.measured.steps import __all__ as _steps

__all__ = [*_reader, *_prefill, *_steps, *_persistent, *_decode, *_flashinfer, *_one_call, *_serving]
