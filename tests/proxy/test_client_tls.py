"""A tunnel's client TLS on Python's ssl (stbproxy/mitm/client_tls.py) against what mitmproxy's
tlsconfig and pyOpenSSL do: the same ALPN choices, the same errors for mitmproxy's messages,
every call mitmproxy's TLS layer makes, contexts made once per host, the leaf's key never
left in a file; and through two real proxies (the lane, and --no-fast-lane), the same
handshakes as a client sees them."""

from __future__ import annotations

import ast
import asyncio
import inspect
import itertools
import socket
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from mitmproxy import connection
from mitmproxy.addons import tlsconfig
from mitmproxy.net import tls as net_tls
from mitmproxy.proxy.context import Context
from mitmproxy.proxy.layers import tls as tls_layers
from mitmproxy.test import taddons
from mitmproxy.tls import TlsData
from OpenSSL import SSL

from stbproxy.mitm import client_tls, internals
from stbproxy.mitm.client_tls import ClientTls, ServerContexts, StdlibConnection, alpn_choice, records_of
from stbproxy.mitm.tunnel_lane import Tunnel
from tests.servers import ProxyProcess

HOST = "api.example.test"


@pytest.fixture(scope="module")
def tls_config(tmp_path_factory):
    """mitmproxy's tlsconfig addon, configured on a CA of its own (as the embedded master's)."""
    confdir = tmp_path_factory.mktemp("confdir")
    addon = tlsconfig.TlsConfig()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, confdir=str(confdir))
        yield tctx, addon, confdir


def tunnel_tls_data(tctx, offers: list[bytes], sni: str | None = HOST) -> TlsData:
    """What a tunnel's ClientTLSLayer passes to tls_start_client (its context as the lane builds it)."""
    client = connection.Client(peername=("127.0.0.1", 50000), sockname=("127.0.0.1", 8080), timestamp_start=0.0,
                               sni=sni, alpn_offers=offers)
    context = Context(client, tctx.options)
    context.server.address = (HOST, 443)
    return TlsData(client, context)


def client_context(ca_file: Path | None, alpn: list[str] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_file)) if ca_file else ssl.create_default_context()
    if alpn is not None:
        context.set_alpn_protocols(alpn)
    return context


def handshake(server, client: ssl.SSLObject, client_in: ssl.MemoryBIO, client_out: ssl.MemoryBIO) -> None:
    """Pump a handshake between a stdlib client and a server driven as mitmproxy's TLS layer
    drives its connection (bio_write, do_handshake, bio_read until WantReadError)."""
    for _ in range(10):
        if handshake_round(server, client, client_in, client_out):
            return
    raise AssertionError("no handshake")


def handshake_round(server, client: ssl.SSLObject, client_in: ssl.MemoryBIO, client_out: ssl.MemoryBIO,
                    refusing: bool = False) -> bool:
    """One round of a handshake: the client's flight to the server, the server's back. True
    once the client is done; ``refusing``: the client's own refusal (its alert goes out) is
    no error of the round."""
    client_done = False
    try:
        client.do_handshake()
        client_done = True
    except ssl.SSLWantReadError:
        pass
    except ssl.SSLError:
        if not refusing:
            raise
    data = client_out.read()
    if data:
        server.bio_write(data)
    try:
        server.do_handshake()
    except SSL.WantReadError:
        pass
    while True:
        try:
            client_in.write(server.bio_read(65535))
        except SSL.WantReadError:
            break
    return client_done


def stdlib_client(context: ssl.SSLContext, sni: str = HOST):
    client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    return context.wrap_bio(client_in, client_out, server_hostname=sni), client_in, client_out


# -- the ALPN choice ----------------------------------------------------------------------------


class _AppDataOnly:
    def __init__(self, http2: bool) -> None:
        self.data = tlsconfig.AppData(client_alpn=None, server_alpn=None, http2=http2)

    def get_app_data(self):
        return self.data


PROTOCOLS = [b"h2", b"http/1.1", b"http/1.0", b"h3", b"spdy/3", b"http/0.9"]
OFFERS = [list(offer) for size in range(4) for offer in itertools.permutations(PROTOCOLS, size)]


