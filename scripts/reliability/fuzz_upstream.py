"""The loopback upstream fuzz cases aim at: ``FuzzUpstream`` and ``make_tls`` for its HTTPS side.

``FuzzUpstream`` serves HTTP (and, given a TLS context, HTTPS) on 127.0.0.1 in the running event
loop. It answers 200 with a small JSON body except on purpose (/status/NNN, /garbage, /reset,
/slow) and remembers, by the ``stbfz=<number>`` each proxied target carries, which cases reached
it and what it did, so that fuzz_judge.py can tell the upstream's failures from the proxy's.
``make_tls`` makes a throw-away CA and a certificate for localhost signed by it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import ssl
import struct


def make_tls(folder) -> tuple[str, ssl.SSLContext]:
    """A throw-away CA (its PEM file, for the proxy's --upstream-ca) and a server context with a
    certificate for localhost and 127.0.0.1 signed by it."""
    import datetime
    import ipaddress
    from pathlib import Path

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    day = datetime.timedelta(days=1)

    def issued(subject: str, key, issuer: str, signer, ca: bool):
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - day).not_valid_after(now + 2 * day)
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            builder = builder.add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
                decipher_only=False), critical=True)
        else:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = issued("stbproxy fuzz CA", ca_key, "stbproxy fuzz CA", ca_key, True)
    cert = issued("localhost", key, "stbproxy fuzz CA", ca_key, False)
    ca_file, cert_file, key_file = folder / "fuzz-ca.pem", folder / "fuzz-server.pem", folder / "fuzz-server.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return str(ca_file), context


class FuzzUpstream:
    """An HTTP upstream on 127.0.0.1 (and, with a TLS context, an HTTPS one on another port),
    served on the running event loop. It answers everything 200 with a small JSON body, except
    on purpose: /status/NNN answers NNN, /garbage answers bytes that are not HTTP, /reset resets
    the connection. It remembers what it did for each case number (stbfz=N in the target)."""

    def __init__(self) -> None:
        self.answers: dict[int, int | str] = {}  # case number -> status sent, "garbage" or "reset"
        self.requests = 0
        self.port = 0
        self.tls_port: int | None = None
        self._servers: list[asyncio.AbstractServer] = []

    async def start(self, tls: ssl.SSLContext | None = None) -> "FuzzUpstream":
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0, limit=1 << 23, backlog=512)
        self._servers.append(server)
        self.port = server.sockets[0].getsockname()[1]
        if tls is not None:
            server = await asyncio.start_server(self._connection, "127.0.0.1", 0, ssl=tls, limit=1 << 23, backlog=512)
            self._servers.append(server)
            self.tls_port = server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)

    def reached(self, number: int | None) -> bool:
        return number is not None and number in self.answers

    def failed(self, number: int | None) -> bool:
        """Whether the upstream itself failed this case (a 5xx, garbage or a reset)."""
        answer = self.answers.get(number) if number is not None else None
        return answer in ("garbage", "reset") or (isinstance(answer, int) and answer >= 500)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._exchange(reader, writer):
                pass
        except Exception:  # noqa: BLE001 - a test server: whatever happens, the connection just ends
            pass
        finally:
            writer.close()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return False
        self.requests += 1
        numbers = [int(n) for n in re.findall(rb"stbfz=(\d{1,12})", head.split(b"\r\n", 1)[0])]
        lines = head[:-4].split(b"\r\n")
        method, _, rest = lines[0].partition(b" ")
        target = rest.rpartition(b" ")[0] or rest
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip()
        status: int | str = 200
        try:
            if b"chunked" in fields.get(b"transfer-encoding", b"").lower():
                body = b""
                while size := int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16):
                    body += (await reader.readexactly(size + 2))[:-2]
                while (await reader.readuntil(b"\r\n")) != b"\r\n":  # the trailer section
                    pass
            else:
                body = await reader.readexactly(int(fields.get(b"content-length", b"0") or 0))
        except (ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            body, status = b"", 400
        path = re.sub(rb"^[a-zA-Z]+://[^/?]*", b"", target).split(b"?")[0]
        match = re.fullmatch(rb"/status/(\d{3})", path)
        if status == 200 and match and 200 <= int(match.group(1)) <= 599:
            status = int(match.group(1))
        elif status == 200 and path in (b"/garbage", b"/reset"):
            status = path[1:].decode()
        elif path == b"/slow":
            await asyncio.sleep(0.3)
        for number in numbers:
            self.answers[number] = status
        if status == "garbage":
            writer.write(b"this is not HTTP at all\r\n\r\n")
            await writer.drain()
            return False
        if status == "reset":
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        document = json.dumps({"method": method.decode("latin-1"), "path": path.decode("latin-1"),
                               "bytes": len(body), "status": status}).encode()
        close = status == 400 or fields.get(b"connection", b"").lower() == b"close"
        writer.write(b"HTTP/1.1 %d Fuzz\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
            status, len(document), b"Connection: close\r\n" if close else b"", b"" if method == b"HEAD" else document))
        await writer.drain()
        return not close
