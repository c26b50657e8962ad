"""pytest's setup for the whole tree: without torch and Triton (the conda route's base install), the
GPU modules' doctests cannot import, so `pytest --doctest-modules lib/attnlab` leaves kernels/ and
gpubench/ out (tests/conftest.py does the same for the kernel tests and says so in the header)."""

import importlib.util

collect_ignore_glob = (
    []
    if importlib.util.find_spec("torch") and importlib.util.find_spec("triton")
    else ["lib/attnlab/kernels/*.py", "lib/attnlab/gpubench/*.py", "lib/attnlab/gpubench/*/*.py"]
)
