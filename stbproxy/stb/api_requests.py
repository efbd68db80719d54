"""From an API of the catalog and its arguments to the requests that call it, and back.

Pure. A request's arguments merge its query and body parameters (request_args); the
request that calls an API is built under the names its doc lists (api_request); an entry
whose API has no URL keeps a stand-in request naming the API (stored_request); a /virtual
call sent on to a ToolBench-style server is re-packed as StableToolBench sends it
(toolbench_request). Which request is which kind of call is the traffic kinds' business
(traffic/, stb/traffic.py).
"""

from __future__ import annotations

import json
from typing import Any, Mapping
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from stbcore.toolbench_names import server_names
from stbproxy import jsonsafe, keys
from stbproxy.models import ApiRef, Request
from stbproxy.stb.catalog import ApiDoc

VIRTUAL_HOST = "virtual.invalid"  # stands for an API whose URL is unknown (.invalid is never real)
# json.dumps with options builds an encoder per call; a stand-in body is made per imported
# entry. Its arguments come from JSON or literals, so they hold no cycles to look for.
_STAND_IN_BODY = json.JSONEncoder(ensure_ascii=False, default=str, check_circular=False)


def request_args(request: Request) -> dict[str, Any]:
    """Query and body parameters as one mapping (body wins on a clash, as servers read it)."""
    try:
        query = urlsplit(request.url).query
    except ValueError:
        query = ""
    args: dict[str, Any] = dict(parse_qsl(query, keep_blank_values=True))
    content_type = request.header("content-type")
    if request.body and keys.is_json_type(content_type):
        try:
            value = jsonsafe.loads(request.body)
        except (ValueError, UnicodeDecodeError):
            value = None
        if isinstance(value, dict):
            args.update(value)
        elif value is not None:
            args["_body"] = value
    elif request.body and keys.is_form_type(content_type):
        try:
            args.update(parse_qsl(request.body.decode("utf-8"), keep_blank_values=True))
        except UnicodeDecodeError:
            pass
    return args


def api_request(doc: ApiDoc, args: Mapping[str, Any], headers: tuple[tuple[str, str], ...] = ()) -> Request | None:
    """The RapidAPI-style HTTP request that calls ``doc`` with ``args`` (under the names
    the doc lists, whichever spelling the caller used); None without a URL."""
    if not doc.url:
        return None
    url, rest = fill_path(doc.url, doc.wire_args(args))
    method = (doc.method or "GET").upper()
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return None
    base_headers = (("X-RapidAPI-Host", host),) + tuple(headers)
    if method in ("GET", "DELETE", "HEAD") or not rest:
        query = urlencode({k: keys.arg_text(v) for k, v in rest.items()})
        separator = "&" if "?" in url else "?"
        return Request(method, url + (separator + query if query else ""), base_headers)
    body = json.dumps(dict(rest), ensure_ascii=False).encode()
    return Request(method, url, base_headers + (("Content-Type", "application/json"),), body)


def fill_path(url: str, args: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """Substitute ``{param}`` templates from args; the args left over go in query or body."""
    rest = dict(args)
    for name in list(rest):
        token = "{" + name + "}"
        if token in url:
            url = url.replace(token, quote(keys.arg_text(rest.pop(name)), safe=""))
    return url, rest


def stored_request(ref: ApiRef, doc: ApiDoc | None, args: Mapping[str, Any]) -> Request:
    """The request kept with an API entry: the real call when the URL is known, else a
    stand-in naming the API, so that every entry can be shown, diffed and exported."""
    real = api_request(doc, args) if doc is not None else None
    return real if real is not None else stand_in_request(ref, args)


def stand_in_request(ref: ApiRef, args: Mapping[str, Any]) -> Request:
    """``POST http://virtual.invalid/<category>/<tool>/<api>`` with the arguments as JSON."""
    return Request("POST", f"http://{VIRTUAL_HOST}/{ref.category}/{ref.tool}/{ref.api}",
                   (("Content-Type", "application/json"),), stand_in_body(args))


def stand_in_body(args: Mapping[str, Any]) -> bytes:
    """The body of stored_request's stand-in: the arguments as JSON, in the call's order and
    with their types, which is what an exact key is made of (keys.exact_arguments_text)."""
    return _STAND_IN_BODY.encode(dict(args)).encode()


def is_rapidapi_url(url: str) -> bool:
    """True for RapidAPI's hosts, which answer nothing useful without a key."""
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return False
    return host == "rapidapi.com" or host.endswith(".rapidapi.com")


def toolbench_request(url: str, category: str, tool_name: str, api_name: str, args: Mapping[str, Any],
                      toolbench_key: str) -> Request:
    """A /virtual call sent on to a ToolBench-style server as StableToolBench's server sends
    it: its category key, the tool name as the client gave it cut at its first ``_for_``,
    its API key (server_names), the arguments as a JSON object, and the key in the body and
    as a header."""
    category, _tool, api = server_names(category, tool_name, api_name)
    body = {"category": category, "tool_name": tool_name.split("_for_")[0], "api_name": api,
            "tool_input": dict(args), "strip": "", "toolbench_key": toolbench_key}
    headers = (("accept", "application/json"), ("Content-Type", "application/json"),
               ("toolbench_key", toolbench_key))
    return Request("POST", url, headers, json.dumps(body).encode())
