"""The GPU benchmark harness: our kernels (attnlab.kernels) beside FlashInfer, cuDNN and
FlexAttention, in one run that writes one file.

    python -m attnlab.gpubench                       # every section, on a CUDA machine
    TRITON_INTERPRET=1 python -m attnlab.gpubench --dry   # tiny sizes on a CPU: the code path

One module per section (prefill, paged, cascade, decode, scheduled, variants), the launch
sweeps under sweeps/, and ncu (the recorded Nsight Compute profile's calls). Imports torch and
triton lazily; imports attnlab's layers 0-2 and attnlab.kernels, nothing above.
"""
