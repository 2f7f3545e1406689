# `make demo` and `make test` create .venv on first use (torch 2.13.0 CPU wheel first).
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

.PHONY: demo test lab
demo: $(STAMP)
	$(PY) -m nca_interp.layer_sim

test: $(STAMP)
	$(PY) -m pytest -q

lab: $(STAMP)
	$(PY) -m pip install -q -e ".[notebooks]"
	$(VENV)/bin/jupyter lab notebooks/
