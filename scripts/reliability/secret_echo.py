"""Secrets in every place a request carries them, an upstream that echoes them in every form,
and the forms a checker looks for: the kit of scripts/reliability/fuzz_secrets.py.

- ``places(rng)``: one ``Place`` per way a request carries a secret (a query value, a header,
  a Basic password, a JSON member written with ``\\u`` escapes or given twice, a form with a
  byte that is no UTF-8, ``api_key=`` in a text body, a multipart body cut short, ``;`` pairs,
  the fragment, a key in the path, camelCase names, ...), each with fresh secrets drawn from
  the seeded ``rng`` (characters that need escaping included wherever the place allows them);
- ``ECHO_FORMS`` and ``echoed(value, form)``: how an upstream may write a value back (as
  itself, percent-encoded in either case or twice, with ``+``, JSON-escaped, ``\\u`` escapes,
  escaped twice, HTML references decimal, hex or named, as a header's value or name, and
  the raw request quoted as it came or JSON-escaped);
- ``EchoUpstream``: that upstream, on 127.0.0.1 (HTTP, or HTTPS with a context), answering
  ``/echo/<form>/...`` with every value it received written in ``<form>``, ``/data/...`` with
  fixed data (for what must be kept as it came) and anything else with the path it received;
- ``forms_of(secret)``: every form of a secret that must be found nowhere.
"""

from __future__ import annotations

import base64
import html
import json
import random
import re
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlencode, urlsplit

LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
TOKEN_SAFE = LETTERS + "-._~+/="  # header values, text bodies, cookies: no space, quote or separator
ANY = TOKEN_SAFE + ' "\\:;&?#%@!*\'()[]{}<>,é名\U0001F511'  # where escaping carries anything


def secret(rng: random.Random, alphabet: str = ANY, size: tuple[int, int] = (12, 22)) -> str:
    """A fresh secret: a letter, then characters of ``alphabet`` (at least a third of them
    letters or digits), never one character repeated; long enough to be hunted."""
    length = rng.randint(*size)
    chars = [rng.choice(LETTERS)] + [rng.choice(alphabet if rng.random() < 0.6 else LETTERS) for _ in range(length)]
    return "".join(chars).strip()


@dataclass(frozen=True)
class Place:
    """A request carrying secrets: its name, method, path and query (after /echo/<form>),
    headers, body, and the secrets it carries with the raw texts they were sent as."""

    name: str
    method: str
    target: str  # "/rest?query" (or with "#fragment"), appended to /echo/<form>/<name>
    headers: tuple[tuple[str, str], ...]
    body: bytes
    secrets: tuple[tuple[str, tuple[str, ...]], ...]  # (secret, raw forms it was sent in)


JSON_TYPE = ("Content-Type", "application/json")
FORM_TYPE = ("Content-Type", "application/x-www-form-urlencoded")
BOUNDARY = "stb-fuzz-boundary-7Qx"


def _multipart(fields: list[tuple[str, str]], closed: bool = True) -> bytes:
    body = b"".join(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
                    + value.encode() + b"\r\n" for name, value in fields)
    return body + (f"--{BOUNDARY}--\r\n".encode() if closed else b"")


def _u_escaped(value: str) -> str:
    units = value.encode("utf-16-be", "surrogatepass")
    return "".join(f"\\u{int.from_bytes(units[i:i + 2], 'big'):04x}" for i in range(0, len(units), 2))


