"""An OpenAPI document read into the operations it describes (``read_spec``): JSON or YAML,
OpenAPI 3.0 and 3.1, references within the file resolved with ``referencing``, every schema
made a JSON Schema 2020-12 (schemas.py) whose shared parts are converted and checked once per
document. Each problem is one InputError naming the JSON pointer where it is. Reads the one
file it is given.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit

from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from stbproxy import json_schema, yaml_text
from stbproxy.errors import InputError
from stbproxy.openapi.model import MediaType, Operation, Parameter, Reply, Spec
from stbproxy.openapi.schemas import Bundler

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
PLACES = ("path", "query", "header", "cookie")
_BASE = "urn:stbproxy:openapi-document"
_MAX_HOPS = 32  # a $ref to a $ref to ...: a longer chain is a loop


def read_spec(path: Path, *, name: str | None = None, base_url: str | None = None) -> Spec:
    """The spec in the file at ``path``; ``name`` is what keys and reports call it (default:
    its title, made safe), ``base_url`` replaces every server URL it names."""
    try:
        document = load_document(path)
        return spec_of(document, source=str(path), name=name, base_url=base_url)
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to read") from None


def load_document(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc
    if path.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise InputError(f"{path} is not valid JSON: {exc}") from exc
    try:
        return yaml_text.load(text)
    except yaml_text.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"{path} is not valid YAML: {problem}{yaml_text.where(exc)}") from exc


def spec_of(document: Any, *, source: str = "", name: str | None = None, base_url: str | None = None) -> Spec:
    if not isinstance(document, dict):
        raise InputError(f"{source or 'the spec'}: an OpenAPI document is a JSON object at its top (pointer '')")
    return _Reader(document, source, base_url).read(name)


class _Reader:
    def __init__(self, document: dict, source: str, base_url: str | None) -> None:
        self.doc = document
        self.source = source
        self.dialect = _dialect(document, source)
        resource = Resource.from_contents(document, default_specification=DRAFT202012)
        self.resolver = Registry().with_resource(_BASE, resource).resolver(base_uri=_BASE)
        self.schemas = Bundler(self.lookup, self.dialect)
        self.checked: set[str] = set()  # the $defs names already checked
        self.base_url = base_url
        if base_url is not None and not _absolute(base_url):
            raise InputError(f"--base-url {base_url!r} is not an absolute http(s) URL")

    def fail(self, where: str, problem: str) -> InputError:
        return InputError(f"{self.source}: at {where or '/'}: {problem}")

    # -- references ------------------------------------------------------------------

    def lookup(self, ref: str, where: str) -> Any:
        if not ref.startswith("#"):
            raise self.fail(where, f"$ref {ref!r} points outside the file; only references within it "
                                   "(#/...) are read")
        try:
            return self.resolver.lookup(ref).contents
        except Unresolvable:
            raise self.fail(where, f"$ref {ref!r} points at nothing in the file") from None

    def deref(self, node: Any, where: str) -> tuple[Any, str]:
        """A non-schema object (a parameter, response, body, example) with its $refs followed;
        the pointer where the object really is."""
        hops = 0
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            node, where = self.lookup(ref, f"{where}/$ref"), ref[1:]
            hops += 1
            if hops > _MAX_HOPS:
                raise self.fail(where, "$ref chain loops")
        return node, where

    def schema(self, node: Any, where: str) -> Any:
        local = self.schemas.local(node, where)
        # Each shared schema it reached is checked alone, once, so that a problem is reported
        # where it is in the document, not where the schema is used.
        for name, part in self.schemas.defs.items() if len(self.checked) < len(self.schemas.defs) else ():
            if name not in self.checked:
                self.checked.add(name)
                problem = json_schema.schema_problem(part)
                if problem is not None:
                    raise self.fail(self.schemas.source_of(name), problem)
        problem = json_schema.schema_problem(local)
        if problem is not None:
            raise self.fail(where, problem)
        return local

    # -- the document ------------------------------------------------------------------

    def read(self, name: str | None) -> Spec:
        info = _object(self.doc.get("info"))
        title = str(info.get("title") or Path(self.source).stem or "api")
        paths = self.doc.get("paths", {})
        if not isinstance(paths, dict):
            raise self.fail("/paths", "'paths' must be an object")
        top_servers = self.servers(self.doc.get("servers"), "/servers", None)
        operations: list[Operation] = []
        seen_ids: dict[str, str] = {}
        for template, item in paths.items():
            where = f"/paths/{_escape(template)}"
            if isinstance(template, str) and template.startswith("x-"):
                continue  # an extension, not a path
            if not isinstance(template, str) or not template.startswith("/"):
                raise self.fail(where, f"a path must start with '/', not {template!r}")
            item, item_where = self.deref(item, where)
            if not isinstance(item, dict):
                raise self.fail(item_where, "a path item must be an object")
            servers = self.servers(item.get("servers"), f"{item_where}/servers", top_servers)
            shared = self.parameters(item.get("parameters"), f"{item_where}/parameters", ())
            for method in METHODS:
                if method not in item:
                    continue
                op_where = f"{item_where}/{method}"
                op = self.operation(template, method, item[method], op_where, servers, shared)
                if op.id in seen_ids and not _named(item[method]):  # two made-up ids alike: numbered
                    op = replace(op, id=_unused(op.id, seen_ids))
                if op.id in seen_ids:
                    raise self.fail(op_where, f"operationId {op.id!r} is used at {seen_ids[op.id]} too")
                seen_ids[op.id] = op_where
                operations.append(op)
        if not operations:
            raise self.fail("/paths", "the spec describes no operation")
        spec_name = safe_name(name or title)
        defs = self.schemas.defs
        operations = [op.named(spec_name, defs) for op in operations]
        return Spec(name=spec_name, title=title, version=str(info.get("version") or ""),
                    openapi=self.dialect, source=self.source, description=str(info.get("description") or ""),
                    operations=tuple(operations), secrets=self.secrets(), imported_at=time.time(),
                    schemas=defs, warnings=tuple(self.schemas.warnings))

    def servers(self, value: Any, where: str, inherited: tuple[str, ...] | None) -> tuple[str, ...]:
        if self.base_url is not None:
            return (self.base_url.rstrip("/"),)
        if value is None or value == []:
            return inherited if inherited is not None else ()
        if not isinstance(value, list):
            raise self.fail(where, "'servers' must be a list")
        urls = []
        for i, server in enumerate(value):
            if not isinstance(server, dict) or not isinstance(server.get("url"), str):
                raise self.fail(f"{where}/{i}", "a server needs a 'url'")
            urls.append(_with_defaults(server["url"], server.get("variables"), f"{where}/{i}", self))
        return tuple(urls)

    def operation(self, template: str, method: str, node: Any, where: str, servers: tuple[str, ...],
                  shared: tuple[Parameter, ...]) -> Operation:
        if not isinstance(node, dict):
            raise self.fail(where, "an operation must be an object")
        servers = self.servers(node.get("servers"), f"{where}/servers", servers)
        absolute = tuple(s for s in servers if _absolute(s))
        if not absolute:
            raise self.fail(where, f"no absolute server URL is named for {method.upper()} {template} "
                                   f"(servers: {list(servers)}); give one with --base-url")
        parameters = self.parameters(node.get("parameters"), f"{where}/parameters", shared)
        declared = {p.name for p in parameters if p.where == "path"}
        for var in re.findall(r"{([^}/]+)}", template):
            if var not in declared:  # described nowhere: still a path parameter, as text
                parameters = (*parameters, Parameter(var, "path", True, "", {"type": "string"}))
        op_id = node.get("operationId")
        if op_id is not None and not isinstance(op_id, str):
            raise self.fail(f"{where}/operationId", "operationId must be a string")
        op_id = op_id.strip() if op_id else op_id  # an empty one names nothing: one is made up
        return Operation(
            spec="", id=op_id or _made_up_id(method, template), method=method.upper(), path=template,
            servers=absolute, summary=str(node.get("summary") or ""),
            description=str(node.get("description") or ""), parameters=parameters,
            body=self.request_body(node.get("requestBody"), f"{where}/requestBody"),
            body_required=self.body_required(node.get("requestBody"), f"{where}/requestBody"),
            replies=self.replies(node.get("responses"), f"{where}/responses"),
            security=self.security(node.get("security", self.doc.get("security")), f"{where}/security"),
        )

    def parameters(self, value: Any, where: str, shared: Iterable[Parameter]) -> tuple[Parameter, ...]:
        by_place = {(p.where, p.name): p for p in shared}
        if value is None:
            return tuple(by_place.values())
        if not isinstance(value, list):
            raise self.fail(where, "'parameters' must be a list")
        for i, node in enumerate(value):
            node, at = self.deref(node, f"{where}/{i}")
            if not isinstance(node, dict) or not isinstance(node.get("name"), str) or not node["name"]:
                raise self.fail(at, "a parameter needs a 'name'")
            place = node.get("in")
            if place not in PLACES:
                raise self.fail(f"{at}/in", f"'in' must be one of {', '.join(PLACES)}, not {place!r}")
            schema = None
            if "schema" in node:
                schema = self.schema(node["schema"], f"{at}/schema")
            elif isinstance(node.get("content"), dict) and node["content"]:
                ctype, media = next(iter(node["content"].items()))
                media, media_at = self.deref(media, f"{at}/content/{_escape(ctype)}")
                if isinstance(media, dict) and "schema" in media:
                    schema = self.schema(media["schema"], f"{media_at}/schema")
            by_place[(place, node["name"])] = Parameter(
                node["name"], place, bool(node.get("required")) or place == "path",
                str(node.get("description") or ""), schema, _examples(node, self, at))
        return tuple(by_place.values())

    def body_required(self, value: Any, where: str) -> bool:
        node, _ = self.deref(value, where)
        return isinstance(node, dict) and bool(node.get("required"))

    def request_body(self, value: Any, where: str) -> dict[str, MediaType]:
        if value is None:
            return {}
        node, at = self.deref(value, where)
        if not isinstance(node, dict) or not isinstance(node.get("content"), dict):
            raise self.fail(at, "a request body needs a 'content' object")
        return self.content(node["content"], f"{at}/content")

    def replies(self, value: Any, where: str) -> dict[str, Reply]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(where, "'responses' must be an object")
        replies = {}
        for status, node in value.items():
            if str(status).startswith("x-"):
                continue  # an extension, not a status
            status = str(status).upper()  # YAML reads 200 as a number
            at = f"{where}/{_escape(status)}"
            if status != "DEFAULT" and not re.fullmatch(r"[1-5](\d\d|XX)", status):
                raise self.fail(at, f"{status!r} is not an HTTP status, a range like 2XX, or 'default'")
            node, at = self.deref(node, at)
            if not isinstance(node, dict):
                raise self.fail(at, "a response must be an object")
            content = node.get("content")
            if content is not None and not isinstance(content, dict):
                raise self.fail(f"{at}/content", "'content' must be an object")
            replies[status.lower() if status == "DEFAULT" else status] = Reply(
                str(node.get("description") or ""), self.content(content or {}, f"{at}/content"),
                self.headers(node.get("headers"), f"{at}/headers"))
        return replies

    def headers(self, value: Any, where: str) -> dict[str, MediaType]:
        """A reply's documented headers: their schemas and examples, by lower-cased name."""
        if not isinstance(value, dict):
            return {}
        out = {}
        for name, node in value.items():
            node, at = self.deref(node, f"{where}/{_escape(name)}")
            if isinstance(node, dict):
                schema = self.schema(node["schema"], f"{at}/schema") if "schema" in node else None
                out[str(name).lower()] = MediaType(schema, _examples(node, self, at))
        return out

    def security(self, value: Any, where: str) -> tuple:
        """The operation's security alternatives, each scheme as (name, type, where, what);
        () when none is asked, or an alternative is empty (``{}``: anonymous calls too)."""
        if not isinstance(value, list):
            return ()
        schemes = self.scheme_table()
        alternatives = []
        for requirement in value:
            if not isinstance(requirement, dict) or not requirement:
                return ()  # an empty requirement: no credential needed
            known = tuple(schemes[name] for name in requirement if name in schemes)
            if not known or any(s[1] == "mutualTLS" for s in known):
                return ()  # a scheme the document does not define, or TLS's: not checked
            alternatives.append(known)
        return tuple(alternatives)

    def scheme_table(self) -> dict[str, tuple[str, str, str, str]]:
        schemes = _object(_object(self.doc.get("components")).get("securitySchemes"))
        table = {}
        for name, scheme in schemes.items():
            scheme, _ = self.deref(scheme, f"/components/securitySchemes/{_escape(name)}")
            if not isinstance(scheme, dict):
                continue
            kind = str(scheme.get("type") or "")
            if kind == "apiKey" and scheme.get("in") in PLACES and isinstance(scheme.get("name"), str):
                table[name] = (name, kind, scheme["in"], scheme["name"])
            elif kind == "http":
                table[name] = (name, kind, "header", str(scheme.get("scheme") or "").lower())
            elif kind in ("oauth2", "openIdConnect"):
                table[name] = (name, kind, "header", "bearer")
            elif kind == "mutualTLS":
                table[name] = (name, kind, "", "")
        return table

    def content(self, content: Mapping, where: str) -> dict[str, MediaType]:
        out = {}
        for ctype, media in content.items():
            media, at = self.deref(media, f"{where}/{_escape(ctype)}")
            if not isinstance(media, dict):
                raise self.fail(at, "a media type must be an object")
            schema = self.schema(media["schema"], f"{at}/schema") if "schema" in media else None
            out[str(ctype).lower()] = MediaType(schema, _examples(media, self, at))
        return out

    def secrets(self) -> dict[str, tuple[str, ...]]:
        """The names that carry credentials (apiKey security schemes), by place."""
        schemes = _object(_object(self.doc.get("components")).get("securitySchemes"))
        found: dict[str, set[str]] = {}
        for scheme_name, scheme in schemes.items():
            scheme, _ = self.deref(scheme, f"/components/securitySchemes/{_escape(scheme_name)}")
            if isinstance(scheme, dict) and scheme.get("type") == "apiKey" and isinstance(scheme.get("name"), str):
                found.setdefault(str(scheme.get("in")), set()).add(scheme["name"])
        return {place: tuple(sorted(names)) for place, names in sorted(found.items()) if place in PLACES}


