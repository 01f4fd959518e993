# Fresh machine: `make demo` (set up + train/convert/sample/eval on CPU) and `make test`.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
VENV03 ?= .venv03
BIN03 := $(VENV03)/bin
SHARED ?= $(abspath ../shared)
export TIKTOKEN_CACHE_DIR ?= $(SHARED)/data/tiktoken_cache
export AOGPT_DATA_DIR ?= $(SHARED)/data

VENV211 ?= .venv211
BIN211 := $(VENV211)/bin

.PHONY: setup setup-titan03 setup-torch211 demo test test-titan03 test-torch211 test-slow lint bench-train bench-sampler findings findings-gpt2 clean

$(VENV)/.installed: pyproject.toml
	@echo "setup: $(VENV) with torch 2.13.0 (CPU wheel), torchtitan 0.2.2, lm-eval, transformers, the server (fastapi, uvicorn), ruff and pytest (about 3 minutes the first time, quiet pip)"
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0  # the local CPU wheel; an unpinned torch pulls CUDA builds
	PYTHONWARNINGS='ignore:Editable installation' $(BIN)/pip install -q -e '.[dev,serve,titan022]'  # hides setuptools' information-only banner
	touch $@

setup: $(VENV)/.installed

# A second venv with torchtitan 0.3.0 (what `pip install torchtitan` gives today) for the training tests.
# 0.3 needs torch >= 2.14 (torch.distributed.set_timeout); 2.14.1 is the newest the registry serves, a
# CUDA build (about 5.4 GB with its CUDA libraries and triton) that runs on a CPU-only machine too.
$(VENV03)/.installed: pyproject.toml
	@echo "setup: $(VENV03) with torch 2.14.1 (a CUDA build, about 5 GB) and torchtitan 0.3.0 (1-3 minutes the first time, quiet pip)"
	test -d $(VENV03) || $(PYTHON) -m venv $(VENV03)
	$(BIN03)/pip install -q --upgrade pip
	$(BIN03)/pip install -q torch==2.14.1
	PYTHONWARNINGS='ignore:Editable installation' $(BIN03)/pip install -q -e '.[titan03]' pytest==9.2.0
	touch $@

setup-titan03: $(VENV03)/.installed

# A third venv at the GPU image's torch (2.11; torchtitan 0.2.2 as scripts/gpu_check.sh installs it), so a
# version gap shows on a CPU in CI, not in a GPU's scarce minutes. The registry's 2.11.0 is a CUDA build
# (about 4 GB with its CUDA libraries and triton) that runs on a CPU-only machine too.
$(VENV211)/.installed: pyproject.toml
	@echo "setup: $(VENV211) with torch 2.11.0 (the GPU image's; a CUDA build, about 4 GB) and torchtitan 0.2.2 (1-3 minutes the first time, quiet pip)"
	test -d $(VENV211) || $(PYTHON) -m venv $(VENV211)
	$(BIN211)/pip install -q --upgrade pip
	$(BIN211)/pip install -q torch==2.11.0
	PYTHONWARNINGS='ignore:Editable installation' $(BIN211)/pip install -q -e '.[dev,serve,titan022]'
	touch $@

setup-torch211: $(VENV211)/.installed

demo: setup
	PATH=$(abspath $(BIN)):$$PATH bash scripts/demo.sh

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-logo --no-cache

test: lint
	$(BIN)/pytest

# The training tests that apply under torchtitan 0.3.0: 0.2.2's losses through the launcher and through stock
# `torchrun -m torchtitan.train --module aogpt_plugin --config aogpt_debug` (what GPU users run), the
# 2-process FSDP resume.
test-titan03: setup setup-titan03
	$(BIN03)/pytest -m 'slow or not slow' tests/training/titan03
	$(BIN03)/pytest tests/training/test_checkpointing.py tests/training/test_stop_request.py \
	    tests/training/test_sections.py tests/training/test_ema.py tests/training/test_loss.py tests/training/test_versions.py \
	    tests/training/test_step_guard.py

# The default suite's torch-dependent parts on the GPU image's torch 2.11 (CPU): the model, the sampler, the
# benches, training, the likelihood and the GPU check's plans, before a GPU runs them (the commands' words,
# the server's HTTP and the data tools do not change with torch; CI's hour holds both runs only this way).
test-torch211: setup-torch211
	$(BIN211)/pytest tests/model tests/sampler tests/bench tests/training tests/test_cross_entropy.py \
	    tests/test_likelihood.py tests/scripts/test_gpu_check.py tests/scripts/test_bench_flex_decode.py \
	    tests/scripts/test_bench_linears.py tests/scripts/test_speculative_quality.py

test-slow: setup
	$(BIN)/pytest -m slow

bench-train: setup
	$(BIN)/aogpt bench train --flavor tiny

bench-sampler: setup
	$(BIN)/aogpt bench sampler

findings: setup
	$(BIN)/python scripts/reproduce_findings.py

findings-gpt2: setup
	$(BIN)/python scripts/gpt2_start_study.py

clean:
	rm -rf outputs
