"""MkDocs hook: the reference pages' generated parts, made from the code at build time.

A page holds a placeholder line, `<!-- generated: NAME -->`, and the build replaces it with
the text of that generator, so the reference cannot drift from what it describes:

- `cli`: every command of the `strata` typer app (service.cli's `app`), its `--help` as the
  command prints it;
- `grpc`: every service, RPC, message and enum of the proto files (proto/), with their
  comments, read by protoc itself (`--include_source_info`);
- `http`: every route and schema of the HTTP API's OpenAPI document, the one the server
  answers at `/openapi.json`.

Nothing generated is committed. mkdocs.yml names this file under `hooks:`.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from markdown.extensions.toc import slugify
from mkdocs.exceptions import PluginError

PLACEHOLDER = re.compile(r"^<!-- generated: (\w+) -->$", re.MULTILINE)
HELP_WIDTH = 100


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    """Replace each placeholder of the page with its generated text."""

    def generated(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            known = ", ".join(sorted(GENERATORS))
            raise PluginError(f"{page.file.src_uri}: no generator '{name}' (known: {known})")
        return GENERATORS[name]()

    return PLACEHOLDER.sub(generated, markdown)


def anchor(heading: str) -> str:
    """The id MkDocs gives a heading (the toc extension's slug rule)."""
    return slugify(heading, "-")


def cell(text: str) -> str:
    """Text fit for one table cell: one line, no column breaks."""
    return " ".join(text.split()).replace("|", "\\|")


# --- the command line ---


def cli_reference() -> str:
    """Every command of `strata`, depth first, with its help as `--help` prints it."""
    import typer

    from service.cli import app

    root = typer.main.get_command(app)
    parts = []
    for context, _ in walk_commands(root, root.make_context("strata", [], **_context())):
        path = context.command_path
        level = "#" * min(2 + path.count(" "), 4)
        parts += [f"{level} `{path}`", "", "```text", context.get_help().rstrip(), "```", ""]
    return "\n".join(parts)


def _context() -> dict[str, Any]:
    return {"resilient_parsing": True, "max_content_width": HELP_WIDTH, "terminal_width": 100}


def walk_commands(command: Any, context: Any) -> Iterator[tuple[Any, Any]]:
    """(context, command) of `command` and of every visible command under it."""
    yield context, command
    if not hasattr(command, "list_commands"):
        return
    for name in command.list_commands(context):
        child = command.get_command(context, name)
        if child is None or child.hidden:
            continue
        yield from walk_commands(child, child.make_context(name, [], parent=context, **_context()))


# --- the gRPC API ---

# field numbers of descriptor.proto, as SourceCodeInfo paths use them
_MESSAGE_TYPE, _ENUM_TYPE, _SERVICE, _SYNTAX = 4, 5, 6, 12
_FIELD, _NESTED_TYPE, _NESTED_ENUM, _METHOD, _ENUM_VALUE = 2, 3, 4, 2, 2


def grpc_reference() -> str:
    """The proto files' services, messages and enums with their comments."""
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    from service.proto_codegen import PROTO_FILES, PROTO_ROOT

    well_known = resources.files("grpc_tools") / "_proto"
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "descriptors.pb"
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--descriptor_set_out={out}",
            "--include_source_info",
            *PROTO_FILES,
        ]
        if protoc.main(args) != 0:
            raise PluginError(f"protoc failed on {', '.join(PROTO_FILES)} under {PROTO_ROOT}")
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    return "\n".join(proto_file_text(f) for f in files)


def proto_file_text(proto: Any) -> str:
    comments = {tuple(location.path): location for location in proto.source_code_info.location}

    def comment(*path: int) -> str:
        location = comments.get(path)
        return location.leading_comments.strip() if location is not None else ""

    header = comments.get((_SYNTAX,))
    overview = "\n\n".join(c.strip() for c in header.leading_detached_comments) if header else ""
    lines = [f"## `{proto.name}`", "", f"Package `{proto.package}`.", ""]
    if overview:
        lines += [paragraphs(overview), ""]
    for s, service in enumerate(proto.service):
        lines += [f"### {service.name}", "", paragraphs(comment(_SERVICE, s)), ""]
        lines += ["| RPC | request → response | what it does |", "|---|---|---|"]
        for m, method in enumerate(service.method):
            request, response = short_type(method.input_type), short_type(method.output_type)
            lines.append(
                f"| `{method.name}` | {type_link(request)} → {type_link(response)} "
                f"| {cell(comment(_SERVICE, s, _METHOD, m))} |"
            )
        lines.append("")
    for e, enum in enumerate(proto.enum_type):
        lines += enum_text(enum, enum.name, (_ENUM_TYPE, e), comment)
    for m, message in enumerate(proto.message_type):
        lines += message_text(message, message.name, (_MESSAGE_TYPE, m), comment)
    return "\n".join(lines)


