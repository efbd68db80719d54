"""mitmproxy's HTTP/2 server layer, guarded with the bounds of h2_guard.py
(``layers.http._http2.Http2Server._handle_event``, ``.handle_h2_event`` and what they read)."""

from __future__ import annotations

from mitmproxy.proxy import commands, events


def guard_http2() -> None:
    """mitmproxy's HTTP/2 server layer with the bounds of h2_guard.py: frames read a few at a
    time (the rest on the next turn of the event loop), a reset stream's answer cancelled,
    streams past MAX_STREAMS refused, and GOAWAY ENHANCE_YOUR_CALM for a client that resets
    streams past its budget or sends frames faster than they can be read."""
    from mitmproxy.proxy.layers.http import _http2

    if getattr(_http2.Http2Server, "_stb_guarded", False):
        return  # once per process (serve may run more than once in one)
    handling = _http2.Http2Server._handle_event
    handling_h2 = _http2.Http2Server.handle_h2_event

    def _handle_event(self, event):
        guard = _h2_guard_of(self)
        if isinstance(event, events.DataReceived):
            guard.unread += event.data
            if guard.wakeup is None:
                yield from _h2_read_turn(self, guard, handling)
        elif isinstance(event, events.Wakeup):
            if event.command is guard.wakeup:  # the next turn of frames waiting
                guard.wakeup = None
                yield from _h2_read_turn(self, guard, handling)
        else:
            if isinstance(event, events.ConnectionClosed):  # nobody is left to answer
                guard.unread.clear()
                _h2_cancel_all(guard)
            yield from handling(self, event)

    def handle_h2_event(self, event):
        import h2.errors
        import h2.events

        from stbproxy.mitm import h2_guard

        if isinstance(event, h2.events.RequestReceived):
            guard = _h2_guard_of(self)
            if self.is_closed(event.stream_id) or event.stream_id in guard.doomed:
                return False  # reset in the same frames, or its reset is waiting: nobody wants the answer
            if _h2_answering(guard) >= h2_guard.MAX_STREAMS:
                self.h2_conn.reset_stream(event.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
                if guard.resets.spend():
                    return False
                yield from _h2_calm_down(self, guard, f"opened more than {h2_guard.MAX_STREAMS} streams at once")
                return True
        elif isinstance(event, h2.events.StreamReset) and event.remote_reset:
            guard = _h2_guard_of(self)
            guard.doomed.discard(event.stream_id)
            stream = guard.http_layer.streams.get(event.stream_id) if guard.http_layer is not None else None
            if stream is not None and getattr(stream, "flow", None) is not None:
                h2_guard.cancel(stream.flow)
                if stream.flow.live and event.stream_id not in self.streams:
                    # mitmproxy forgets a stream whose request ended in the frames that also
                    # reset it, and so never tells it of the reset: it would be answered in full
                    self.streams[event.stream_id] = _http2.StreamState.HEADERS_RECEIVED
            if not guard.resets.spend():
                yield from handling_h2(self, event)  # its stream ends as any reset one does
                yield from _h2_calm_down(self, guard, f"reset more than {h2_guard.RESET_BURST} streams at once or "
                                                      f"{h2_guard.RESETS_PER_SECOND:g} a second")
                return True
        return (yield from handling_h2(self, event))

    _http2.Http2Server._handle_event = _handle_event  # type: ignore[method-assign]  # patched on purpose: replacing it is what this module is for
    _http2.Http2Server.handle_h2_event = handle_h2_event  # type: ignore[method-assign]  # patched on purpose: replacing it is what this module is for
    _http2.Http2Server._stb_guarded = True  # type: ignore[attr-defined]  # stbproxy's mark, not mitmproxy's


def _h2_guard_of(server):
    """The h2_guard.ConnectionGuard of one Http2Server layer, made on first use."""
    guard = getattr(server, "_stb_guard", None)
    if guard is None:
        from mitmproxy.proxy.layers.http import HttpLayer

        from stbproxy.mitm.h2_guard import ConnectionGuard

        guard = server._stb_guard = ConnectionGuard()
        guard.http_layer = next((item for item in reversed(server.context.layers) if isinstance(item, HttpLayer)),
                                None)
    return guard


def _h2_read_turn(server, guard, handling):
    """Hand h2 the next few frames; ask to be woken for the rest on the next turn."""
    from stbproxy.mitm.h2_guard import MAX_UNREAD

    if len(guard.unread) > MAX_UNREAD:
        yield from _h2_calm_down(server, guard,
                                 f"sent frames faster than they can be read ({MAX_UNREAD} bytes waiting)")
        return
    yield from handling(server, events.DataReceived(server.conn, guard.next_frames()))
    if guard.unread and server._handle_event != server.done:  # still open, with frames waiting
        guard.wakeup = commands.RequestWakeup(0)
        yield guard.wakeup


def _h2_answering(guard) -> int:
    """The connection's streams being answered (reset ones included until their answer has
    stopped); streams mitmproxy has finished with but keeps (killed ones) are let go."""
    if guard.http_layer is None:
        return 0
    streams = guard.http_layer.streams
    live = 0
    for stream_id, stream in list(streams.items()):
        flow = getattr(stream, "flow", None)
        if flow is None or flow.live:
            live += 1
        else:
            del streams[stream_id]
    return live


def _h2_cancel_all(guard) -> None:
    from stbproxy.mitm.h2_guard import cancel

    if guard.http_layer is not None:
        for stream in list(guard.http_layer.streams.values()):
            if getattr(stream, "flow", None) is not None:
                cancel(stream.flow)


def _h2_calm_down(server, guard, why: str):
    """GOAWAY with ENHANCE_YOUR_CALM, every answer of the connection cancelled, and the
    connection closed (mitmproxy's own close: its streams end as closed ones do)."""
    import h2.errors

    from stbproxy.mitm.h2_guard import note_calmed

    guard.unread.clear()
    _h2_cancel_all(guard)
    note_calmed(server.conn.peername, why)
    server.h2_conn.close_connection(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, f"stbproxy: the client {why}".encode())
    yield commands.SendData(server.conn, server.h2_conn.data_to_send())
    yield from server.close_connection(f"HTTP/2 client {why}")
