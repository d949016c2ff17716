# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ampfl-installed

.PHONY: demo test install data lint docs clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU build of torch first, so that pip never fetches CUDA wheels.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[train,dev,flower,opacus]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/ampfl demo --out runs/demo
	$(VENV)/bin/ampfl reproduce accounting-demo --out runs/demo/accounting

data: $(STAMP)
	-$(VENV)/bin/ampfl data fetch adult fmnist

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml): docs/ and the API reference from the docstrings, offline, every
# warning an error. Open site/index.html.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# Three workers on two cores: the real-process Flower tests spend most of their ~70 s each waiting on
# Flower's fixed 3 s polls, so a third worker keeps both cores busy (measured: 8.3 min against 9.6 with -n 2).
test: $(STAMP) data lint docs
	$(VENV)/bin/pytest -n 3

clean:
	rm -rf $(VENV) runs site .pytest_cache .mypy_cache .ruff_cache
