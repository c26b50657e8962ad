"""Layer 3, the course around the notebooks: the exercises' checker, `make bench`'s explorer
timings (explorer_bench), notebook execution (execute), the static site (site), a kernel's source
read without importing it (source) and the recorded request batches (batches). Nothing else in
attnlab imports this package.
"""