@pytest.mark.parametrize("http2", [True, False])
def test_the_alpn_choice_is_tlsconfigs_for_every_offer(http2):
    for offers in OFFERS:
        chosen = tlsconfig.alpn_select_callback(_AppDataOnly(http2), offers)
        expected = None if chosen == SSL.NO_OVERLAPPING_PROTOCOLS else chosen
        assert alpn_choice(offers, http2) == expected, offers


# -- the connection mitmproxy's TLS layer drives -----------------------------------------------


def test_every_call_mitmproxys_tls_layer_makes_on_its_connection_is_there():
    tree = ast.parse(inspect.getsource(tls_layers))
    called = {node.attr for node in ast.walk(tree)
              if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
              and node.value.attr == "tls" and isinstance(node.value.value, ast.Name) and node.value.value.id == "self"}
    # ``_ssl`` is read only when a server's certificate fails verification; a client's is never verified
    assert called - {"_ssl"} <= set(dir(StdlibConnection)), called - set(dir(StdlibConnection))
    assert {"bio_write", "bio_read", "do_handshake", "recv", "sendall"} <= called  # the scan found the calls


def test_a_handshake_then_requests_and_the_clients_goodbye(tls_config):
    tctx, addon, confdir = tls_config
    entry = addon.certstore.get_cert(HOST, [x509.DNSName(HOST)])
    contexts = ServerContexts(internals.default_client_ciphers(), confdir / client_tls.DHPARAM_FILE)
    server = StdlibConnection(contexts.get(entry, b"http/1.1"))
    client, client_in, client_out = stdlib_client(client_context(confdir / "mitmproxy-ca-cert.pem", ["http/1.1"]))
    handshake(server, client, client_in, client_out)

    assert server.get_alpn_proto_negotiated() == b"http/1.1" == client.selected_alpn_protocol().encode()
    assert server.get_protocol_version_name() == client.version() == "TLSv1.3"
    assert server.get_cipher_name() == client.cipher()[0]
    assert server.get_peer_certificate() is None and server.get_peer_cert_chain() is None
    assert client.getpeercert()["subjectAltName"] == (("DNS", HOST),)
    for request, answer in [(b"GET /a HTTP/1.1\r\n\r\n", b"HTTP/1.1 200 OK\r\n\r\n"), (b"x" * 40000, b"y" * 70000)]:
        client.write(request)
        received = bytearray()
        assert server.decrypt(client_out.read(), received) is True
        assert received == request
        server.encrypt(answer)
        client_in.write(server.outgoing())
        assert server.outgoing() == b""
        got = b""
        while len(got) < len(answer):
            got += client.read(100000)
        assert got == answer
    try:
        client.unwrap()  # close_notify
    except ssl.SSLWantReadError:
        pass
    received = bytearray()
    assert server.decrypt(client_out.read(), received) is False and received == b""
    assert server.get_shutdown() & SSL.RECEIVED_SHUTDOWN
    with pytest.raises(SSL.ZeroReturnError):
        server.recv(65535)


def test_the_lanes_records_read_a_pyopenssl_connection_alike(tls_config):
    tctx, addon, confdir = tls_config
    data = tunnel_tls_data(tctx, [b"http/1.1"])
    addon.tls_start_client(data)  # tlsconfig's own connection, as before
    server = data.ssl_conn
    assert isinstance(server, SSL.Connection)
    client, client_in, client_out = stdlib_client(client_context(confdir / "mitmproxy-ca-cert.pem", ["http/1.1"]))
    handshake(server, client, client_in, client_out)
    records = records_of(server)
    client.write(b"GET / HTTP/1.1\r\n\r\n")
    received = bytearray()
    assert records.decrypt(client_out.read(), received) is True and received == b"GET / HTTP/1.1\r\n\r\n"
    records.encrypt(b"z" * 70000)
    client_in.write(records.outgoing())
    got = b""
    while len(got) < 70000:
        got += client.read(100000)
    assert got == b"z" * 70000


def pyopenssl_server(tctx, addon) -> SSL.Connection:
    data = tunnel_tls_data(tctx, [])
    addon.tls_start_client(data)
    return data.ssl_conn


def failed_handshake(server, client_ctx: ssl.SSLContext) -> tuple:
    client, client_in, client_out = stdlib_client(client_ctx)
    with pytest.raises(SSL.Error) as raised:
        for _ in range(10):
            handshake_round(server, client, client_in, client_out, refusing=True)
    return raised.value.args[0][-1]


