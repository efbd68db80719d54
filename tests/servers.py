"""Real servers on loopback for tests: a scriptable upstream (HTTP or TLS), and
``stbproxy serve`` started as a real process (the runner users and the plugin get)."""

from __future__ import annotations

import datetime
import gzip
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from stbproxy.serve_process import ServeProcess


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        self.server.owner.hits[parts.path] += 1
        self.server.owner.requests.append((self.command, self.path, dict(self.headers), body))
        route = parts.path.strip("/").split("/")
        handler = getattr(self, f"route_{route[0]}", self.route_echo)
        handler(route[1:], dict(parse_qsl(parts.query)), body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve
    do_CONNECT = _serve  # as an outbound proxy: the CONNECT is recorded (and the tunnel then fails)

    def send(self, status: int, body: bytes, content_type: str = "application/json", headers=()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    # routes ------------------------------------------------------------------------------
    def route_echo(self, _rest, query, body) -> None:
        document = {
            "method": self.command,
            "path": urlsplit(self.path).path,
            "query": query,
            "body": body.decode("utf-8", "replace"),
            # The Host header is left out: its random port could hold "500" or "404", which
            # StableToolBench's substring rules would read as a failure.
            "headers": {k.lower(): v for k, v in self.headers.items() if k.lower() != "host"},
            "calls": self.server.owner.hits[urlsplit(self.path).path],
        }
        self.send(200, json.dumps(document, sort_keys=True).encode(), headers=[("X-Demo", "yes")])

    def route_api(self, _rest, query, body) -> None:
        # A RapidAPI-style endpoint: answers with what it was asked, but never echoes headers
        # (the caller's key stays in self.requests, for tests to look at).
        parts = urlsplit(self.path)
        document = {"path": parts.path, "query": query, "body": body.decode("utf-8", "replace")}
        self.send(200, json.dumps(document, sort_keys=True).encode())

    def route_status(self, rest, _query, _body) -> None:
        code = int(rest[0]) if rest else 500
        self.send(code, json.dumps({"message": f"status {code}"}).encode())

    def route_slow(self, _rest, query, _body) -> None:
        time.sleep(float(query.get("seconds", "1")))
        self.send(200, b'{"slow": true}')

    def route_reset(self, _rest, _query, _body) -> None:
        # Close without a word: the client sees a reset / empty reply.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self.close_connection = True
        self.connection.close()

    def route_garbage(self, _rest, _query, _body) -> None:
        self.wfile.write(b"this is not HTTP at all\r\n\r\n")
        self.close_connection = True

    def route_binary(self, _rest, _query, _body) -> None:
        self.send(200, bytes(range(256)) * 4, "application/octet-stream")

    def route_big(self, _rest, query, _body) -> None:
        self.send(200, b"x" * int(query.get("bytes", "1024")), "text/plain")

    def route_gzip(self, _rest, _query, _body) -> None:
        self.send(200, gzip.compress(b'{"compressed": true}'), headers=[("Content-Encoding", "gzip")])

    def route_echoheader(self, _rest, _query, _body) -> None:
        # An upstream that echoes the caller's key, as some real APIs do.
        key = self.headers.get("X-RapidAPI-Key", "")
        self.send(200, json.dumps({"your_key": key}).encode(), headers=[("X-Echo-Key", key)])

    def route_setcookie(self, _rest, query, _body) -> None:
        # A session cookie for whoever called: a proxy must not hand it to anyone else.
        self.send(200, b'{"cookie": "set"}', headers=[("Set-Cookie", f"sid={query.get('value', 'x')}; Path=/")])

    def route_virtual(self, _rest, _query, body) -> None:
        # A ToolBench-style server: {"error", "response"} for a /virtual call. tool_input
        # may be a JSON string (as clients send it) or an object (as StableToolBench's
        # server forwards it), as StableToolBench's server accepts both.
        call = json.loads(body)
        tool_input = call["tool_input"]
        args = tool_input if isinstance(tool_input, dict) else json.loads(tool_input or "{}")
        self.server.owner.toolbench_keys.append(call.get("toolbench_key"))
        self.server.owner.virtual_calls.append(({k.lower(): v for k, v in self.headers.items()}, call))
        if args.get("fail"):
            answer = {"error": "", "response": "API rate limit exceeded"}
        elif args.get("echo_key") == "error":  # a server that quotes the caller's key in an error
            answer = {"error": f"key {call.get('toolbench_key')} is over its quota", "response": ""}
        elif args.get("echo_key"):  # ... or echoes it in its answer
            answer = {"error": "", "response": {"your_key": call.get("toolbench_key")}}
        else:
            answer = {"error": "", "response": {"api": call["api_name"], "args": args, "from": "toolbench"}}
        self.send(200, json.dumps(answer).encode())

    def route_sse(self, _rest, _query, _body) -> None:
        events = b"".join(f"data: {json.dumps({'n': i})}\n\n".encode() for i in range(3)) + b"data: [DONE]\n\n"
        self.send(200, events, "text/event-stream")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: "Upstream", ssl_context: ssl.SSLContext | None, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.owner = owner
        if ssl_context is not None:
            self.socket = ssl_context.wrap_socket(self.socket, server_side=True)


class Upstream:
    """A real HTTP(S) server on 127.0.0.1 with an ephemeral port, started and stopped by tests."""

    def __init__(self, tls: "TestCA | None" = None, port: int = 0) -> None:
        self.hits: Counter[str] = Counter()
        self.requests: list[tuple[str, str, dict, bytes]] = []
        self.toolbench_keys: list[str | None] = []
        self.virtual_calls: list[tuple[dict, dict]] = []  # (headers, body) of each /virtual call
        context = tls.server_context() if tls else None
        self.scheme = "https" if tls else "http"
        self._server = _Server(self, context, port)  # port 0: an ephemeral one
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base + path

    def __enter__(self) -> "Upstream":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class TestCA:
    """A throw-away CA and a server certificate for 127.0.0.1 / localhost."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        now = datetime.datetime.now(datetime.timezone.utc)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "stbproxy test CA")])
        ca_cert = (
            x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
            .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        self.ca_file = folder / "test-ca.pem"
        self.ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
        self.cert_file = folder / "server.pem"
        self.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self.key_file = folder / "server.key"
        self.key_file.write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


# One way to start `stbproxy serve` everywhere: the package's own runner.
ProxyProcess = ServeProcess


def run_client(script: str, argument, env: dict[str, str]):
    """Run a client script (python -c) with the proxy environment ``env`` and nothing of the
    caller's own proxy settings; its JSON output, once it exited cleanly."""
    clean = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "no_proxy")}
    result = subprocess.run([sys.executable, "-c", script, json.dumps(argument)], env={**clean, **env},
                            capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
