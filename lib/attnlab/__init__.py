"""attnlab: the library behind the course notebooks on efficient attention.

Layers (imports point down only):
1. math and accounting (numpy): hbm, softmax, attention, iomodel
2. models of the machine: hardware, models
3. presentation: explore (one module per notebook topic)
The optional GPU path lives in attnlab.gpu and imports torch/triton lazily.
"""
__version__ = "0.1.0"
