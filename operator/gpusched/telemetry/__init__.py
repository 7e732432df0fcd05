"""GPU telemetry from Prometheus (dcgm-exporter metrics), cached with a TTL."""
