"""The front end's checks without a proxy: which request heads are client mistakes
(limits.head_problem), and which connections the watch closes when (connections.py)."""

from __future__ import annotations

import pytest

from stbproxy.front.limits import default_max_connections, head_problem
from stbproxy.mitm.connections import ConnectionLimits, ConnectionWatch


@pytest.mark.parametrize("method, target, fields", [
    (b"GET", b"/v1/items?q=1", [(b"Host", b"api.example.com"), (b"Accept", b"*/*")]),
    (b"POST", b"/virtual", []),
    (b"PROPFIND", "/caf\u00e9/\u540d\u524d".encode(), []),  # raw UTF-8 in a path: lenient, as clients send it
    (b"GET", b"/", [(b"X-Latin", b"caf\xe9"), (b"X-Tab", b"a\tb")]),  # obs-text and HTAB are allowed in values
    (b"GET", b"/", [(b"X-Empty", b"")]),
])
def test_heads_http_allows_pass(method, target, fields):
    assert head_problem(method, target, fields) is None


@pytest.mark.parametrize("method, target, fields, named", [
    (b"PO\xffST", b"/u", [], r"method 'PO\xffST' is not an HTTP token"),
    (b"GE T", b"/u", [], "is not an HTTP token"),
    (b"", b"/u", [], "method '' is not"),
    (b"GET", b"/virtual\xff\xfe", [], r"target '/virtual\xff\xfe' holds bytes that are not UTF-8"),
    (b"GET", b"/\xc0\xaf", [], "not UTF-8"),
    (b"GET", b"/a\x00b", [], "a space or a control byte"),
    (b"GET", b"/a\x7f", [], "a space or a control byte"),
    (b"GET", b"/", [(b"X A", b"1")], "header name 'X A' is not an HTTP token"),
    (b"GET", b"/", [(b"", b"1")], "header name '' is not"),
    (b"GET", b"/", [(b"Host", b"x"), (b"X-A", b"a\x00b")], "value of header 'X-A' holds NUL"),
    (b"GET", b"/", [(b"X-A", b"a\rb")], "value of header 'X-A'"),
    (b"GET", b"/", [(b"X-Fold", b"a\r\n b")], "folded line"),
])
def test_heads_http_forbids_are_named(method, target, fields, named):
    problem = head_problem(method, target, fields)
    assert problem is not None and named in problem


def test_a_long_bad_target_is_shown_shortened():
    problem = head_problem(b"GET", b"/\xff" + b"a" * 500, [])
    assert problem is not None and len(problem) < 200 and "..." in problem


def test_the_default_connection_limit_leaves_room_under_the_open_file_limit(monkeypatch):
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 4096))
    assert default_max_connections() == 1024 - 256
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1 << 20, 1 << 20))
    assert default_max_connections() == 4096


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Transport:
    def __init__(self) -> None:
        self.closed = False

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


class Writer:
    count = 0

    def __init__(self) -> None:
        Writer.count += 1
        self.peer = ("127.0.0.1", 40000 + Writer.count)
        self.transport = Transport()

    def get_extra_info(self, name):
        return self.peer if name == "peername" else None


def watch_with(clock: Clock, max_connections: int = 10) -> ConnectionWatch:
    return ConnectionWatch(ConnectionLimits(head_timeout=5, idle_timeout=20, max_connections=max_connections), clock)


def test_each_state_has_its_own_timeout():
    clock = Clock()
    watch = watch_with(clock)
    idle, heading, body, answering = (watch.admit(Writer()) for _ in range(4))
    heading.read(clock())  # the first bytes of a head
    body.read(clock()), body.head_done()  # head done, body not
    answering.read(clock()), answering.head_done(), answering.body_done()
    clock.now += 6
    assert watch.close_overdue() == {"slow head": 1}
    assert heading.writer.transport.closed and heading.peer not in watch.open
    clock.now += 15  # 21 s since the last byte
    assert watch.close_overdue() == {"idle": 1, "stalled body": 1}
    clock.now += 1000
    assert watch.close_overdue() == {}  # an answer in progress is never timed here
    answering.answered(clock())
    clock.now += 21
    assert watch.close_overdue() == {"idle": 1} and watch.open == {}


def test_bytes_keep_a_body_alive_but_not_a_head():
    clock = Clock()
    watch = watch_with(clock)
    heading, body = watch.admit(Writer()), watch.admit(Writer())
    body.read(clock()), body.head_done()
    for _ in range(10):
        clock.now += 1
        heading.read(clock())  # a byte a second: slowloris
        body.read(clock())
    assert watch.close_overdue() == {"slow head": 1}
    assert body.peer in watch.open


def test_a_handshake_or_an_answer_starts_the_idle_clock_afresh():
    clock = Clock()
    watch = watch_with(clock)
    tunnel = watch.admit(Writer())
    tunnel.read(clock())  # a TLS handshake's bytes, no request yet
    tunnel.between_requests()
    clock.now += 6
    assert watch.close_overdue() == {}


def test_past_the_limit_admit_refuses_and_says_so_once_a_minute(caplog):
    clock = Clock()
    watch = watch_with(clock, max_connections=2)
    first, second = watch.admit(Writer()), watch.admit(Writer())
    assert first is not None and second is not None
    assert watch.admit(Writer()) is None and watch.admit(Writer()) is None
    assert caplog.text.count("the most --max-connections allows") == 1
    watch.leave(first)
    assert watch.admit(Writer()) is not None
    clock.now += 61
    assert watch.admit(Writer()) is None
    assert caplog.text.count("the most --max-connections allows") == 2


def test_hooks_find_only_the_connections_mitmproxy_serves():
    watch = watch_with(Clock())
    by_lane, by_mitmproxy = watch.admit(Writer()), watch.admit(Writer())
    by_lane.by_lane = True
    assert watch.of(by_lane.peer) is None and watch.of(by_mitmproxy.peer) is by_mitmproxy