def message_text(
    message: Any, name: str, path: tuple[int, ...], comment: Callable[..., str]
) -> list[str]:
    maps = {f".{n.name}" for n in message.nested_type if n.options.map_entry}
    lines = [f"### {name}", ""]
    if comment(*path):
        lines += [paragraphs(comment(*path)), ""]
    if message.field:
        lines += ["| field | number | type | meaning |", "|---|---:|---|---|"]
        entries = {n.name: n for n in message.nested_type}
        for f, field in enumerate(message.field):
            kind = field_type(field, message, maps, entries)
            meaning = cell(comment(*path, _FIELD, f))
            lines.append(f"| `{field.name}` | {field.number} | {kind} | {meaning} |")
        lines.append("")
    for n, nested in enumerate(message.nested_type):
        if not nested.options.map_entry:
            lines += message_text(
                nested, f"{name}.{nested.name}", (*path, _NESTED_TYPE, n), comment
            )
    for n, nested in enumerate(message.enum_type):
        lines += enum_text(nested, f"{name}.{nested.name}", (*path, _NESTED_ENUM, n), comment)
    return lines


def enum_text(
    enum: Any, name: str, path: tuple[int, ...], comment: Callable[..., str]
) -> list[str]:
    lines = [f"### {name}", ""]
    if comment(*path):
        lines += [paragraphs(comment(*path)), ""]
    lines += ["| value | number | meaning |", "|---|---:|---|"]
    for v, value in enumerate(enum.value):
        lines.append(
            f"| `{value.name}` | {value.number} | {cell(comment(*path, _ENUM_VALUE, v))} |"
        )
    return [*lines, ""]


def field_type(field: Any, message: Any, maps: set[str], entries: dict[str, Any]) -> str:
    """The field's type as the proto writes it, message and enum types linked."""
    from google.protobuf.descriptor_pb2 import FieldDescriptorProto as F

    if field.type_name and any(field.type_name.endswith(m) for m in maps):
        entry = entries[field.type_name.rsplit(".", 1)[-1]]
        key, value = (field_type(f, message, set(), {}) for f in entry.field)
        return f"map<{key}, {value}>"
    if field.type in (F.TYPE_MESSAGE, F.TYPE_ENUM):
        kind = type_link(short_type(field.type_name))
    else:
        kind = "`" + F.Type.Name(field.type).removeprefix("TYPE_").lower() + "`"
    if field.label == F.LABEL_REPEATED:
        return f"repeated {kind}"
    if field.proto3_optional:
        return f"optional {kind}"
    if field.HasField("oneof_index"):
        return f"{kind} (oneof `{message.oneof_decl[field.oneof_index].name}`)"
    return kind


def short_type(type_name: str) -> str:
    """`.strata.v1.Query` → `Query`; a type of another package keeps its package."""
    return type_name.removeprefix(".strata.v1.").removeprefix(".")


def type_link(name: str) -> str:
    if "." in name and not name[0].isupper():  # another package's type: no section here
        return f"`{name}`"
    return f"[`{name}`](#{anchor(name)})"


def paragraphs(comment: str) -> str:
    """A proto comment as Markdown: its blank lines separate paragraphs."""
    return "\n".join(line.strip() for line in comment.splitlines())


# --- the HTTP API ---


def http_reference() -> str:
    """The routes and schemas of the OpenAPI document the server answers at /openapi.json."""
    from service.api.http.app import api_document

    document = api_document()
    info = document["info"]
    lines = [
        f"OpenAPI {document['openapi']}: {info['title']}, {info['version']}.",
        "",
        "### Routes",
        "",
        "| route | request body or parameters | answer | what |",
        "|---|---|---|---|",
    ]
    for path, verbs in document["paths"].items():
        for verb, operation in verbs.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None:
                asked = schema_type(body["schema"])
            else:
                asked = ", ".join(f"`{p['name']}`" for p in operation.get("parameters", [])) or "–"
            answered = answer_type(operation["responses"])
            what = operation.get("summary", "")
            lines.append(f"| `{verb.upper()} {path}` | {asked} | {answered} | {cell(what)} |")
    lines.append("")
    for name, schema in document["components"]["schemas"].items():
        lines += [f"### {name}", ""]
        if "description" in schema:
            lines += [schema["description"], ""]
        lines += ["| property | type |", "|---|---|"]
        for key, value in schema.get("properties", {}).items():
            lines.append(f"| `{key}` | {schema_type(value)} |")
        lines.append("")
    return "\n".join(lines)


def answer_type(responses: dict[str, Any]) -> str:
    """What a route answers on success: a JSON schema, another media type, or a description."""
    ok = responses.get("200", {})
    for media, content in ok.get("content", {}).items():
        return schema_type(content["schema"]) if media == "application/json" else f"`{media}`"
    return cell(ok.get("description", "–"))


def schema_type(schema: dict[str, Any]) -> str:
    """A JSON Schema in a few words, references linked to their section."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#{anchor(name)})"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{value}`" for value in schema["enum"])
    kind = schema.get("type", "object")
    if kind == "array":
        return f"array of {schema_type(schema['items'])}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {schema_type(schema['additionalProperties'])}"
    words = " or ".join(kind) if isinstance(kind, list) else kind
    detail = schema.get("format") or schema.get("contentEncoding")
    return f"`{words}`" + (f" ({detail})" if detail else "")


GENERATORS: dict[str, Callable[[], str]] = {
    "cli": cli_reference,
    "grpc": grpc_reference,
    "http": http_reference,
}
