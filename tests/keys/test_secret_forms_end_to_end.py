"""A secret is kept nowhere in any form an upstream may echo it in, end to end: every kind of
secret is sent through a real proxy (record mode, a Redis tier, then two workers) to an upstream
that echoes it in each form, and every form of every secret is looked for in the store's files,
its decoded entries, the YAML export, every Redis key and value, and the proxy's -v log.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit

from scripts.reliability.fuzz_secrets import redis_contents
from stbproxy.serve_process import ServeProcess
from tests.keys.secret_forms_helpers import (
    _json_inner,
    echo_forms,
    forbidden,
    leaks,
    multipart,
)

# -- end to end: a real proxy, an upstream that echoes, every place something is kept ------------

# "raw" is answered 401 (an upstream's refusal quoting the request); the others 200.
ECHO_FORMS = ("raw", "decoded", "pct", "pct-lower", "plus", "json", "json-slash", "json-u", "json-U", "pct-all",
              "html", "html-dec", "html-hex", "json-twice", "raw-json")


class _EchoHandler(BaseHTTPRequestHandler):
    """An upstream that answers 401 quoting everything it was sent in the form its path
    names (/echo/<form>/...): the request target and body as they came (raw), or each value
    (query, header, JSON string, form and multipart field) written in that form."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        form = urlsplit(self.path).path.split("/")[2]
        if form == "raw":
            text = f"you called {self.path} with {body.decode('utf-8', 'surrogateescape')}"
        elif form == "raw-json":  # the request's text quoted in a JSON string: its escapes escaped again
            text = _json_inner(f"you called {self.path} with {body.decode('utf-8', 'surrogateescape')}")
        else:
            text = " | ".join(echo_forms(v)[form] for v in self._values(body))
        payload = json.dumps({"error": "", "note": "you called with"})[:-1] + f', "you_sent": "{text}"}}'
        data = payload.encode("utf-8", "surrogateescape")
        self.send_response(401 if form == "raw" else 200)  # a 401 is logged, a 200 kept as an answer
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-You-Sent", quote(text, safe="")[:2000])
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _serve

    def _values(self, body: bytes) -> list[str]:
        values = [v for _, v in parse_qsl(urlsplit(self.path).query)]
        values += [v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")]
        content_type = self.headers.get("Content-Type", "")
        if "json" in content_type:
            try:
                values += _strings(json.loads(body))
            except ValueError:
                values.append(body.decode("utf-8", "replace"))
        elif "multipart" in content_type:
            head = b"Content-Type: " + content_type.encode() + b"\r\n\r\n"
            message = BytesParser(policy=HTTP).parsebytes(head + body)
            values += [part.get_content() for part in message.iter_parts()]
        elif body:  # a form, or text with name=value pairs in it
            values += [v for _, v in parse_qsl(body.decode("utf-8", "surrogateescape").replace(" ", "&"))]
        return [v for v in values if _is_text(v)]  # a byte that was no UTF-8 (form-not-utf8) is echoed by none


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _strings(value) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def _case(name, method, target, headers, body, *secrets):
    return name, method, target, headers, body, secrets


def secret_cases() -> list[tuple]:
    """(name, method, path and query, headers, body, (secret, raw text sent)...) for each way
    a secret is sent; every secret is a string no other case holds."""
    mp_type, mp_body = multipart([("q", "hello", None), ("password", "Mp/Field+Pw01=", None),
                                  ("Api_Key", "Mp\"Quote\\Key02", None)])
    return [
        _case("pct-upper", "GET", "/p?apikey=SECRET%2FSLASH026&q=1", {}, b"", ("SECRET/SLASH026", "SECRET%2FSLASH026")),
        _case("pct-lower", "GET", "/p?apikey=LoWeR%2fHex%3d031&q=1", {}, b"", ("LoWeR/Hex=031", "LoWeR%2fHex%3d031")),
        _case("plus", "GET", "/p?api_key=SECRET+PLUS027&q=1", {}, b"", ("SECRET PLUS027", "SECRET+PLUS027")),
        _case("plus-sign", "GET", "/p?access_token=B64%2BPlus%2Fkey%3D%3D", {}, b"",
              ("B64+Plus/key==", "B64%2BPlus%2Fkey%3D%3D")),
        _case("json-quote-backslash", "POST", "/p", {"Content-Type": "application/json"},
              json.dumps({"api_key": 'Qu"ote\\Back032', "q": 1}).encode(), ('Qu"ote\\Back032', 'Qu\\"ote\\\\Back032')),
        _case("json-u-escapes", "POST", "/p", {"Content-Type": "application/json"},
              b'{"toolbench_key": "\\u0055Esc\\u0041ped\\u002fTb033", "q": 2}',
              ("UEscAped/Tb033", "\\u0055Esc\\u0041ped\\u002fTb033")),
        _case("x-api-key", "GET", "/p?q=3", {"X-Api-Key": "XaK/Header+034="}, b"", ("XaK/Header+034=",)),
        _case("password-token", "POST", "/p", {"Content-Type": "application/x-www-form-urlencoded"},
              b"user=bob&password=Pa%24%24w0rd+035&token=Tok%2Fen036", ("Pa$$w0rd 035", "Pa%24%24w0rd+035"),
              ("Tok/en036", "Tok%2Fen036")),
        _case("api-key-array", "GET", "/p?api_key[]=Arr%2FOne037&api_key[]=Arr+Two038&q=4", {}, b"",
              ("Arr/One037", "Arr%2FOne037"), ("Arr Two038", "Arr+Two038")),
        _case("multipart", "POST", "/p", {"Content-Type": mp_type}, mp_body, ("Mp/Field+Pw01=",),
              ('Mp"Quote\\Key02',)),
        _case("json-names-case", "POST", "/p", {"Content-Type": "application/json"},
              json.dumps({"API_KEY": "UpperCase/Key039", "Toolbench_Key": "Mixed+Case040", "q": 5}).encode(),
              ("UpperCase/Key039",), ("Mixed+Case040",)),
        # issue 38: a key in the path (item 4), and the places of item 8
        _case("path-secret", "GET", "/user/PathKey-044/x?q=6", {"X-Api-Key": "PathKey-044"}, b"", ("PathKey-044",)),
        _case("json-duplicate", "POST", "/p", {"Content-Type": "application/json"},
              b'{"api_key": "First/Dup-045", "q": 7, "api_key": "Second/Dup-046"}', ("First/Dup-045",),
              ("Second/Dup-046",)),
        _case("text-plain", "POST", "/p", {"Content-Type": "text/plain"}, b"use api_key=Text/Plain-047 please",
              ("Text/Plain-047",)),
        _case("form-not-utf8", "POST", "/p", {"Content-Type": "application/x-www-form-urlencoded"},
              b"city=S\xe3o&api_key=NotUtf8%2FForm-048", ("NotUtf8/Form-048", "NotUtf8%2FForm-048")),
        _case("multipart-unclosed", "POST", "/p", {"Content-Type": mp_type},
              mp_body[:mp_body.rindex(b"--b0undary")].replace(b"Mp/Field+Pw01=", b"Mp/Unclosed-049"),
              ("Mp/Unclosed-049",), ('Mp"Quote\\Key02',)),
        _case("semicolon-query", "GET", "/p?x=1;api_key=Semi%2FColon-050&q=8", {}, b"",
              ("Semi/Colon-050", "Semi%2FColon-050")),
        _case("camel-case", "POST", "/p", {"Content-Type": "application/json"},
              json.dumps({"accessToken": "Camel/Token-051", "clientSecret": "Client+Secret052", "q": 9}).encode(),
              ("Camel/Token-051",), ("Client+Secret052",)),
    ]


def _send(proxy: ServeProcess, upstream_port: int, method: str, target: str, headers: dict, body: bytes) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    try:
        # absolute form: the proxy is the client's HTTP proxy; the target's bytes go as written
        connection.putrequest(method, f"http://127.0.0.1:{upstream_port}{target}", skip_accept_encoding=True)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def _send_all(proxy: ServeProcess, upstream_port: int) -> None:
    """Every case, echoed in every form; then once to a port where nothing listens (an
    upstream failure the -v log reports with the request's URL)."""
    for name, method, target, headers, body, _ in secret_cases():
        path, _, query = target.partition("?")
        for form in ECHO_FORMS:
            echo_target = f"/echo/{form}/{name}{path}" + (f"?{query}" if query else "")
            status = _send(proxy, upstream_port, method, echo_target, headers, body)
            assert form == "raw" or status == 200, (name, form, status)
        _send(proxy, _closed_port(), method, target, headers, body)


# Sent on both runs: "passwd" and X-Auth-Token are secret by default, "sig" is not; the
# workers run is told otherwise (--not-secret-field passwd --not-secret-header X-Auth-Token
# --secret-field sig), through its command line to both worker processes.
OPTIONS_TARGET = "/echo/decoded/options?passwd=Passwd-Value-043&sig=Sig-Value-041"
OPTIONS_HEADERS = {"X-Auth-Token": "Header-Value-042"}


def _send_options_case(proxy: ServeProcess, upstream_port: int) -> None:
    assert _send(proxy, upstream_port, "GET", OPTIONS_TARGET, OPTIONS_HEADERS, b"") == 200


def _decoded_store_text(store: Path) -> str:
    from stbproxy.store.embedded import Store

    with Store(store, readonly=True) as db:
        return json.dumps([[e.request.url, e.request.headers, e.response.body.decode("utf-8", "replace")]
                           for e in db.entries()])


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _all_secrets() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for *_, secrets in secret_cases():
        for secret, *raw in secrets:
            found[secret] = forbidden(secret, *raw)
    return found


def _store_leaks(store: Path, secrets: dict[str, set[str]]) -> list:
    """Leaks in the store's files read raw; since RocksDB compresses its tables (Snappy:
    some text stays readable, not all), in every record as RocksDB gives it back; and in
    every record decoded (a request body is kept in base64)."""
    from rocksdict import AccessType, Options, Rdict

    from stbproxy.store.record_format import decode_exchange

    found = []
    for path in store.rglob("*"):  # tables, the write-ahead log, RocksDB's LOG, stbproxy's own files
        if path.is_file():
            found += [(path.name, *leak) for leak in leaks(path.read_bytes(), secrets)]
    db = Rdict(str(store), Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        records = list(db.items())
    finally:
        db.close()
    assert sum(value.count(b"you called with") for _, value in records) >= len(secret_cases()) * len(ECHO_FORMS)
    for raw_key, value in records:
        key = raw_key.decode("utf-8", "surrogateescape")
        found += [(key, *leak) for leak in leaks(key, secrets) + leaks(value, secrets)]
        try:
            exchange = decode_exchange(key, value)
        except Exception:  # a session or meta record: its bytes are all there is
            continue
        request, response = exchange.request, exchange.response
        text = json.dumps([request.method, request.url, request.headers, response.headers, exchange.meta])
        for part in (text, request.body, response.body):
            found += [(key, *leak) for leak in leaks(part, secrets)]
    return found


def _export_leaks(store: Path, tmp_path: Path, secrets: dict[str, set[str]]) -> list:
    """Leaks in the YAML exports of every stored answer and of the session (which holds
    the logged 401s too)."""
    import yaml

    found = []
    for name, selection in (("all", ["--all", "*"]), ("session", ["--session", "secrets"])):
        out = tmp_path / f"{store.name}-{name}.yaml"
        done = subprocess.run([sys.executable, "-m", "stbproxy", "export", *selection, "-o", str(out),
                               "--store", str(store)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        text = out.read_text(encoding="utf-8", errors="surrogateescape")
        assert text.count("you called with") >= len(secret_cases()) * (len(ECHO_FORMS) - 1)
        document = yaml.safe_load(text)  # and decoded, so that an escape of YAML's own hides nothing
        found += leaks(text, secrets) + leaks(json.dumps(document, ensure_ascii=False, default=repr), secrets)
        found += leaks(done.stdout + done.stderr, secrets)
    return found


def _redis_leaks(redis_url: str, secrets: dict[str, set[str]]) -> list:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        found, keys_seen = [], 0
        for key, values in redis_contents(client):
            keys_seen += 1
            for value in [key, *values]:
                found += [(key, *leak) for leak in leaks(value or b"", secrets)]
        assert keys_seen >= len(secret_cases()) * len(ECHO_FORMS)
        return found
    finally:
        client.close()


def test_no_secret_in_any_form_reaches_store_export_redis_workers_or_log(tmp_path, redis_server):
    cases = _all_secrets()
    secrets = {**cases, "Passwd-Value-043": forbidden("Passwd-Value-043"),
               "Header-Value-042": forbidden("Header-Value-042")}
    workers_secrets = {**cases, "Sig-Value-041": forbidden("Sig-Value-041")}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        upstream_port = server.server_address[1]
        # virtual mode: 200s are stored as real answers, the 401 and the failures logged
        # (-v) and kept as records; no simulator, so that nothing else answers
        options = ("--mode", "virtual", "--simulator", "off", "-v", "--session", "secrets")
        # one process, the fast lane, a Redis tier
        store = tmp_path / "store"
        with ServeProcess(store, *options, "--shared", redis_server.url) as proxy:
            _send_all(proxy, upstream_port)
            _send_options_case(proxy, upstream_port)
        single_log = "".join(proxy.output)
        # two workers, every request through mitmproxy
        workers_store = tmp_path / "workers-store"
        workers = ServeProcess(workers_store, *options, "--workers", "2", "--no-fast-lane",
                               "--not-secret-field", "passwd", "--not-secret-header", "X-Auth-Token",
                               "--secret-field", "sig").start(120)
        try:
            _send_all(workers, upstream_port)
            _send_options_case(workers, upstream_port)
        finally:
            workers.stop()
        workers_log = "".join(workers.output)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    for log in (single_log, workers_log):  # -v logged the 401s and the failures, with their URLs
        assert "invalid upstream answer for GET http://127.0.0.1" in log
        assert "upstream failed for POST http://127.0.0.1" in log
    assert leaks(single_log, secrets) == []
    assert leaks(workers_log, workers_secrets) == []
    assert _store_leaks(store, secrets) == []
    assert _store_leaks(workers_store, workers_secrets) == []
    assert _export_leaks(store, tmp_path, secrets) == []
    assert _export_leaks(workers_store, tmp_path, workers_secrets) == []
    assert _redis_leaks(redis_server.url, secrets) == []
    # what the options took out of the defaults is kept as sent; what they added is not
    assert "Sig-Value-041" in _decoded_store_text(store)
    assert "Passwd-Value-043" in _decoded_store_text(workers_store)
    assert "Header-Value-042" in _decoded_store_text(workers_store)
