"""Builds the running parts (store, catalog, upstream client, simulator, engine, /virtual)
from Settings, and closes them."""

from __future__ import annotations

import logging

from stbproxy import simulator
from stbproxy.cassette_store import CassetteStore
from stbproxy.catalog import Catalog
from stbproxy.engine import Engine
from stbproxy.errors import ConfigError
from stbproxy.models import Mode
from stbproxy.sessions import default_session_name
from stbproxy.settings import Settings
from stbproxy.shared_store import SharedTier
from stbproxy.store import Store
from stbproxy.tiered_store import TieredStore
from stbproxy.upstream import Upstream
from stbproxy.virtual_api import VirtualApi
from stbproxy.write_failures import WriteFailures, status_path

log = logging.getLogger("stbproxy")


def load_catalog(settings: Settings) -> Catalog | None:
    path = settings.catalog_path()
    if not path.exists():
        if settings.catalog is not None:
            raise ConfigError(f"no catalog file at {path} (create one with 'stbproxy import tools')",
                              setting="catalog")
        return None
    catalog = Catalog.load(path)
    log.info("catalog: %d APIs from %s", len(catalog), path)
    return catalog


def build_simulator(settings: Settings, catalog: Catalog | None, store: Store):
    optional = {"max_tokens": settings.sim_max_tokens} if settings.sim_max_tokens else {}
    config = simulator.SimulatorConfig(
        kind=None if settings.simulator == "auto" else settings.simulator,
        model=settings.sim_model,
        temperature=settings.sim_temperature,
        seed=settings.sim_seed,
        concurrency=settings.sim_concurrency,
        timeout=settings.sim_timeout,
        **optional,
    )
    kind = config.choose_kind()
    # Named in the ready line: an OPENAI_API_KEY left in the environment switches "auto" to
    # the LLM, which a user should see before paying for it.
    description = f"llm {config.model_name}" if kind == "llm" else kind
    return simulator.build_simulator(config, catalog, store, rules=settings.key_rules()), description


class Runtime:
    """Owns what must be closed when the proxy stops: the store and the upstream client."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.catalog = load_catalog(settings)  # before the store: a bad file leaves nothing open
        if settings.cassette is not None:  # the RocksDB store stays untouched
            self.store = CassetteStore(settings.cassette, catalog=self.catalog, rules=settings.key_rules(),
                                       ordered=settings.ordered)
        else:
            self.store = Store(settings.store)
            shared = settings.shared_url()
            if shared is not None:  # read local, then shared; write both (tiered_store.py)
                self.store = TieredStore(self.store, SharedTier(shared), wait_limit=settings.upstream_timeout)
        try:
            self.upstream = Upstream(settings.upstream_config())
            self.simulator, self.simulator_description = build_simulator(settings, self.catalog, self.store)
        except Exception:
            self.store.close()
            raise
        # Failed writes are counted beside a store the proxy writes to (a cassette takes none).
        self.write_failures = WriteFailures(None if settings.cassette else status_path(settings.store))
        self.engine = Engine(self.store, self.upstream, settings.engine_config(), simulator=self.simulator,
                             catalog=self.catalog, faults=settings.fault_plan(), write_failures=self.write_failures)
        self.session = settings.session or default_session_name()
        self.virtual = VirtualApi(self.engine, self.catalog, toolbench_url=settings.toolbench_url,
                                  rapidapi_key=settings.rapidapi_key)

    @property
    def description(self) -> str:
        """For the ready line: who answers misses, the simulator and the real upstream."""
        real = "none (replay)" if self.settings.mode is Mode.REPLAY else self.virtual.real_calls()
        return f"simulator {self.simulator_description}, real /virtual calls: {real}"

    async def ready(self) -> None:
        """Wait (bounded) until a shared tier has tried to connect, so the first requests use it."""
        if isinstance(self.store, TieredStore):
            await self.store.shared.connected()

    async def aclose(self) -> None:
        try:
            await self.upstream.aclose()
            closer = getattr(self.simulator, "aclose", None)
            if closer is not None:
                await closer()
        finally:
            self.write_failures.close()
            if isinstance(self.store, CassetteStore):
                self._report_playback(self.store)
            elif isinstance(self.store, TieredStore):
                await self.store.aclose()  # pushes what is queued for the shared tier first
            else:
                self.store.close()  # StoreError when the flush fails: the caller reports it

    def _report_playback(self, cassette: CassetteStore) -> None:
        cassette.close(self.engine.misses)
        report = cassette.report
        log.warning("%s", report.summary())
        for item in report.unplayed[:20]:
            log.warning("  never played: #%s %s %s", item["index"], item["method"], item["url"])
        for miss in report.unmatched[:20]:
            log.warning("  not in the cassette: %s %s", miss["request"]["method"], miss["request"]["url"])
        if self.settings.report is not None:
            cassette.write_report(self.settings.report)
