"""The ``config`` part of charts/gpusched/values.schema.json, derived from `SchedulerConfig`.

The rest of the values schema is written by hand; ``config`` mirrors the model, so it is
generated from it. ``python -m tests.chart.values_schema`` rewrites it in place after the model
changed; ``test_chart.py`` fails while the file and the model disagree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpusched.api.config import SchedulerConfig

VALUES_SCHEMA = Path(__file__).resolve().parents[2] / "charts" / "gpusched" / "values.schema.json"


def _inline(node: Any, definitions: dict[str, Any]) -> Any:
    """The schema with every ``$ref`` replaced by its definition and titles dropped: one
    self-contained tree reads the same in every helm version's JSON-schema validator."""
    if isinstance(node, list):
        return [_inline(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = definitions[node["$ref"].rsplit("/", 1)[1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _inline(merged, definitions)
    return {k: _inline(v, definitions) for k, v in node.items() if k not in ("title", "$defs")}


def config_schema() -> dict[str, Any]:
    schema = SchedulerConfig.model_json_schema(by_alias=True)
    inlined: dict[str, Any] = _inline(schema, schema.get("$defs", {}))
    return inlined


def render(values_schema: dict[str, Any]) -> str:
    return json.dumps(values_schema, indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    values_schema = json.loads(VALUES_SCHEMA.read_text(encoding="utf-8"))
    values_schema["properties"]["config"] = config_schema()
    VALUES_SCHEMA.write_text(render(values_schema), encoding="utf-8")
    print(f"wrote {VALUES_SCHEMA}")


if __name__ == "__main__":
    main()
