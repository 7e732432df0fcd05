# gpusched — `make help` lists the targets.
PYTHON ?= python3

.PHONY: help setup test lint bench bench-openb bench-versus bench-scale bench-shapes chaos e2e simulate chart crds image controlplane cluster

help: ## list the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

setup: ## install gpusched with its development tools (editable)
	$(PYTHON) -m pip install -e '.[dev]'

test: lint ## lint, install helm and build the control plane (cached), then run every test
	bash .ci/prepare-tests.sh
	PATH="$(CURDIR)/.ci/bin:$$PATH" $(PYTHON) -m pytest -q

lint: ## ruff, ruff format --check, mypy --strict, import-linter
	ruff check operator tests testing bench
	ruff format --check operator tests testing bench
	mypy --strict operator/gpusched
	lint-imports

bench: ## run the engine, operator and telemetry benchmarks and print their tables
	$(PYTHON) bench/engine.py
	$(PYTHON) bench/operator_bench.py
	$(PYTHON) bench/telemetry.py
	$(PYTHON) bench/quality.py
	$(PYTHON) bench/openb.py --quick

bench-openb: ## openb placement quality vs published FGD: 17 traces x 9 policies x 10 seeds (~30 min, 2 cores)
	$(PYTHON) bench/openb.py --jobs 2 --plot bench/results/openb.png --json bench/results/openb.json

bench-versus: ## gpusched vs kube-scheduler 1.37 on a real control plane, 500 nodes (needs Go; ~7 min on 2 cores)
	bash .ci/install-helm.sh
	$(PYTHON) bench/versus.py

bench-scale: ## 5,000 nodes, 50,000 pods, 200 gangs, a failover, kube-scheduler beside (Go; well over 30 min on 2 cores)
	bash .ci/install-helm.sh
	$(PYTHON) bench/scale.py

bench-shapes: ## scheduler_perf shapes: gpusched vs kube-scheduler 1.37 vs the API server bind rate (ARGS=--quick: minutes)
	bash .ci/install-helm.sh
	$(PYTHON) bench/perf_shapes.py $(ARGS)

simulate: ## run `gpusched simulate` on the embedded sample
	gpusched simulate

controlplane: ## build etcd, kube-apiserver, kube-controller-manager, kube-scheduler v1.37.2, KubeRay, Kueue, kwok (Go; cached)
	bash testing/cluster/build-controlplane.sh
	bash testing/cluster/build-go.sh kuberay
	bash testing/cluster/build-go.sh kueue
	bash testing/cluster/build-go.sh kwok

cluster: ## a real control plane on 127.0.0.1 with the sample nodes, until Ctrl-C (prints kubeconfigs)
	bash .ci/install-helm.sh
	PATH="$(CURDIR)/.ci/bin:$$PATH" $(PYTHON) -m testing.cluster

e2e: ## kind end-to-end tests (need Docker and kind; skip otherwise)
	$(PYTHON) -m pytest -q tests/e2e

chart: ## helm lint --strict, then the chart, CRD schema and Dockerfile tests (installs helm into .ci/bin)
	bash .ci/install-helm.sh
	PATH="$(CURDIR)/.ci/bin:$$PATH" helm lint --strict charts/gpusched
	$(PYTHON) -m pytest -q tests/chart tests/unit/api/test_crd_schemas.py

crds: ## copy crds/ into the chart (the copy must stay identical; a test checks)
	cp crds/*.yaml charts/gpusched/crds/

image: ## build the container image gpusched:dev (needs a Docker engine)
	docker build -t gpusched:dev .

chaos: ## long chaos run (10,000 seeded runs of every class and 2,000 of the gangs class, ~35 min) and the fuzz tests at 2x (~15,000 cases)
	GPUSCHED_CHAOS_RUNS=10000 GPUSCHED_CHAOS_GANG_RUNS=2000 $(PYTHON) -m pytest -q -s tests/chaos/test_chaos.py
	GPUSCHED_FUZZ_SCALE=2 $(PYTHON) -m pytest -q tests/unit/api/test_fuzz_objects.py tests/unit/telemetry/test_fuzz_telemetry.py
