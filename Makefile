# Two commands for a new user: `make demo` (set up + default run) and `make test` (set up + the fast tests).
# `make test-all` is what CI runs: every test (fast and slow tiers) and every notebook under nbval.
# Set-up creates .venv if there is none and installs the project with pip (`pip install -e '.[dev]'`).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# pytest processes side by side (pytest-xdist; tests/conftest.py keeps the network-namespace tests and
# the notebooks each in one process, in order). The multi-rank tests each use every core already.
TEST_JOBS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist loadgroup

.PHONY: setup system-deps demo test test-slow test-all test-notebooks bench-all bench-overhead bench-bytes bench-staleness bench-stanza bench-compression bench-bandwidth gpu-check lab lab-check lab-screenshots clean-runs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[dev]'
	touch $@

setup: $(VENV)/.installed          ## virtual environment with the project and its dev tools

system-deps:                       ## (root; Debian/Ubuntu) Chromium for the report-rendering test, iproute2 for network=emulated
	apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium iproute2

demo: setup                        ## the default job: sync DDP, small CNN, digits, 4 CPU ranks
	$(BIN)/python -m workbench

test: setup                        ## the fast tier (minutes): unit, equivalence, byte-count, config and bad-input tests
	$(PYTEST) -m "not slow" --durations=10

test-slow: setup                   ## the slow tier: convergence runs, restarts, bench smoke runs, notebook executions
	$(PYTEST) -m slow --durations=15

test-all: setup                    ## what CI runs: every test (both tiers) and every notebook under nbval
	$(PYTEST) --durations=25 --nbval-lax notebooks/ tests/

test-notebooks: setup              ## every notebook with its default parameters (pytest --nbval-lax)
	$(BIN)/python -m pytest -q --nbval-lax notebooks/   # one process: the groups live in tests/conftest.py

bench-all: setup                   ## every section of BENCHMARKS.md (hours; `python -m workbench.bench all --list`)
	$(BIN)/python -m workbench.bench all --write

bench-overhead: setup              ## trainer=sync and the default job vs hand-written DDP scripts -> BENCHMARKS.md
	$(BIN)/python -m workbench.bench all --only overhead --write

bench-bytes: setup                 ## bytes per worker per step, every paradigm, 4 models -> BENCHMARKS.md
	$(BIN)/python -m workbench.bench all --only bytes --write

bench-staleness: setup             ## time to 90 % on the digits, sync vs hardsync vs n-softsync vs async -> BENCHMARKS.md
	$(BIN)/python -m workbench.bench all --only staleness --write

bench-stanza: setup                ## Stanza allocation sweep, predicted vs measured -> BENCHMARKS.md
	$(BIN)/python -m workbench.bench all --only stanza --write

bench-compression: setup           ## every compressor on ResNet-18 and VGG-16, and the utility model -> BENCHMARKS.md
	$(BIN)/python -m workbench.bench all --only compression --write

bench-bandwidth: setup             ## emulated link-rate sweep (root): samples/s per paradigm, compression crossover -> BENCHMARKS.md
	$(BIN)/python -m workbench.bench all --only bandwidth --write

gpu-check: setup                   ## every trainer a few steps on this machine's GPUs (PASS/FAIL, samples/s)
	$(BIN)/python -m workbench.bench.gpu_check

LAB_PORT ?= 8888
lab: setup                         ## JupyterLab on the notebooks; prints the URL to open (LAB_PORT=8888)
	@token=$$($(BIN)/python -c 'import secrets; print(secrets.token_hex(16))'); \
	echo "JupyterLab: http://127.0.0.1:$(LAB_PORT)/lab/tree/00_quickstart.ipynb?token=$$token"; \
	$(BIN)/jupyter lab --ServerApp.root_dir=notebooks --ip=127.0.0.1 --port=$(LAB_PORT) --ServerApp.port_retries=0 \
	    --IdentityProvider.token=$$token $$([ "$$(id -u)" = 0 ] && echo --allow-root)

lab-check: setup                   ## JupyterLab driven by headless Chromium: widgets, figures, sliders (needs make system-deps)
	$(BIN)/python -m pytest -q -m browser tests/test_lab_browser.py

lab-screenshots: setup             ## the same, also writing the README's JupyterLab screenshots into docs/img/
	WORKBENCH_LAB_SCREENSHOTS=docs/img $(BIN)/python -m pytest -q -m browser tests/test_lab_browser.py

clean-runs:                        ## delete everything under experiments/runs and experiments/multiruns
	rm -rf experiments/runs experiments/multiruns
