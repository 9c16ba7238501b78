# topo-scheduler: every target does its own set-up, so `make demo` and `make test` work on a fresh
# machine. Python packages go into .venv (from PyPI); the control plane is built from Go modules.
# Benchmarks: bench-* (and dashboard-png) each run one in full; bench-smoke runs every one's quick
# mode (small sizes, seconds to a minute each; .ci/run calls it after `make test`).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: deps lint types imports unit integration redis-server test demo bench-core bench-frag bench-topology bench-live bench-scale bench-takeover bench-failover bench-soak bench-smoke sim soak-sim clean \
        k8s-build cluster-up cluster-down e2e

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

deps: $(STAMP)

lint: deps
	$(BIN)/ruff check scheduler tests benchmarks
	$(BIN)/ruff format --check scheduler tests benchmarks

types: deps
	$(BIN)/mypy

imports: deps
	$(BIN)/lint-imports

unit: deps
	$(BIN)/pytest -q tests/unit

# Integration tests run a real redis-server (Debian's package), started per test session.
redis-server:
	@command -v redis-server >/dev/null || { \
	  echo "redis-server is missing: installing Debian's package (apt-get install redis-server)"; \
	  { apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; } || { \
	    echo "ERROR: could not install redis-server; install it with: apt-get install redis-server"; \
	    exit 1; }; }

integration: deps redis-server
	$(BIN)/pytest -q tests/integration

# ---- the local control plane (issue 4): tools/k8s + scheduler/testing --------------------------
# Binaries are built from tools/k8s into ~/.cache/topo-scheduler/k8s/<versions>/ (only what is
# missing; a cold build takes about 8 minutes on 2 cores). A missing Go fails the build, never skips it.
k8s-build:
	@bash tools/k8s/build.sh

# Helm (issue 24), built from tools/helm's Go module into ~/.cache/topo-scheduler/helm/<version>/
# the same way (4.5 CPU-minutes cold: about 5 minutes on 2 cores); the e2e tests lint, render and
# install the chart with it.
.PHONY: helm-build
helm-build:
	@bash tools/helm/build.sh

# The dashboard picture of docs/operations.md (docs/dashboard.png): the chart's Grafana dashboard queries
# evaluated over /metrics scrapes of two replicas under a scripted load on the local plane, drawn
# with matplotlib (no Grafana here). About 3 minutes.
.PHONY: dashboard-png
dashboard-png: deps redis-server k8s-build
	$(BIN)/python -m benchmarks.dashboard

cluster-up: deps
	@$(BIN)/python -m scheduler.testing.controlplane detach --state .cluster

cluster-down: deps
	@$(BIN)/python -m scheduler.testing.controlplane down --state .cluster

e2e: deps redis-server k8s-build helm-build
	$(BIN)/pytest -q tests/e2e

test: lint types imports unit integration sim e2e

# The main job: simulate the example workload, then run it live on the local control plane
# (etcd + kube-apiserver + KWOK) with Redis and the scheduler, print where every pod went, clean up.
demo: deps redis-server k8s-build
	$(BIN)/python -m scheduler.testing.demo

bench-live: deps redis-server k8s-build
	$(BIN)/python -m benchmarks.bench_live

# 5,000 KWOK nodes of 8 GPUs, 50,000 bound pods, a backlog of 5,000 pending pods: start-up to
# first bind, the backlog's binds, peak RSS beside kube-scheduler v1.37, and topo-scheduler's
# failover between two replicas (Redis). 5 to 7 minutes on 2 cores.
bench-scale: deps redis-server k8s-build
	$(BIN)/python -m benchmarks.bench_scale

bench-core: deps
	$(BIN)/python -m benchmarks.bench_core

