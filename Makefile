# Every target makes its own .venv on first use, so a fresh machine needs nothing by hand.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gridroute demo

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# The in-process benchmarks; the proxy ones (bench_proxy, bench_sse, bench_workers) pin
# processes to cores and install nginx/LiteLLM, so they are run by hand (BENCHMARKS.md).
bench: $(STAMP)
	$(BIN)/python bench/bench_select.py
	$(BIN)/python bench/bench_signals.py
	$(BIN)/python bench/bench_sim.py
	$(BIN)/python bench/bench_worlds.py
	$(BIN)/python bench/bench_fleet.py

clean:
	rm -rf $(VENV) build dist *.egg-info