def places(rng: random.Random) -> list[Place]:
    """One Place per way a request carries a secret, with fresh secrets from ``rng``."""
    s = {name: secret(rng, alphabet) for name, alphabet in (
        ("query", ANY), ("header", TOKEN_SAFE), ("bearer", TOKEN_SAFE), ("basic", ANY.replace(":", "")),
        ("cookie", TOKEN_SAFE.replace("=", "")), ("json", ANY), ("json_u", ANY), ("dup_first", ANY),
        ("dup_last", ANY), ("form", ANY), ("form_bytes", ANY), ("text", TOKEN_SAFE.replace("+", "")),
        ("multipart", TOKEN_SAFE + " :é"), ("unclosed", TOKEN_SAFE + " :é"), ("semicolon", ANY),
        ("fragment", ANY), ("path", TOKEN_SAFE.replace("/", "")), ("camel", ANY), ("client", ANY),
        ("nested", ANY))}
    q = lambda value: quote(value, safe="")  # noqa: E731
    basic = base64.b64encode(f"fuzz-user:{s['basic']}".encode()).decode()
    json_u = '{"q": 1, "toolbench_key": "' + _u_escaped(s["json_u"]) + '"}'
    dup = json.dumps({"api_key": s["dup_first"]})[:-1] + ', "q": 2, "api_key": ' + json.dumps(s["dup_last"]) + "}"
    return [
        Place("query", "GET", f"/p?q=1&api_key={q(s['query'])}", (), b"", ((s["query"], (q(s["query"]),)),)),
        Place("header", "GET", "/p?q=2", (("X-Api-Key", s["header"]),), b"", ((s["header"], ()),)),
        Place("bearer", "GET", "/p?q=3", (("Authorization", f"Bearer {s['bearer']}"),), b"", ((s["bearer"], ()),)),
        Place("basic-password", "GET", "/p?q=4", (("Authorization", f"Basic {basic}"),), b"",
              ((s["basic"], (basic,)),)),
        Place("cookie", "GET", "/p?q=5", (("Cookie", f"theme=dark; sid={s['cookie']}"),), b"", ((s["cookie"], ()),)),
        Place("json", "POST", "/p", (JSON_TYPE,), json.dumps({"q": 6, "api_key": s["json"]}).encode(),
              ((s["json"], (json.dumps(s["json"])[1:-1],)),)),
        Place("json-u-escaped", "POST", "/p", (JSON_TYPE,), json_u.encode(),
              ((s["json_u"], (_u_escaped(s["json_u"]),)),)),
        Place("json-duplicate", "POST", "/p", (JSON_TYPE,), dup.encode(),
              ((s["dup_first"], (json.dumps(s["dup_first"])[1:-1],)),
               (s["dup_last"], (json.dumps(s["dup_last"])[1:-1],)))),
        Place("json-nested", "POST", "/p", (JSON_TYPE,),
              json.dumps({"auth": {"credentials": {"password": s["nested"]}}, "q": 7}).encode(), ((s["nested"], ()),)),
        Place("form", "POST", "/p", (FORM_TYPE,), urlencode({"q": "8", "password": s["form"]}).encode(),
              ((s["form"], (quote_plus(s["form"]),)),)),
        Place("form-not-utf8", "POST", "/p", (FORM_TYPE,),
              b"city=S\xe3o&" + urlencode({"token": s["form_bytes"]}).encode(),
              ((s["form_bytes"], (quote_plus(s["form_bytes"]),)),)),
        Place("text-plain", "POST", "/p", (("Content-Type", "text/plain"),),
              f"please use api_key={s['text']} for this".encode(), ((s["text"], ()),)),
        Place("multipart", "POST", "/p", (("Content-Type", f"multipart/form-data; boundary={BOUNDARY}"),),
              _multipart([("q", "9"), ("api_key", s["multipart"])]), ((s["multipart"], ()),)),
        Place("multipart-unclosed", "POST", "/p", (("Content-Type", f"multipart/form-data; boundary={BOUNDARY}"),),
              _multipart([("q", "10"), ("password", s["unclosed"])], closed=False), ((s["unclosed"], ()),)),
        Place("semicolon-pair", "GET", f"/p?x=11;api_key={q(s['semicolon'])}&q=11", (), b"",
              ((s["semicolon"], (q(s["semicolon"]),)),)),
        Place("fragment", "GET", f"/p?q=12#access_token={q(s['fragment'])}&x=1", (), b"",
              ((s["fragment"], (q(s["fragment"]),)),)),
        Place("path", "GET", f"/user/{q(s['path'])}/items?q=13", (("X-Api-Key", s["path"]),), b"", ((s["path"], ()),)),
        Place("camel-case", "POST", "/p", (JSON_TYPE,), json.dumps({"accessToken": s["camel"], "q": 14}).encode(),
              ((s["camel"], (json.dumps(s["camel"])[1:-1],)),)),
        Place("kebab-form", "POST", "/p", (FORM_TYPE,), urlencode({"client-secret": s["client"], "q": "15"}).encode(),
              ((s["client"], (quote_plus(s["client"]),)),)),
    ]


# -- how an upstream writes a value back, and what a checker looks for -----------------------------


def _json_inner(value: str, ensure_ascii: bool = True) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii)[1:-1]


def _lower_hex(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), text)


def _units(value: str) -> list[int]:
    data = value.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


WRITERS = {
    "decoded": lambda v: v,
    "pct": lambda v: quote(v, safe=""),
    "pct-lower": lambda v: _lower_hex(quote(v, safe="")),
    "pct-slash": lambda v: quote(v, safe="/"),
    "pct-twice": lambda v: quote(quote(v, safe=""), safe=""),
    "pct-all": lambda v: "".join(f"%{b:02X}" for b in v.encode()),
    "plus": lambda v: quote_plus(v, safe=""),
    "json": lambda v: _json_inner(v),
    "json-utf8": lambda v: _json_inner(v, ensure_ascii=False),
    "json-slash": lambda v: _json_inner(v).replace("/", "\\/"),
    "json-u": lambda v: "".join(f"\\u{unit:04x}" for unit in _units(v)),
    "json-U": lambda v: "".join(f"\\u{unit:04X}" for unit in _units(v)),
    "json-twice": lambda v: _json_inner(_json_inner(v)),
    "html": lambda v: html.escape(v).replace("/", "&#x2F;"),
    "html-dec": lambda v: "".join(f"&#{ord(c)};" for c in v),
    "html-hex": lambda v: "".join(f"&#x{ord(c):x};" for c in v),
    "html-named": lambda v: "".join({"/": "&sol;", "=": "&equals;", "+": "&plus;", ".": "&period;", "_": "&lowbar;",
                                     ":": "&colon;"}.get(c, c) for c in v),
}
# The forms the upstream answers in: the writers, the value in a header's value and name, and
# the raw request quoted as it came (answered 401, a refusal that quotes the caller) or JSON-escaped.
ECHO_FORMS = (*WRITERS, "header-value", "header-name", "raw", "raw-json")
QUICK_FORMS = ("decoded", "pct-lower", "json-twice", "html-dec", "header-name", "raw-json")


