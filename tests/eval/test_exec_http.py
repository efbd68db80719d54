"""eval exec's sender (exec_http.py) against a scripted stand-in for the proxy on loopback:
redirects only with -L and only to allowed hosts, POST turned GET as curl does, a cap on
the answer's size and a timeout (issue 44)."""

from __future__ import annotations

import json
import time

import pytest

from stbeval import exec_http
from stbeval.exec_curl import parse_curl
from stbeval.exec_http import Sender
from tests.loopback import LoopbackServer, QuietHandler


class _Handler(QuietHandler):
    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.owner.seen.append((self.command, self.path, body))
        path = self.path.split("://", 1)[-1].split("/", 1)[-1]  # an absolute-form target, as a proxy gets it
        if path.startswith("to-target"):
            status = int(path.rsplit("-", 1)[-1])
            self.send_response(status)
            self.send_header("Location", "/target")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "elsewhere":
            self.send_response(302)
            self.send_header("Location", "http://other.example/x")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "loop":
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "big":
            self.answer(200, b"[" + b"1," * 600 + b"1]")
        elif path == "slow":
            time.sleep(1.5)
            try:
                self.answer(200, b"{}")
            except OSError:  # the client gave up waiting, as it should
                pass
        else:
            self.answer(200, json.dumps({"ok": path}).encode())

    do_GET = do_POST = do_DELETE = _any


class FakeProxy(LoopbackServer):
    handler = _Handler

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, bytes]] = []


@pytest.fixture
def proxy():
    with FakeProxy() as server:
        yield server


def allow_h(host: str) -> str | None:
    return None if host == "h" else f"{host} is not allowed"


def send(proxy, line: str, timeout: float = 5.0):
    with Sender(proxy.base_url, ca=None, timeout=timeout, scrub=lambda t: t) as sender:
        return sender.send(parse_curl(line), allow_h)


def test_redirects_are_followed_only_with_dash_l(proxy):
    assert send(proxy, "curl http://h/to-target-302").status == 302
    reply = send(proxy, "curl -L http://h/to-target-302")
    assert (reply.status, json.loads(reply.body), reply.hops) == (200, {"ok": "target"}, 1)


@pytest.mark.parametrize("status,method", [(301, "GET"), (302, "GET"), (303, "GET"), (307, "POST"), (308, "POST")])
def test_a_post_redirected_is_sent_again_as_curl_sends_it(proxy, status, method):
    reply = send(proxy, f"curl -L -d a=1 http://h/to-target-{status}")
    assert reply.status == 200
    assert proxy.seen[-1][0] == method and proxy.seen[-1][2] == (b"a=1" if method == "POST" else b"")


def test_a_redirect_to_a_host_not_allowed_is_refused_and_never_sent(proxy):
    reply = send(proxy, "curl -L http://h/elsewhere")
    assert reply.error == "a redirect to other.example: other.example is not allowed"
    assert all("other.example" not in path for _, path, _ in proxy.seen)


def test_redirects_end(proxy):
    assert send(proxy, "curl -L http://h/loop").error == f"more than {exec_http.MAX_REDIRECTS} redirects"


def test_an_answer_over_the_cap_is_no_answer(proxy, monkeypatch):
    monkeypatch.setattr(exec_http, "MAX_ANSWER_BYTES", 1000)
    assert send(proxy, "curl http://h/big").error == "an answer over 1000 bytes"


def test_a_request_has_its_timeout_and_curls_max_time_shortens_it(proxy):
    assert send(proxy, "curl http://h/slow", timeout=0.3).error == "no answer within 0.3 s"
    assert send(proxy, "curl -m 0.2 http://h/slow", timeout=30).error == "no answer within 0.2 s"
