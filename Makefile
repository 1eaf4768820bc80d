# privlake: the two set-up commands are `make release` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(CURDIR)/$(PY)
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(PY)

.PHONY: install release test lint bench clean demo-data

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH" >&2; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo-data: $(STAMP)
	$(VENV)/bin/privlake generate-crowd --out data/sample_crowd

release: demo-data
	$(VENV)/bin/privlake run examples/crowd_sample.yaml --engine spark

test: $(STAMP)
	$(VENV)/bin/ruff check schemas transforms pipelines tests benchmarks
	$(VENV)/bin/pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(VENV)/bin/ruff check schemas transforms pipelines tests benchmarks

bench: $(STAMP)
	$(PIP) install --quiet -e ".[dev,bench]"
	$(PY) benchmarks/crowd_scaling.py
	$(PY) benchmarks/ldp_reproduction.py

clean:
	rm -rf lake data .pytest_cache
