"""What the proxy keeps of an OpenAPI document: a ``Spec`` with its ``Operation``s, their
``Parameter``s, request body and documented ``Reply``s by status, each with its media types'
JSON Schemas (self-contained, 2020-12) and examples. Saved as plain JSON (``to_dict``,
``from_dict``). Pure."""

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

    def json_media(self) -> tuple[str, MediaType] | None:
        """The JSON media type this reply documents (application/json first), if any."""
        ranked = sorted(self.content.items(), key=lambda item: _json_rank(item[0]))
        return next(((t, m) for t, m in ranked if _json_rank(t) < 3), None)

    def to_dict(self) -> dict[str, Any]:
        return {"description": self.description, "content": {t: m.to_dict() for t, m in self.content.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Reply:
        return cls(d.get("description") or "",
                   {t: MediaType.from_dict(m) for t, m in (d.get("content") or {}).items()})


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

    @property
    def name(self) -> str:
        return f"{self.spec}/{self.id}"

    def named(self, spec: str) -> Operation:
        return replace(self, spec=spec)

    def reply_for(self, status: int) -> tuple[str, Reply] | None:
        """The documented reply for ``status``: the exact code, else its range, else default."""
        for key in (str(status), f"{str(status)[0]}XX", "default"):
            if key in self.replies:
                return key, self.replies[key]
        return None

    def success(self) -> tuple[int, Reply | None]:
        """The status a made-up answer gets and its documented reply: the first 2xx documented
        (an exact code before a range), else 200 with the default reply."""
        exact = sorted(k for k in self.replies if k.isdigit() and k.startswith("2"))
        if exact:
            return int(exact[0]), self.replies[exact[0]]
        if "2XX" in self.replies:
            return 200, self.replies["2XX"]
        return 200, self.replies.get("default")

    def parameter(self, where: str, name: str) -> Parameter | None:
        return next((p for p in self.parameters if p.where == where and p.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "method": self.method, "path": self.path, "servers": list(self.servers),
                "summary": self.summary, "description": self.description,
                "parameters": [p.to_dict() for p in self.parameters],
                "body": {t: m.to_dict() for t, m in self.body.items()}, "body_required": self.body_required,
                "replies": {s: r.to_dict() for s, r in self.replies.items()}}

    @classmethod
    def from_dict(cls, spec: str, d: Mapping[str, Any]) -> Operation:
        return cls(spec, d["id"], d["method"], d["path"], tuple(d["servers"]), d.get("summary") or "",
                   d.get("description") or "", tuple(Parameter.from_dict(p) for p in d.get("parameters") or ()),
                   {t: MediaType.from_dict(m) for t, m in (d.get("body") or {}).items()},
                   bool(d.get("body_required")),
                   {s: Reply.from_dict(r) for s, r in (d.get("replies") or {}).items()})


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

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "version": self.version, "openapi": self.openapi,
                "source": self.source, "description": self.description, "imported_at": self.imported_at,
                "secrets": {k: list(v) for k, v in self.secrets.items()},
                "operations": [op.to_dict() for op in self.operations]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Spec:
        try:
            name = d["name"]
            return cls(name, d.get("title") or name, d.get("version") or "", d.get("openapi") or "",
                       d.get("source") or "", d.get("description") or "",
                       tuple(Operation.from_dict(name, op) for op in d.get("operations") or ()),
                       {k: tuple(v) for k, v in (d.get("secrets") or {}).items()}, float(d.get("imported_at") or 0))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InputError(f"a saved spec cannot be read ({type(exc).__name__}: {exc})") from exc
