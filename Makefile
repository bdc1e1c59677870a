# Two commands matter: `make demo` (the main job) and `make test`. Both install what is missing
# first: the Python virtual environment, Azurite and a local Cosmos DB server (npm, into this repository), Java (for
# PySpark) and PostgreSQL (for endpoints that keep their state there). Re-running is fast because every step is skipped when its stamp is up to date.

SHELL := /bin/bash
# Some machines set PYTHONDONTWRITEBYTECODE for every process (this project's do). Then every
# Python process compiles every module it imports from source: in a clean clone `bus --help`
# took 1.35 s of CPU instead of 0.63 s, and the suite starts hundreds of Python processes
# (docs/testing.md).
# Every target here lets Python cache the compiled modules (in .venv and the repository's
# __pycache__ folders, which git ignores).
unexport PYTHONDONTWRITEBYTECODE
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PY_STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
UV := $(VENV)/bin/uv
UV_STAMP := $(VENV)/.installed-uv
NODE_STAMP := node_modules/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=
# make test spreads the test files over this many processes (pytest-xdist): most tests wait on
# Azurite, PostgreSQL, Spark or a subprocess, so three keep two cores busy and the suite takes
# half the time (docs/testing.md). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 3

.PHONY: deps demo-deps java postgres chromium test lint format lint-infra demo clean

# Everything the tests, the lab and the benches need. The Python packages, the npm packages and
# the system packages install side by side (-j): on a fresh machine npm's download no longer
# waits for the Python one (docs/running-locally.md).
deps:
	@$(MAKE) --no-print-directory -j4 $(PY_STAMP) $(NODE_STAMP) java postgres chromium

# What the demo runs, and nothing more: no Chromium, no test or bench packages
# (requirements-demo.txt), so that a newcomer's first command is quick.
demo-deps:
	@$(MAKE) --no-print-directory -j3 $(DEMO_STAMP) $(NODE_STAMP) java postgres

# uv installs the Python packages: from an empty cache it installs the demo's set in about 22 s
# where pip took 54 s (it downloads in parallel, and builds PySpark's wheel faster). pip only
# installs uv itself, pinned in requirements-bootstrap.txt.
$(UV_STAMP): requirements-bootstrap.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-bootstrap.txt
	@touch $@

$(DEMO_STAMP): requirements.txt requirements-tools.txt requirements-demo.txt pyproject.toml $(UV_STAMP)
	$(UV) pip install --quiet --python $(PY) -r requirements-demo.txt
	@touch $@

# The full set includes the demo's, so it stamps both.
$(PY_STAMP): requirements.txt requirements-tools.txt requirements-demo.txt requirements-dev.txt pyproject.toml $(UV_STAMP)
	$(UV) pip install --quiet --python $(PY) -r requirements-dev.txt
	@touch $@ $(DEMO_STAMP)

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "Java not found: installing openjdk-17-jre-headless (needed by PySpark)"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq openjdk-17-jre-headless; }

# Debian's server binaries (initdb, postgres); tests and the demo start private servers.
# After java, and chromium after this (order-only): under -j the apt steps still run one at a
# time, since apt-get holds one lock.
postgres: | java
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  echo "PostgreSQL not found: installing postgresql (endpoints with store=postgres)"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql; }

# The audit report and the console are tested in a real headless browser (lab/chromium.py).
chromium: | postgres
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "Chromium not found: installing chromium (the audit report and the console in tests)"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium; }

