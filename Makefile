# Two commands for learners and instructors:
#   make lab    install the notebooks' dependencies into .venv (created if missing), open JupyterLab
#   make test   install the test extra into .venv and run every check (library tests, strict nbval
#               over every notebook, every notebook and explorer in a real browser)
# and for maintainers:
#   make check         the same checks with whatever Python PY names, no install (ruff first)
#   make lint          `ruff format --check` and `ruff check` over lib/ and tests/; make format rewrites
#   make check-notebooks   doctests and strict nbval (also under OPENBLAS_CORETYPE=Prescott):
#                      what needs no torch or Triton (the conda route: `make check-notebooks PY=python`)
#   make test-browser  only the browser stage (JupyterLab driven by the system Chromium)
#   make bench         time every explorer's recompute + redraw after a slider change
#   make site          every notebook with its committed outputs as static HTML in site/
#                      (open site/index.html from disk: no server, no install needed to read it)

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# One stamp per install route: each is redone only when pyproject.toml changes (the install is
# editable, so library edits need none). The test extra contains the base, so installing it
# satisfies the base stamp too; going from `make test` to `make lab` installs nothing more.
BASE_STAMP := $(VENV)/.installed-base
TEST_STAMP := $(VENV)/.installed-test

.PHONY: lab test check lint format check-notebooks test-browser bench notebooks site clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(BASE_STAMP): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e ".[test]"
	touch $@ $(BASE_STAMP)

lab: $(BASE_STAMP)
	$(VENV)/bin/jupyter lab notebooks/00_start_here.ipynb $(if $(filter 0,$(shell id -u)),--allow-root,)

test: $(TEST_STAMP)
	@$(MAKE) --no-print-directory check

# The one definition of "the checks", shared by `make test` and the conda route. The browser
# stage starts JupyterLab as a learner would (it drops MPLBACKEND for the server it starts).
# JOBS: pytest-xdist workers (library tests and notebooks; each notebook stays in one worker).
JOBS ?= 2
NBVAL := -m pytest -n $(JOBS) --dist loadscope --nbval --nbval-sanitize-with notebooks/sanitize.cfg notebooks
check: lint
	MPLBACKEND=Agg $(PY) -m pytest -n $(JOBS) --dist worksteal tests
	@$(MAKE) --no-print-directory check-notebooks
	MPLBACKEND=Agg $(PY) -m pytest tests/browser

# The formatter and the linter over the library and its tests (settings in pyproject.toml):
# `make lint` fails on code that `make format` would rewrite or that ruff check flags.
RUFF := $(PY) -m ruff
lint:
	$(RUFF) format --check --quiet lib tests conftest.py
	$(RUFF) check --quiet lib tests conftest.py

format:
	$(RUFF) format lib tests conftest.py

# What needs no torch or Triton (the conda route's checks): the doctests and strict nbval over every
# notebook, then both again under OpenBLAS's Prescott kernels (SSE3, on every x86-64 CPU), so a
# committed output that shows roundoff of one BLAS kernel fails here and not on a learner's machine.
check-notebooks:
	MPLBACKEND=Agg $(PY) -m pytest --doctest-modules lib/attnlab
	MPLBACKEND=Agg $(PY) $(NBVAL)
	@if [ "$$(uname -m)" = x86_64 ]; then \
	  echo "portability: doctests and strict nbval again with OPENBLAS_CORETYPE=Prescott"; \
	  OPENBLAS_CORETYPE=Prescott MPLBACKEND=Agg $(PY) -m pytest --doctest-modules lib/attnlab && \
	  OPENBLAS_CORETYPE=Prescott MPLBACKEND=Agg $(PY) $(NBVAL); \
	else \
	  echo "portability stage skipped: OPENBLAS_CORETYPE=Prescott is an x86-64 kernel and this CPU is $$(uname -m)"; \
	fi

test-browser: $(TEST_STAMP)
	MPLBACKEND=Agg $(PY) -m pytest tests/browser

bench: $(BASE_STAMP)
	MPLBACKEND=Agg $(PY) -m attnlab.course.explorer_bench

# Re-execute every notebook in place (instructors, after changing the library or a notebook).
notebooks: $(BASE_STAMP)
	$(PY) -m attnlab.course.execute notebooks/*.ipynb

# Render, never execute: the pages show what the notebooks were committed with (after `make notebooks`).
# Formulas use MathJax from its CDN; for typeset formulas offline, name a local MathJax 2, e.g.
#   make site MATHJAX_URL="file:///usr/share/javascript/mathjax/MathJax.js?config=TeX-AMS_CHTML"
# (Debian/Ubuntu: apt-get install libjs-mathjax).
site: $(BASE_STAMP)
	rm -rf site
	$(PY) -m attnlab.course.site --notebooks notebooks --out site $(if $(MATHJAX_URL),--mathjax-url "$(MATHJAX_URL)")

clean:
	rm -rf $(VENV) .pytest_cache build/browser_timings.json site
