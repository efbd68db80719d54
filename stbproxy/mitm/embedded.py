"""The embedded proxy ``stbproxy serve`` runs: a lean mitmproxy master with only the addons
a proxy needs, whose connections start in the fast lane, and which reports ready only once
it can serve."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import re
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable

from mitmproxy import ctx, exceptions, options
from mitmproxy.addons import core, next_layer, proxyauth, proxyserver, tlsconfig
from mitmproxy.master import Master

from stbproxy.errors import ConfigError, StbError
from stbproxy.front.limits import (
    DEFAULT_HEAD_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_REQUEST_BODY,
)
from stbproxy.mitm import internals
from stbproxy.mitm.addon import StbAddon
from stbproxy.mitm.ca import ensure_ca
from stbproxy.mitm.connections import ConnectionLimits, ConnectionWatch, WatchedReader
from stbproxy.mitm.fast_lane import FastLane
from stbproxy.mitm.flows import own_error_answers
from stbproxy.mitm.lanes import NO_FAST_LANE
from stbproxy.private_files import private_umask
from stbproxy.runtime import Runtime
from stbproxy.settings import Settings

log = logging.getLogger("stbproxy")



# -- the embedded master ------------------------------------------------------------------


@dataclass
class ServeHooks:
    """What ``serve --workers`` (mitm/worker_pool.py) adds to one embedded proxy: how its Runtime is
    built, what runs once it listens and before it reports ready (``listening(runtime, host,
    port, stop)``; a StbError there is a start-up failure), what must stop before the master
    does, and whether the port is shared (SO_REUSEPORT)."""

    make_runtime: Callable[[Settings], Runtime] = Runtime
    listening: Callable[[Runtime, str, int, Callable[[], None]], Awaitable[None]] | None = None
    stopping: Callable[[], Awaitable[None]] | None = None
    reuse_port: bool = False


def usable_internals() -> bool:
    """Whether this mitmproxy has the private names the lean master and the fast lanes use
    (internals/). If not, serve runs on mitmproxy's own master and protocol layers, as
    with --no-fast-lane, after one warning; without the names it listens with, it cannot run."""
    missing = internals.changed(internals.LISTENING)
    if missing:
        raise ConfigError(internals.changed_message(missing, "stbproxy cannot listen with it; install the "
                                                    f"mitmproxy version pyproject.toml pins ({internals.TESTED})"))
    missing = internals.changed(internals.LEAN_MASTER + internals.FAST_LANE)
    if missing:
        log.warning("%s", internals.changed_message(missing, "running as with --no-fast-lane"))
        return False
    return True


def _mend_http1(max_request_body: int) -> None:
    """mitmproxy's HTTP/1 server layer answers every request, and in stbproxy's form
    (internals.mend_http1_server); without the names that takes, it stays as it is."""
    missing = internals.changed(internals.HTTP1_SERVER)
    if missing:
        log.warning("%s", internals.changed_message(missing, "a request with a trailer, broken chunks or empty "
                                                             "lines before it may go unanswered"))
        return
    internals.mend_http1_server(own_error_answers(max_request_body))


def _guard_http2() -> None:
    """mitmproxy's HTTP/2 server layer keeps each connection to its share (h2_guard.py); without
    the names that takes, it stays as it is."""
    missing = internals.changed(internals.HTTP2_SERVER)
    if missing:
        log.warning("%s", internals.changed_message(missing, "HTTP/2 clients are not kept to their share of the "
                                                             "proxy (rapid reset)"))
        return
    internals.guard_http2()


class _CoalescingWriter:
    """A client connection's writer that sends what one turn of the event loop wrote in one
    system call: mitmproxy writes a response's head and body separately, and each write to
    an idle socket is a send() of its own (on loopback, the costliest call of a hit)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._pending: list[bytes] = []
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(data)

    def _flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending) if len(self._pending) > 1 else self._pending[0]
            self._pending = []
            if not self._writer.is_closing():
                self._writer.write(data)

    async def drain(self) -> None:
        self._flush()
        await self._writer.drain()

    def write_eof(self) -> None:
        self._flush()
        self._writer.write_eof()

    def close(self) -> None:
        self._flush()
        self._writer.close()

    def __getattr__(self, name: str):
        return getattr(self._writer, name)


