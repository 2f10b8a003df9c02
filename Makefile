# The first two commands on a fresh machine: `make demo`, then `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TRAINERS := $(VENV)/.installed-trainers

.PHONY: demo test lint bench clean images test-images test-packs

$(STAMP): pyproject.toml setup.py
	@test -x $(BIN)/python || $(PY) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

# The suite also tests the trainer adapters (worldfactory.adapters): they need the `trainers` extra
# (torch CPU, transformers, TRL, datasets, OpenEnv), which `make demo` does not. verifiers goes in
# without its pins (it pins mcp==2.0.0; see pyproject.toml).
$(TRAINERS): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[dev,trainers]"
	$(BIN)/python -m pip install --quiet --no-deps "verifiers==0.4.0"
	@touch $(TRAINERS)

demo: $(STAMP)  ## build and verify the three example worlds into data/worlds/
	$(BIN)/worldfactory build --examples

test: $(TRAINERS)  ## the whole test suite
	$(BIN)/python -m pytest

test-packs: $(STAMP)  ## a full build per pack to the floors; the first three stages of every seed type
	$(BIN)/python -m pytest tests/packs

# World images (needs root on Debian: it installs podman). containers/engine.sh prepares the engine
# idempotently (packages, .engine/containers.conf, the base image cached with `podman save`, the Docker
# API socket .engine/podman.sock); then every example world gets its image, run and checked over MCP.
images: $(STAMP)  ## container engine + the example worlds' images (after this: make test-images)
	containers/engine.sh
	$(BIN)/worldfactory build --examples
	$(BIN)/worldfactory image --examples --probe

test-images: $(STAMP)  ## tests against real images and containers (needs `make images` first)
	$(BIN)/python -m pytest -n0 tests/images

lint: $(STAMP)
	$(BIN)/ruff check worldfactory assets pipelines resources tests bench

bench: $(STAMP)  ## speed figures for the notes (not part of the tests)
	$(BIN)/python bench/factory_bench.py
	$(BIN)/python bench/runtime_bench.py
	$(BIN)/python bench/dagster_bench.py
	$(BIN)/python bench/factory_parallel_bench.py
	$(BIN)/python bench/tasks_bench.py
	$(BIN)/python bench/rollouts_bench.py

clean:
	rm -rf data/worlds data/build data/catalog data/catalog.duckdb .pytest_cache