test: deps
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: $(PY_STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

format: $(PY_STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

lint-infra:
	bash scripts/lint-infra.sh

demo: demo-deps
	$(PY) -m lab.local.demo

# The Spark audit against DuckDB, Polars and the same checks in one Python process, at 1M and
# 10M synthetic audit rows on local[2] (docs/audit.md). Prints figures; not a timed test.
.PHONY: audit-bench
audit-bench: deps
	$(PY) -m lab.audit.bench

# Large payloads (docs/benchmarks.md): (a) one 1 MiB event to 50 subscribers, shared against
# inline and against the bus before shared payloads and concurrent sends; (b) one 16 MiB
# command through HTTP to a handler, the host's time and peak memory; (c) one publish to
# 1,000 subscribers in memory with 10 ms per request and 300 on Azurite, at several send
# concurrencies. Prints figures; not a timed test. About 3 minutes on a quiet machine.
.PHONY: payload-bench
payload-bench: deps
	$(PY) -m lab.bench.payload_shared
	$(PY) -m lab.bench.payload_large
	$(PY) -m lab.bench.payload_fanout
	$(PY) -m lab.bench.payload_concurrent

# The test kit (docs/testing-your-app.md): 100 messages through a three-endpoint flow in
# memory, best of five runs, with the machine's load. Prints figures; not a timed test.
.PHONY: kit-bench
kit-bench: deps
	$(PY) -m lab.bench.kit_flow

# What a web request that writes one row and sends one message costs: a transactional
# session against a plain write plus the ingress's send or a raw queue message, on Table
# Storage and PostgreSQL, side by side in one run (docs/sessions.md). Prints requests per
# request and latencies; not a timed test.
.PHONY: session-bench
session-bench: deps
	$(PY) -m lab.bench.session_cost $(if $(REQUESTS),--requests $(REQUESTS))

# One cleanup pass over N abandoned tokens, N retired outbox records and N expired ingress
# and audit rows, N = 5,000 and 20,000, on Azurite and on the in-memory store with 10 ms per
# request (docs/cleanup.md). Prints items/s and requests per item; not a timed test.
.PHONY: cleanup-bench
cleanup-bench: deps
	$(PY) -m lab.cleanup.bench $(if $(N),--n $(N))

# The audit on a real Spark standalone cluster (a master and two workers from the pyspark
# installation, on free ports) against local mode; about a minute (docs/audit.md).
.PHONY: audit-cluster-test
audit-cluster-test: deps
	$(PY) -m pytest tests/audit/test_cluster.py -m slow $(PYTEST_ARGS)

# Bulk sends through Spark on Azurite: 10,000 and 100,000 rows on local[2] (docs/bulk.md;
# `make bulk-bench ROWS=10000` for one size). Prints rows/s and requests per row; not a timed test.
.PHONY: bulk-bench
bulk-bench: deps
	$(PY) -m lab.bulk.bench $(if $(ROWS),--rows $(ROWS))

# The bulk job under spark-submit on the audit's standalone cluster (docs/bulk.md); slow.
.PHONY: bulk-cluster-test
bulk-cluster-test: deps
	$(PY) -m pytest tests/bulk/test_cluster.py -m slow $(PYTEST_ARGS)

# Deterministic simulation of the real pipeline under interleavings and faults, every endpoint
# mode, about 4 minutes (docs/simulation.md); `make simulate SEED=<seed>` replays the one run a violation
# printed; `make simulate MODE=<mode>` explores one endpoint mode only.
.PHONY: simulate
simulate: deps
	$(PY) -m lab.sim $(if $(SEED),--seed $(SEED)) $(if $(MODE),--mode $(MODE))

# The simulator over the app BUS_APP names (docs/verify.md): `make verify APP=pkg.module:app
# BUDGET=60 SEED=<seed>` (each optional; without APP, BUS_APP, else the sample app).
.PHONY: verify
verify: deps
	$(PY) -m shared.cli verify --stats $(if $(APP),--app $(APP)) $(if $(BUDGET),--budget $(BUDGET)) $(if $(SEED),--seed $(SEED))

# Mutation testing of the protocol modules (docs/mutation.md): each mutant of
# lab/mutation/mutants.py against the protocol tests and a bounded simulator run, in a copy
# of the repository. Long (roughly an hour on two cores); not part of CI.
.PHONY: mutate
mutate: deps
	$(PY) -m lab.mutation $(if $(ONLY),--only $(ONLY))

# The cost of exactly-once: every mode side by side on one Azurite (docs/benchmarks.md).
# Writes bench/results.json; QUICK=1 runs the same at a small size into bench/results-quick.json.
.PHONY: bench
bench: deps
	$(PY) -m lab.bench $(if $(QUICK),--quick)

clean:
	rm -rf $(VENV) .venv-checkov node_modules .pytest_cache .mypy_cache .ruff_cache
