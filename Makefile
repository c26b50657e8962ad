# Two commands for learners and instructors:
#   make lab    install into .venv (created if missing) and open JupyterLab on the first notebook
#   make test   install into .venv and run the library tests plus strict nbval over every notebook
# and one for maintainers:
#   make bench  time every explorer's recompute + redraw after a slider change

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: lab test bench notebooks clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-install only when pyproject.toml changes (editable install: library edits need no reinstall).
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/00_start_here.ipynb $(if $(filter 0,$(shell id -u)),--allow-root,)

test: $(STAMP)
	MPLBACKEND=Agg $(PY) -m pytest tests
	MPLBACKEND=Agg $(PY) -m pytest --nbval --nbval-sanitize-with notebooks/sanitize.cfg notebooks

bench: $(STAMP)
	MPLBACKEND=Agg $(PY) -m attnlab.bench

# Re-execute every notebook in place (instructors, after changing the library or a notebook).
notebooks: $(STAMP)
	$(PY) -m attnlab.tools.execute notebooks/*.ipynb

clean:
	rm -rf $(VENV) .pytest_cache
