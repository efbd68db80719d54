"""A layer that stands in for mitmproxy's HTTP layer on the tunnel lane (``Layer._handle_event``,
``._paused``, ``._paused_event_queue``)."""

from __future__ import annotations

import collections

from mitmproxy.proxy import events, layer


class StandIn(layer.Layer):
    """Where mitmproxy's HTTP layer for an HTTP/1 client would be: keeps the decrypted bytes
    for the lane until the lane hands the connection to that layer (``delegated``)."""

    def __init__(self, http_layer: layer.Layer) -> None:
        # Like mitmproxy's NextLayer, a stand-in is not one of the context's layers; it sets
        # what Layer.__init__ would, as mitmproxy's layers read it.
        self.context = http_layer.context
        self._paused = None
        self._paused_event_queue = collections.deque()
        self.http_layer = http_layer
        self.buffer = bytearray()
        self.delegated = False

    def handle_event(self, event: events.Event) -> layer.CommandGenerator[None]:
        if self.delegated:
            yield from self.http_layer.handle_event(event)
        elif isinstance(event, events.DataReceived):
            self.buffer += event.data

    _handle_event = handle_event
