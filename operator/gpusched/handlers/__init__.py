"""The operator under Kopf: three activities, through Kopf's public API only.

- startup: applies the Kopf settings the operator needs, then builds the runtime from the
  options (`gpusched.handlers.startup.start`: options → runtime) and keeps it in Kopf's memo;
- login: Kopf's own requests use the runtime's credentials;
- cleanup: stops the runtime (`gpusched.handlers.startup.stop`).

The watches are the operator's own (`gpusched.k8s.watch`, one per kind of
`gpusched.handlers.events` and `gpusched.handlers.dra`); Kopf runs the process (start, stop,
signals, its ``/healthz`` liveness probe) and handles no resource. Nothing is ever written
on the watched objects for Kopf: no finalizers, no progress annotations.

Options are the flags of ``gpusched run`` (`gpusched.options`): from `configure`
(``gpusched run``) or, under plain ``kopf run -m gpusched.handlers.plain``, from
``$GPUSCHED_RUN_ARGS``. Importing this package changes nothing outside it: `registry` is a
registry of its own, handed to Kopf by ``gpusched run`` and the tests, and made Kopf's
default only by `gpusched.handlers.plain`.

A watch the API server refuses (a 404 while a CRD is re-installed) never ends the operator:
it is started over after a backoff, and ``/readyz`` (`gpusched.handlers.probes`) answers 503
while it is down.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any

import kopf

from gpusched.handlers.logs import configure_logging as configure_logging
from gpusched.handlers.logs import quiet_kopf
from gpusched.handlers.startup import Runtime, start, stop
from gpusched.k8s.client import load_configuration
from gpusched.options import Options as Options
from gpusched.options import OptionsError, from_environment

logger = logging.getLogger(__name__)

_options: Options | None = None
running: Runtime | None = None
"""The runtime of the operator running in this process, if any (for tests and debugging)."""


def configure(options: Options) -> None:
    """Sets the options the next operator run in this process uses."""
    global _options
    _options = options


def options() -> Options:
    """The options of `configure`, else (plain ``kopf run``) those in ``$GPUSCHED_RUN_ARGS``."""
    if _options is not None:
        return _options
    return from_environment(os.environ)


def _options_or_exit() -> Options:
    """`options`, or (plain ``kopf run`` with a bad configuration) one line and exit status 2,
    as ``gpusched run`` does: Kopf retries a failing startup handler every 60 s for ever, with
    a traceback each time, and a configuration does not fix itself."""
    try:
        return options()
    except OptionsError as error:
        print(f"gpusched: {error}", file=sys.stderr)
        # Kopf's own tasks, never started, would warn on the way out: noise after the line.
        warnings.filterwarnings("ignore", message="coroutine .* was never awaited")
        raise SystemExit(2) from None


async def on_startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    opts = _options_or_exit()
    # Under `kopf run --verbose` (or --debug) Kopf has set the root logger to DEBUG.
    quiet_kopf(opts.verbose or logging.getLogger().isEnabledFor(logging.DEBUG))
    settings.posting.enabled = False  # our own Events are aggregated; Kopf's would duplicate
    settings.scanning.disabled = True  # Kopf watches nothing: no need to scan for CRDs
    settings.networking.request_timeout = 60
    memo.runtime = await start(opts)
    global running
    running = memo.runtime


async def on_login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo:
    """Kopf's own requests use the same credentials as our client."""
    runtime: Runtime | None = memo.get("runtime")
    configuration = (
        runtime.configuration
        if runtime is not None
        else await load_configuration(options().kubeconfig)
    )
    api_key = configuration.api_key or {}
    token = api_key.get("authorization") or api_key.get("BearerToken")
    if token and token.lower().startswith("bearer "):
        token = token[len("bearer ") :]
    return kopf.ConnectionInfo(
        server=str(configuration.host),
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        token=token or None,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
        default_namespace="default",
    )


async def on_cleanup(memo: kopf.Memo, **_: Any) -> None:
    global running
    runtime: Runtime | None = memo.get("runtime")
    if runtime is None:
        return
    running = None
    await stop(runtime)


def operator_registry() -> kopf.OperatorRegistry:
    """A registry with the operator's three activities, registered explicitly."""
    made = kopf.OperatorRegistry()
    kopf.on.startup(registry=made)(on_startup)
    kopf.on.login(registry=made)(on_login)
    kopf.on.cleanup(registry=made)(on_cleanup)
    return made


registry = operator_registry()
"""The operator's registry (not Kopf's default: see `gpusched.handlers.plain`)."""
