# envbuilder: the README's two commands are `make lock NEMO=v2.3.0` and `make test`.
# Everything else (the venv with uv from PyPI, Docker engine, squashfs-tools) is set up here.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ENVB   := $(BIN)/envbuilder

NEMO   ?= v2.3.0
LOCKDIR ?= build/$(NEMO)
TAG    ?= envbuilder/nemo:$(NEMO)
PYTEST_ARGS ?=

.PHONY: setup host lock test lint unit integration image image-smoke sqsh sif certify bench clean

# ---- setup -----------------------------------------------------------------------
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

host:
	scripts/setup-host.sh

# ---- main job --------------------------------------------------------------------
lock: setup
	$(ENVB) lock --nemo $(NEMO) -o $(LOCKDIR)

# ---- tests: lint, fast unit tests, then real-engine / real-PyPI integration tests --
lint: setup
	$(BIN)/ruff check envbuilder tests bench
	$(BIN)/mypy

test: setup host lint
	$(BIN)/pytest $(PYTEST_ARGS)

unit: setup
	$(BIN)/pytest -m "not integration" $(PYTEST_ARGS)

integration: setup host
	$(BIN)/pytest -m integration $(PYTEST_ARGS)

# ---- images and artifacts (issue owners: build / export / certify) ---------------
image: setup host
	test -f $(LOCKDIR)/uv.lock || $(ENVB) lock --nemo $(NEMO) -o $(LOCKDIR)
	$(ENVB) build $(LOCKDIR) --tag $(TAG)

clean:
	rm -rf build .pytest_cache .mypy_cache .ruff_cache
