"""The upstream client against a real server on loopback: no cookie jar shared between
clients; each request carries exactly the cookies its client sent."""

import asyncio
import json
import ssl

from stbproxy.engine import Engine, EngineConfig
from stbproxy.models import Mode, Request
from stbproxy.store.embedded import Store
from stbproxy.upstream import Upstream, UpstreamConfig

COOKIE_SECRET = "ck-agent-a-session-7f3e9"


def cookies_seen(upstream) -> list[str]:
    return [v for k, v in upstream.requests[-1][2].items() if k.lower() == "cookie"]


def test_a_cookie_set_for_one_client_is_never_sent_for_another(tmp_path, upstream):
    own = "theme=dark; sid=agent-c-own-cookie"

    async def scenario(engine):
        await engine.handle(Request("GET", upstream.url(f"/setcookie?value={COOKIE_SECRET}")), "agent-a")
        b = await engine.handle(Request("GET", upstream.url("/echo?who=b")), "agent-b")
        b_cookies = cookies_seen(upstream)
        c = await engine.handle(Request("GET", upstream.url("/echo?who=c"), (("Cookie", own),)), "agent-c")
        return b, b_cookies, c, cookies_seen(upstream)

    async def main(store):
        upstream_client = Upstream(UpstreamConfig(timeout=5.0))
        try:
            return await scenario(Engine(store, upstream_client, EngineConfig(mode=Mode.RECORD)))
        finally:
            await upstream_client.aclose()

    with Store(tmp_path / "store") as store:
        b, b_cookies, c, c_cookies = asyncio.run(main(store))
        assert b_cookies == [], "agent B was sent agent A's cookie"
        assert c_cookies == [own]  # exactly what the client sent: nothing added, nothing dropped
        assert COOKIE_SECRET not in json.dumps(json.loads(b.response.body))
        for answer in (b, c):  # neither the jar's cookie nor the client's own is stored
            body = store.get(answer.key).response.body
            assert COOKIE_SECRET.encode() not in body and b"agent-c-own-cookie" not in body


def test_an_extra_ca_adds_trust_and_keeps_the_public_cas(test_ca):
    """--upstream-ca adds a CA for private hosts: the public CAs stay trusted beside it."""
    import certifi

    from stbproxy.upstream.client import _verification

    context = _verification(UpstreamConfig(ca_file=str(test_ca.ca_file)))
    public = ssl.create_default_context(cafile=certifi.where())
    assert context.cert_store_stats()["x509_ca"] == public.cert_store_stats()["x509_ca"] + 1
    assert _verification(UpstreamConfig(insecure=True)) is False


async def _events_and_plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """/events: an event stream that stays open; anything else: a short answer."""
    head = await reader.readuntil(b"\r\n\r\n")
    if head.startswith(b"GET /events "):
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                     b"d\r\ndata: first\n\n\r\n")
        await writer.drain()
        await reader.read()  # open until the client goes
    else:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
    writer.close()


def test_open_event_streams_never_hold_up_calls():
    async def run() -> None:
        server = await asyncio.start_server(_events_and_plain, "127.0.0.1", 0)
        base = "http://127.0.0.1:%d" % server.sockets[0].getsockname()[1]
        upstream = Upstream(UpstreamConfig(timeout=5, max_connections=1))
        try:
            head, _ = await upstream.open_stream(Request("GET", base + "/events"))
            pieces = head.stream.chunks()
            assert head.status == 200 and await pieces.__anext__() == b"data: first\n\n"
            # the one connection calls may use is not the stream's: the call is answered at once
            answer, _ = await asyncio.wait_for(upstream.send(Request("GET", base + "/plain")), 2)
            assert answer.body == b"ok"
            await head.stream.aclose()  # gives the stream's connection back
            plain, _ = await upstream.open_stream(Request("GET", base + "/plain"))
            assert plain.body == b"ok" and not hasattr(plain, "stream")  # not a stream: read whole
        finally:
            await upstream.aclose()
            server.close()

    asyncio.run(run())
