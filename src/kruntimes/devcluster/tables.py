"""``meta.k8s.io/v1`` Tables: what ``kubectl get`` prints, built from printer columns.

kubectl asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``;
answered with a plain list it shows only NAME and AGE. Cells come from each
column's JSONPath, evaluated by the small subset implemented here (fields,
``['quoted']``, ``[n]``, ``[*]`` and ``[?(@.k=="v")]`` filters), which covers
what CRD printer columns use.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, Final

from kruntimes.devcluster.resources import PrinterColumn, ResourceDef
from kruntimes.devcluster.times import human_duration, parse_rfc3339
from kruntimes.devcluster.types import Obj

_TOKEN: Final = re.compile(
    r"""\.(?P<field>[A-Za-z0-9_\-$]+)"""
    r"""|\[\s*'(?P<quoted>[^']*)'\s*\]"""
    r"""|\[\s*"(?P<dquoted>[^"]*)"\s*\]"""
    r"""|\[\s*(?P<index>-?\d+)\s*\]"""
    r"""|\[\s*(?P<star>\*)\s*\]"""
    r"""|\[\s*\?\(\s*@\.(?P<fpath>[A-Za-z0-9_.\-]+)\s*(?P<fop>==|!=)\s*(?:"(?P<fval>[^"]*)"|'(?P<fval2>[^']*)'|(?P<fnum>[^)\s]+))\s*\)\s*\]"""
)

Step = Callable[[list[Any]], list[Any]]


def _field(name: str) -> Step:
    return lambda values: [v[name] for v in values if isinstance(v, dict) and name in v]


def _index(i: int) -> Step:
    return lambda values: [v[i] for v in values if isinstance(v, list) and -len(v) <= i < len(v)]


def _star(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if isinstance(v, list):
            out.extend(v)
        elif isinstance(v, dict):
            out.extend(v.values())
    return out


def _filter(path: str, equal: bool, want: str) -> Step:
    def lookup(item: Any) -> str | None:
        for part in path.split("."):
            if not isinstance(item, dict) or part not in item:
                return None
            item = item[part]
        return str(item).lower() if isinstance(item, bool) else str(item)

    return lambda values: [i for v in values if isinstance(v, list) for i in v if (lookup(i) == want) == equal]


def compile_jsonpath(expression: str) -> Callable[[Any], list[Any]]:
    """Compile ``.a.b[0]`` (optionally wrapped in ``{}``) into a function returning every match."""
    text = expression.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if text.startswith("$"):
        text = text[1:]
    steps: list[Step] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"unsupported JSONPath {expression!r} at {text[pos:]!r}")
        if m["field"] is not None:
            steps.append(_field(m["field"]))
        elif m["quoted"] is not None or m["dquoted"] is not None:
            steps.append(_field(m["quoted"] if m["quoted"] is not None else m["dquoted"]))
        elif m["index"] is not None:
            steps.append(_index(int(m["index"])))
        elif m["star"] is not None:
            steps.append(_star)
        else:
            want = next(v for v in (m["fval"], m["fval2"], m["fnum"]) if v is not None)
            steps.append(_filter(m["fpath"], m["fop"] == "==", want))
        pos = m.end()

    def run(obj: Any) -> list[Any]:
        values = [obj]
        for step in steps:
            values = step(values)
        return values

    return run


def _cell(column: PrinterColumn, obj: Obj, now: float) -> Any:
    try:
        values = compile_jsonpath(column.json_path)(obj)
    except ValueError:
        return None
    if not values or values[0] is None:
        return None
    if column.type == "date":
        stamp = parse_rfc3339(str(values[0]))
        return human_duration(now - stamp) if stamp is not None else "<invalid>"
    if len(values) > 1:
        return ",".join(str(v) for v in values)
    value = values[0]
    if column.type in ("integer", "number", "boolean") or isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(value, separators=(",", ":"))


def column_definitions(rd: ResourceDef) -> list[Obj]:
    name = {"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}
    return [name] + [
        {"name": c.name, "type": c.type, "format": c.format, "description": c.description, "priority": c.priority}
        for c in rd.printer_columns
    ]


def _row_object(obj: Obj, include_object: str) -> Obj | None:
    if include_object == "None":
        return None
    if include_object == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata", {})}


def table(
    rd: ResourceDef,
    objects: Sequence[Obj],
    *,
    now: float,
    resource_version: str = "",
    continue_token: str = "",
    include_object: str = "Metadata",
    with_headers: bool = True,
    api_version: str = "meta.k8s.io/v1",
) -> Obj:
    """A Table of ``objects``; watch events after the first omit the headers, as the API server does."""
    rows = []
    for obj in objects:
        row: Obj = {"cells": [obj.get("metadata", {}).get("name", "")] + [_cell(c, obj, now) for c in rd.printer_columns]}
        embedded = _row_object(obj, include_object)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    metadata: Obj = {}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    if continue_token:
        metadata["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": metadata,
        "columnDefinitions": column_definitions(rd) if with_headers else None,
        "rows": rows,
    }
