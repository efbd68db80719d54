"""The benchmarks' load generators (scripts/bench/hitload.py, and hitload.c built from its
source) count what went wrong: a figure from them is only as honest as their checks. Run as
the benchmarks run them, against a loopback server that misbehaves on purpose.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path
from typing import Callable

import pytest

from scripts.bench.hitbench import PYTHON_LOAD, LoadGenerator, Subject, build_c_load, c_load_missing

GOOD = b"hello"


@pytest.fixture(scope="module", params=["hitload.py", "hitload.c"])
def load(request, tmp_path_factory) -> LoadGenerator:
    if request.param == "hitload.py":
        return PYTHON_LOAD
    if missing := c_load_missing():  # .ci/run installs gcc and libssl-dev
        pytest.skip(f"hitload.c cannot be built here: {missing}")
    return build_c_load(tmp_path_factory.mktemp("hitload-c"))


Answer = Callable[[int], "tuple[bytes, bytes, bool]"]  # n-th request -> (extra head lines, body, close after)


def _misbehaving(n: int) -> tuple[bytes, bytes, bool]:
    """Every third answer has the wrong body; every fifth closes the connection after it."""
    return b"", b"wrong" if n % 3 == 0 else GOOD, n % 5 == 0


VIRTUAL_BODY = b'{"error": "", "response": "hello"}'  # as stbproxy writes a /virtual answer


def _virtual(n: int) -> tuple[bytes, bytes, bool]:
    """/virtual's answer, but every fourth one without the header saying it was a hit."""
    return b"" if n % 4 == 0 else b"X-Stb-Source: cache\r\n", VIRTUAL_BODY, False


class _Server:
    """Keep-alive HTTP/1.1 on 127.0.0.1, answering as ``answer`` says."""

    def __init__(self, answer: Answer = _misbehaving) -> None:
        self.answer = answer
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.count = 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while conn.recv(4096):  # each request arrives whole in one read: they are small
                with self.lock:
                    self.count += 1
                    n = self.count
                extra, body, close = self.answer(n)
                conn.sendall(b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s" % (extra, len(body), body))
                if close:
                    return

    def close(self) -> None:
        self.listener.close()


PLAIN_PLAN = {"kind": "plain", "expect": "", "items": [
    ["GET http://@HOSTPORT@/a HTTP/1.1\r\nHost: api.test\r\n\r\n", GOOD.decode()]]}
VIRTUAL_PLAN = {"kind": "virtual", "expect": "x-stb-source: cache", "items": [
    ["POST /virtual HTTP/1.1\r\nHost: @HOSTPORT@\r\nContent-Length: 2\r\n\r\n{}", "hello"]]}


def _run(load: LoadGenerator, tmp_path: Path, port: int, requests: int, plan_document: dict = PLAIN_PLAN) -> dict:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(plan_document))
    done = subprocess.run([*load.argv(Subject("test server", port, None), plan), "--port", str(port),
                           "--requests", str(requests), "--concurrency", "4", "--timeout", "60"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(150)
def test_wrong_bodies_and_closed_connections_are_counted_as_failures(load, tmp_path):
    server = _Server()
    try:
        result = _run(load, tmp_path, server.port, 300)
    finally:
        server.close()
    samples = " | ".join(result["samples"])
    assert result["failures"] > 0 and "another body than expected: " in samples and "wrong" in samples, result
    # Every request had one outcome: a checked answer, a wrong one, or a lost connection.
    assert 0 < result["ok"] < 300 and result["ok"] + result["failures"] == 300, result
    assert result["rps"] > 0 and result["p50_ms"] > 0, result


@pytest.mark.timeout(150)
def test_virtual_answers_are_checked_for_their_body_and_their_header(load, tmp_path):
    server = _Server(_virtual)
    try:
        result = _run(load, tmp_path, server.port, 200, VIRTUAL_PLAN)
    finally:
        server.close()
    # Every fourth answer lacks the header, and only those fail: the body, the stbproxy form
    # of the planned response, is right in all of them.
    assert result["failures"] == 50 and result["ok"] == 150, result
    assert all("x-stb-source: cache" in sample for sample in result["samples"]), result


@pytest.mark.timeout(150)
def test_a_refused_connection_is_a_failure_not_a_crash(load, tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
    result = _run(load, tmp_path, port, 10)  # nothing listens there any more
    assert result["ok"] == 0 and result["failures"] >= 1, result
    assert "Connection refused" in result["samples"][0], result