def _object(value: Any) -> dict[Any, Any]:
    """A member that must be an object, as one: an empty one when it is anything else."""
    return value if isinstance(value, dict) else {}


def _examples(node: Mapping, reader: _Reader, where: str) -> tuple[Any, ...]:
    """The documented example values of a parameter or media type, in document order."""
    found = []
    if "example" in node:
        found.append(node["example"])
    examples = node.get("examples")
    if isinstance(examples, dict):
        for key, example in examples.items():
            example, _ = reader.deref(example, f"{where}/examples/{_escape(key)}")
            if isinstance(example, dict) and "value" in example:
                found.append(example["value"])
    return tuple(found)


def _dialect(document: dict, source: str) -> str:
    version = document.get("openapi")
    if "swagger" in document and version is None:
        raise InputError(f"{source}: at /swagger: Swagger {document['swagger']} is not read; convert it to "
                         "OpenAPI 3 first")
    if not isinstance(version, str) or not re.fullmatch(r"3\.[01]\.\d+(-.+)?", version):
        raise InputError(f"{source}: at /openapi: {version!r} is not an OpenAPI 3.0 or 3.1 version")
    return version[:3]


def _with_defaults(url: str, variables: Any, where: str, reader: _Reader) -> str:
    """A server URL with its variables at their defaults."""
    def default(match: re.Match) -> str:
        var = variables.get(match.group(1)) if isinstance(variables, dict) else None
        if not isinstance(var, dict) or "default" not in var:
            raise reader.fail(f"{where}/variables", f"server variable {match.group(1)!r} has no default")
        return str(var["default"])
    return re.sub(r"{([^}]+)}", default, url).rstrip("/")


def _absolute(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _named(node: Any) -> bool:
    return isinstance(node, dict) and isinstance(node.get("operationId"), str) and bool(node["operationId"].strip())


def _unused(op_id: str, taken: Mapping[str, str]) -> str:
    n = 2
    while f"{op_id}_{n}" in taken:
        n += 1
    return f"{op_id}_{n}"


def _made_up_id(method: str, template: str) -> str:
    """An operation without an operationId: its method and path (``get_pets_petId``)."""
    words = re.findall(r"[A-Za-z0-9]+", template)
    return "_".join([method.lower(), *words]) if words else method.lower()


def safe_name(text: str) -> str:
    """A spec's name as keys and file names can hold it: lower case, words joined by '-'."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return "-".join(words)[:60] or "api"


def _escape(key: Any) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")
