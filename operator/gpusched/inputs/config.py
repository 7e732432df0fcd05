"""The SchedulerConfig file a person hands us, read once, for the operator and the offline
tools alike."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpusched.api.config import SchedulerConfig, load_config
from gpusched.api.errors import InvalidObjectError
from gpusched.inputs import InputError


def read_config(path: Path | None) -> SchedulerConfig:
    """The SchedulerConfig in ``path``, or the defaults; `InputError` naming the file."""
    if path is None:
        return SchedulerConfig()
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        return load_config(raw, source=str(path))
    except (OSError, yaml.YAMLError) as error:
        raise InputError(f"{path}: cannot read: {error}") from None
    except InvalidObjectError as error:
        raise InputError(str(error)) from None
