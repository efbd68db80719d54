"""The client's side of a tunnel's TLS on Python's ssl module: records and handshakes in C.

Inside a tunnel every cache hit is a TLS record in and a record out. Through pyOpenSSL each
record costs a few Python calls and exceptions (bio_write, recv until WantReadError, sendall,
bio_read until WantReadError); ``ssl.SSLObject`` over memory BIOs does the same work in one
C call each. A handshake costs less too: the context, with the certificate and its key
loaded, is made once per host and reused, where mitmproxy's tlsconfig loads the key into
every new connection.

The policy stays mitmproxy's. Its TLS layers still drive the handshake: they parse the
ClientHello, fire ``tls_clienthello``, ``tls_start_client``, ``tls_established_client`` or
``tls_failed_client``, and word the failures ("The client does not trust the proxy's
certificate for ..."). The lane only hands them another connection object
(``StdlibConnection``, with the methods of pyOpenSSL's that they call) in
``tls_start_client``, before tlsconfig runs, which then leaves it be. The certificate is the
one tlsconfig picks (its ``get_cert``, from mitmproxy's CertStore); TLS versions, ciphers, DH
parameters and the ALPN choice are tlsconfig's defaults. ``ClientTls.start`` does this only
for a client the lane would serve itself: ALPN chooses HTTP/1.1 or nothing, and the options
for client TLS are mitmproxy's defaults. A client whose offer makes it HTTP/2, other
options, or an SSLKEYLOGFILE leave the handshake to pyOpenSSL, as before.
"""

from __future__ import annotations

import collections
import logging
import re
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Union

from cryptography.hazmat.primitives import serialization
from mitmproxy import certs
from mitmproxy.net import tls as net_tls
from mitmproxy.proxy.layers.tls import HTTP1_ALPNS, HTTP_ALPNS
from mitmproxy.tls import TlsData
from OpenSSL import SSL

from stbproxy.mitm import internals
from stbproxy.private_files import transient_file

log = logging.getLogger("stbproxy")

READ_SIZE = 65535  # plaintext asked of a TLS connection at a time (a record holds at most 16 KiB)
SERVED_ALPNS = (None, b"http/1.1")  # the ALPN choices of clients the lane stands in for
CONTEXTS_KEPT = 256  # hosts whose context is kept (mitmproxy keeps 100 certificates)
DHPARAM_FILE = "mitmproxy-dhparam.pem"  # in the confdir, written by mitmproxy's CertStore


def alpn_choice(offers: Sequence[bytes], http2: bool) -> bytes | None:
    """The protocol mitmproxy's tlsconfig selects for a tunnel's client while no server
    connection has chosen one: the client's first offer among HTTP's (HTTP/2 and 3 only with
    the ``http2`` option); None: no ALPN at all."""
    allowed = HTTP_ALPNS if http2 else HTTP1_ALPNS
    return next((offer for offer in offers if offer in allowed), None)


_SSL_MESSAGE = re.compile(r"^\[[^\]]*\] (?P<reason>.*) \(_ssl\.c:\d+\)$")
_LIBRARIES = {"SSL": "SSL routines"}  # ssl's short names for what pyOpenSSL names OpenSSL's way


def openssl_error(exc: ssl.SSLError) -> SSL.Error:
    """pyOpenSSL's form of a TLS error ssl raised: [(library, function, reason)], which
    mitmproxy's TLS layer reads for its messages ("tlsv1 alert unknown ca")."""
    text = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], str) else str(exc)
    match = _SSL_MESSAGE.match(text)
    reason = match.group("reason") if match else (exc.reason or text).lower().replace("_", " ")
    return SSL.Error([(_LIBRARIES.get(exc.library or "", exc.library or ""), "", reason)])


