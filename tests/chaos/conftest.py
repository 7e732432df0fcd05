"""The chaos suite's size: a short form by default (part of `pytest`), a long form with
``GPUSCHED_CHAOS_RUNS=10000 pytest tests/chaos``; ``GPUSCHED_CHAOS_FIRST`` picks the first seed,
``GPUSCHED_CHAOS_HTTP_RUNS`` the number of runs against the real operator.

The API server fixtures are the integration tests' (tests/integration/conftest.py): the runs
against the real operator go to the real control plane, through the fault proxy."""

from tests.integration.conftest import api, apiserver, crds, kubeconfig, real_cluster

__all__ = ["api", "apiserver", "crds", "kubeconfig", "real_cluster"]
