# Two commands for a new user: `make demo` (set up + default run) and `make test` (set up + tests).
# Set-up creates .venv if there is none and installs the project with pip (`pip install -e '.[dev]'`).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: setup demo test bench-overhead gpu-check lab clean-runs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[dev]'
	touch $@

setup: $(VENV)/.installed          ## virtual environment with the project and its dev tools

demo: setup                        ## the default job: sync DDP, small CNN, digits, 4 CPU ranks
	$(BIN)/python -m workbench

test: setup                        ## the whole test suite
	$(BIN)/python -m pytest -q --durations=15

bench-overhead: setup              ## trainer=sync vs a hand-written DDP script -> BENCHMARKS.md
	$(BIN)/python -m workbench.bench.overhead --write

gpu-check: setup                   ## every trainer a few steps on this machine's GPUs (PASS/FAIL, samples/s)
	$(BIN)/python -m workbench.bench.gpu_check

lab: setup                         ## JupyterLab on the notebooks
	$(BIN)/jupyter lab notebooks/

clean-runs:                        ## delete everything under experiments/runs and experiments/multiruns
	rm -rf experiments/runs experiments/multiruns
