"""The operator's log: INFO lines of its own (decisions, binds, leadership), and Kopf's
quiet unless asked."""

from __future__ import annotations

import logging
import re

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_HANDLER_SUCCEEDED = re.compile(r"Handler '[^']*' succeeded\.")


def _not_a_handler_success(record: logging.LogRecord) -> bool:
    return not (
        record.levelno == logging.INFO and _HANDLER_SUCCEEDED.fullmatch(record.getMessage())
    )


def configure_logging(verbose: bool) -> None:
    """Logging for ``gpusched run``: INFO (DEBUG with ``verbose``) to stderr."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=LOG_FORMAT)
    quiet_kopf(verbose)


def quiet_kopf(verbose: bool) -> None:
    """Drops Kopf's INFO line per handled event unless ``verbose`` (idempotent)."""
    objects = logging.getLogger("kopf.objects")
    objects.removeFilter(_not_a_handler_success)
    if not verbose:
        objects.addFilter(_not_a_handler_success)