class StdlibConnection:
    """The server side of one client's TLS: an ``ssl.SSLObject`` between two memory BIOs,
    with the methods of pyOpenSSL's Connection that mitmproxy's TLS layer calls (and their
    exceptions), and the three the lane calls for each request (``decrypt``, ``encrypt``,
    ``outgoing``)."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._shutdown = 0  # SSL.RECEIVED_SHUTDOWN once the client's close_notify is read

    # -- the lane's calls ------------------------------------------------------------------

    def decrypt(self, data: bytes, into: bytearray) -> bool:
        """Append to ``into`` what ``data`` decrypts to; False once the client has said it
        sends no more (close_notify). SSL.Error for a TLS error (what came before it is kept)."""
        incoming, tls = self._incoming, self._tls
        incoming.write(data)
        while True:
            try:
                plain = tls.read(READ_SIZE)
            except ssl.SSLWantReadError:
                return True
            except ssl.SSLZeroReturnError:
                self._shutdown |= SSL.RECEIVED_SHUTDOWN
                return False
            except ssl.SSLError as exc:
                raise openssl_error(exc) from None
            if not plain:  # ssl's way of saying close_notify
                self._shutdown |= SSL.RECEIVED_SHUTDOWN
                return False
            into += plain
            if not incoming.pending and not tls.pending():
                return True  # all read: asking again would only raise SSLWantReadError

    def encrypt(self, data: bytes) -> None:
        """As pyOpenSSL's sendall: ZeroReturnError or SysCallError once the client is gone."""
        try:
            written = self._tls.write(data)
            if written < len(data):
                view = memoryview(data)[written:]
                while view:
                    view = view[self._tls.write(view):]
        except ssl.SSLZeroReturnError:
            raise SSL.ZeroReturnError() from None
        except (ssl.SSLSyscallError, ssl.SSLEOFError) as exc:
            raise SSL.SysCallError(-1, str(exc)) from None
        except ssl.SSLError as exc:
            raise openssl_error(exc) from None

    def outgoing(self) -> bytes:
        """The TLS bytes waiting to go to the client (b"" when none)."""
        return self._outgoing.read()

    # -- pyOpenSSL's names, as mitmproxy's TLS layer calls them --------------------------------

    def bio_write(self, data: bytes) -> int:
        return self._incoming.write(data)

    def bio_read(self, size: int) -> bytes:
        data = self._outgoing.read(size)
        if not data:
            raise SSL.WantReadError()
        return data

    def do_handshake(self) -> None:
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            raise SSL.WantReadError() from None
        except ssl.SSLError as exc:
            raise openssl_error(exc) from None

    def recv(self, size: int, flags: int | None = None) -> bytes:
        try:
            plain = self._tls.read(size)
        except ssl.SSLWantReadError:
            raise SSL.WantReadError() from None
        except ssl.SSLZeroReturnError:
            plain = b""
        except ssl.SSLError as exc:
            raise openssl_error(exc) from None
        if not plain:
            self._shutdown |= SSL.RECEIVED_SHUTDOWN
            raise SSL.ZeroReturnError()
        return plain

    def sendall(self, data: bytes, flags: int = 0) -> int:
        self.encrypt(data)
        return len(data)

    def get_peer_certificate(self) -> None:
        return None  # no client certificate is asked for (request_client_cert is off)

    def get_peer_cert_chain(self) -> None:
        return None

    def get_alpn_proto_negotiated(self) -> bytes:
        return (self._tls.selected_alpn_protocol() or "").encode()

    def get_cipher_name(self) -> str | None:
        cipher = self._tls.cipher()
        return cipher[0] if cipher else None

    def get_protocol_version_name(self) -> str:
        return self._tls.version() or "unknown"

    def get_shutdown(self) -> int:
        return self._shutdown


class OpenSSLRecords:
    """The lane's three calls on a pyOpenSSL connection (one mitmproxy's tlsconfig made)."""

    def __init__(self, tls: SSL.Connection) -> None:
        self.tls = tls

    def decrypt(self, data: bytes, into: bytearray) -> bool:
        self.tls.bio_write(data)
        while True:
            try:
                into += self.tls.recv(READ_SIZE)
            except SSL.WantReadError:
                return True
            except SSL.ZeroReturnError:
                return False

    def encrypt(self, data: bytes) -> None:
        self.tls.sendall(data)

    def outgoing(self) -> bytes:
        chunks = []
        while True:
            try:
                chunk = self.tls.bio_read(READ_SIZE)
            except SSL.WantReadError:
                break
            chunks.append(chunk)
            if len(chunk) < READ_SIZE:
                break  # the memory BIO gave all it held: asking again would only raise WantReadError
        return b"".join(chunks)


Records = Union[StdlibConnection, OpenSSLRecords]  # what the lane decrypts and encrypts a tunnel's requests with


def records_of(tls) -> Records:
    """What the lane decrypts and encrypts a tunnel's requests with."""
    return tls if isinstance(tls, StdlibConnection) else OpenSSLRecords(tls)


