# Every target does its own set-up: `make image` and `make test` work on a fresh Debian machine as root.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON   ?= python3
VENV     := .venv
BIN      := $(VENV)/bin
TARGET   ?= pro6000
BASE     ?= auto
TAG      ?= ddtree
PYTEST_ARGS ?=
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help venv engine base-image image render render-check test test-unit test-docker test-slow test-full \
        test-gpu lint lock dev-lock router-lock patches-check selfcheck clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(BIN)/.stamp: requirements/dev.txt requirements/torch-cpu.txt pyproject.toml
	@$(PYTHON) -m venv --help >/dev/null 2>&1 && $(PYTHON) -c 'import ensurepip' 2>/dev/null || \
	  { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	    { echo "installing python3-venv (Debian)"; apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null; } ; } || \
	  { echo "error: $(PYTHON) cannot make a venv; install python3-venv" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --require-hashes -r requirements/dev.txt
	$(BIN)/pip install -q -r requirements/torch-cpu.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	@touch $@

venv: $(BIN)/.stamp ## .venv with both packages (editable), test and lint tools

engine: venv ## make sure a Docker engine, BuildKit client and compose v2 answer (installs them as root on Debian)
	@$(BIN)/ddtree-build engine ensure

base-image: engine ## the registry-free base image (debootstrap + docker import), built once; prints its tag
	@$(BIN)/ddtree-build base-image

image: venv ## build the image for TARGET (pro6000|b300) on BASE (auto|nvidia|bootstrap); it sets up the engine itself
	@$(BIN)/ddtree-build image --target $(TARGET) --base $(BASE) --tag $(TAG)

render: venv ## re-render the committed Dockerfile
	@$(BIN)/ddtree-build render --target pro6000 --base nvidia --out Dockerfile

render-check: venv ## fail when the committed Dockerfile is stale
	@$(BIN)/ddtree-build render --target pro6000 --base nvidia --check

test: engine ## unit + docker tiers (CI runs this, then test-slow); sets up the engine and base image first
	@$(BIN)/ddtree-build base-image --quiet
	@$(BIN)/python -m tests.run -m "(unit or docker) and not slow and not gpu" $(PYTEST_ARGS)

test-unit: venv ## unit tier only, no engine
	@$(BIN)/python -m tests.run -m "unit and not slow" $(PYTEST_ARGS)

test-docker: engine ## docker tier only (real engine, registry-free base image)
	@$(BIN)/ddtree-build base-image --quiet
	@$(BIN)/python -m tests.run -m "docker and not slow and not gpu" $(PYTEST_ARGS)

test-slow: engine ## full-image tier (CI's second step): a plain `make image`, then checks in that image
	@$(BIN)/python -m tests.run tests/slow -m slow $(PYTEST_ARGS)

test-full: engine ## everything but GPU, full-size image included
	@$(BIN)/ddtree-build base-image --quiet
	@$(BIN)/python -m tests.run -m "not gpu" $(PYTEST_ARGS)

test-gpu: venv ## GPU tier (needs CUDA; skipped without it)
	@$(BIN)/python -m tests.run -m gpu $(PYTEST_ARGS)

lint: venv ## ruff, clean
	@$(BIN)/ruff check . && $(BIN)/ruff format --check .

lock: venv ## env/freeze.txt -> env/requirements*.lock with hashes
	@$(BIN)/ddtree-build lock

dev-lock: venv ## requirements/dev.in -> requirements/dev.txt with hashes
	SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt $(BIN)/uv pip compile --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 --generate-hashes --no-header \
	  --index-url https://pypi.org/simple requirements/dev.in -o requirements/dev.txt

router-lock: venv ## env/router.in -> env/router.lock with hashes, each dependency at the freeze's version
	SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt $(BIN)/uv pip compile --python-version 3.12 \
	  --python-platform x86_64-manylinux_2_34 --generate-hashes --no-header --no-annotate \
	  --index-url https://pypi.org/simple --constraint env/freeze.txt env/router.in -o env/router.lock

patches-check: venv ## apply the patch series to the pristine pinned SGLang wheel and verify
	@$(BIN)/ddtree-build patches check

selfcheck: ## run the offline self-check inside the built image
	docker run --rm --entrypoint ddtree $(TAG):$(TARGET) selfcheck --offline

clean: ## remove the venv and caches (keeps Docker images)
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
