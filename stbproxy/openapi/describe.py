"""An OpenAPI operation in the doc fields every simulator reads (``ApiDoc``): its summary
and description, its parameters (a JSON body's members among them), and the schema of its
documented answer with the documented examples first. Pure."""

from __future__ import annotations

from typing import Any

from stbproxy.openapi.model import Operation, Parameter, Spec
from stbproxy.openapi.schemas import closed
from stbproxy.stb.api_doc import ApiDoc, Param

CATEGORY = "openapi"


def operation_doc(op: Operation, spec: Spec | None) -> ApiDoc:
    params = [_param(p) for p in op.parameters]
    required = [p.name for p in op.parameters if p.required]
    body = _json_body_schema(op)
    if body is not None:
        listed = body.get("properties")
        members: dict[Any, Any] = listed if isinstance(listed, dict) else {}
        needed = set(body.get("required") or ()) if op.body_required else set()
        for name, schema in members.items():
            params.append(Param(name, _type(schema), _text(schema.get("description") if isinstance(schema, dict)
                                                           else ""), None))
            if name in needed:
                required.append(name)
    _, reply = op.success()
    media = reply.json_media() if reply is not None else None
    output = None
    if media is not None and media[1].schema is not None:
        output = closed(media[1].schema, op.defs)  # one schema that stands alone, for any simulator
        if media[1].examples and isinstance(output, dict):  # examples first, as the schema simulator reads them
            output = {**output, "examples": [*media[1].examples, *output.get("examples", [])]}
    description = "\n\n".join(t for t in (op.summary, op.description) if t)
    return ApiDoc(
        category=CATEGORY, tool=spec.title if spec else op.spec, api=op.id, url=op.servers[0] + op.path,
        method=op.method, tool_description=spec.description if spec else "",
        api_description=description,
        required_parameters=tuple(p for p in params if p.name in required),
        optional_parameters=tuple(p for p in params if p.name not in required),
        template_response=media[1].examples[0] if media is not None and media[1].examples else None,
        output_schema=output,  # the body's members are among the parameters above
    )


def _param(p: Parameter) -> Param:
    default = p.schema.get("default") if isinstance(p.schema, dict) else None
    where = f"(in {p.where}) " if p.where != "query" else ""
    return Param(p.name, _type(p.schema), where + p.description, default)


def _json_body_schema(op: Operation) -> dict | None:
    for media_type, media in op.body.items():
        if "json" in media_type and isinstance(media.schema, dict):
            schema, hops = media.schema, 0
            while isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#/$defs/") and hops < 16:
                schema, hops = op.defs.get(schema["$ref"][len("#/$defs/"):]) or {}, hops + 1
            return schema if isinstance(schema, dict) else None
    return None


def _type(schema: Any) -> str:
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    return str(kind or "string").upper()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
