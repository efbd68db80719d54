"""What one client may hold of a running proxy, on both lanes (the fast lane and
--no-fast-lane): a request body over --max-request-body is answered 413 before it is read,
so parallel large uploads leave memory flat; a request head that trickles in is cut off
after --head-timeout, an idle or stalled connection after --idle-timeout, a request being
answered never; past --max-connections a new connection is answered 503 and closed."""

from __future__ import annotations

import json
import re
import socket
import threading
import time

import psutil
import pytest

from tests.servers import ProxyProcess

pytestmark = pytest.mark.integration

LANES = {"fast-lane": (), "no-fast-lane": ("--no-fast-lane",)}
MiB = 1 << 20


def answer_of(sock: socket.socket, timeout: float = 10) -> bytes:
    """What the proxy sent until it closed the connection or one whole answer arrived."""
    sock.settimeout(timeout)
    received = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            break
        if not chunk:
            break
        received += chunk
        head, sep, body = received.partition(b"\r\n\r\n")
        length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
        if sep and length and len(body) >= int(length.group(1)):
            break
    return received


def closed_by_proxy(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True


def upload(port: int, host: bytes, total: int, chunked: bool, results: list) -> None:
    """Send a ``total``-byte body as fast as the proxy takes it; record the answer's status."""
    head = b"POST http://%s/upload HTTP/1.1\r\nHost: %s\r\n" % (host, host)
    head += b"Transfer-Encoding: chunked\r\n\r\n" if chunked else b"Content-Length: %d\r\n\r\n" % total
    piece = b"x" * MiB
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        try:
            sock.sendall(head)
            for _ in range(total // MiB):
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the body was read: what is wanted
        answer = answer_of(sock)
    results.append(answer)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("lane", sorted(LANES))
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_large_uploads_in_parallel_are_refused_413_and_memory_stays_flat(tmp_path, upstream, lane, chunked):
    with ProxyProcess(tmp_path / "store", "--max-request-body", "4MiB", *LANES[lane]) as proxy:
        process = psutil.Process(proxy.process.pid)
        before = process.memory_info().rss
        peak, results = before, []
        threads = [threading.Thread(target=upload, args=(proxy.port, b"127.0.0.1:%d" % upstream.port, 200 * MiB,
                                                         chunked, results)) for _ in range(4)]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            peak = max(peak, process.memory_info().rss)
            time.sleep(0.02)
        for thread in threads:
            thread.join()
    assert len(results) == 4
    for answer in results:
        assert answer.startswith(b"HTTP/1.1 413 "), answer[:300]
        head, _, body = answer.partition(b"\r\n\r\n")
        assert re.search(rb"(?i)\r\nx-stb-source: error\r\n", head), head
        assert "--max-request-body" in json.loads(body)["error"]
    # four 200 MB bodies: the old proxy held each whole; now at most the 4 MiB limit each
    assert peak - before < 48 * MiB, f"RSS grew by {(peak - before) / MiB:.0f} MiB"
    assert upstream.hits["/upload"] == 0  # nothing was forwarded


@pytest.mark.timeout(120)
@pytest.mark.parametrize("lane", sorted(LANES))
def test_a_trickling_head_is_cut_off_and_others_are_served_meanwhile(tmp_path, upstream, lane):
    with ProxyProcess(tmp_path / "store", "-v", "--head-timeout", "1", *LANES[lane]) as proxy:
        slow = [socket.create_connection(("127.0.0.1", proxy.port)) for _ in range(50)]
        started = time.monotonic()
        for sock in slow:
            sock.sendall(b"GET http://127.0.0.1:%d/echo HTTP/1.1\r\n" % upstream.port)
        fast_answer = None
        while time.monotonic() - started < 6:
            for sock in slow:
                try:
                    sock.sendall(b"X")  # a byte at a time: never a whole head
                except OSError:
                    pass
            if fast_answer is None:
                with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
                    sock.sendall(b"GET http://127.0.0.1:%d/echo?q=1 HTTP/1.1\r\nHost: x\r\n\r\n" % upstream.port)
                    fast_answer = answer_of(sock)
            time.sleep(0.2)
        still_open = [sock for sock in slow if not closed_by_proxy(sock, 0.5)]
        for sock in slow:
            sock.close()
    assert fast_answer.startswith(b"HTTP/1.1 200 "), fast_answer[:200]
    assert not still_open, f"{len(still_open)} of 50 trickling connections are still open"
    log = "".join(proxy.output)
    assert re.search(r"closed \d+ client connections? whose request head did not arrive within 1 s "
                     r"\(--head-timeout\)", log), log[-2000:]
    assert "Traceback" not in log


@pytest.mark.timeout(120)
@pytest.mark.parametrize("lane", sorted(LANES))
def test_idle_and_stalled_connections_are_closed_but_an_answer_in_progress_is_not(tmp_path, upstream, lane):
    host = b"127.0.0.1:%d" % upstream.port
    with ProxyProcess(tmp_path / "store", "--mode", "record", "--idle-timeout", "1", *LANES[lane]) as proxy:
        idle = socket.create_connection(("127.0.0.1", proxy.port))
        idle.sendall(b"GET http://%s/echo?idle=1 HTTP/1.1\r\nHost: %s\r\n\r\n" % (host, host))
        first = answer_of(idle)
        stalled = socket.create_connection(("127.0.0.1", proxy.port))
        stalled.sendall(b"POST http://%s/echo HTTP/1.1\r\nHost: %s\r\nContent-Length: 100\r\n\r\nabc" % (host, host))
        slow = socket.create_connection(("127.0.0.1", proxy.port))
        slow.sendall(b"GET http://%s/slow?seconds=2.5 HTTP/1.1\r\nHost: %s\r\n\r\n" % (host, host))
        slow_answer = answer_of(slow, timeout=15)  # 2.5 s of upstream time, over the 1 s idle timeout
        idle_closed = closed_by_proxy(idle, 4)
        stalled_closed = closed_by_proxy(stalled, 4)
        for sock in (idle, stalled, slow):
            sock.close()
    assert first.startswith(b"HTTP/1.1 200 ")
    assert slow_answer.startswith(b"HTTP/1.1 200 ") and b'"slow": true' in slow_answer, slow_answer[:300]
    assert idle_closed and stalled_closed


@pytest.mark.timeout(120)
@pytest.mark.parametrize("lane", sorted(LANES))
def test_past_the_connection_limit_a_new_connection_gets_503_then_room_frees(tmp_path, upstream, lane):
    with ProxyProcess(tmp_path / "store", "--max-connections", "20", *LANES[lane]) as proxy:
        time.sleep(0.3)  # the start-up check's connection has gone
        held = [socket.create_connection(("127.0.0.1", proxy.port)) for _ in range(20)]
        time.sleep(0.3)  # every one accepted
        with socket.create_connection(("127.0.0.1", proxy.port)) as extra:
            refused = answer_of(extra)
        for sock in held[:5]:
            sock.close()
        time.sleep(0.5)
        with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
            sock.sendall(b"GET http://127.0.0.1:%d/echo HTTP/1.1\r\nHost: x\r\n\r\n" % upstream.port)
            served = answer_of(sock)
        for sock in held[5:]:
            sock.close()
    assert refused.startswith(b"HTTP/1.1 503 "), refused[:200]
    assert b"--max-connections" in refused and re.search(rb"(?i)x-stb-source: error", refused)
    assert served.startswith(b"HTTP/1.1 200 "), served[:200]
    log = "".join(proxy.output)
    assert log.count("client connections are open, the most --max-connections allows") == 1, log[-2000:]


# Client mistakes and what the proxy answers itself (never forwarded: the upstream sees none).
MISTAKES = {
    "path-not-utf8": (b"POST /virtual\xff\xfe HTTP/1.1\r\nHost: PROXY\r\nContent-Length: 2\r\n\r\n{}", 400),
    "overlong-utf8-path": (b"GET /\xc0\xaf HTTP/1.1\r\nHost: PROXY\r\n\r\n", 400),
    "session-path-not-utf8": (b"GET /s/\xff/virtual HTTP/1.1\r\nHost: PROXY\r\n\r\n", 400),
    "method-not-token": (b"PO\xffST http://UP/u HTTP/1.1\r\nHost: UP\r\nContent-Length: 0\r\n\r\n", 400),
    "nul-in-value": (b"GET http://UP/n HTTP/1.1\r\nHost: UP\r\nX-A: a\x00b\r\n\r\n", 400),
    "bare-cr-in-value": (b"GET http://UP/c HTTP/1.1\r\nHost: UP\r\nX-A: a\rb\r\n\r\n", 400),
    "obs-fold": (b"GET http://UP/o HTTP/1.1\r\nHost: UP\r\nX-A: a\r\n b\r\n\r\n", 400),
    "nul-in-path": (b"GET http://UP/a\x00b HTTP/1.1\r\nHost: UP\r\n\r\n", 400),
    "bad-chunk-size": (b"POST http://UP/b HTTP/1.1\r\nHost: UP\r\nTransfer-Encoding: chunked\r\n\r\n"
                       b"zz\r\nab\r\n0\r\n\r\n", 400),
}
TOLERATED = {
    "chunked-with-trailer": b"POST http://UP/t HTTP/1.1\r\nHost: UP\r\nTransfer-Encoding: chunked\r\n\r\n"
                            b"2\r\nab\r\n0\r\nX-Checksum: 1\r\n\r\n",
    "empty-line-first": b"\r\nGET http://UP/l HTTP/1.1\r\nHost: UP\r\n\r\n",
    "empty-lines-first": b"\r\n\r\n\nGET http://UP/l2 HTTP/1.1\r\nHost: UP\r\n\r\n",
}


def _filled(raw: bytes, proxy_port: int, upstream_port: int) -> bytes:
    return raw.replace(b"PROXY", b"127.0.0.1:%d" % proxy_port).replace(b"UP", b"127.0.0.1:%d" % upstream_port)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("lane", sorted(LANES))
def test_client_mistakes_are_400_from_the_proxy_and_tolerable_oddities_are_answered(tmp_path, upstream, lane):
    with ProxyProcess(tmp_path / "store", "--mode", "record", *LANES[lane]) as proxy:
        answers = {}
        for name, (raw, _) in MISTAKES.items():
            with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
                sock.sendall(_filled(raw, proxy.port, upstream.port))
                answers[name] = answer_of(sock, timeout=10)
        tolerated = {}
        for name, raw in TOLERATED.items():
            with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
                sock.sendall(_filled(raw, proxy.port, upstream.port))
                tolerated[name] = answer_of(sock, timeout=10)
        # a client leaving mid-body, then the proxy goes on serving
        for body_start in (b"Content-Length: 1000\r\n\r\nabc", b"Transfer-Encoding: chunked\r\n\r\n10\r\nabc"):
            with socket.create_connection(("127.0.0.1", proxy.port)) as sock:
                sock.sendall(_filled(b"POST http://UP/gone HTTP/1.1\r\nHost: UP\r\n", proxy.port, upstream.port)
                             + body_start)
        time.sleep(0.5)
    for name, (_, status) in MISTAKES.items():
        head = answers[name].partition(b"\r\n\r\n")[0]
        assert head.startswith(b"HTTP/1.1 %d " % status), (name, answers[name][:300])
        assert re.search(rb"(?i)\r\nx-stb-source: error\r\n", head), (name, head)
        assert b"stbproxy" in answers[name]
    for name, answer in tolerated.items():
        assert answer.startswith(b"HTTP/1.1 200 ") and b"X-Stb-Source: upstream" in answer, (name, answer[:300])
    assert upstream.hits["/t"] == 1 and upstream.hits["/l"] == 1 and upstream.hits["/l2"] == 1
    forwarded_mistakes = {"/u", "/n", "/c", "/o", "/b", "/gone"} & set(upstream.hits)
    assert not forwarded_mistakes
    log = "".join(proxy.output)
    assert "Traceback" not in log and "has crashed" not in log and "internal error" not in log, log[-3000:]


def tunnel(proxy, host: str, port: int):
    """A TLS connection to host:port through the proxy's CONNECT, trusting the proxy's CA."""
    import ssl

    raw = socket.create_connection(("127.0.0.1", proxy.port))
    raw.sendall(b"CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host.encode(), port, host.encode(), port))
    reply = b""
    while b"\r\n\r\n" not in reply:
        reply += raw.recv(4096)
    assert reply.startswith(b"HTTP/1.1 200"), reply
    context = ssl.create_default_context(cafile=str(proxy.ca_file))
    return context.wrap_socket(raw, server_hostname=host)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("lane", sorted(LANES))
def test_inside_https_tunnels_the_body_limit_and_the_idle_timeout_hold(tmp_path, tls_upstream, test_ca, lane):
    args = ("--mode", "record", "--upstream-ca", str(test_ca.ca_file), "--max-request-body", "64KiB",
            "--idle-timeout", "1", *LANES[lane])
    with ProxyProcess(tmp_path / "store", *args) as proxy:
        with tunnel(proxy, "127.0.0.1", tls_upstream.port) as sock:
            sock.sendall(b"POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 209715200\r\n\r\n")
            refused = answer_of(sock)
        idle = tunnel(proxy, "127.0.0.1", tls_upstream.port)
        idle.sendall(b"GET /echo?tls=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        served = answer_of(idle)
        idle_closed = closed_by_proxy(idle, 4)
        idle.close()
    assert refused.startswith(b"HTTP/1.1 413 ") and b"--max-request-body" in refused, refused[:300]
    assert served.startswith(b"HTTP/1.1 200 ") and b"X-Stb-Source: upstream" in served, served[:300]
    assert idle_closed
    assert tls_upstream.hits["/upload"] == 0
