"""What the proxy keeps of an OpenAPI document: a ``Spec`` with its ``Operation``s, their
``Parameter``s, request body, security and documented ``Reply``s by status, each with its
media types' JSON Schemas (2020-12) and examples. The schemas name the document's shared
ones (``Spec.schemas``, kept once per document, which every operation holds as ``defs``) as
``#/$defs/NAME``. Saved as plain JSON (``to_dict``, ``from_dict``). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from stbproxy.errors import InputError


@dataclass(frozen=True, slots=True)
class Parameter:
    name: str
    where: str  # "path", "query", "header" or "cookie"
    required: bool = False
    description: str = ""
    schema: Any = None
    examples: tuple[Any, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "in": self.where, "required": self.required, "description": self.description,
                "schema": self.schema, "examples": list(self.examples)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Parameter:
        return cls(d["name"], d["in"], bool(d.get("required")), d.get("description") or "", d.get("schema"),
                   tuple(d.get("examples") or ()))


@dataclass(frozen=True, slots=True)
class MediaType:
    schema: Any = None  # None: documented without a schema
    examples: tuple[Any, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "examples": list(self.examples)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MediaType:
        return cls(d.get("schema"), tuple(d.get("examples") or ()))


@dataclass(frozen=True, slots=True)
class Reply:
    description: str = ""
    content: Mapping[str, MediaType] = field(default_factory=dict)  # by lower-cased media type
    headers: Mapping[str, MediaType] = field(default_factory=dict)  # by lower-cased name: schema, examples

    def json_media(self) -> tuple[str, MediaType] | None:
        """The JSON media type this reply documents (application/json first), if any."""
        ranked = sorted(self.content.items(), key=lambda item: _json_rank(item[0]))
        return next(((t, m) for t, m in ranked if _json_rank(t) < 3), None)

    def media(self) -> tuple[str, MediaType] | None:
        """The media type a made-up answer takes: JSON first, else the first documented."""
        return self.json_media() or next(iter(self.content.items()), None)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"description": self.description,
                               "content": {t: m.to_dict() for t, m in self.content.items()}}
        if self.headers:
            out["headers"] = {n: m.to_dict() for n, m in self.headers.items()}
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Reply:
        return cls(d.get("description") or "",
                   {t: MediaType.from_dict(m) for t, m in (d.get("content") or {}).items()},
                   {n: MediaType.from_dict(m) for n, m in (d.get("headers") or {}).items()})


def _json_rank(media_type: str) -> int:
    base = media_type.split(";", 1)[0].strip()
    if base == "application/json":
        return 0
    if base.endswith("+json") or base.endswith("/json"):
        return 1
    if base in ("*/*", "application/*"):
        return 2
    return 3


@dataclass(frozen=True, slots=True)
class Operation:
    spec: str
    id: str
    method: str
    path: str  # the template, "/pets/{petId}"
    servers: tuple[str, ...]
    summary: str = ""
    description: str = ""
    parameters: tuple[Parameter, ...] = ()
    body: Mapping[str, MediaType] = field(default_factory=dict)  # by media type
    body_required: bool = False
    replies: Mapping[str, Reply] = field(default_factory=dict)  # "200", "2XX", "default"
    # Alternatives, each a set of schemes that must all be met; () = none asked. Each scheme as
    # (name, type, where, what): ("key", "apiKey", "query", "appid"), ("auth", "http", "header", "bearer").
    security: tuple[tuple[tuple[str, str, str, str], ...], ...] = ()
    defs: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the spec's schemas

    @property
    def name(self) -> str:
        return f"{self.spec}/{self.id}"

    def named(self, spec: str, defs: Mapping[str, Any] | None = None) -> Operation:
        return replace(self, spec=spec, defs=self.defs if defs is None else defs)

    def reply_for(self, status: int) -> tuple[str, Reply] | None:
        """The documented reply for ``status``: the exact code, else its range, else default."""
        for key in (str(status), f"{str(status)[0]}XX", "default"):
            if key in self.replies:
                return key, self.replies[key]
        return None

    def success(self) -> tuple[int, Reply | None]:
        """The status a made-up answer gets and its documented reply: the first 2xx documented
        (an exact code before a range), else the first 3xx (an operation that only redirects),
        else 200 with the default reply; (0, None) when only failures are documented."""
        for first in ("2", "3"):
            exact = sorted(k for k in self.replies if k.isdigit() and k.startswith(first))
            if exact:
                return int(exact[0]), self.replies[exact[0]]
            if f"{first}XX" in self.replies:
                return int(first) * 100, self.replies[f"{first}XX"]
        if "default" in self.replies or not self.replies:
            return 200, self.replies.get("default")
        return 0, None

    def parameter(self, where: str, name: str) -> Parameter | None:
        return next((p for p in self.parameters if p.where == where and p.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "method": self.method, "path": self.path, "servers": list(self.servers),
                "summary": self.summary, "description": self.description,
                "parameters": [p.to_dict() for p in self.parameters],
                "body": {t: m.to_dict() for t, m in self.body.items()}, "body_required": self.body_required,
                "replies": {s: r.to_dict() for s, r in self.replies.items()},
                "security": [[list(s) for s in alternative] for alternative in self.security]}

    @classmethod
    def from_dict(cls, spec: str, d: Mapping[str, Any], defs: Mapping[str, Any] | None = None) -> Operation:
        return cls(spec, d["id"], d["method"], d["path"], tuple(d["servers"]), d.get("summary") or "",
                   d.get("description") or "", tuple(Parameter.from_dict(p) for p in d.get("parameters") or ()),
                   {t: MediaType.from_dict(m) for t, m in (d.get("body") or {}).items()},
                   bool(d.get("body_required")),
                   {s: Reply.from_dict(r) for s, r in (d.get("replies") or {}).items()},
                   tuple(tuple(tuple(s) for s in alternative) for alternative in d.get("security") or ()),
                   defs or {})


@dataclass(frozen=True, slots=True)
class Spec:
    name: str  # what keys and reports call it
    title: str
    version: str
    openapi: str  # "3.0" or "3.1"
    source: str  # the file it was imported from
    description: str = ""
    operations: tuple[Operation, ...] = ()
    secrets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # apiKey names by place
    imported_at: float = 0.0
    schemas: Mapping[str, Any] = field(default_factory=dict)  # the shared schemas, by their $defs name
    warnings: tuple[str, ...] = ()  # what the import left out (a pattern no dialect reads), with its place

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "version": self.version, "openapi": self.openapi,
                "source": self.source, "description": self.description, "imported_at": self.imported_at,
                "secrets": {k: list(v) for k, v in self.secrets.items()}, "warnings": list(self.warnings),
                "schemas": self.schemas, "operations": [op.to_dict() for op in self.operations]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Spec:
        try:
            name = d["name"]
            schemas = d.get("schemas") or {}
            return cls(name, d.get("title") or name, d.get("version") or "", d.get("openapi") or "",
                       d.get("source") or "", d.get("description") or "",
                       tuple(Operation.from_dict(name, op, schemas) for op in d.get("operations") or ()),
                       {k: tuple(v) for k, v in (d.get("secrets") or {}).items()}, float(d.get("imported_at") or 0),
                       schemas, tuple(d.get("warnings") or ()))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InputError(f"a saved spec cannot be read ({type(exc).__name__}: {exc})") from exc
