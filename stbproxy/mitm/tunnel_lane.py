"""HTTPS in the fast lane: the CONNECT tunnels of FastLane.

A tunnel carries TLS, and TLS is where mitmproxy keeps its policy: which certificate for
which name, which ALPN protocol, which TLS versions and ciphers, and the handshake-failure
messages that tell a user that a client does not trust the proxy's CA. So the lane does not
run the handshake itself. It builds the layers mitmproxy stacks after a CONNECT (a NextLayer,
which the next_layer addon turns into server-side and client-side TLS layers) and runs them
the way mitmproxy's connection handler does: events in, commands out, hooks through the
master's addon manager. Only where mitmproxy would put its HTTP layer for an HTTP/1 client
does the lane stand in (``internals.StandIn``): from then on it decrypts with the TLS layer's
own connection and answers plain requests as it answers them on plain connections. The
first request of any other kind goes to the HTTP layer mitmproxy chose, which serves the
rest of the connection through the same TLS layers.

That connection is, for a client the lane will serve, Python's ssl rather than pyOpenSSL:
the lane puts it in the ``tls_start_client`` hook, made as mitmproxy's tlsconfig would make
its own (client_tls.py), so that each request costs a C call or two to decrypt and encrypt.

What the lane does not do: open server connections (stbproxy's addon answers every request,
so mitmproxy would not either; a layer that asks for one gets an error), and carry non-TLS
bytes through a tunnel; those tunnels are handed to mitmproxy, which then answers the
CONNECT a second time (that answer is not sent twice).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass

from mitmproxy import flow as mitm_flow
from mitmproxy import http
from mitmproxy.net.http import http1
from mitmproxy.proxy import commands, events, layer, server_hooks
from mitmproxy.proxy.context import Context
from mitmproxy.proxy.layers import modes
from mitmproxy.proxy.layers.http import (
    HttpConnectedHook,
    HttpConnectErrorHook,
    HttpConnectHook,
    HttpLayer,
    HTTPMode,
    HttpStream,
)
from mitmproxy.proxy.layers.tls import ClientTLSLayer, TlsStartClientHook
from mitmproxy.utils import human
from OpenSSL import SSL

from stbproxy.mitm.client_tls import Records, records_of
from stbproxy.mitm.connections import Watched, WatchedReader
from stbproxy.mitm.internals import StandIn
from stbproxy.mitm.lanes import HEAD_CUT_SHORT, TUNNEL, Door, Doors
from stbproxy.mitm.plain_http import Replayed, closes, head_end, response_bytes
from stbproxy.mitm.streaming import ClientWriter

log = logging.getLogger("stbproxy")
connection_log = logging.getLogger("mitmproxy.proxy.server")  # where mitmproxy's connection handler logs

EMPTY_LINE_BYTES = frozenset(b"\r\n")
NO_SERVER_CONNECTIONS = "stbproxy's fast lane opens no server connections (serve --no-fast-lane does)"


class _WithoutReply:
    """The client's writer for mitmproxy taking over a tunnel whose CONNECT the lane has
    answered: mitmproxy reads that CONNECT again and answers it again, and that answer is
    not sent a second time."""

    def __init__(self, writer: asyncio.StreamWriter, reply: bytes) -> None:
        self._writer = writer
        self._expected = reply

    def write(self, data: bytes) -> None:
        if self._expected:
            n = min(len(data), len(self._expected))
            if data[:n] != self._expected[:n]:  # hooks decided otherwise the second time: nothing sane to send
                log.error("stbproxy: mitmproxy answered a CONNECT differently the second time; connection closed")
                self._expected = b""
                self._writer.close()
                return
            self._expected, data = self._expected[n:], data[n:]
            if not data:
                return
        self._writer.write(data)

    def __getattr__(self, name: str):
        return getattr(self._writer, name)


class _Encrypting:
    """What the lane's answer writes goes through the client's TLS connection (``records``)."""

    def __init__(self, records: Records, writer: asyncio.StreamWriter) -> None:
        self.records = records
        self.writer = writer

    def write(self, data: bytes) -> None:
        """As the TLS layer sends data."""
        try:
            self.records.encrypt(data)
        except (SSL.ZeroReturnError, SSL.SysCallError):
            pass  # the client is going; what it still sends is dropped, as mitmproxy does
        self.flush()

    def flush(self) -> None:
        out = self.records.outgoing()
        if out and not self.writer.is_closing():
            self.writer.write(out)

    async def drain(self) -> None:
        await self.writer.drain()


@dataclass
class _StandingIn:
    """Where the lane stands in for mitmproxy's HTTP layer (``stand_in``): the client TLS
    layer below it and its connection's records, which the lane decrypts and encrypts with."""

    stand_in: StandIn
    client_tls: ClientTLSLayer
    encrypting: _Encrypting


