"""The operator's probes and metrics, on one port beside Kopf's: Prometheus' ``/metrics``
and the readiness probe's ``/readyz`` (200 while every watch is up, 503 naming those that are
down). Kopf's ``/healthz`` stays the liveness probe, so a watch that is down makes the pod
unready, not restarted."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from gpusched.k8s.watch import Readiness


class _MetricsServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """One line per scrape or probe would drown the operator's own."""


Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def serve_metrics(address: str, port: int, readiness: Readiness) -> WSGIServer:
    """Prometheus' ``/metrics`` and the readiness probe's ``/readyz`` (200 while every watch
    is up, 503 naming those that are down), served from a thread: Kopf's ``/healthz`` stays
    the liveness probe, so a watch that is down makes the pod unready, not restarted."""
    metrics: Wsgi = make_wsgi_app()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/readyz":
            return metrics(environ, start_response)
        status = "200 OK" if readiness.ready else "503 Service Unavailable"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
        return [readiness.report().encode() + b"\n"]

    host = address.strip("[]")  # an IPv6 address, as --metrics-address writes it
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("MetricsServer", (_MetricsServer,), {"address_family": family})
    server: WSGIServer = make_server(host, port, app, server_class, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="gpusched-metrics", daemon=True).start()
    return server
