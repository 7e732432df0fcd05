"""The node annotation ``gpusched.io/gpus-actual``: the GPUs each pod on a device-plugin node
really got, as the kubelet records them (its PodResources API, read by the node agent).

One annotation on the Node rather than one per pod: the agent already writes its Node and
needs no right to write pods, and the scheduler already watches nodes. The value is JSON,
``{"<namespace>/<pod>": [0, 1], …}``, pods with GPUs only, keys sorted; indices are those of
the node's ``gpusched.io/gpu-topology``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from gpusched.api.errors import InvalidObjectError

ACTUAL_GPUS_ANNOTATION = "gpusched.io/gpus-actual"


def format_actual_gpus(actual: Mapping[str, tuple[int, ...]]) -> str:
    return json.dumps({key: list(actual[key]) for key in sorted(actual)}, separators=(",", ":"))


def parse_actual_gpus(node: str, value: str) -> dict[str, tuple[int, ...]]:
    """The annotation's pods and indices; raises `InvalidObjectError` naming the field."""
    field = f"metadata.annotations[{ACTUAL_GPUS_ANNOTATION}]"
    try:
        raw = json.loads(value)
    except ValueError as error:
        raise InvalidObjectError(f"Node {node}", field, f"not JSON: {error}") from None
    if not isinstance(raw, dict):
        raise InvalidObjectError(f"Node {node}", field, "must be an object of pod -> indices")
    actual: dict[str, tuple[int, ...]] = {}
    for key, indices in raw.items():
        if not (
            isinstance(indices, list)
            and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices)
        ):
            raise InvalidObjectError(f"Node {node}", f"{field}[{key}]", "must be a list of indices")
        actual[str(key)] = tuple(sorted(indices))
    return actual