class ServerContexts:
    """``ssl.SSLContext`` per leaf certificate and ALPN choice, set as mitmproxy's tlsconfig
    sets its OpenSSL context by default: TLS 1.2 and up, its cipher list (TLS 1.2's; 1.3's
    are OpenSSL's), its DH parameters, the server's cipher preference, no compression, the
    leaf alone sent. The least recently used go first past ``CONTEXTS_KEPT``."""

    def __init__(self, ciphers: tuple[str, ...], dhparam_file: Path | None) -> None:
        self._ciphers = ":".join(ciphers)
        self._dhparam_file = dhparam_file
        self._contexts: collections.OrderedDict[tuple[int, bytes | None],
                                                tuple[certs.CertStoreEntry, ssl.SSLContext]] = collections.OrderedDict()

    def get(self, entry: certs.CertStoreEntry, alpn: bytes | None) -> ssl.SSLContext:
        key = (id(entry), alpn)
        kept = self._contexts.get(key)
        if kept is not None and kept[0] is entry:  # (an id is unique only while its object lives)
            self._contexts.move_to_end(key)
            return kept[1]
        context = self._make(entry, alpn)
        self._contexts[key] = (entry, context)
        while len(self._contexts) > CONTEXTS_KEPT:
            self._contexts.popitem(last=False)
        return context

    def _make(self, entry: certs.CertStoreEntry, alpn: bytes | None) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.maximum_version = ssl.TLSVersion.MAXIMUM_SUPPORTED
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_COMPRESSION
        context.set_ciphers(self._ciphers)
        if self._dhparam_file is not None and self._dhparam_file.is_file():
            context.load_dh_params(str(self._dhparam_file))
        if alpn is not None:
            context.set_alpn_protocols([alpn.decode()])
        key = entry.privatekey.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption())
        with transient_file(entry.cert.to_pem() + key) as path:  # load_cert_chain reads files only
            context.load_cert_chain(path)
        return context


class ClientTls:
    """Puts a ``StdlibConnection`` in a tunnel's ``tls_start_client`` where that serves the
    client as tlsconfig's connection would (``start``). One per lane: its contexts are
    shared by all tunnels."""

    def __init__(self, addons, options) -> None:
        self._addons = addons
        self.options = options
        self._tlsconfig: Any = None  # mitmproxy's tlsconfig addon, once usable() has looked it up
        self._contexts: ServerContexts | None = None
        self._usable: bool | None = None

    def usable(self) -> bool:
        """Whether this mitmproxy has what the stdlib TLS needs (internals.OWN_TLS) and the
        master has mitmproxy's tlsconfig; if not, pyOpenSSL serves every tunnel, as before."""
        if self._usable is None:
            missing = internals.changed(internals.OWN_TLS)
            self._tlsconfig = self._addons.get("tlsconfig")
            self._usable = not missing and self._tlsconfig is not None
            if missing:
                log.warning("%s", internals.changed_message(missing, "HTTPS tunnels keep pyOpenSSL's TLS"))
        return self._usable

    def defaults_in_force(self) -> bool:
        """The client-TLS options are mitmproxy's defaults (which ServerContexts copies), and
        no key log is asked for."""
        options = self.options
        return (options.tls_version_client_min == net_tls.DEFAULT_MIN_VERSION.name
                and options.tls_version_client_max == net_tls.DEFAULT_MAX_VERSION.name
                and options.ciphers_client is None and options.tls_ecdh_curve_client is None
                and not options.request_client_cert and not options.add_upstream_certs_to_client_chain
                and net_tls.log_master_secret is None)

    def start(self, tls_start: TlsData) -> bool:
        """Give the client's TLS a StdlibConnection if the lane would serve its requests and
        the result is the one tlsconfig's connection would give; False leaves it to tlsconfig."""
        client, context = tls_start.conn, tls_start.context
        if (tls_start.ssl_conn is not None or tls_start.is_dtls or client.cipher_list or client.alpn is not None
                or context.server.alpn is not None or not self.usable() or not self.defaults_in_force()):
            return False
        alpn = alpn_choice(client.alpn_offers, self.options.http2)
        if alpn not in SERVED_ALPNS:
            return False  # HTTP/2 (or another protocol): mitmproxy's layers serve it, on its own TLS
        entry = self._tlsconfig.get_cert(context)
        # a stand-in with the pyOpenSSL Connection methods mitmproxy's TLS layer calls
        tls_start.ssl_conn = StdlibConnection(self._server_contexts().get(entry, alpn))  # type: ignore[assignment]
        return True

    def _server_contexts(self) -> ServerContexts:
        if self._contexts is None:
            confdir = Path(self.options.confdir).expanduser()
            self._contexts = ServerContexts(internals.default_client_ciphers(), confdir / DHPARAM_FILE)
        return self._contexts
