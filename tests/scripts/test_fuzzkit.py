"""The fuzz harness itself (scripts/reliability/fuzzkit.py and its fuzz_*.py modules), without
a proxy: its cases are seeded and keep their destination, its judge tells a 5xx the upstream
made from one the proxy made, and its runner names each way a misbehaving server fails (a
hang, a silent close, a proxy-made 5xx, an answer that blames the upstream) and none where a
client left. Everything listens on 127.0.0.1 and is closed at the end of each test."""

from __future__ import annotations

import asyncio
import re
import time

from scripts.reliability.fuzz_hostile import CLASSES, hostile_cases
from scripts.reliability.fuzz_judge import ANSWERED, BLAMED, CLOSED, GARBLED, GONE, HANG, NO_ANSWER, PROXY_5XX, judge
from scripts.reliability.fuzz_lane import LaneRun, log_problems
from scripts.reliability.fuzz_runner import run_cases
from scripts.reliability.fuzz_upstream import FuzzUpstream
from scripts.reliability.fuzzkit import ANSWER, ANY, LEFT, Case

PROXY, UPSTREAM, TLS = 1000, 2000, 3000


def generated(seed: int, count: int, tls_port: int | None = TLS, classes=None) -> list[Case]:
    cases = hostile_cases(seed, PROXY, UPSTREAM, tls_port, classes)
    return [next(cases) for _ in range(count)]


def test_the_same_seed_gives_the_same_cases_and_every_class_comes_up():
    first, again, other = generated(5, 3000), generated(5, 3000), generated(6, 300)
    assert [c.raw for c in first] == [c.raw for c in again]
    assert [c.raw for c in first[:300]] != [c.raw for c in other]
    assert all(any(c.cls.startswith(name) for c in first) for name in CLASSES)
    assert {c.kind for c in first} == {"proxy", "virtual", "own", "tunnel"}
    assert {c.expect for c in first} == {ANSWER, ANY, LEFT}
    assert not any(c.kind == "tunnel" for c in generated(5, 1000, tls_port=None))
    assert all(c.number in (None, position) for position, c in enumerate(first, 1))  # the case's place


def test_a_live_case_carries_its_number_to_the_upstream_whatever_was_mutated():
    for case in generated(7, 4000, classes=["byte-flip", "truncated", "duplicated-bytes", "valid", "nul-header"]):
        if not case.live:
            continue
        first_line = case.raw.split(b"\n", 1)[0]
        assert re.search(rb"stbfz=%d(?!\d)" % case.number, first_line), case
        authority = case.tunnel or b"127.0.0.1:%d" % UPSTREAM
        assert authority in case.raw, case  # a mutation never touches the destination
    flips = generated(8, 2000, classes=["byte-flip"])
    assert sum(c.live for c in flips) > 500  # most flips still go where they were sent


def test_the_audits_examples_are_among_the_cases():
    raws = [c.raw for c in generated(9, 3000, classes=["nonutf8-path", "nonutf8-method", "chunked-trailer",
                                                       "chunk-bad-size", "blank-line-first", "obs-fold"])]
    assert any(r.startswith(b"POST /virtual\xff\xfe HTTP/1.1") for r in raws)
    assert any(r.startswith(b"GET /\xc0\xaf HTTP/1.1") for r in raws)
    assert any(r.startswith(b"GET /s/\xff/virtual HTTP/1.1") for r in raws)
    assert any(re.match(rb"[A-Z]*\xff[A-Z]* http://127\.0\.0\.1:2000/", r) for r in raws)
    assert any(re.search(rb"\r\n0\r\n[^\r\n]+\r\n(.*\r\n)?\r\n$", r) for r in raws)  # a trailer section
    assert any(b"\r\n\r\nzz\r\n" in r for r in raws)
    assert any(r.startswith(b"\r\nGET ") or r.startswith(b"\r\nPOST ") for r in raws)
    assert any(re.search(rb"\r\nX-A: a\r\n[ \t]", r) for r in raws)


def answer(status: int, source: str = "error") -> bytes:
    return b"HTTP/1.1 %d X\r\nX-Stb-Source: %s\r\nContent-Length: 2\r\n\r\n{}" % (status, source.encode())


