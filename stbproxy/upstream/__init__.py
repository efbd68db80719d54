"""Calls to the real API, the only importer of httpx for that job: the client (client.py:
``Upstream`` and its ``UpstreamConfig``, what a call may read, and how its failures are
named) and the content codings an answer is decoded from, bounded (codings.py).

It sits with the store and the simulators (layer 3: errors, models); the engine uses it.
"""

from stbproxy.upstream.client import DEFAULT_MAX_UPSTREAM_BODY, Upstream, UpstreamConfig

__all__ = ["DEFAULT_MAX_UPSTREAM_BODY", "Upstream", "UpstreamConfig"]
