"""Merge patch (RFC 7386), strategic merge (as merge) and JSON patch (RFC 6902)."""

from __future__ import annotations

import copy
from typing import Any

from .errors import api_error, bad_request

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: dicts merge recursively, `null` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            result[key] = merge_patch(result.get(key), value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _strip_directives(patch: Any) -> Any:
    """Drop strategic-merge directives ($patch, $setElementOrder/..., $retainKeys, ...)."""
    if isinstance(patch, dict):
        return {k: _strip_directives(v) for k, v in patch.items() if not k.startswith("$")}
    if isinstance(patch, list):
        return [_strip_directives(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    return patch


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge treated as a merge patch: lists (e.g. conditions) are replaced whole."""
    return merge_patch(target, _strip_directives(patch))


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _split_pointer(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise bad_request(f"invalid JSON pointer: {pointer!r}")
    return [_unescape(token) for token in pointer[1:].split("/")]


def _resolve_parent(doc: Any, tokens: list[str], pointer: str) -> tuple[Any, str]:
    current = doc
    for token in tokens[:-1]:
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            raise api_error(422, "Invalid", f"jsonpatch: path {pointer!r} does not exist")
    return current, tokens[-1]


def _get(doc: Any, pointer: str) -> Any:
    current = doc
    for token in _split_pointer(pointer):
        if isinstance(current, dict) and token in current:
            current = current[token]
        elif isinstance(current, list) and token.isdigit() and int(token) < len(current):
            current = current[int(token)]
        else:
            raise api_error(422, "Invalid", f"jsonpatch: path {pointer!r} does not exist")
    return current


def _add(doc: Any, pointer: str, value: Any) -> Any:
    tokens = _split_pointer(pointer)
    if not tokens:
        return copy.deepcopy(value)
    parent, last = _resolve_parent(doc, tokens, pointer)
    if isinstance(parent, dict):
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        if last == "-":
            parent.append(copy.deepcopy(value))
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), copy.deepcopy(value))
        else:
            raise api_error(422, "Invalid", f"jsonpatch add: index out of range in {pointer!r}")
    else:
        raise api_error(422, "Invalid", f"jsonpatch add: no container at {pointer!r}")
    return doc


def _remove(doc: Any, pointer: str) -> Any:
    tokens = _split_pointer(pointer)
    if not tokens:
        raise api_error(422, "Invalid", "jsonpatch remove: cannot remove the root")
    parent, last = _resolve_parent(doc, tokens, pointer)
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        del parent[int(last)]
    else:
        raise api_error(422, "Invalid", f"jsonpatch remove: path {pointer!r} does not exist")
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902. A failed `test` or a missing path is a 422 Invalid, as in the real server."""
    if not isinstance(ops, list):
        raise bad_request("json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"invalid json patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind == "test":
            actual = _get(doc, path)
            if actual != op.get("value"):
                raise api_error(
                    422,
                    "Invalid",
                    f"the server rejected our request due to an error in our request: "
                    f"testing value {path} failed: {actual!r} != {op.get('value')!r}",
                )
        elif kind == "add":
            doc = _add(doc, path, op.get("value"))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)  # must exist
            doc = _remove(doc, path) if _split_pointer(path) else doc
            doc = _add(doc, path, op.get("value"))
        elif kind == "move":
            value = copy.deepcopy(_get(doc, op["from"]))
            doc = _remove(doc, op["from"])
            doc = _add(doc, path, value)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
        else:
            raise bad_request(f"unknown json patch operation: {kind!r}")
    return doc


def apply_patch(content_type: str, target: dict[str, Any], patch: Any) -> dict[str, Any]:
    """Dispatch on the Content-Type (parameters such as `; charset=` ignored)."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == JSON_PATCH:
        result = json_patch(target, patch)
    elif kind == STRATEGIC:
        result = strategic_merge_patch(target, patch)
    elif kind in (MERGE, "application/json"):
        result = merge_patch(target, patch)
    else:
        raise api_error(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: "
            f"{JSON_PATCH}, {MERGE}, {STRATEGIC}",
        )
    if not isinstance(result, dict):
        raise bad_request("the patched object is not a JSON object")
    return result
