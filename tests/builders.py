"""Moved to tests/support/engine.py; this name stays until the last importers move."""

from tests.support.engine import *  # noqa: F403
