"""Moved to tests/support/dra.py; this name stays until the last importers move."""

from tests.support.dra import *  # noqa: F403
