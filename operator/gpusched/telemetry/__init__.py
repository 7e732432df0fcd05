"""GPU telemetry from Prometheus (dcgm-exporter metrics), cached with a TTL.

`gpusched.telemetry.cache.TelemetryCache` is what the operator uses; `series` maps series to
GPUs for both Prometheus answers (`prometheus`) and saved scrapes (`exposition`). This package
file imports nothing, so ``simulate --metrics`` does not pull in httpx.
"""
