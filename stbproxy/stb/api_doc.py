"""What the catalog knows about one API: ``ApiDoc`` with its ``Param`` lists, its keys
derived from its names, and the mapping between documented and standardized parameter
names. Also how a doc URL reads as (host, path), which routing matches on."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping
from urllib.parse import unquote, urlsplit

from stbcore.toolbench_names import api_key_name, category_key, function_name, tool_key_in
from stbproxy.errors import InputError
from stbproxy.models import ApiRef


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type: str = "STRING"
    description: str = ""
    default: Any = None

    @classmethod
    def from_dict(cls, d: Any) -> Param:
        if not isinstance(d, Mapping) or not isinstance(d.get("name"), str) or not d["name"]:
            raise InputError(f"parameter without a name: {d!r:.80}")
        return cls(
            name=d["name"],
            type=str(d.get("type") or "STRING"),
            description=str(d.get("description") or ""),
            default=d.get("default"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "description": self.description,
                "default": self.default}


def _params(value: Any, what: str) -> tuple[Param, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InputError(f"{what} is not a list")
    return tuple(Param.from_dict(p) for p in value)


def param_fields(d: Mapping[str, Any]) -> dict[str, tuple[Param, ...]]:
    """The two parameter lists of a doc, query entry or saved doc, as ApiDoc fields."""
    return {name: _params(d.get(name), name)
            for name in ("required_parameters", "optional_parameters")}


@dataclass(frozen=True, slots=True)
class ApiDoc:
    """What the catalog knows about one API; ``ref`` is derived from the names."""

    category: str
    tool: str
    api: str
    url: str | None = None
    method: str = ""
    tool_description: str = ""
    api_description: str = ""
    required_parameters: tuple[Param, ...] = ()
    optional_parameters: tuple[Param, ...] = ()
    template_response: Any = None
    # JSON Schemas of the arguments and the answer, where the API publishes them (an MCP
    # tool's inputSchema and outputSchema); a catalog of ToolBench docs has none.
    input_schema: Any = field(default=None, compare=False)
    output_schema: Any = field(default=None, compare=False)
    ref: ApiRef = field(init=False, compare=False)
    # Documented parameter name <-> the standardized one agents see in the function
    # schema (ToolBench renames ``id`` to ``is_id``, ``playerId`` to ``playerid``, ...).
    key_names: Mapping[str, str] = field(init=False, compare=False, repr=False)
    wire_names: Mapping[str, str] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        cat = category_key(self.category)
        object.__setattr__(self, "ref", ApiRef(cat, tool_key_in(self.tool, cat),
                                               api_key_name(self.api)))
        object.__setattr__(self, "method", self.method.upper())
        key_names: dict[str, str] = {}
        wire_names: dict[str, str] = {}
        for param in self.required_parameters + self.optional_parameters:
            standard = api_key_name(param.name)
            if standard != param.name:
                key_names.setdefault(param.name, standard)
                wire_names.setdefault(standard, param.name)  # the first one listed wins
        object.__setattr__(self, "key_names", key_names)
        object.__setattr__(self, "wire_names", wire_names)

    @property
    def host(self) -> str:
        """The lower-case host of the API's URL; '' when it has none."""
        parts = url_parts(self.url or "")
        return parts[0] if parts else ""

    def key_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Arguments under their standardized names, as keys and StableToolBench's cache
        use them; a name the doc does not list is kept as given."""
        if not self.key_names:
            return dict(args)
        out: dict[str, Any] = {}
        for name, value in args.items():
            target = self.key_names.get(name, name)
            if target not in out or target == name:  # the standardized spelling wins a clash
                out[target] = value
        return out

    def in_doc_order(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Arguments (under their standardized names) in the order the doc lists them,
        required first, as an agent's function schema lists them; unlisted names after,
        as given. An HTTP request has no order of arguments that a /virtual call would
        share, so this is the order its exact key is made in."""
        listed = [api_key_name(p.name) for p in self.required_parameters + self.optional_parameters]
        ordered = {name: args[name] for name in listed if name in args}
        ordered.update((name, value) for name, value in args.items() if name not in ordered)
        return ordered

    def wire_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Arguments under the names the real API documents; unlisted names kept as given."""
        if not self.wire_names:
            return dict(args)
        return {self.wire_names.get(name, name): value for name, value in args.items()}

    @property
    def function_name(self) -> str:
        return function_name(self.api, self.tool)

    def merged(self, other: ApiDoc) -> ApiDoc:
        """This doc with its empty fields filled from ``other`` (same API)."""
        updates = {}
        for f in fields(self):
            if f.init and _is_empty(getattr(self, f.name)) and not _is_empty(getattr(other, f.name)):
                updates[f.name] = getattr(other, f.name)
        return replace(self, **updates) if updates else self

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "tool": self.tool,
            "api": self.api,
            # Derived, written for readers of the file; from_dict recomputes them.
            "keys": {"category": self.ref.category, "tool": self.ref.tool, "api": self.ref.api},
            "parameter_keys": dict(self.key_names),  # documented name -> standardized, where they differ
            "url": self.url,
            "method": self.method,
            "tool_description": self.tool_description,
            "api_description": self.api_description,
            "required_parameters": [p.to_dict() for p in self.required_parameters],
            "optional_parameters": [p.to_dict() for p in self.optional_parameters],
            "template_response": self.template_response,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ApiDoc:
        for name in ("category", "tool", "api"):
            if not isinstance(d.get(name), str) or not d[name]:
                raise InputError(f"API doc field {name!r} is missing or not a text")
        return cls(
            category=d["category"],
            tool=d["tool"],
            api=d["api"],
            url=d.get("url") or None,
            method=str(d.get("method") or ""),
            tool_description=str(d.get("tool_description") or ""),
            api_description=str(d.get("api_description") or ""),
            template_response=d.get("template_response"),
            **param_fields(d),
        )


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, (str, tuple, list, dict)) and not value)


# --- doc URLs ------------------------------------------------------------------------


def norm_path(path: str) -> str:
    """A URL path as routing compares it: "/a/b/" and "/a/b" name the same endpoint; an
    empty path is the root."""
    return unquote(path).rstrip("/") or "/"


def url_parts(url: str) -> tuple[str, str] | None:
    """(lower-case host, normalized path) of a doc URL, or None when it has no host."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError:
        return None
    return (host, norm_path(parts.path)) if host else None