def old_client() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_ciphers("@SECLEVEL=0:ALL")
    context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_1
    return context


@pytest.mark.parametrize("client", ["untrusted CA", "TLS 1.1 only"])
def test_a_failed_handshake_reads_as_pyopenssls_for_mitmproxys_messages(tls_config, client):
    tctx, addon, confdir = tls_config
    make_client = {"untrusted CA": lambda: client_context(None, ["http/1.1"]), "TLS 1.1 only": old_client}[client]
    entry = addon.certstore.get_cert(HOST, [x509.DNSName(HOST)])
    contexts = ServerContexts(internals.default_client_ciphers(), confdir / client_tls.DHPARAM_FILE)
    ours = failed_handshake(StdlibConnection(contexts.get(entry, b"http/1.1")), make_client())
    theirs = failed_handshake(pyopenssl_server(tctx, addon), make_client())
    assert ours == theirs
    assert ours in {("SSL routines", "", "tlsv1 alert unknown ca"), ("SSL routines", "", "unsupported protocol")}


def test_contexts_are_made_once_per_certificate_and_alpn_and_the_oldest_go(tls_config, monkeypatch):
    tctx, addon, confdir = tls_config
    monkeypatch.setattr(client_tls, "CONTEXTS_KEPT", 2)
    contexts = ServerContexts(internals.default_client_ciphers(), None)
    a, b = (addon.certstore.get_cert(name, [x509.DNSName(name)]) for name in ("a.example.test", "b.example.test"))
    first = contexts.get(a, b"http/1.1")
    assert contexts.get(a, b"http/1.1") is first
    other = contexts.get(a, None)
    assert other is not first
    assert contexts.get(a, b"http/1.1") is first
    contexts.get(b, None)  # a third: the least recently used, (a, None), goes
    assert len(contexts._contexts) == 2
    assert contexts.get(a, b"http/1.1") is first
    assert contexts.get(a, None) is not other


# -- which tunnels get it ---------------------------------------------------------------------------


@pytest.mark.parametrize("offers, ours", [
    ([b"http/1.1"], True), ([], True), ([b"spdy/3"], True), ([b"http/1.1", b"h2"], True),
    ([b"h2", b"http/1.1"], False), ([b"http/1.0"], False),
])
def test_the_stdlib_serves_the_clients_the_lane_serves_and_tlsconfig_the_rest(tls_config, offers, ours):
    tctx, addon, confdir = tls_config
    data = tunnel_tls_data(tctx, offers)
    assert ClientTls(tctx.master.addons, tctx.options).start(data) is ours
    addon.tls_start_client(data)  # tlsconfig leaves a connection it finds
    assert isinstance(data.ssl_conn, StdlibConnection if ours else SSL.Connection)


@pytest.mark.parametrize("option", [{"ciphers_client": "ECDHE-RSA-AES128-GCM-SHA256"},
                                    {"tls_version_client_min": "TLS1_3"},
                                    {"request_client_cert": True}, {"http2": False}])
def test_other_client_tls_options_leave_the_handshake_to_tlsconfig(tls_config, option):
    tctx, addon, confdir = tls_config
    before = {name: getattr(tctx.options, name) for name in option}
    tctx.options.update(**option)
    try:
        data = tunnel_tls_data(tctx, [b"h2", b"http/1.1"] if "http2" in option else [b"http/1.1"])
        started = ClientTls(tctx.master.addons, tctx.options).start(data)
    finally:
        tctx.options.update(**before)
    # without HTTP/2, an h2 offer is served as HTTP/1.1: the lane's, on the stdlib
    assert started is ("http2" in option)


def test_a_key_log_leaves_the_handshake_to_tlsconfig(tls_config, monkeypatch):
    tctx, addon, confdir = tls_config
    monkeypatch.setattr(net_tls, "log_master_secret", net_tls.MasterSecretLogger(confdir / "keys.log"))
    assert ClientTls(tctx.master.addons, tctx.options).start(tunnel_tls_data(tctx, [b"http/1.1"])) is False


