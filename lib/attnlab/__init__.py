"""attnlab: the library behind the course notebooks on efficient attention.

A module's layer is its folder; imports point down only (tests/test_layers.py derives the rule
from the path):

0. validate, catalog, fmt, runfile, timing   argument checks, the data/ folder, number formatting,
                            the GPU run file, wall-clock medians
1. core/      the exact math and the exact counts (numpy): HBM counter, softmax, attention,
              closed-form IO, decode, MLA, low precision, paged KV, variants
2. machine/   models of the machine: GPU specs and rooflines, model shapes, configs, workloads,
              schedules
3. explore/   the notebooks' explorers and tables (one folder per notebook)
4. course/    the exercises' checker, explorer timings, notebook execution, the static site (it may
              import explore, never the other way)

The optional GPU path sits beside explore (no layer imports it) and imports torch and triton lazily:
   kernels/   the Triton kernels (layers 0-2 below them)
   gpubench/  their benchmark harness beside FlashInfer, cuDNN and FlexAttention (kernels + 0-2)
"""

__version__ = "0.1.0"
