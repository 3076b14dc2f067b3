"""Failures as the Kubernetes ``Status`` objects clients parse.

Clients branch on ``reason`` and ``code`` (client-go's ``IsConflict``, the
Python client's ``ApiException.status``), so every refusal the dev cluster
makes is an :class:`ApiError` carrying exactly those two, never a bare
HTTP error page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, final

from kruntimes.devcluster.types import Obj

# reason -> HTTP code, the closed set this server answers with.
REASON_CODES: Final[dict[str, int]] = {
    "BadRequest": 400,
    "Unauthorized": 401,
    "Forbidden": 403,
    "NotFound": 404,
    "MethodNotAllowed": 405,
    "NotAcceptable": 406,
    "AlreadyExists": 409,
    "Conflict": 409,
    "Gone": 410,
    "Expired": 410,
    "RequestEntityTooLarge": 413,
    "UnsupportedMediaType": 415,
    "Invalid": 422,
    "TooManyRequests": 429,
    "InternalError": 500,
    "ServiceUnavailable": 503,
    "Timeout": 504,
}


@final
class ApiError(Exception):
    """A refused request; :meth:`status` is the body the client receives."""

    __slots__ = ("code", "reason", "message", "details", "retry_after")

    def __init__(
        self,
        reason: str,
        message: str,
        *,
        details: Obj | None = None,
        retry_after: int | None = None,
        code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.code = code if code is not None else REASON_CODES[reason]
        self.message = message
        self.details = details
        self.retry_after = retry_after

    def status(self) -> Obj:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        if self.retry_after is not None:
            body.setdefault("details", {})["retryAfterSeconds"] = self.retry_after
        return body


def _details(group: str, plural: str, name: str) -> Obj:
    details: Obj = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return details


def _qualified(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        "NotFound", f'{_qualified(group, plural)} "{name}" not found', details=_details(group, plural, name)
    )


def already_exists(group: str, plural: str, name: str) -> ApiError:
    return ApiError(
        "AlreadyExists",
        f'{_qualified(group, plural)} "{name}" already exists',
        details=_details(group, plural, name),
    )


def conflict(group: str, plural: str, name: str, why: str | None = None) -> ApiError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(group, plural)} "{name}": {why}',
        details=_details(group, plural, name),
    )


@final
@dataclass(frozen=True, slots=True)
class FieldError:
    """One cause of a 422: apimachinery's ``field.Error`` (``reason`` is the cause's ``FieldValue...`` name).

    ``detail`` is what follows the field path in the rendered message, e.g.
    ``Invalid value: "x": must be ...`` or ``Required value``.
    """

    reason: str
    field: str
    detail: str

    def __str__(self) -> str:
        return f"{self.field}: {self.detail}" if self.field else self.detail


_REASON_BY_PREFIX: Final = (
    ("Required value", "FieldValueRequired"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("Too long", "FieldValueTooLong"),
    ("Too many", "FieldValueTooMany"),
    ("Duplicate value", "FieldValueDuplicate"),
    ("Forbidden", "FieldValueForbidden"),
    ("Not found", "FieldValueNotFound"),
    ("Internal error", "InternalError"),
)


def field_error(field: str, detail: str) -> FieldError:
    """A :class:`FieldError` whose reason follows from the detail's wording, as apimachinery words them."""
    reason = next((r for prefix, r in _REASON_BY_PREFIX if detail.startswith(prefix)), "FieldValueInvalid")
    return FieldError(reason, field, detail)


def invalid(kind: str, group: str, name: str, causes: Sequence[tuple[str, str] | FieldError]) -> ApiError:
    """422 with one cause per field error, as apimachinery's ``NewInvalid`` renders it.

    One cause reads ``Kind.group "name" is invalid: field: detail``; several are bracketed and comma-separated.
    """
    errs = [c if isinstance(c, FieldError) else field_error(*c) for c in causes]
    rendered = str(errs[0]) if len(errs) == 1 else "[" + ", ".join(str(e) for e in errs) + "]"
    details: Obj = {
        "name": name,
        "kind": kind,
        "causes": [{"reason": e.reason, "message": e.detail, "field": e.field} for e in errs],
    }
    if group:
        details["group"] = group
    qualified = f"{kind}.{group}" if group else kind
    return ApiError("Invalid", f'{qualified} "{name}" is invalid: {rendered}', details=details)


def bad_request(message: str) -> ApiError:
    return ApiError("BadRequest", message)


def expired(message: str) -> ApiError:
    return ApiError("Expired", message)


TOO_LARGE_RETRY_SECONDS: Final = 1
"""kube-apiserver's ``resourceVersionTooHighRetrySeconds``."""


def too_large_resource_version(requested: int, current: int) -> ApiError:
    """What kube-apiserver answers a read from a resourceVersion it has not reached
    (``storage.NewTooLargeResourceVersionError``: a ``Timeout`` with one cause)."""
    return ApiError(
        "Timeout",
        f"Timeout: Too large resource version: {requested}, current: {current}",
        details={"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]},
        retry_after=TOO_LARGE_RETRY_SECONDS,
    )


def method_not_allowed(method: str) -> ApiError:
    return ApiError("MethodNotAllowed", f"the server does not allow this method on the requested resource ({method})")


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError("UnsupportedMediaType", f'the body of the request was in an unknown format - accepted media types include: application/json, application/merge-patch+json, application/json-patch+json ("{content_type}" given)')


def internal_error(message: str) -> ApiError:
    return ApiError("InternalError", f"Internal error occurred: {message}")


def unauthorized() -> ApiError:
    return ApiError("Unauthorized", "Unauthorized")


def forbidden(message: str) -> ApiError:
    return ApiError("Forbidden", message)
