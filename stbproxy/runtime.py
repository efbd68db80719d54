"""Builds the running parts (store, upstream client, engine) from Settings, and closes them."""

from __future__ import annotations

from stbproxy.engine import Engine
from stbproxy.settings import Settings
from stbproxy.store import Store
from stbproxy.upstream import Upstream


class Runtime:
    """Owns what must be closed when the proxy stops: the store and the upstream client."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store = Store(settings.store)
        try:
            self.upstream = Upstream(settings.upstream_config())
        except Exception:
            self.store.close()
            raise
        self.engine = Engine(self.store, self.upstream, settings.engine_config())

    async def aclose(self) -> None:
        try:
            await self.upstream.aclose()
        finally:
            self.store.close()
