# ContextLens set-up, run and test. `make run` and `make test` do everything on a fresh machine;
# every step is a file target, so a second run rebuilds nothing.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
MODEL  := models/SmolLM2-135M-Instruct.Q4_1.gguf
export QT_QPA_PLATFORM ?= $(if $(DISPLAY)$(WAYLAND_DISPLAY),,offscreen)

.PHONY: all setup run test lint pytest bench clean clean-llama

all: setup

setup: $(VENV)/.installed $(MODEL)

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "ContextLens needs Python 3.11 or newer (found " + sys.version.split()[0] + ")")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# llama-cpp-python is compiled from source with flags that are safe on this CPU (see
# packaging/build-llama-wheel.sh); the wheel is cached per flags outside the checkout.
$(VENV)/.llama: packaging/build-llama-wheel.sh | $(PY)
	wheel="$$(PYTHON=$(PY) bash packaging/build-llama-wheel.sh)" && \
	$(PY) -m pip install --quiet --force-reinstall --no-deps "$$wheel"
	touch $@

$(VENV)/.installed: pyproject.toml $(VENV)/.llama
	$(PY) -m pip install --quiet -e '.[test,dev]'
	touch $@

$(MODEL): | $(VENV)/.installed
	$(BIN)/contextlens-cli fetch-model

run: setup
	$(BIN)/contextlens --demo --model $(MODEL)

lint: $(VENV)/.installed
	$(BIN)/ruff check app tests
	$(BIN)/lint-imports

pytest: setup
	$(BIN)/pytest $(PYTEST_ARGS)

test: setup lint pytest

# The benchmarks compare against other chunkers, which only they need (the `bench` extra).
$(VENV)/.bench: pyproject.toml | $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[test,dev,bench]'
	touch $@

# Every tests/benchmarks/bench_*.py, one at a time, into bench-report/report.md (and .csv, .png);
# `make bench BENCH_ARGS=--quick` for small sizes (minutes), or e.g. BENCH_ARGS="--only kv".
bench: setup $(VENV)/.bench
	$(BIN)/contextlens-cli bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache

# Forget the cached llama.cpp builds (for example after changing LLAMA_CMAKE_ARGS by hand).
clean-llama:
	rm -rf "$${CONTEXTLENS_CACHE:-$${XDG_CACHE_HOME:-$$HOME/.cache}/contextlens}/wheels" $(VENV)/.llama
