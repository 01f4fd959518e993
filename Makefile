# Fresh machine: `make demo` (set up + train/convert/sample/eval on CPU) and `make test`.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
SHARED ?= $(abspath ../shared)
export TIKTOKEN_CACHE_DIR ?= $(SHARED)/data/tiktoken_cache
export AOGPT_DATA_DIR ?= $(SHARED)/data

.PHONY: setup demo test test-slow lint bench-train bench-sampler findings clean

$(VENV)/.installed: pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0  # the local CPU wheel; an unpinned torch pulls CUDA builds
	PYTHONWARNINGS='ignore:Editable installation' $(BIN)/pip install -q -e '.[dev]'  # hides setuptools' information-only banner
	touch $@

setup: $(VENV)/.installed

demo: setup
	PATH=$(abspath $(BIN)):$$PATH bash scripts/demo.sh

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-logo --no-cache

test: lint
	$(BIN)/pytest

test-slow: setup
	$(BIN)/pytest -m slow

bench-train: setup
	$(BIN)/aogpt bench train --flavor tiny

bench-sampler: setup
	$(BIN)/aogpt bench sampler

findings: setup
	$(BIN)/python scripts/reproduce_findings.py

clean:
	rm -rf outputs