def forms_of(value: str) -> dict[str, str]:
    """Every form of a secret that must never be kept, by name (forms that are the same text
    named once)."""
    found: dict[str, str] = {}
    for name, write in WRITERS.items():
        try:
            text = write(value)
        except UnicodeEncodeError:
            continue
        found.setdefault(text, name)
    return {name: text for text, name in found.items()}


# -- the upstream ---------------------------------------------------------------------------------


class _Members(list):
    pass


def _strings(value) -> list[str]:
    if isinstance(value, _Members):
        return [s for _, v in value for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def _multipart_values(body: bytes, content_type: str) -> list[str]:
    boundary = content_type.partition("boundary=")[2].strip('"')
    values = []
    for section in body.split(b"--" + boundary.encode())[1:]:
        if section.startswith(b"--"):
            break
        _, _, value = section.partition(b"\r\n\r\n")
        values.append(value.removesuffix(b"\r\n").decode("utf-8", "surrogateescape"))
    return values


def received_values(target: str, headers, body: bytes) -> list[str]:
    """Every value a request carried, decoded, as an upstream reads them: path segments after
    /echo/<form>/<place>, query values (split at & and ;), header values (a Basic password,
    a bearer token and each cookie alone too), and the body's strings (JSON, every member), fields (form,
    multipart) or words."""
    parts = urlsplit(target)
    values = [unquote(segment) for segment in parts.path.split("/")[4:]]
    values += [unquote_plus(pair.partition("=")[2]) for pair in re.split("[&;]", parts.query) if "=" in pair]
    for name, value in headers:
        if name.lower() in ("host", "content-length", "content-type", "connection", "accept-encoding"):
            continue
        values.append(value)
        scheme, _, credential = value.partition(" ")
        if scheme.lower() == "bearer":
            values.append(credential)
        elif name.lower() == "cookie":
            values += [cookie.partition("=")[2] for cookie in value.split("; ")]
        elif scheme.lower() == "basic":
            values.append(base64.b64decode(credential).decode("utf-8", "surrogateescape").partition(":")[2])
    content_type = dict((k.lower(), v) for k, v in headers).get("content-type", "")
    if "json" in content_type:
        try:
            values += _strings(json.loads(body, object_pairs_hook=_Members))
        except ValueError:
            values.append(body.decode("utf-8", "surrogateescape"))
    elif "multipart" in content_type:
        values += _multipart_values(body, content_type)
    elif body:
        text = body.decode("utf-8", "surrogateescape")
        values += [unquote_plus(pair.partition("=")[2]) for pair in re.split(r"[&;\s]", text) if "=" in pair]
    return [v for v in values if v and _is_text(v)]


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False  # a byte that was no UTF-8: echoed by none of the forms
    return True


DATA = b'{"name":"Milo","tag":"Milos","status":"active","code":"abc1234","word":"password"}'


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        segments = urlsplit(self.path).path.split("/")
        self.server.paths.append(urlsplit(self.path).path)
        if segments[1:2] == ["data"]:  # fixed data, with words a careless scrubber would take for secrets
            return self._answer(200, DATA)
        if segments[1:2] != ["echo"] or len(segments) < 4:  # the path as received
            return self._answer(200, json.dumps({"path": urlsplit(self.path).path}).encode())
        form = segments[2]
        received = f"you called {self.command} {self.path} with {body.decode('utf-8', 'surrogateescape')}"
        extra: list[tuple[str, str]] = []
        values = received_values(self.path, list(self.headers.items()), body)
        if form == "raw":
            text = received
        elif form == "raw-json":
            text = _json_inner(received)
        elif form in ("header-value", "header-name"):
            text = "see the headers"
            for n, value in enumerate(values):
                encoded = quote(value, safe="")[:200]
                extra.append((f"X-Echo-{n}", encoded) if form == "header-value" else (f"X-{encoded}", str(n)))
        else:
            text = " | ".join(WRITERS[form](value) for value in values)
        answer = '{"error": "", "note": "you called with", "you_sent": "' + text + '"}'
        payload = answer.encode("utf-8", "surrogateescape")
        self._answer(401 if form == "raw" else 200, payload, extra)

    def _answer(self, status: int, payload: bytes, extra: list[tuple[str, str]] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = _serve


class EchoUpstream:
    """The echoing upstream on 127.0.0.1, on a thread of its own; ``paths``: every path it received."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.paths = []
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def paths(self) -> list[str]:
        return self.server.paths

    def __enter__(self) -> EchoUpstream:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
