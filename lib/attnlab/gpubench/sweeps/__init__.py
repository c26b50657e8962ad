"""Launch-parameter sweeps that set the kernels' automatic launch tables (hopper, paged)."""