@dataclass
class _Listening:
    """How _listen listens, set by serve() before the master starts."""

    reuse_port: bool = False  # several workers share the port
    fast_lane: bool = True
    watch: ConnectionWatch = field(default_factory=lambda: ConnectionWatch(ConnectionLimits(
        DEFAULT_HEAD_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS)))


_LISTENING = _Listening()


async def _listen(self, host: str, port: int) -> list:
    """How the embedded master listens (in place of mitmproxy's regular-mode ``listen``): each
    connection starts in the fast lane (fast_lane.py) unless ``serve(fast_lane=False)``, and
    what mitmproxy serves writes through _CoalescingWriter; SO_REUSEPORT when several workers
    share the port (_LISTENING)."""
    mitmproxy_handles = self.handle_stream
    watch = _LISTENING.watch

    async def handed_over(reader, writer) -> None:
        await mitmproxy_handles(reader, _CoalescingWriter(writer))

    lane = FastLane(ctx.master.addons, ctx.options, self.mode, handed_over) if _LISTENING.fast_lane else None

    async def accepted(reader, writer) -> None:
        watched = watch.admit(writer)
        if watched is None:
            writer.write(internals.make_error_response(503, TOO_MANY_CONNECTIONS))
            writer.close()
            return
        try:
            if lane is not None:
                await lane.serve(reader, writer, watched)
            else:
                watched.handed_over = NO_FAST_LANE.reason
                await handed_over(WatchedReader(reader, watched), writer)
        finally:
            watch.leave(watched)
    if not host and not _LISTENING.reuse_port:  # every interface: mitmproxy's own dual-stack binding
        self.handle_stream = accepted
        return await internals.MITMPROXY_LISTEN(self, host, port)
    return [await asyncio.start_server(accepted, host or None, port, reuse_port=_LISTENING.reuse_port or None)]


TOO_MANY_CONNECTIONS = ("stbproxy: too many client connections are open (--max-connections); this one was closed "
                        "at once: retry later, or reuse connections")


class _Startup:
    """Reports readiness only when the proxy is ready: the store, catalog and cassette are
    open (before the master runs) and the listening socket is up. mitmproxy's own errors
    during start-up (a port in use) are held back and turned into one message instead."""

    def __init__(self, on_ready: Callable[[str, int, Runtime], None], stb: StbAddon, hooks: ServeHooks,
                 stop: Callable[[], None]) -> None:
        self.on_ready = on_ready
        self.stb = stb
        self.hooks = hooks
        self.stop = stop
        self.errors: list[str] = []
        self.failure: str | None = None
        self._handler = _Collect(self.errors)
        self._mitm_log = logging.getLogger("mitmproxy")

    def watch(self) -> None:
        self._mitm_log.addHandler(self._handler)
        self._mitm_log.propagate = False

    def unwatch(self) -> None:
        self._mitm_log.removeHandler(self._handler)
        self._mitm_log.propagate = True

    async def running(self) -> None:
        self.unwatch()
        server = ctx.master.addons.get("proxyserver")
        addresses = server.listen_addrs()
        runtime = self.stb.runtime
        if self.errors or not addresses or runtime is None:
            self.failure = listen_failure(self.errors) if self.errors else "the proxy did not start listening"
            ctx.master.shutdown()
            return
        await runtime.ready()  # a shared tier has had its first try at connecting
        host, port, *_ = addresses[0]
        if self.hooks.listening is not None:
            try:
                await self.hooks.listening(runtime, host, port, self.stop)
            except StbError as exc:
                self.failure = str(exc)
                self.stop()
                return
        # Everything loaded so far lives as long as the proxy: keep it out of the garbage
        # collector's full passes, which otherwise stall every request for tens of ms.
        gc.freeze()
        self.on_ready(host, port, runtime)