def test_without_its_mitmproxy_names_every_tunnel_keeps_pyopenssl(tls_config, monkeypatch, caplog):
    tctx, addon, confdir = tls_config
    missing = internals.Internal("mitmproxy.addons.tlsconfig", None, "no_such_name_in_any_mitmproxy")
    monkeypatch.setattr(internals, "OWN_TLS", internals.OWN_TLS + (missing,))
    own = ClientTls(tctx.master.addons, tctx.options)
    assert own.start(tunnel_tls_data(tctx, [b"http/1.1"])) is False
    assert own.start(tunnel_tls_data(tctx, [b"http/1.1"])) is False
    assert [r.getMessage() for r in caplog.records if "keep pyOpenSSL" in r.getMessage()] != []


class _Addons:
    def __init__(self) -> None:
        self.fired: list = []

    async def handle_lifecycle(self, hook) -> None:
        self.fired.append(type(hook).__name__)


class _Lane:
    def __init__(self, tctx) -> None:
        self.addons = _Addons()
        self.client_tls = ClientTls(tctx.master.addons, tctx.options)


def test_the_tunnel_offers_it_in_tls_start_client_once_and_then_fires_the_hook(tls_config):
    tctx, addon, confdir = tls_config
    data = tunnel_tls_data(tctx, [b"http/1.1"])
    lane = _Lane(tctx)
    tunnel = Tunnel(lane, data.conn, None, None, None, None)
    asyncio.run(tunnel._hook(tls_layers.TlsStartClientHook(data)))
    assert isinstance(data.ssl_conn, StdlibConnection) and lane.addons.fired == ["TlsStartClientHook"]
    nested = tunnel_tls_data(tctx, [b"http/1.1"])  # a second TLS start on the tunnel: a client's own, inside
    nested.conn = data.conn
    asyncio.run(tunnel._hook(tls_layers.TlsStartClientHook(nested)))
    assert nested.ssl_conn is None


# -- as clients see it, through the lane and through mitmproxy's layers ----------------------------


CLIENTS = {
    "default": {"alpn": ["http/1.1"]},
    "no ALPN": {},
    "HTTP/1.1 before h2": {"alpn": ["http/1.1", "h2"]},
    "h2 first": {"alpn": ["h2", "http/1.1"]},
    "nothing in common": {"alpn": ["spdy/3"]},
    "TLS 1.2": {"alpn": ["http/1.1"], "max": ssl.TLSVersion.TLSv1_2},
    "TLS 1.2, DHE only": {"max": ssl.TLSVersion.TLSv1_2, "ciphers": "DHE-RSA-AES128-GCM-SHA256"},
    "no SNI": {"alpn": ["http/1.1"], "sni": None},
}


def what_a_client_sees(proxy: ProxyProcess, settings: dict) -> dict:
    context = client_context(proxy.ca_file, settings.get("alpn"))
    if "max" in settings:
        context.maximum_version = settings["max"]
    if "ciphers" in settings:
        context.set_ciphers(settings["ciphers"])
    if settings.get("sni", HOST) is None:
        context.check_hostname = False
    seen = {}
    session = None
    for attempt in ("first", "again"):
        sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=15)
        sock.sendall(f"CONNECT {HOST}:443 HTTP/1.1\r\nHost: {HOST}:443\r\n\r\n".encode())
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += sock.recv(1)
        with context.wrap_socket(sock, server_hostname=settings.get("sni", HOST), session=session) as tls:
            certificate = tls.getpeercert()
            seen[attempt] = (tls.version(), tls.cipher()[0], tls.selected_alpn_protocol(),
                             certificate["subject"], certificate.get("subjectAltName"), tls.session_reused)
            tls.settimeout(0.5)
            try:
                tls.recv(1)  # reads the session tickets TLS 1.3 sends after the handshake
            except (TimeoutError, ssl.SSLError, OSError):
                pass
            session = tls.session
    return seen


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_clients_see_the_same_handshakes_through_the_lane_and_through_mitmproxys_layers(tmp_path):
    seen = []
    for name, args in (("lane", ()), ("layers", ("--no-fast-lane",))):
        with ProxyProcess(tmp_path / name / "store", "--mode", "replay", "--allow-empty", *args) as proxy:
            seen.append({client: what_a_client_sees(proxy, settings) for client, settings in CLIENTS.items()})
    lane, layers = seen
    assert lane == layers
    assert lane["default"]["again"][-1] is True  # a session is resumed
    assert lane["h2 first"]["first"][2] == "h2" and lane["nothing in common"]["first"][2] is None
