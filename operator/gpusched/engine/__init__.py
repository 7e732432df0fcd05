"""The placement engine: pure functions from a cluster snapshot and pending work to decisions.

No I/O, no Kubernetes client, no network (enforced by import-linter's ``engine-is-pure``).
"""