class _Collect(logging.Handler):
    """Keeps mitmproxy's error lines (for _Startup); passes the rest on as usual."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__()
        self.errors = errors

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            self.errors.append(record.getMessage())
            return
        for handler in logging.getLogger().handlers:
            if record.levelno >= handler.level:
                handler.handle(record)


def listen_failure(errors: list[str]) -> str:
    """mitmproxy's start-up errors as one line that names stbproxy's own options."""
    text = errors[0]
    where = re.search(r"listen on (\S+?):(\d+)", text)
    address = f"{where.group(1)}:{where.group(2)}" if where else "the address"
    if "address already in use" in text.lower() or "errno 98" in text.lower():
        return (f"cannot listen on {address}: the port is in use (another stbproxy?); stop that process "
                "or choose another port with --port (--port 0 picks a free one)")
    if "permission denied" in text.lower() or "errno 13" in text.lower():
        return f"cannot listen on {address}: permission denied; ports below 1024 need root, choose another --port"
    if "cannot assign requested address" in text.lower() or "errno 99" in text.lower():
        return f"cannot listen on {address}: no such address on this machine; choose another --host"
    first = text.split(" with ", 1)[-1].splitlines()[0]
    return f"cannot listen on {address}: {first}; check --host and --port"


async def serve(
    stb_options: dict,
    *,
    listen_host: str,
    listen_port: int,
    confdir: Path,
    proxy_auth: str | None = None,
    on_ready: Callable[[str, int, Runtime], None] = lambda host, port, runtime: None,
    hooks: ServeHooks | None = None,
    fast_lane: bool = True,
) -> None:
    """Run a lean proxy until SIGINT/SIGTERM; returns after everything is closed.

    The CA, the options, the store, catalog and cassette are opened and checked before
    anything listens, and ``on_ready`` is called only once the socket is up (and a shared
    tier has had its first try at connecting): a failure at any step raises StbError
    (ConfigError) and nothing ready is ever reported. ``fast_lane=False`` leaves every
    request to mitmproxy's own protocol layers (``serve --no-fast-lane``).
    """
    private_umask()  # the store, the CA and reports: owner-only, whatever the umask
    ensure_ca(confdir)
    lean = usable_internals()
    opts = options.Options()
    if lean:
        internals.skip_message_checks()
    _mend_http1(stb_options.get("stb_max_request_body", DEFAULT_MAX_REQUEST_BODY))
    _guard_http2()
    hooks = hooks or ServeHooks()
    internals.replace_listen(_listen)
    _LISTENING.reuse_port = hooks.reuse_port
    _LISTENING.fast_lane = fast_lane and lean
    master = internals.lean_master(opts) if lean else Master(opts)
    loop = asyncio.get_running_loop()
    stopping: list[asyncio.Task] = []

    def stop() -> None:
        """Stop once: what ``hooks.stopping`` names first (other workers), then the master."""
        if not stopping:
            stopping.append(loop.create_task(_stop(hooks, master)))

    auth_addons = [proxyauth.ProxyAuth()] if proxy_auth else []
    stb = StbAddon(hooks.make_runtime)
    startup = _Startup(on_ready, stb, hooks, stop)
    master.addons.add(
        core.Core(),
        *auth_addons,
        proxyserver.Proxyserver(),
        next_layer.NextLayer(),
        tlsconfig.TlsConfig(),
        stb,
        startup,
    )
    extra = {"proxyauth": proxy_auth} if proxy_auth else {}
    try:
        opts.update(
            listen_host=listen_host,
            listen_port=listen_port,
            confdir=str(confdir),
            # lazy: do not connect upstream before answering, so replay works offline
            connection_strategy="lazy",
            # what a tunnel carries is HTTP, whatever its first bytes look like: a request that
            # breaks HTTP's rules gets its 400, never a blind TCP relay to the server
            rawtcp=False,
            # a larger request body is answered 413 before it is read (the fast lane hands it here)
            body_size_limit=str(stb_options.get("stb_max_request_body", DEFAULT_MAX_REQUEST_BODY)),
            **extra,
            **stb_options,
        )
    except exceptions.OptionsError as exc:
        raise ConfigError(str(exc)) from exc
    # StbError: a locked store, a bad catalog or cassette, ... before listening
    settings = stb.open_runtime().settings
    watch = ConnectionWatch(ConnectionLimits(settings.head_timeout, settings.idle_timeout,
                                             settings.max_connections))
    _LISTENING.watch = stb.connections = watch
    watching = loop.create_task(watch.run())
    stop_watch = StopWatch()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
        stop_watch.arm_on(sig)
    startup.watch()
    try:
        await master.run()
    finally:
        watching.cancel()
        startup.unwatch()
        if stopping:
            await stopping[0]
        if stb.runtime is not None:  # start-up stopped before mitmproxy's done hook
            await stb.done()
        stop_watch.closed = stb.close_error is None
    # Client connections still open are cancelled here, within the stop watch's grace, and
    # asyncio's stream callbacks report each such cancellation as an error: expected now.
    loop.set_exception_handler(_quiet_about_cancelled)
    await _cut_off_the_rest(STOP_GRACE)
    stop_watch.disarm()
    if startup.failure:
        raise ConfigError(startup.failure)
    if stb.close_error is not None:
        raise stb.close_error


async def _stop(hooks: ServeHooks, master: Master) -> None:
    try:
        if hooks.stopping is not None:
            await hooks.stopping()
    finally:
        master.shutdown()


# -- stopping within a bound ----------------------------------------------------------------------


STOP_GRACE = 15.0  # seconds from SIGTERM (or Ctrl-C) to the end of the process, whatever it is doing


class StopWatch:
    """Ends the process STOP_GRACE seconds after the first stop signal if it has not ended by
    then. The event loop may be too busy to stop in time (thousands of upstream calls queued in
    httpx's pool, where each call's arrival and departure costs time in proportion to all the
    others), so the watch is a thread, armed by a signal handler that runs whatever the loop
    is doing. Cut short, the store is as after kill -9: every acknowledged answer is in
    RocksDB's write-ahead log."""

    def __init__(self, grace: float = STOP_GRACE, exit=os._exit) -> None:
        self.grace = grace
        self.closed = False  # the store was flushed and closed: only open connections are left
        self._exit = exit
        self._armed: threading.Thread | None = None
        self._done = threading.Event()

    def arm_on(self, sig: int) -> None:
        """Arm on ``sig``, before the handler already there (asyncio's, which wakes the loop)."""
        before = signal.getsignal(sig)

        def handler(signum, frame) -> None:
            self.arm()
            if callable(before):
                before(signum, frame)

        signal.signal(sig, handler)

    def arm(self) -> None:
        if self._armed is None:
            self._armed = threading.Thread(target=self._watch, name="stbproxy stop watch", daemon=True)
            self._armed.start()

    def disarm(self) -> None:
        self._done.set()

    def _watch(self) -> None:
        if self._done.wait(self.grace):
            return
        if self.closed:
            log.warning("stbproxy: stopped %g s after the signal with connections still open; the store was "
                        "flushed and closed", self.grace)
            self._exit(0)
        else:
            log.error("stbproxy: could not stop within %g s of the signal (the event loop is busy); stopped at "
                      "once: the store keeps every answer it acknowledged (its write-ahead log)", self.grace)
            self._exit(1)


async def _cut_off_the_rest(grace: float) -> None:
    """Cancel what is still running once the proxy has stopped (connections, answers nobody will
    read), while the stop watch runs: asyncio.run would otherwise do it after serve, unwatched."""
    current = asyncio.current_task()
    rest = [task for task in asyncio.all_tasks() if task is not current and not task.done()]
    for task in rest:
        task.cancel()
    if rest:
        await asyncio.wait(rest, timeout=grace)


def _quiet_about_cancelled(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    if not isinstance(context.get("exception"), asyncio.CancelledError):
        loop.default_exception_handler(context)
