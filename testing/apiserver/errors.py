"""API errors as kmock's KubernetesError, rendered as v1 Status objects."""

from __future__ import annotations

from typing import Any

import kmock

ApiError = kmock.KubernetesError

REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Gone",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_body(
    code: int,
    reason: str | None = None,
    message: str | None = None,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A v1 Status object; `code` < 400 gives a Success status."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "code": code,
    }
    if code >= 400:
        body["reason"] = reason or REASONS.get(code, "Unknown")
        body["message"] = message or body["reason"]
    if details:
        body["details"] = details
    return body


def error_status(exc: kmock.KubernetesError) -> dict[str, Any]:
    return status_body(exc.status, exc.reason, exc.message, exc.details)


def api_error(
    code: int, reason: str | None = None, message: str | None = None, **details: Any
) -> kmock.KubernetesError:
    return kmock.KubernetesError(
        status=code,
        reason=reason or REASONS.get(code, "Unknown"),
        message=message or reason or REASONS.get(code, "Unknown"),
        details=details or None,
    )


def bad_request(message: str) -> kmock.KubernetesError:
    return api_error(400, "BadRequest", message)


def not_found(kind: str, name: str, group: str = "") -> kmock.KubernetesError:
    what = f"{kind}.{group}" if group else kind
    return api_error(404, "NotFound", f'{what} "{name}" not found', name=name, kind=kind)


def already_exists(kind: str, name: str, group: str = "") -> kmock.KubernetesError:
    what = f"{kind}.{group}" if group else kind
    return api_error(409, "AlreadyExists", f'{what} "{name}" already exists', name=name, kind=kind)


def conflict(kind: str, name: str, message: str, group: str = "") -> kmock.KubernetesError:
    what = f"{kind}.{group}" if group else kind
    return api_error(
        409, "Conflict", f'Operation cannot be fulfilled on {what} "{name}": {message}',
        name=name, kind=kind,
    )  # fmt: skip


def invalid(kind: str, name: str, message: str) -> kmock.KubernetesError:
    return api_error(422, "Invalid", f'{kind} "{name}" is invalid: {message}', name=name, kind=kind)
