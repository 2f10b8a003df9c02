# The first two commands on a fresh machine: `make demo`, then `make test`.
PY ?= python3.11
# One virtual environment per interpreter: .venv for the default, .venv-python3.13 for PY=python3.13.
VENV ?= $(if $(filter python3.11,$(notdir $(PY))),.venv,.venv-$(notdir $(PY)))
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TRAINERS := $(VENV)/.installed-trainers

# Debian packages each target needs (declared in scripts/system-packages.sh), installed when missing.
SYSTEM := PY=$(PY) scripts/system-packages.sh

.PHONY: demo test test-trainers test-fast lint bench clean images test-images test-packs fresh-check screenshots

$(STAMP): pyproject.toml setup.py
	@$(PY) -c "" 2>/dev/null || { echo "error: $(PY) does not run here; install Debian's python3 (3.11), or name another interpreter (3.11 to 3.13) with PY=..." >&2; exit 1; }
	@$(SYSTEM) venv
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
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

# packages-build, packages-build+images, ...: checked first, before any download or build.
packages-%:
	@$(SYSTEM) $(subst +, ,$*)

demo: packages-build $(STAMP)  ## build and verify the three example worlds into data/worlds/
	$(BIN)/worldfactory build --examples

test: packages-test $(TRAINERS)  ## the test suite (without the slices below, kept out for its 4-minute budget)
	$(BIN)/python -m pytest

test-trainers: packages-test $(TRAINERS)  ## the trainer adapters through the trainers' own tools (vf-eval, TRL, OpenEnv, datasets)
	$(BIN)/python -m pytest tests/trainers

test-packs: packages-build $(STAMP)  ## a full build per pack to the floors; the first three stages of every seed type
	$(BIN)/python -m pytest tests/packs

# The fast tests: the engine, its sandbox and its MCP surfaces, without Dagster, the trainers or a browser.
# CI runs them under Python 3.13 as well, and `make fresh-check` in a fresh container.
FAST_TESTS := tests/test_sandbox.py tests/test_tools.py tests/test_tasks_verifiers.py tests/test_mcp_transports.py \
	tests/test_world_contents.py tests/test_guard_expressions.py
test-fast: packages-build $(STAMP)  ## the fast tests (no Dagster, trainers or browser)
	$(BIN)/python -m pytest $(FAST_TESTS)

# A clean clone in a bare Debian 12 container (nothing installed but python3, make and git) runs `make demo`
# and a slice of the tests: proves the README's commands install what they need. REF=commit to check another.
fresh-check:  ## the README's first command on a fresh machine, in a container (needs root: podman)
	scripts/fresh-check.sh $(REF)

# World images (needs root on Debian: it installs podman). containers/engine.sh prepares the engine
# idempotently (packages, .engine/containers.conf and its drop-in for a plain `podman run`, the base image
# cached with `podman save`, the Docker API socket .engine/podman.sock); then every example world gets its
# image, run and checked over MCP.
images: packages-build+images $(STAMP)  ## container engine + the example worlds' images (after this: make test-images)
	containers/engine.sh
	$(BIN)/worldfactory build --examples
	$(BIN)/worldfactory image --examples --probe

test-images: packages-build+images+deploy $(STAMP)  ## tests against real images and containers (needs `make images` first)
	$(BIN)/python -m pytest -n0 tests/images

screenshots: packages-test $(STAMP)  ## the README's docs/world-page.png and docs/catalog-site.png, from the examples as built now (needs Chromium)
	$(BIN)/worldfactory build --examples
	$(BIN)/python docs/screenshots.py --out docs

lint: $(STAMP)
	$(BIN)/ruff check worldfactory assets pipelines resources tests bench docs setup.py

bench: $(STAMP)  ## speed figures for the notes (not part of the tests)
	$(BIN)/python bench/factory_bench.py
	$(BIN)/python bench/runtime_bench.py
	$(BIN)/python bench/dagster_bench.py
	$(BIN)/python bench/factory_parallel_bench.py
	$(BIN)/python bench/tasks_bench.py
	$(BIN)/python bench/rollouts_bench.py

clean:
	rm -rf data/worlds data/build data/catalog data/catalog.duckdb .pytest_cache .venv-*
