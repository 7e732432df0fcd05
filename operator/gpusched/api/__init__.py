"""Pydantic models of what gpusched reads: our CRDs, the Kubernetes objects the engine needs,
the node GPU-topology annotation and the scheduler configuration. Parsing only; no I/O."""
