# The two commands of the README: `make run` (the main job) and `make test`.
# Both set everything up themselves on a fresh machine.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: run serve test lint unit integration bench setup

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[spark,test,bench]'
	touch $@

setup: $(STAMP)
	bash scripts/system-deps.sh

## The main job: a broker on ./headwater-data:9092 plus the demo pipeline.
run: setup
	$(VENV)/bin/headwater demo

## Just a broker on the embedded default data directory.
serve: $(STAMP)
	$(VENV)/bin/headwater serve --listen 127.0.0.1:9092 --data-dir ./headwater-data

## Lint, type-check and every test (CI runs exactly this).
test: setup lint
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q -ra --durations=40 $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check headwater tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

bench: setup
	$(PY) bench/run_all.py
