"""APIs described by OpenAPI documents, as a kind of traffic: a request that matches an
imported operation is keyed by the operation and its named arguments, its real answers are
checked against the schema documented for their status (a mismatch is drift: kept and
recorded, or invalid under ``--validity schema``; a status documented without a body is a
valid answer without one, and a 4xx the operation lists is a real answer), and its misses
are simulated in the documented status, media type and shape (answers.py), or, for a
request that breaks the document, answered as the document's validation would (validate.py).
A request to a documented server that matches no operation keeps its plain HTTP key; with
its API down it gets a 404 or 405."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping
from urllib.parse import parse_qsl, urlsplit

from stbproxy import json_schema, jsonsafe, keys, redact
from stbproxy.keys import KeyRules, canonical_body, is_json_type
from stbproxy.models import Request, Response
from stbproxy.openapi import answers
from stbproxy.openapi.catalog import OpenApiCatalog
from stbproxy.openapi.describe import operation_doc
from stbproxy.openapi.model import Operation
from stbproxy.openapi.validate import cookies_of, request_problem
from stbproxy.stb import validity
from stbproxy.stb.validity import FailureKind, Verdict
from stbproxy.synthesis.simulation import Simulation, SimulationRequest
from stbproxy.traffic.plain_http import judge_http
from stbproxy.traffic.seam import BaseKind, Call, Judged

PREFIX = "openapi/"


def key_prefix(operation: Operation) -> str:
    return f"{PREFIX}{operation.spec}/{operation.id}/"


class OpenApi(BaseKind):
    name = "openapi"

    def __init__(self, catalog: OpenApiCatalog | None) -> None:
        self.catalog = catalog if catalog else None

    # -- keying --------------------------------------------------------------------------

    def call(self, request: Request, rules: KeyRules) -> Call | None:
        if self.catalog is None:
            return None
        found = self.catalog.match(request.method, request.url)
        if found is None:
            unmatched = self.catalog.unmatched(request.method, request.url)
            if unmatched is None:
                return None
            # Keyed as plain HTTP (stores recorded before are still read); only its miss differs.
            return Call(keys.request_key(request, rules), request, request, host=request.host, kind=self.name,
                        facts={"unmatched": unmatched[0], "allowed": list(unmatched[1])})
        op = found.operation
        args, undeclared, material = _arguments(op, found.path_args, request, rules)
        digest = hashlib.sha256(json.dumps(material, ensure_ascii=False, separators=(",", ":"))
                                .encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return Call(f"{key_prefix(op)}{digest}", request, request, host=request.host, kind=self.name, args=args,
                    facts={"operation": op.name, "undeclared": undeclared, "path": dict(found.path_args)})

    # -- judging real answers ------------------------------------------------------------

    def judge(self, call: Call, response: Response, setting: str) -> Judged:
        judged = judge_http(response, validity.policy_for(setting, stb_traffic=False))
        op = self._operation(call)
        if op is None:
            return judged
        meta = {**judged.meta, "operation": op.name}
        if not judged.verdict.valid and _documented_without_body(op, response):
            judged = judged._replace(verdict=Verdict(True, f"openapi: {response.status} is documented without a body",
                                                     FailureKind.SUCCESS))
        elif not judged.verdict.valid and _documented_client_error(op, response):
            # The API's own answer to this call (no such pet): real, kept with its failure kind.
            judged = judged._replace(verdict=Verdict(True, f"openapi: {response.status} is documented for {op.name}",
                                                     judged.verdict.failure))
        drift = answer_problem(op, response)
        if drift is None:
            return judged._replace(meta=meta)
        meta["drift"] = drift
        verdict = judged.verdict
        if setting == validity.SCHEMA and verdict.valid:  # --validity schema: drift is invalid
            verdict = Verdict(False, f"schema: {drift}", FailureKind.OTHER)
        return judged._replace(meta=meta, verdict=verdict)

    # -- simulating ----------------------------------------------------------------------

    def describe(self, call: Call):
        op = self._operation(call)
        if op is None or self.catalog is None:  # (an operation is only found in a catalog)
            return None
        return operation_doc(op, self.catalog.specs.get(op.spec))

    async def simulate(self, call: Call, simulator, reason: str) -> Simulation:
        if call.facts.get("unmatched"):
            return answers.unmatched(call.facts["unmatched"], call.request, call.facts.get("allowed") or ())
        op = self._operation(call)
        if op is None:
            return await super().simulate(call, simulator, reason)
        broken = request_problem(op, call.request, call.facts.get("path") or {})
        if broken is not None:  # answered as the document's validation would: never a made-up success
            return answers.rejected(op, broken, call.seed)
        status, reply = op.success()
        if not status:
            return answers.failed(f"{op.name} documents no success answer to make up", {}, simulator_on=True)
        media = reply.media() if reply is not None else None
        headers = answers.documented_headers(op, reply, status, call.seed)
        if media is None or status in answers.NO_BODY or op.method == "HEAD":
            return Simulation(Response(status, headers, b""), ok=True, meta={"simulator": "schema"})
        made = await simulator.simulate(SimulationRequest(call.request, call.key, call.api, reason,
                                                          doc=self.describe(call), args=call.args))
        if not made.ok:
            return answers.failed_simulation(made)
        media_type, documented = media
        if not answers.is_json_media(media_type):
            return answers.text_answer(op, status, headers, media_type, documented, made, call.seed)
        value, meta = _value_of(made.response), dict(made.meta)
        problem = _schema_problem(op, value, documented.schema)
        if problem is not None:  # the simulator's answer breaks the promise: one from the schema
            value = schema_value(op, call.seed, status)
            meta = {**meta, "simulator": "schema", "replaced": f"{meta.get('simulator', 'the simulator')}'s "
                                                              f"answer broke the schema at {problem}"}
            still = _schema_problem(op, value, documented.schema)
            if still is not None:
                return answers.failed(f"no answer that follows the schema could be made: {still}", meta,
                                      simulator_on=True)
        if meta.get("simulator") == "schema" and documented.schema is not None:
            value = with_arguments(value, documented.schema, op, call.args)
        content_type = "application/json" if "*" in media_type else media_type
        body = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
        return Simulation(Response(status, (("content-type", content_type), *headers), body), ok=True, meta=meta)

    def _operation(self, call: Call) -> Operation | None:
        name = call.facts.get("operation") if call.facts else None
        return self.catalog.operation(name) if self.catalog is not None and name else None


def schema_value(op: Operation, key: str, status: int) -> Any:
    """A value for ``op``'s documented answer: its documented example when it follows the
    schema, else one made from the schema, drawn by ``key`` (drawn again, without the
    schema's own examples, when a draw breaks it)."""
    reply = op.replies.get(str(status)) or op.success()[1]
    media = reply.json_media() if reply is not None else None
    if media is None:
        return {}
    return answers.value_following(op, media[1], key)


def _schema_problem(op: Operation, value: Any, schema: Any) -> str | None:
    return None if schema is None else json_schema.problem(value, schema, op.defs, "answer")


def with_arguments(value: Any, schema: Any, op: Operation, args: Mapping[str, Any]) -> Any:
    """A made-up object answer that says back what the call named: a member named as an
    argument takes its value (``name`` of a pet added as "Zed"), and ``id`` the value of
    the one path parameter that is an id (``petId``), wherever the schema allows it."""
    if not isinstance(value, dict):
        return value
    pairs = [(name, args[name]) for name in value if name in args]
    ids = [p.name for p in op.parameters if p.where == "path" and p.name.lower().endswith("id")]
    if "id" in value and len(ids) == 1 and ids[0] in args and "id" not in args:
        pairs.append(("id", args[ids[0]]))
    for name, given in pairs:
        for candidate in _readings(given):
            tried = {**value, name: candidate}
            if json_schema.problem(tried, schema, op.defs, "answer") is None:
                value = tried
                break
    return value


def _readings(given: Any) -> list[Any]:
    """An argument as the answer may hold it: as given, then as a number or a boolean."""
    found = [given]
    if isinstance(given, str):
        for read in (int, float):
            try:
                found.append(read(given))
            except ValueError:
                pass
        if given in ("true", "false"):
            found.append(given == "true")
    return found


def answer_problem(op: Operation, response: Response) -> str | None:
    """How a real answer breaks what ``op`` documents (the first failing JSON pointer), or None."""
    found = op.reply_for(response.status)
    if found is None:
        return f"status {response.status} is not documented"
    documented, reply = found
    if not reply.content:
        return None  # documented without a body
    media = reply.json_media()
    if media is None or media[1].schema is None:
        return None  # a body this check does not read (text, images) or no schema for it
    content_type = response.header("content-type")
    if response.body and content_type and not is_json_type(content_type):
        return f"{documented}: the answer is {content_type.split(';')[0]}, not the documented {media[0]}"
    try:
        value = jsonsafe.loads(response.body) if response.body else None
    except (ValueError, UnicodeDecodeError):
        return f"{documented}: the answer is not JSON"
    problem = json_schema.problem(value, media[1].schema, op.defs, "answer")
    return f"{documented} {problem}" if problem else None


def _documented_without_body(op: Operation, response: Response) -> bool:
    """A status the operation documents without a body, answered without one (a 204 DELETE,
    a 201 "Null response", a 302): a valid answer, which strict judging takes for an empty one."""
    found = op.reply_for(response.status)
    return (found is not None and not found[1].content and 200 <= response.status < 400
            and not response.body.strip())


def _documented_client_error(op: Operation, response: Response) -> bool:
    """A 4xx the operation lists (its own code, or the 4XX range; ``default`` does not count):
    the API's documented answer, which the proxy keeps as real. Never a timeout or a rate
    limit (validity.TRANSIENT_CLIENT_ERRORS), which say nothing of the call."""
    found = op.reply_for(response.status)
    return (found is not None and found[0] != "default" and 400 <= response.status < 500
            and response.status not in validity.TRANSIENT_CLIENT_ERRORS)


def _arguments(op: Operation, path_args, request: Request, rules: KeyRules):
    """The call's named arguments (path, query, declared headers and cookies, a JSON body's
    members), the undeclared query parameters, and what its key is made of. A secret value
    of the request met anywhere else in it (an echo in a query value, the body) is REDACTED
    there first, as keys.canonical does: no key holds a secret, even hashed."""
    secrets = redact.secret_values(request, rules)
    query = [(k, v) for k, v in parse_qsl(urlsplit(request.url).query, keep_blank_values=True)
             if k.lower() not in rules.unkeyed_fields]
    if secrets:
        path_args = {k: redact.scrub_text(v, secrets) if isinstance(v, str) else v for k, v in path_args.items()}
        query = [(redact.scrub_text(k, secrets), redact.scrub_text(v, secrets)) for k, v in query]
    query.sort(key=lambda pair: pair[0])
    declared = {p.name for p in op.parameters if p.where == "query"}
    undeclared = sorted({k for k, _ in query if k not in declared})
    headers = {}
    cookies = cookies_of(request.header("cookie"))
    for p in op.parameters:
        if p.where == "header" and p.name.lower() not in rules.secret_headers:
            value = request.header(p.name)
            if value is not None:
                headers[p.name.lower()] = redact.scrub_text(value, secrets) if secrets else value
        elif p.where == "cookie" and p.name.lower() in cookies and p.name.lower() not in rules.unkeyed_fields:
            headers[f"cookie:{p.name}"] = cookies[p.name.lower()]
    body_kind, body = canonical_body(request.body, request.header("content-type"), rules, secrets)
    args: dict[str, Any] = {**path_args, **dict(query), **headers}
    if body_kind == "json":
        value = json.loads(body)  # the canonical text: secret and volatile members already out
        if isinstance(value, dict):
            args.update(value)
        else:
            args["body"] = value
    elif body_kind != "empty":
        args["body"] = body if body_kind == "form" else f"<{body_kind} body>"
    material = [op.id, sorted(path_args.items()), query, sorted(headers.items()), body_kind, body]
    return args, undeclared, material


def _value_of(response: Response) -> Any:
    try:
        return jsonsafe.loads(response.body)
    except (ValueError, UnicodeDecodeError):
        return response.body.decode("utf-8", "replace")

