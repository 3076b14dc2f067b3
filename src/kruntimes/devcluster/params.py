"""Query parameters and DeleteOptions read as kube-apiserver reads them: a bad one is a 400 or a 422, never a 500.

apimachinery converts query parameters with ``strconv.ParseInt(s, 10, 64)`` for numbers (``limit``,
``timeoutSeconds``, ``gracePeriodSeconds``; anything else is a 400 with the parser's message) and
with its own rule for booleans (absent, ``0`` or ``false`` in any case is false; anything else,
even an empty value, is true). Write options are then validated (``dryRun`` only ``All``,
``fieldValidation`` one of its three values, ``fieldManager`` at most 128 bytes of printable
characters; DeleteOptions' ``propagationPolicy`` one of three), each failure a 422 ``Invalid``
naming ``CreateOptions.meta.k8s.io`` (or Update/Patch/DeleteOptions) and the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, final

from kruntimes.devcluster import errors
from kruntimes.devcluster.errors import FieldError, field_error
from kruntimes.devcluster.types import Obj

Query = dict[str, list[str]]
META_GROUP: Final = "meta.k8s.io"
FIELD_MANAGER_MAX_BYTES: Final = 128
_DECIMAL: Final = re.compile(r"[+-]?[0-9]+")
_INT64: Final = (-(2**63), 2**63 - 1)
_FIELD_VALIDATIONS: Final = ("", "Ignore", "Strict", "Warn")
_PROPAGATION_POLICIES: Final = ("Foreground", "Background", "Orphan")
INCLUDE_OBJECT: Final = ("", "None", "Metadata", "Object")


def first(query: Query, key: str, default: str = "") -> str:
    values = query.get(key)
    return values[0] if values else default


def go_quote(text: str, limit: int = 100) -> str:
    """``text`` quoted about as Go's ``%q`` quotes it, cut to ``limit`` characters so an answer stays small."""
    return json.dumps(text if len(text) <= limit else text[:limit] + "...", ensure_ascii=False)


def flag(query: Query, key: str) -> bool:
    """apimachinery's ``Convert_Slice_string_To_bool``: absent, "0" or "false" (any case) is false; anything else is true."""
    values = query.get(key)
    return values is not None and len(values) > 0 and values[0] != "0" and values[0].lower() != "false"


def parse_int64(text: str) -> int:
    """Go's ``strconv.ParseInt(text, 10, 64)``: ASCII digits with an optional sign, within int64; else a 400."""
    if not _DECIMAL.fullmatch(text):
        raise errors.bad_request(f"strconv.ParseInt: parsing {go_quote(text)}: invalid syntax")
    value = int(text) if len(text) <= 21 else None  # longer is out of range whatever it says
    if value is None or not _INT64[0] <= value <= _INT64[1]:
        raise errors.bad_request(f"strconv.ParseInt: parsing {go_quote(text)}: value out of range")
    return value


def int64(query: Query, key: str) -> int | None:
    """The int64 query parameter ``key``, or None when absent."""
    values = query.get(key)
    return parse_int64(values[0]) if values else None


def _go_strings(values: Sequence[str]) -> str:
    return "[]string{" + ", ".join(go_quote(v) for v in values) + "}"


def _dry_run_causes(values: Sequence[str]) -> list[FieldError]:
    if all(v == "All" for v in values):
        return []
    return [field_error("dryRun", f'Unsupported value: {_go_strings(values)}: supported values: "All"')]


def check_write_options(kind: str, query: Query) -> None:
    """``ValidateCreateOptions`` (and Update, Patch): a 422 naming ``kind`` (``CreateOptions``...) when a value is refused."""
    causes = _dry_run_causes(query.get("dryRun", []))
    manager = first(query, "fieldManager")
    if len(manager.encode()) > FIELD_MANAGER_MAX_BYTES:
        causes.append(field_error("fieldManager", f"Too long: may not be more than {FIELD_MANAGER_MAX_BYTES} bytes"))
    for position, char in enumerate(manager):
        if not char.isprintable():
            causes.append(field_error("fieldManager", f"Invalid value: {go_quote(manager)}: invalid character U+{ord(char):04X} (at position {position})"))
            break
    validation = first(query, "fieldValidation")
    if validation not in _FIELD_VALIDATIONS:
        supported = ", ".join(go_quote(v) for v in _FIELD_VALIDATIONS)
        causes.append(field_error("fieldValidation", f"Unsupported value: {go_quote(validation)}: supported values: {supported}"))
    if causes:
        raise errors.invalid(kind, META_GROUP, "", causes)


@final
@dataclass(frozen=True, slots=True)
class DeleteOptions:
    dry_run: bool
    preconditions: Obj


def _delete_type_error(field: str, expected: str) -> errors.ApiError:
    return errors.bad_request(f"DeleteOptions: {field} must be {expected}")


def delete_options(query: Query, body: Any) -> DeleteOptions:
    """DeleteOptions from the request's body (``None`` when it has none) and its query parameters.

    Wrong types are a 400; a refused ``dryRun`` or ``propagationPolicy`` a 422, as
    ``ValidateDeleteOptions`` answers. A ``dryRun`` in either place makes the delete a dry run.
    """
    options: Obj = {} if body is None else body
    if not isinstance(options, dict):
        raise errors.bad_request("DeleteOptions must be an object")
    dry_run = options.get("dryRun") or []
    if not isinstance(dry_run, list) or not all(isinstance(v, str) for v in dry_run):
        raise _delete_type_error("dryRun", "a list of strings")
    grace = options.get("gracePeriodSeconds")
    if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int)):
        raise _delete_type_error("gracePeriodSeconds", "an integer")
    policy = options.get("propagationPolicy")
    if policy is not None and not isinstance(policy, str):
        raise _delete_type_error("propagationPolicy", "a string")
    orphan = options.get("orphanDependents")
    if orphan is not None and not isinstance(orphan, bool):
        raise _delete_type_error("orphanDependents", "a boolean")
    preconditions = options.get("preconditions") or {}
    if not isinstance(preconditions, dict) or not all(isinstance(preconditions.get(k) or "", str) for k in ("uid", "resourceVersion")):
        raise _delete_type_error("preconditions", "an object of strings uid and resourceVersion")
    int64(query, "gracePeriodSeconds")
    if "propagationPolicy" in query:
        policy = first(query, "propagationPolicy")
    if "orphanDependents" in query:
        orphan = flag(query, "orphanDependents")
    dry_run = [*dry_run, *query.get("dryRun", [])]
    causes = _dry_run_causes(dry_run)
    if orphan is not None and policy is not None:
        causes.append(field_error("propagationPolicy", f"Invalid value: {go_quote(policy)}: orphanDependents and deletionPropagation cannot be both set"))
    if policy is not None and policy not in _PROPAGATION_POLICIES:
        supported = ", ".join(go_quote(v) for v in (*_PROPAGATION_POLICIES, "nil"))
        causes.append(field_error("propagationPolicy", f"Unsupported value: {go_quote(policy)}: supported values: {supported}"))
    if causes:
        raise errors.invalid("DeleteOptions", META_GROUP, "", causes)
    return DeleteOptions(dry_run="All" in dry_run, preconditions=preconditions)


def include_object(query: Query) -> str:
    """A Table's ``includeObject`` (default ``Metadata``); another value is a 400."""
    value = first(query, "includeObject")
    if value not in INCLUDE_OBJECT:
        raise errors.bad_request(f"unrecognized includeObject value: {go_quote(value)}")
    return value or "Metadata"
