# podium — every target sets up what it needs: `make demo` and `make test` work on a fresh clone.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup build controlplane helm promtool demo-operators lint typecheck unit e2e e2e-operators test demo demo-stop demo-offline bench bench-placement bench-placement-topology clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

## Build kube-apiserver, kube-scheduler, kube-controller-manager, etcd and kwok from the Go
## module proxy into ~/.cache/podium (skipped when cached).
controlplane:
	$(PYTHON) -m testbed.build controlplane

## helm, built from the Go module proxy (for the chart tests), cached in ~/.cache/podium.
helm:
	$(PYTHON) -m testbed.build helm

## promtool, built from the Go module proxy without service discovery (for the alert tests,
## tests/monitoring), cached in ~/.cache/podium.
promtool:
	$(PYTHON) -m testbed.build promtool

## Every Go-built part the test suite needs, side by side (each a no-op when cached).
build:
	$(MAKE) --no-print-directory -j3 controlplane helm promtool

lint: setup
	$(BIN)/ruff check webhook tests scripts bench testbed
	$(BIN)/ruff format --check webhook
	$(BIN)/lint-imports

typecheck: setup
	$(BIN)/mypy

unit: setup
	$(BIN)/pytest -m "not e2e"

## The real training operators the e2e tests run beside podium (tests/e2e/operators,
## docs/operators.md), and Kueue (tests/e2e/test_kueue.py): all unless PODIUM_E2E_OPERATORS names
## fewer ("" for none).
## Built once from the Go module proxy into ~/.cache/podium (about 13 minutes cold on a quiet
## machine, two to three times that under load).
PODIUM_E2E_OPERATORS ?= all
export PODIUM_E2E_OPERATORS

e2e: setup build
	$(BIN)/pytest -m e2e

e2e-operators: setup controlplane
	$(BIN)/pytest -m e2e tests/e2e/operators

## The whole suite: lint, types, unit and property tests, and the end-to-end tests on a real
## control plane. What only some tests need (the Cilium oracles, the operators, Kueue) builds in
## the background from the start (`testbed.build --for-tests`, log in $(VENV)/test-builds.log),
## beside the control plane and then the rest of the suite; a test that needs a part still being
## built waits for it, and the tests with the operators run last (tests/e2e/conftest.py).
test: setup
	$(PYTHON) -m testbed.build --for-tests > $(VENV)/test-builds.log 2>&1 & builds=$$!; \
	$(MAKE) --no-print-directory build lint typecheck && $(BIN)/pytest; status=$$?; \
	wait $$builds || { echo "background builds failed:"; tail -n 20 $(VENV)/test-builds.log; }; \
	exit $$status

## The three real operators `make demo` runs beside podium (training-operator, mpi-operator,
## JobSet), built from the Go module proxy into ~/.cache/podium (about 6 minutes cold after the
## control plane; skipped when cached).
DEMO_OPERATORS := trainingoperator mpioperator jobset

demo-operators:
	$(PYTHON) -m testbed.build $(DEMO_OPERATORS)

## podium's main job on a local control plane: the real operators create the example jobs' pods,
## podium pins them, creates the policies and audits it all.
demo: setup controlplane demo-operators
	$(BIN)/python -m scripts.demo $(DEMO_ARGS)

## Stop a demo kept running with DEMO_ARGS=--keep (in the foreground or the background), and wait
## until its cluster is down; its work directory stays.
demo-stop:
	$(BIN)/python -m scripts.demo --stop

## The same decisions offline, no cluster at all: podium review on the shipped examples; then the
## hold mode on a snapshot as it leaves the cluster (examples/cluster-held.yaml, taken at 12:00).
demo-offline: setup
	$(BIN)/podium review examples/pytorchjob-worker-0.yaml --cluster examples/cluster.yaml \
		--config examples/podium-pin.yaml
	$(BIN)/podium review examples/pytorchjob-worker-0.yaml --cluster examples/cluster-held.yaml \
		--config examples/podium-hold.yaml --at 2026-12-01T12:00:00Z -o summary

## Benchmarks against the bare-ASGI limit and kopf (docs/benchmarks/); needs wrk from Debian.
bench: setup
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	$(BIN)/python -m bench throughput

## The placement study (docs/benchmarks/placement.md): default scheduler, self-affinity, podium's
## pin and hold, the scheduler's gang placement (by hand and by podium) and Kueue TAS on a local
## control plane, three seeds; ~100 minutes on 2 cores, after Kueue's build.
bench-placement: setup controlplane
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(PYTHON) -m testbed.build kueue
	$(BIN)/python -m bench placement

## The topology study (docs/benchmarks/placement.md, "Below the zone"): podium's hold with and
## without topology-levels, Kueue TAS and kube-scheduler's topology placement on 2 zones × 4
## blocks × 4 nodes, three seeds; ~50 minutes on 2 cores, after Kueue's build.
bench-placement-topology: setup controlplane
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(PYTHON) -m testbed.build kueue
	$(BIN)/python -m bench placement-topology

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