class Tunnel:
    """One client connection from its CONNECT on (``run``); a lanes.Lane."""

    name = TUNNEL
    top: layer.Layer  # mitmproxy's layers, from the first TLS bytes on (_tunnel)

    def __init__(self, lane, client, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 doors: Doors, watched: Watched) -> None:
        self.lane = lane  # the FastLane: hooks, options, answering plain requests, handing over
        self.client = client
        self.doors = doors  # the connection's: which requests the tunnel answers (lanes.py)
        self.watched = watched  # hears what the connection does (connections.py)
        # what it reads is reported to ``watched`` in the loop (a wrapper costs a coroutine a read)
        self.reader = reader
        self.writer = writer
        self.standing: _StandingIn | None = None  # once the lane stands in for the HTTP layer
        self._tls_started = False
        self.closed = False
        self._lock = asyncio.Lock()
        self._wakeups: set[asyncio.Task] = set()
        self._hooks: set[asyncio.Task] = set()  # hooks of an HTTP/2 connection's streams, each on its own

    async def run(self, request: http.Request, head: bytes, rest: bytes) -> bool | None:
        """Answer the CONNECT ``request`` (its bytes: ``head``; read after it: ``rest``).
        None: the tunnel has been served to its end. Otherwise the CONNECT was refused and
        the connection goes on with its next request, or is closed when this is True."""
        # The layers mitmproxy has stacked when it reads a CONNECT: TLS settings and
        # next-layer decisions look at them.
        context = Context(self.client, self.lane.options)
        modes.HttpProxy(context)
        HttpLayer(context, HTTPMode.regular)
        context = context.fork()
        HttpStream(context, 1)
        flow = http.HTTPFlow(self.client, context.server, live=True)
        flow.request = request
        await self.lane.addons.handle_lifecycle(HttpConnectHook(flow))
        if flow.error is not None and flow.error.msg == mitm_flow.Error.KILLED_MESSAGE:
            return True  # mitmproxy closes without a word (and no error hook, for a CONNECT)
        context.server.address = (request.host, request.port)
        if flow.response is None:  # as mitmproxy makes it: no header fields at all
            now = time.time()
            flow.response = http.Response(request.data.http_version, 200, b"Connection established", http.Headers(),
                                          b"", None, now, now)
        response = flow.response
        names = {name.lower() for name, _ in response.headers.fields}
        reply = response_bytes(response, names)
        if not 200 <= response.status_code < 300:
            await self.lane.addons.handle_lifecycle(HttpConnectErrorHook(flow))
            flow.live = False
            self.writer.write(reply)
            # as mitmproxy's HTTP/1 server: closed when the answer or the request says so (an
            # HTTP/1.0 CONNECT without keep-alive, what Python's http.client sends)
            return closes(request, response, names) or http1.connection_close(request.http_version,
                                                                               request.headers)
        await self.lane.addons.handle_lifecycle(HttpConnectedHook(flow))
        self.writer.write(reply)
        try:
            await self._tunnel(context, rest, head, reply)
        finally:
            for task in self._wakeups:
                task.cancel()
            # per-connection state addons keep from a CONNECT (stbproxy's session name) goes
            await self.lane.addons.handle_lifecycle(server_hooks.ClientDisconnectedHook(self.client))
        return None

    async def _tunnel(self, context: Context, data: bytes, head: bytes, reply: bytes) -> None:
        while len(data) < 3:  # enough to tell TLS from anything else
            more = await self.reader.read(65536)
            if not more:
                break
            self.watched.read(time.monotonic())
            data += more
        door = self.doors.in_tunnel(data)
        if door.lane != TUNNEL:
            self.closed = True  # plain HTTP or raw TCP in the tunnel: mitmproxy's to carry
            self.watched.by_lane = False
            self.watched.handed_over = door.reason
            return await self.lane.hand_over(Replayed(head + data, WatchedReader(self.reader, self.watched)),
                                             _WithoutReply(self.writer, reply))
        self.top = layer.NextLayer(context)
        await self.feed(events.Start())
        while not self.closed:
            standing = self.standing
            if data and standing is not None and not standing.stand_in.delegated:
                if not self.decrypt(standing, data):  # close_notify: what came before it is answered, then goodbye
                    await self.answer_plain(standing)
                    if not self.closed:
                        await self.client_left()
                    break
            elif data:
                await self.feed(events.DataReceived(self.client, data))
            standing = self.standing  # (the handshake may have just finished)
            if standing is not None and not standing.stand_in.delegated and not self.closed:
                await self.answer_plain(standing)
                if not standing.stand_in.buffer:
                    self.watched.between_requests()  # what was read finished a request, or the handshake
            if self.closed:
                break
            data = await self.reader.read(65536)
            if not data:
                await self.client_left()
                break
            self.watched.read(time.monotonic())
        self.writer.close()

    # -- the lane's own requests ----------------------------------------------------------

    def decrypt(self, standing: _StandingIn, data: bytes) -> bool:
        """As the TLS layer receives data (which the lane reads itself while it stands in);
        False once the client has said it sends no more (close_notify)."""
        encrypting = standing.encrypting
        try:
            more = encrypting.records.decrypt(data, standing.stand_in.buffer)
        except SSL.Error as exc:
            connection_log.warning(f"TLS Error: {exc}", extra={"client": self.client.peername})
            more = True
        encrypting.flush()
        return more

    async def answer(self, request: http.Request, body: bytes, client, server, writer: ClientWriter,
                     client_says) -> bool:
        """As the fast lane answers (lanes.Lane), the flow marked as the tunnel's."""
        return await self.lane.answer(request, body, client, server, writer, client_says, TUNNEL)

    async def answer_plain(self, standing: _StandingIn) -> None:
        """Answer the complete plain requests received; the first of another kind delegates."""
        doors = self.doors
        buffer = standing.stand_in.buffer
        server = self.top.context.server
        while buffer:
            if buffer[0] in EMPTY_LINE_BYTES:  # empty lines before a request line are ignored (RFC 9112)
                del buffer[:len(buffer) - len(buffer.lstrip(b"\r\n"))]
                continue
            end = head_end(buffer)
            if end is None:
                door = doors.waiting(buffer)
                if door is not None:
                    await self.delegate(standing, door)
                return
            plain = doors.plain(bytes(buffer[:end]), server.address)
            if plain is None:
                return await self.delegate(standing, doors.not_plain(buffer[:end]))
            request, size, request_closes = plain
            if len(buffer) < end + size:
                return
            body = bytes(buffer[end:end + size])
            del buffer[:end + size]
            self.watched.head_done()
            self.watched.body_done()
            keep_open = await self.lane.answer(request, body, self.client, server, standing.encrypting,
                                               self.reader.read, TUNNEL)  # (self.answer, without its frame)
            self.watched.answered(time.monotonic())
            if not keep_open or request_closes:
                self.closed = True
                return
            await self.writer.drain()

    async def delegate(self, standing: _StandingIn, door: Door) -> None:
        """From now on mitmproxy's HTTP layer serves this connection, first the bytes held
        (``door``: mitmproxy's, with the reason)."""
        stand_in = standing.stand_in
        data = bytes(stand_in.buffer)
        stand_in.buffer.clear()
        stand_in.delegated = True
        self.watched.by_lane = False  # mitmproxy's hooks report for it from now on
        self.watched.handed_over = door.reason
        # the events go in below the client TLS layer, whose commands encrypt what goes out
        client_tls = standing.client_tls
        await self.run_commands(client_tls.event_to_child(events.Start()))
        if data:
            await self.run_commands(client_tls.event_to_child(events.DataReceived(self.client, data)))

    async def client_left(self) -> None:
        standing = self.standing
        if standing is not None and not standing.stand_in.delegated:
            if not standing.stand_in.buffer.strip():
                return  # between requests: nothing to say
            await self.delegate(standing, HEAD_CUT_SHORT)  # a request cut short: mitmproxy's HTTP layer logs it
        await self.feed(events.ConnectionClosed(self.client))

    # -- mitmproxy's layers, run as its connection handler runs them -------------------------

    async def feed(self, event: events.Event) -> None:
        await self.run_commands(self.top.handle_event(event))

    async def run_commands(self, produced) -> None:
        async with self._lock:  # one event at a time, as mitmproxy's handler does
            batches = collections.deque([produced])
            while batches:
                hooks = []
                for command in batches.popleft():
                    if isinstance(command, commands.StartHook):
                        hooks.append(command)  # mitmproxy starts hooks as tasks: they run after this batch
                    else:
                        reply = self._execute(command)
                        if reply is not None:
                            batches.append(self.top.handle_event(reply))
                for hook in hooks:
                    # as mitmproxy runs them: no stream holds the others, nor their resets
                    if self.client.alpn == b"h2":
                        self._on_its_own(hook)
                        continue
                    await self._hook(hook)
                    if hook.blocking:
                        batches.append(self.top.handle_event(events.HookCompleted(hook)))

    def _on_its_own(self, hook: commands.StartHook) -> None:
        task = asyncio.get_running_loop().create_task(self._hook_then_resume(hook))
        self._hooks.add(task)
        task.add_done_callback(self._hooks.discard)

    async def _hook_then_resume(self, hook: commands.StartHook) -> None:
        await self._hook(hook)
        if hook.blocking:
            await self.run_commands(self.top.handle_event(events.HookCompleted(hook)))

    def _execute(self, command: commands.Command) -> events.Event | None:
        """Carry out a command; an event to send back, if it needs one."""
        if isinstance(command, commands.SendData):
            if command.connection == self.client and not self.writer.is_closing():
                self.writer.write(command.data)
        elif isinstance(command, commands.CloseTcpConnection) and command.half_close:
            if command.connection == self.client and not self.writer.is_closing() and self.writer.can_write_eof():
                self.writer.write_eof()
        elif isinstance(command, commands.CloseConnection):
            if command.connection == self.client:
                self.closed = True
                self.writer.close()
        elif isinstance(command, commands.Log):
            connection_log.log(command.level, command.message, extra={"client": self.client.peername})
        elif isinstance(command, commands.OpenConnection):
            log.warning("stbproxy: a tunnel to %s asked for a server connection (not HTTP inside its TLS?); %s",
                        human.format_address(command.connection.address), NO_SERVER_CONNECTIONS)
            return events.OpenConnectionCompleted(command, NO_SERVER_CONNECTIONS)
        elif isinstance(command, commands.RequestWakeup):
            task = asyncio.get_running_loop().create_task(self._wake(command))
            self._wakeups.add(task)
            task.add_done_callback(self._wakeups.discard)
        else:
            raise RuntimeError(f"unexpected command from mitmproxy's layers: {command}")
        return None

    async def _wake(self, command: commands.RequestWakeup) -> None:
        await asyncio.sleep(command.delay)
        if not self.closed:
            await self.feed(events.Wakeup(command))

    async def _hook(self, hook: commands.StartHook) -> None:
        if isinstance(hook, TlsStartClientHook) and not self._tls_started and hook.data.conn is self.client:
            self._tls_started = True  # the tunnel's own TLS (not one a client might nest inside it)
            self.lane.client_tls.start(hook.data)
        await self.lane.addons.handle_lifecycle(hook)
        data, = hook.args()
        if isinstance(data, mitm_flow.Flow):
            await data.wait_for_resume()
        if isinstance(data, layer.NextLayer) and self.standing is None:
            self._maybe_stand_in(data)

    def _maybe_stand_in(self, next_layer: layer.NextLayer) -> None:
        """Stand in for the HTTP layer chosen for an HTTP/1 client inside TLS."""
        chosen = next_layer.layer
        if chosen is None:
            return
        door = self.doors.in_tls(chosen, self.client)
        if door is not None and door.lane != TUNNEL:
            self.watched.handed_over = door.reason  # (mitmproxy's HTTP layer, HTTP/2 say: the lane stays out)
        elif door is not None:
            client_tls = [item for item in next_layer.context.layers if isinstance(item, ClientTLSLayer)]
            if len(client_tls) == 1 and client_tls[0].tls is not None:
                stand_in = StandIn(chosen)
                self.standing = _StandingIn(stand_in, client_tls[0], _Encrypting(records_of(client_tls[0].tls),
                                                                                   self.writer))
                next_layer.layer = stand_in

