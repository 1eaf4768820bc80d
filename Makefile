# privlake: the two set-up commands are `make release` and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(CURDIR)/$(PY)
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(PY)
# One thread per BLAS/OpenMP pool: a reduction split over another number of threads rounds
# differently, and the suite must give the same figures on every machine.
TEST_THREADS := OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMEXPR_NUM_THREADS=1
# The fast suite: unit tests and the margin check, no engine, no reproduction run (about 75 s).
FAST_TESTS := tests/unit tests/reproduction/test_margins.py -m "not slow and not spark and not beam and not cluster"

.PHONY: install release test test-fast test-scale test-integration test-scheduling margins lint bench clean demo-data system-deps

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH" >&2; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e ".[dev,filter,spark,beam]"
	# the Spark driver's class archive (a start about 3 s shorter); Spark starts without it if it fails
	-$(PY) -m pipelines.engines.spark_class_archive
	touch $(STAMP)

install: $(STAMP)

# Services and programs the tests start themselves, on loopback: PostgreSQL (a real SQL catalog)
# and Chromium (headless rendering of the HTML report). Debian's packages; installed only if missing.
system-deps:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ! command -v chromium >/dev/null; then \
		echo "installing Debian packages: postgresql chromium"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			postgresql chromium fonts-dejavu-core >/dev/null; \
	fi

demo-data: $(STAMP)
	$(VENV)/bin/privlake generate-crowd --out data/sample_crowd

release: demo-data
	$(VENV)/bin/privlake budget show sample --lake lake >/dev/null 2>&1 || \
		$(VENV)/bin/privlake budget set sample --epsilon 10 --delta 1e-6 --lake lake
	$(VENV)/bin/privlake run examples/crowd_sample.yaml --engine spark

# The suite but for the tests that start whole systems on loopback (a standalone Spark cluster, S3
# and PostgreSQL, Airflow): those are `make test-integration`; .ci/run runs both.
test: $(STAMP) system-deps
	$(VENV)/bin/ruff check schemas transforms pipelines tests benchmarks
	$(VENV)/bin/lint-imports
	$(VENV)/bin/hadolint Dockerfile
	$(TEST_THREADS) $(VENV)/bin/pytest -q -p no:cacheprovider -m "not cluster and not services and not scale"

test-integration: $(STAMP) system-deps test-scheduling
	$(TEST_THREADS) $(VENV)/bin/pytest -q -p no:cacheprovider -m "cluster or services"

# Driver memory at scale (issue 15): releases of 10^6 and 10^7 generated rows, the Python driver's
# own peak resident memory sampled (a few minutes; data under a temporary folder).
test-scale: $(STAMP)
	$(TEST_THREADS) $(VENV)/bin/pytest -q -s -p no:cacheprovider -m scale tests/scale

test-fast: $(STAMP)
	$(VENV)/bin/ruff check schemas transforms pipelines tests benchmarks
	$(VENV)/bin/lint-imports
	$(TEST_THREADS) $(VENV)/bin/pytest -q -p no:cacheprovider $(FAST_TESTS)

# The Airflow example, run by Airflow's own dag.test() in a venv of its own (pinned: Airflow's
# constraint files cannot be downloaded here); part of `make test-integration`.
AIRFLOW_VENV := .venv-airflow
AIRFLOW_STAMP := $(AIRFLOW_VENV)/.installed

$(AIRFLOW_STAMP): examples/airflow/requirements.txt
	test -x $(AIRFLOW_VENV)/bin/python || $(PYTHON) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/pip install --quiet --upgrade pip
	$(AIRFLOW_VENV)/bin/pip install --quiet -r examples/airflow/requirements.txt
	touch $(AIRFLOW_STAMP)

test-scheduling: $(STAMP) $(AIRFLOW_STAMP)
	$(VENV)/bin/ruff check examples/airflow
	$(TEST_THREADS) PRIVLAKE_BIN=$(CURDIR)/$(VENV)/bin/privlake $(AIRFLOW_VENV)/bin/pytest -q -p no:cacheprovider examples/airflow

# Re-measure the reproduction figures over ten keys (tests/reproduction/margins.json).
margins: $(STAMP)
	$(TEST_THREADS) $(PY) -m tests.reproduction.margins

lint: $(STAMP)
	$(VENV)/bin/ruff check schemas transforms pipelines tests benchmarks
	$(VENV)/bin/lint-imports
	$(VENV)/bin/hadolint Dockerfile

bench: $(STAMP)
	$(PIP) install --quiet -e ".[dev,filter,bench]"
	$(PY) benchmarks/crowd_scaling.py
	$(PY) benchmarks/ldp_reproduction.py

clean:
	rm -rf lake data .pytest_cache
