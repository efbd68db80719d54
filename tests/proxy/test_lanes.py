"""Which door a request comes in by (mitm/lanes.py): the choice, and its mark in the
request's session record: the fast lane, the tunnel lane, mitmproxy's layers."""

from __future__ import annotations

import socket
import types

import pytest

from stbproxy.mitm import lanes
from stbproxy.mitm.lanes import Doors
from stbproxy.sessions import SessionRecord, expand_record, stored_record
from stbproxy.store.embedded import Store
from tests.proxy.test_client_tls import client_context
from tests.proxy.test_fast_lane_differential import converse_on
from tests.proxy.test_tunnel_lane_differential import connect
from tests.servers import ProxyProcess, Upstream


def options(**changed) -> types.SimpleNamespace:
    values = dict(stream_large_bodies=None, body_size_limit=None, validate_inbound_headers=True,
                  connection_strategy="lazy", ignore_hosts=[], allow_hosts=[], tcp_hosts=[],
                  add_upstream_certs_to_client_chain=False)
    return types.SimpleNamespace(**{**values, **changed})


def test_a_plain_head_takes_the_fast_lane_and_others_go_to_mitmproxy_with_a_reason():
    doors = Doors(options())
    plain = b"GET http://127.0.0.1:9/a HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n"
    assert doors.waiting(plain[:10]) is None and doors.plain(plain) is not None
    assert doors.waiting(b"\x16\x03\x01") is lanes.NOT_HTTP1
    assert doors.waiting(b"G" * (lanes.MAX_HEAD + 1)) is lanes.HEAD_TOO_LARGE
    head = b"HEAD http://127.0.0.1:9/a HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n"
    assert doors.plain(head) is None and doors.not_plain(head) is lanes.NOT_PLAIN
    assert Doors(options(stream_large_bodies="1m")).waiting(b"GET") is lanes.STREAMING


def test_a_connect_takes_the_tunnel_unless_the_options_send_it_to_mitmproxy():
    connect_head = b"CONNECT localhost:443 HTTP/1.1\r\nHost: localhost:443\r\n\r\n"
    door, request = Doors(options()).connect(connect_head)
    assert door is lanes.TUNNEL_DOOR and request.host == "localhost"
    assert Doors(options()).in_tunnel(b"\x16\x03\x01") is lanes.TUNNEL_DOOR
    assert Doors(options()).in_tunnel(b"GET / HTTP/1.1\r\n") is lanes.NOT_TLS
    passing = Doors(options(ignore_hosts=["localhost"]))
    assert not passing.is_connect(connect_head)
    assert passing.plain(connect_head) is None and passing.not_plain(connect_head) is lanes.CONNECT_NOT_SERVED


def test_a_session_record_keeps_its_lane_and_a_record_without_one_stays_as_it_was():
    stored = stored_record(1.0, "GET", "", 200, "cache", "http/k", 0.001, lane=lanes.TUNNEL)
    assert stored == {"time": 1.0, "source": "cache", "key": "http/k", "seconds": 0.001, "lane": "tunnel"}
    record = SessionRecord.from_dict(expand_record(stored, 1))
    assert record.lane == "tunnel" and record.to_stored() == stored
    assert "lane" not in stored_record(1.0, "GET", "", 200, "cache", "http/k", 0.001)


def plain_get(proxy: ProxyProcess, upstream: Upstream, path: str, method: str = "GET") -> bytes:
    target = f"127.0.0.1:{upstream.port}"
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=15) as sock:
        return converse_on(sock, [f"{method} http://{target}{path} HTTP/1.1\r\nHost: {target}\r\n"
                                  "Connection: close\r\n\r\n".encode()])


def https_get(proxy: ProxyProcess, upstream: Upstream, path: str, alpn=("http/1.1",)) -> bytes:
    target = f"localhost:{upstream.port}"
    sock, _answer = connect(proxy.port, target)
    with client_context(proxy.ca_file, alpn).wrap_socket(sock, server_hostname="localhost") as tls:
        if tls.selected_alpn_protocol() == "h2":
            return b"h2"
        return converse_on(tls, [f"GET {path} HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n".encode()])


def lanes_recorded(store, session: str) -> list:
    with Store(store, readonly=True) as db:
        return [record.get("lane") for record in db.session_records(session)]


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_each_session_record_names_the_door_its_request_came_in_by(tmp_path, test_ca):
    args = ("--session", "doors", "--upstream-ca", str(test_ca.ca_file))
    with Upstream() as plain, Upstream(tls=test_ca) as secure:
        with ProxyProcess(tmp_path / "lane" / "store", *args) as proxy:
            assert b"200" in plain_get(proxy, plain, "/echo/a")
            assert b"200" in https_get(proxy, secure, "/echo/b")
            assert b"200" in plain_get(proxy, plain, "/echo/c", "HEAD")  # not the plain kind: mitmproxy's
        with ProxyProcess(tmp_path / "layers" / "store", *args, "--no-fast-lane") as proxy:
            assert b"200" in plain_get(proxy, plain, "/echo/a")
            assert b"200" in https_get(proxy, secure, "/echo/b")
    assert lanes_recorded(tmp_path / "lane" / "store", "doors") == ["fast", "tunnel", "mitmproxy"]
    assert lanes_recorded(tmp_path / "layers" / "store", "doors") == ["mitmproxy", "mitmproxy"]
