"""Layer 2, models of the machine: what the exact counts of layer 1 cost on a GPU.

hardware (GPU specs, roofline, the wave model, decode time), roofs (FA4's third roof), models
(model shapes, the prefill cost model), configs (a Hugging Face config read into a Model),
workload (request-length batches) and schedule/ (work partitioning, plans, workspace).
Imports layers 0 and 1 only.
"""