# GPU fragmentation on Alibaba's openb trace, replayed as the FGD paper's simulator does (issue
# 23): BestFit and FGD calibrated against the published means, then ours; 10 seeds, a table and
# a plot in build/bench-frag/. The trace is read from ../shared/data/openb (or $$TOPO_OPENB_DIR);
# FRAG_ARGS="--trace openb_pod_list_multigpu50.csv" replays another variant;
# FRAG_ARGS="--scaled 5000,10000 --seeds 42-44" the node list repeated to those sizes (ours);
# FRAG_ARGS="--pin 33 --pin-seed 1" a third of the GPU pods pinned to GPU models.
bench-frag: deps
	$(BIN)/python -m benchmarks.bench_frag $(FRAG_ARGS)

# Cross-node topology (issues 21, 32): one seeded stream of gangs on 5,040 nodes until the first
# refusal, under our joint choice, topology off, and Kueue's BestFit order + our in-node choice,
# side by side; then the same stream queued (gangs wait and retry): domain fragmentation,
# gang wait and GPU-hours stranded per policy (about 3 minutes on 2 cores).
bench-topology: deps
	$(BIN)/python -m benchmarks.bench_topology

# Election to ready with 100,000 bound pods in a local redis-server (no control plane needed).
bench-takeover: deps redis-server
	$(BIN)/python -m benchmarks.bench_takeover

# Redis master failover through Sentinel (a master, two replicas, three Sentinels) under a stream
# of pods, two replicas on the local plane: the time without binding beside down-after and the
# lease (issue 22). About 5 minutes on 2 cores.
bench-failover: deps redis-server k8s-build
	$(BIN)/python -m benchmarks.bench_failover

# 50,000 pods created and deleted through a leader and a standby in one process (a local
# redis-server, a fake apiserver): RSS and every per-pod structure's size before, at the peak
# and after (no control plane needed).
bench-soak: deps redis-server
	$(BIN)/python -m benchmarks.bench_soak

# Every bench above (and dashboard-png) in its quick mode, the same code path on small sizes: each
# must exit 0 and print its table; no figure is checked (benchmarks/smoke.py). .ci/run calls it
# after `make test`, so no benchmark breaks silently. About 3.5 minutes on 2 cores, most of it the
# four that run on the local plane.
bench-smoke: deps redis-server k8s-build
	$(BIN)/python -m benchmarks.smoke

# The deterministic simulation of the live scheduler (issue 30; tests/sim/README.md): real
# replicas on a simulated clock against a fake apiserver with faults, schedules drawn and shrunk
# by Hypothesis. `make sim` is part of `make test`:
# 20,000 steps over many seeds on both cores, then every mutant (each fixed bug of issues 12, 20
# and 30 put back) checked by its hand-written timeline or from its known seed, both cores at
# once; it fails on any violation or missed mutant (about 1 minute). SIM_CI_LEFT_OUT: the rules
# that still find something open on main, each named here with its seed, left out of the soak
# (the mutants' timelines and seeds still use them). None now: seed 14 (standby drift after an
# etcd restore and a recreate) passes since seed 380's fix, seed 25 (a ResourceClaim left
# reserved for a pending pod) since the leader Unreserves it (the not-placed cell's unreserve).
# `make soak-sim` runs for a chosen time. Examples:
#   make soak-sim SIM_ARGS="--seconds 3600"           a release soak
#   make soak-sim SIM_ARGS="--seed 45 --steps 1"       replay one seed (prints its shortest timeline)
#   make soak-sim SIM_ARGS="--mutant all --seconds 60" each fixed bug of issues 12/20/30 put back
#   make soak-sim SIM_ARGS="--redis"                   on a real redis-server
# PYTHONHASHSEED is fixed so that a seed replays the same run.
SIM_CI_LEFT_OUT ?=
sim: deps
	PYTHONHASHSEED=0 $(BIN)/python -m tests.sim.soak --ci --steps 20000 --jobs 2 \
		--mutant-seconds 10 --without "$(SIM_CI_LEFT_OUT)"

SIM_ARGS ?= --seconds 60
soak-sim: deps redis-server
	PYTHONHASHSEED=0 $(BIN)/python -m tests.sim.soak $(SIM_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
