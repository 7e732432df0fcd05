"""gpusched: a topology-aware gang scheduler for GPU workloads on Kubernetes."""

__version__ = "0.1.0"
