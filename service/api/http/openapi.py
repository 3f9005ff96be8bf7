"""The OpenAPI 3.1 description of the HTTP API, made from the proto's own descriptors.

Each message becomes a JSON Schema under `components/schemas` (named by its full proto name)
as `google.protobuf.json_format` writes and reads it: lowerCamelCase property names, int64 as
a string (an integer is accepted too), enums by name, bytes as base64, maps as objects. So the
description follows the proto with no second copy of the API to keep in step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

_INTEGER = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_FIXED32,
    FieldDescriptor.TYPE_SFIXED32,
}
_LONG = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}
_NUMBER = {FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT}


@dataclass(frozen=True)
class Operation:
    """One HTTP route of an RPC: where, which verbs, the messages, what it does."""

    rpc: str
    path: str
    verbs: tuple[str, ...]
    request: Descriptor
    response: Descriptor
    summary: str


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def message_schema(descriptor: Descriptor, schemas: dict[str, Any]) -> dict[str, str]:
    """A reference to `descriptor`'s schema, adding it (and every message it uses) to
    `schemas`."""
    name = descriptor.full_name
    if name not in schemas:
        schemas[name] = {}  # a placeholder first: messages may refer to each other
        properties = {f.json_name: field_schema(f, schemas) for f in descriptor.fields}
        schema: dict[str, Any] = {
            "type": "object",
            "properties": properties,
            "additionalProperties": False,
        }
        choices = [
            [f.json_name for f in oneof.fields]
            for oneof in descriptor.oneofs
            if len(oneof.fields) > 1 or not oneof.name.startswith("_")  # not a proto3 optional
        ]
        if choices:
            schema["description"] = "; ".join(f"at most one of {', '.join(c)}" for c in choices)
        schemas[name] = schema
    return _ref(name)


def field_schema(field: FieldDescriptor, schemas: dict[str, Any]) -> dict[str, Any]:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value = field.message_type.fields_by_name["value"]
        return {"type": "object", "additionalProperties": _single(value, schemas)}
    single = _single(field, schemas)
    return {"type": "array", "items": single} if field.is_repeated else single


def _single(field: FieldDescriptor, schemas: dict[str, Any]) -> dict[str, Any]:
    kind = field.type
    if kind == FieldDescriptor.TYPE_MESSAGE:
        return message_schema(field.message_type, schemas)
    if kind == FieldDescriptor.TYPE_ENUM:
        return {"type": "string", "enum": [v.name for v in field.enum_type.values]}
    if kind in _INTEGER:
        return {"type": "integer", "format": "int32"}
    if kind in _LONG:
        return {"type": ["string", "integer"], "format": "int64"}
    if kind in _NUMBER:
        return {"type": "number"}
    if kind == FieldDescriptor.TYPE_BOOL:
        return {"type": "boolean"}
    if kind == FieldDescriptor.TYPE_BYTES:
        return {"type": "string", "contentEncoding": "base64"}
    return {"type": "string"}


ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "integer", "description": "the HTTP status"},
                "status": {"type": "string", "description": "the gRPC status name"},
                "message": {"type": "string"},
            },
        }
    },
}


def openapi_document(
    operations: Sequence[Operation], title: str, version: str, extra_paths: dict[str, Any]
) -> dict[str, Any]:
    """The OpenAPI document of `operations` (plus `extra_paths`, written out by the caller)."""
    schemas: dict[str, Any] = {"Error": ERROR_SCHEMA}
    error = {"content": {"application/json": {"schema": _ref("Error")}}}
    paths: dict[str, Any] = {}
    for op in operations:
        request, response = (
            message_schema(op.request, schemas),
            message_schema(op.response, schemas),
        )
        for verb in op.verbs:
            entry: dict[str, Any] = {
                "operationId": op.rpc if verb == op.verbs[0] else f"{op.rpc}{verb.title()}",
                "summary": op.summary,
                "description": f"strata.v1.SearchService/{op.rpc} in the proto's JSON mapping",
                "responses": {
                    "200": {"content": {"application/json": {"schema": response}}},
                    "4XX": {"description": "the request is refused", **error},
                    "5XX": {"description": "the server failed", **error},
                },
            }
            if verb == "post":
                entry["requestBody"] = {
                    "required": False,
                    "content": {"application/json": {"schema": request}},
                }
            elif op.request.fields:
                entry["parameters"] = [
                    {"name": f.json_name, "in": "query", "schema": _single(f, schemas)}
                    for f in op.request.fields
                ]
            paths.setdefault(op.path, {})[verb] = entry
    paths.update(extra_paths)
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "paths": paths,
        "components": {"schemas": schemas},
    }
