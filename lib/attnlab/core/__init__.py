"""Layer 1, the exact math and the exact counts (numpy only).

hbm (the HBM counter), softmax (online softmax, attention states and their merge), attention
(standard and tiled FlashAttention), iomodel (closed-form HBM accesses), decode (decode FLOPs,
bytes, split-KV, cascade), mla, lowprec (FP8 / FP4 rounding), paged/ (paged KV cache, BSR
layouts) and variants/ (FlashInfer's attention functors). Imports only attnlab's layer 0
(validate, catalog, fmt) and itself.
"""