def test_the_judge_tells_an_upstream_5xx_from_a_proxy_made_one():
    upstream = FuzzUpstream()
    upstream.answers.update({1: 503, 2: "garbage", 3: 200, 4: "reset"})

    def outcome(number, status, source="error", live=True):
        case = Case("proxy", b"", "valid", ANSWER, number, live)
        return judge(case, status, answer(status, source), upstream)[0]

    assert outcome(1, 503, "upstream") == ANSWERED  # passed through
    assert outcome(2, 502) == ANSWERED and outcome(4, 502) == ANSWERED  # the proxy says it failed
    assert outcome(3, 502) == PROXY_5XX  # the upstream answered fine
    assert outcome(5, 502, "upstream") == PROXY_5XX  # "upstream answered garbage": nothing reached it
    assert outcome(None, 500, "-", live=False) == PROXY_5XX  # /virtual, the proxy's own address
    assert outcome(5, 501) == ANSWERED and outcome(5, 505) == ANSWERED  # unsupported by the client
    assert outcome(5, 200, "simulated") == BLAMED  # made up because "the upstream failed"
    assert outcome(5, 200, "upstream") == BLAMED
    assert outcome(5, 200, "simulated", live=False) == ANSWERED
    assert outcome(5, 400, "error") == ANSWERED  # the proxy refused the client's request
    assert outcome(5, 200, "cache") == ANSWERED
    assert judge(Case("own", b""), None, b"junk", upstream)[0] == GARBLED


async def _misbehaving_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers by a word in the request: "hang" never, "silent" closes, "bad" a 502 of its own."""
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = await reader.read(4096)
            if not chunk:
                break
            data += chunk
        if b"hang" in data:
            await asyncio.sleep(30)
        elif b"bad" in data:
            writer.write(answer(502, "upstream"))
        elif b"silent" not in data:
            writer.write(answer(200, "upstream"))
        await writer.drain()
    finally:
        writer.close()


def test_the_runner_names_every_way_a_server_fails_and_none_where_the_client_left():
    def request(word: bytes) -> bytes:
        return b"GET /%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % word

    cases = [Case("own", request(b"ok"), "a"), Case("own", request(b"hang"), "b"),
             Case("own", request(b"hang"), "c", ANY), Case("own", request(b"silent"), "d"),
             Case("own", request(b"silent"), "e", ANY), Case("own", request(b"bad"), "f"),
             Case("own", request(b"hang"), "g", LEFT, leave="close"), Case("own", request(b"hang"), "h", LEFT,
                                                                             leave="reset")]

    async def run():
        server = await asyncio.start_server(_misbehaving_server, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        started = time.monotonic()
        try:
            results = await run_cases(port, iter(cases), FuzzUpstream(), seconds=10, max_cases=len(cases),
                                              concurrency=1, timeout=1.0, park_after=0.05)
        finally:
            server.close()
        return results, time.monotonic() - started

    results, seconds = asyncio.run(run())
    outcomes = {r.case.cls: r.outcome for r in results}
    assert outcomes == {"a": ANSWERED, "b": HANG, "c": HANG, "d": NO_ANSWER,
                        "e": CLOSED, "f": PROXY_5XX, "g": GONE, "h": GONE}
    assert seconds < 2.5  # the cases that hung gave their place to the next after park_after
    hung = next(r for r in results if r.case.cls == "b")
    assert "GET /hang" in hung.describe() and "no answer and no close within 1s" in hung.describe()
    run_ = LaneRun("test", 0, results, [("a check", True, "")], [], "", seconds)
    assert not run_.ok and "b / own / expects answer] hang" in run_.report()


def test_the_upstream_remembers_what_it_did_for_each_case():
    async def run():
        upstream = await FuzzUpstream().start()
        got = []
        for raw in [b"GET /status/503?stbfz=7 HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"GET http://x/garbage?stbfz=8 HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"POST /echo?stbfz=9 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n"]:
            reader, writer = await asyncio.open_connection("127.0.0.1", upstream.port)
            writer.write(raw)
            got.append(await reader.read(4096))
            writer.close()
        await upstream.stop()
        return upstream, got

    upstream, got = asyncio.run(run())
    assert upstream.answers == {7: 503, 8: "garbage", 9: 200}
    assert upstream.failed(7) and upstream.failed(8) and not upstream.failed(9) and not upstream.reached(10)
    assert got[0].startswith(b"HTTP/1.1 503") and got[1].startswith(b"this is not HTTP")
    assert b'"bytes": 3' in got[2]


def test_log_problems_name_each_traceback_by_its_exception():
    log = ("2026-01-01 10:00:00,000 ERROR mitmproxy.proxy.server: mitmproxy has crashed!\n"
           "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n    g()\n"
           "NotImplementedError: HTTP trailers are not implemented yet.\nquiet line\n")
    assert log_problems(log) == [
        "ERROR mitmproxy.proxy.server: mitmproxy has crashed!",
        "Traceback ... NotImplementedError: HTTP trailers are not implemented yet."]
    assert log_problems("all fine\n") == []
