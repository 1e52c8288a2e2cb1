# stride: two commands on a fresh clone, `make bench` and `make test`.
# Set-up is idempotent: a stamp file records that .venv matches pyproject.toml.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.stride-installed

.PHONY: setup test test-fast test-torch bench lint lint-imports clean

setup: $(STAMP)

# --system-site-packages lets a machine that already has a (CUDA) torch keep it;
# torch==2.13.0 is installed only when no torch is importable.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[dev,observe,ray,mlflow,wandb]"
	touch $(STAMP)

# Two pytest workers (pytest-xdist): the suite is one core's work at a time except its multi-process
# tests, which tests/conftest.py keeps on one worker, one after another, as in a serial run.
PYTEST_WORKERS ?= 2
PYTEST_PAR := -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder

test: setup
	$(PY) -m pytest -q $(PYTEST_PAR)

test-fast: setup
	$(PY) -m pytest -q -m "not slow" $(PYTEST_PAR)

# The suite under another torch, on CPU, in a venv of its own (.venv-torch-X): `make test-torch TORCH=2.11.0`.
# GPU machines keep the torch they have (the H200 image: 2.11.0, whose DDP refused a 2.13 keyword); PyPI's CUDA
# wheel of torch imports and runs here without a GPU. Triton stays CI's 3.9 (--no-deps): older interpreters
# (3.6) cannot run the kernels' loops over runtime bounds, which the GPU compiles fine (docs/gpu.md).
TORCH ?= 2.11.0
TRITON_CPU ?= 3.9.0
test-torch:
	test -x .venv-torch-$(TORCH)/bin/python || $(PYTHON) -m venv .venv-torch-$(TORCH)
	.venv-torch-$(TORCH)/bin/python -m pip install -q "torch==$(TORCH)"
	.venv-torch-$(TORCH)/bin/python -m pip install -q -e ".[dev,observe,ray,mlflow,wandb]"  # as setup
	.venv-torch-$(TORCH)/bin/python -m pip install -q --no-deps "triton==$(TRITON_CPU)"  # last: torch pins its own
	.venv-torch-$(TORCH)/bin/python -m pytest -q $(PYTEST_PAR)

bench: setup
	$(VENV)/bin/stride bench

lint: lint-imports
	$(VENV)/bin/ruff check stride tests benchmarks

# The layering contracts in pyproject.toml ([tool.importlinter]; docs/architecture.md).
lint-imports: setup
	$(VENV)/bin/lint-imports --no-cache

clean:
	rm -rf $(VENV) runs .pytest_cache
