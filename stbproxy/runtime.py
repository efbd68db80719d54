"""Builds the running parts (store, catalog, upstream client, simulator, engine with its
kinds of traffic, /virtual's included) from Settings, and closes them."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable, Iterator

from stbproxy.cassettes.store import CassetteStore, describe_miss
from stbproxy.engine import Engine
from stbproxy.errors import ConfigError, InputError
from stbproxy.keys import stb_keys_of
from stbproxy.kinds import proxy_kinds
from stbproxy.models import Mode, Response
from stbproxy.openapi.catalog import OpenApiCatalog, load_for_store
from stbproxy.sessions import default_session_name
from stbproxy.settings import Settings
from stbproxy.sim import simulators as simulator
from stbproxy.sim.config import MODEL_SIMULATORS
from stbproxy.sim.prompt_file import PromptTemplate, read_text, stb_system_prompt
from stbproxy.stb.catalog import Catalog
from stbproxy.stb.validity import replaced_answers
from stbproxy.stb.virtual_calls import VirtualUpstream
from stbproxy.store.contract import EngineStore
from stbproxy.store.embedded import Store
from stbproxy.store.key_layout import ENTRY_PREFIXES
from stbproxy.store.shared_bulk import SharedBulk, check_at_start
from stbproxy.store.shared_tier import SharedTier
from stbproxy.store.tiered import TieredStore
from stbproxy.store.write_failures import WriteFailures, status_path
from stbproxy.synthesis.simulation import NoSimulator
from stbproxy.upstream import Upstream
from stbproxy.workers.link import LinkClient
from stbproxy.workers.reader_engine import ReaderEngine, ReaderStore

log = logging.getLogger("stbproxy")


def stored_answers(store) -> Callable[[str], Iterator[Response]]:
    """The stored answers under a key prefix (what a kind reads back: an MCP server's tools/list)."""
    def answers(prefix: str) -> Iterator[Response]:
        return (exchange.response for exchange in store.scan(prefix))
    return answers


def load_catalog(settings: Settings, path: Path | None = None) -> Catalog | None:
    """The catalog at ``path`` (default: where the settings say), None when there is none."""
    path = path or settings.catalog_path()
    if not path.exists():
        if settings.catalog is not None:
            raise ConfigError(f"no catalog file at {path} (create one with 'stbproxy import tools')",
                              setting="catalog")
        return None
    try:
        catalog = Catalog.load(path)
    except InputError as exc:
        raise ConfigError(f"{exc}; write it again with 'stbproxy import tools', or name another with --catalog",
                          setting="catalog") from exc
    log.info("catalog: %d APIs from %s", len(catalog), path)
    return catalog


def load_openapi(settings: Settings) -> OpenApiCatalog | None:
    """The OpenAPI specs imported into the store ('stbproxy import openapi'), None when none was."""
    try:
        found = load_for_store(settings.store)
    except InputError as exc:
        raise ConfigError(f"{exc}; import the specs again with 'stbproxy import openapi'", setting="store") from exc
    if found:
        log.info("OpenAPI: %d operations of %d specs", sum(1 for _ in found.operations()), len(found))
    return found


def system_prompt_of(settings: Settings) -> str | None:
    """The simulator model's system prompt from the user's files: --sim-system-prompt, or
    StableToolBench's own from the checkout --stb-dir names."""
    if settings.sim_system_prompt is not None and settings.stb_dir is not None:
        raise ConfigError("give --sim-system-prompt or --stb-dir, not both", setting="sim_system_prompt")
    if settings.sim_system_prompt is not None:
        return read_text(settings.sim_system_prompt, "system prompt")
    if settings.stb_dir is not None:
        return stb_system_prompt(settings.stb_dir, settings.stb_prompt)
    return None


def build_simulator(settings: Settings, catalog: Catalog | None, store: EngineStore):
    optional: dict[str, Any] = {"max_tokens": settings.sim_max_tokens} if settings.sim_max_tokens else {}
    config = simulator.SimulatorConfig(
        name=None if settings.simulator == "auto" else settings.simulator,
        model=settings.sim_model,
        temperature=settings.sim_temperature,
        seed=settings.sim_seed,
        concurrency=settings.sim_concurrency,
        timeout=settings.sim_timeout,
        system_prompt=system_prompt_of(settings),
        template=PromptTemplate.read(settings.sim_prompt) if settings.sim_prompt else None,
        mirrorapi_parse=settings.mirrorapi_parse,
        mirrorapi_unknown=settings.mirrorapi_unknown,
        **optional,
    )
    name = config.chosen()
    # Named in the ready line: an OPENAI_API_KEY left in the environment switches "auto" to
    # the LLM, which a user should see before paying for it.
    description = f"{name} {config.model_name}" if name in MODEL_SIMULATORS else name
    return simulator.build_simulator(config, catalog, store, rules=settings.key_rules()), description


def virtual_upstream(settings: Settings) -> VirtualUpstream:
    """Where misses on the proxy's own /virtual go (stb/virtual_calls.py)."""
    return VirtualUpstream(toolbench_url=settings.toolbench_url, rapidapi_key=settings.rapidapi_key)


def check_fork_source(settings: Settings, store) -> None:
    """A fork of a session the store does not hold would silently fork nothing."""
    if settings.fork is None:
        return
    source = settings.fork.rpartition("@")[0]
    if next(iter(store.session_records(source)), None) is None:
        store.close()
        raise ConfigError(f"fork {settings.fork}: the store holds no session {source!r} to fork ('stbproxy sessions' "
                          "lists them)", setting="fork")


def check_stb_keys(settings: Settings, store: Store) -> None:
    """A store whose StableToolBench entries are keyed otherwise than this proxy keys calls
    would miss every one of them, silently: refused, naming the setting that fits."""
    first = next(iter(store.keys("api/")), None)
    made = stb_keys_of(first) if first is not None else None
    wanted = settings.stb_keys
    if made is not None and made != wanted:
        store.close()
        raise ConfigError(f"the store at {settings.store} holds StableToolBench calls under {made} keys ({first}), "
                          f"and this proxy makes {wanted} keys, so every stored call would miss: serve it with "
                          f"--stb-keys {made}, or import into a new store with --stb-keys {wanted}",
                          setting="stb_keys")


class Runtime:
    """Owns what must be closed when the proxy stops: the store and the upstream client."""

    store: CassetteStore | Store | TieredStore | ReaderStore

    def __init__(self, settings: Settings, *, link: LinkClient | None = None, upstream=None) -> None:
        """``link``: this is a reader worker of ``serve --workers`` (workers/reader_engine.py), which
        reads the store as a RocksDB secondary and leaves writes and misses to the primary.
        ``upstream``: the real API's client, when it is not HTTP (a stdio MCP server's)."""
        self.settings = settings
        if link is not None:
            self._open_reader(settings, link)
            return
        if settings.report is not None:
            check_writable(settings.report, "report")
        if settings.mode is Mode.REPLAY and settings.cassette is None and not settings.allow_empty:
            check_something_to_replay(settings)  # before anything (the catalog's move) creates the store's folder
        self.catalog_file = settings.catalog_path()
        self.catalog = load_catalog(settings, self.catalog_file)  # before the store: a bad file leaves nothing open
        self.openapi = load_openapi(settings)
        if settings.cassette is not None:  # the RocksDB store stays untouched
            try:
                self.store = CassetteStore(settings.cassette, catalog=self.catalog, openapi=self.openapi,
                                           rules=settings.key_rules(),
                                           ordered=settings.ordered)
            except InputError as exc:
                raise ConfigError(f"cannot replay the cassette: {exc}; fix it, record it again, or name "
                                  "another with --cassette", setting="cassette") from exc
        else:
            opened = self.store = open_store(settings)
            check_fork_source(settings, opened)
            check_stb_keys(settings, opened.local if isinstance(opened, TieredStore) else opened)
        try:
            self.upstream = upstream or Upstream(settings.upstream_config())
            self.simulator, self.simulator_description = build_simulator(settings, self.catalog, self.store)
        except Exception:
            self.store.close()
            raise
        # Failed writes are counted beside a store the proxy writes to (a cassette takes none).
        self.write_failures = WriteFailures(None if settings.cassette else status_path(settings.store))
        self.virtual = virtual_upstream(settings)
        self.engine = Engine(self.store, self.upstream, settings.engine_config(), simulator=self.simulator,
                             kinds=proxy_kinds(self.catalog, stored_answers(self.store), self.openapi, self.virtual),
                             faults=settings.fault_plan(),
                             write_failures=self.write_failures)
        self.session = settings.session or default_session_name()

    def _open_reader(self, settings: Settings, link: LinkClient) -> None:
        self.catalog_file = settings.catalog_path()
        self.catalog = load_catalog(settings, self.catalog_file)
        self.openapi = load_openapi(settings)
        # The secondary's folder goes in the primary's private folder, which the primary
        # removes when it stops, even after this worker was killed.
        scratch = link.path.parent if link.path is not None else None
        reader = self.store = ReaderStore(Store(settings.store, secondary=True, scratch=scratch), link)
        try:
            self.upstream = Upstream(settings.upstream_config())  # unused: the primary calls out
        except Exception:
            self.store.close()
            raise
        self.simulator, self.simulator_description = NoSimulator(), "the primary worker's"
        self.write_failures = WriteFailures(None)  # the primary counts every failed write
        self.virtual = virtual_upstream(settings)
        self.engine = ReaderEngine(reader, self.upstream, settings.engine_config(), link=link,
                                   kinds=proxy_kinds(self.catalog, stored_answers(reader.store), self.openapi,
                                                     self.virtual),
                                   faults=settings.fault_plan(),
                                   write_failures=self.write_failures)
        self.session = settings.session or default_session_name()

    def description(self) -> list[str]:
        """What the ready line says about this proxy: only what can act in its mode (the
        simulator answers in virtual mode alone, replay calls no real API), where misses
        go, the shared tier (its password masked), and every fault rule that is on."""
        s = self.settings
        parts = [f"mode {s.mode.value}", f"cassette {s.cassette}" if s.cassette else f"store {s.store}",
                 self.catalog_description()]
        if self.openapi:  # the OpenAPI documents imported into the store, by name
            parts.append(self.openapi.description())
        shared = s.shared_url()
        if shared is not None:
            parts.append(f"shared {shared.redacted}")
        if s.mode is Mode.VIRTUAL:
            parts.append(f"simulator {self.simulator_description}")
            # the answers a new user may not expect to lose: a real 404 becomes a made-up 200
            parts.append(f"replaces {replaced_answers(s.validity, s.keep_status)}")
        if s.mode is not Mode.REPLAY:
            parts.append(f"real /virtual calls: {self.virtual.real_calls(self.catalog)}")
        for name, url in s.mcp_servers().items():
            parts.append(f"MCP /mcp/{name} -> {url}")
        if s.refresh_simulated:
            parts.append("asking real APIs again for simulated answers")
        if s.mode is Mode.VERIFY:
            parts.append("serving stored answers, comparing real ones" + (", updating the store" if s.update else ""))
        if s.fork:
            parts.append(f"sessions fork {s.fork}")
        if s.ordered and s.cassette is None:
            parts.append("ordered playback of each session's namesake")
        if s.faults:
            parts.append(f"FAULTS ON: {'; '.join(s.faults)} (seed {s.fault_seed})")
        return parts

    def catalog_description(self) -> str:
        if self.catalog is None:
            return "no catalog"
        apis = len(self.catalog)
        return f"catalog {self.catalog_file} ({apis} API{'s' * (apis != 1)})"

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
            log.warning("  %s", describe_miss(miss)[0])
        if self.settings.report is not None:
            cassette.write_report(self.settings.report)


def open_store(settings: Settings) -> Store | TieredStore:
    """The local store, with the shared tier behind it when one is set (read local, then
    shared; write both: tiered_store.py)."""
    shared = settings.shared_url()
    if shared is not None:  # a wrong URL fails here, before anything is opened
        check_at_start(shared)
    store = Store(settings.store)
    if shared is None:
        return store
    return TieredStore(store, SharedTier(shared), wait_limit=settings.upstream_timeout)


def check_something_to_replay(settings: Settings) -> None:
    """A replay answers only what is stored: a store that does not exist or holds no entries
    (nor does the shared tier) would answer every request with a miss, so it is refused."""
    store = settings.store
    if (store / "CURRENT").exists():
        with Store(store, readonly=True) as local:
            if holds_entries(local.keys):
                return
        problem = f"the store at {store} holds no entries"
    else:
        problem = f"no store at {store}"
    shared = settings.shared_url()
    if shared is not None:
        check_at_start(shared)
        with SharedBulk(shared) as bulk:
            if holds_entries(lambda prefix: bulk.keys([prefix])):
                return
        problem += f", nor does the shared tier {shared.redacted}"
    raise ConfigError(f"nothing to replay: {problem}; record into it first (--mode record), check --store, or "
                      "pass --allow-empty to answer every request with a miss", setting="allow_empty")


def holds_entries(keys_under: Callable[[str], Iterator[str]]) -> bool:
    """Whether any stored answer is there (logged records and sessions are not answers)."""
    return any(next(iter(keys_under(prefix)), None) is not None for prefix in ENTRY_PREFIXES)


def check_writable(path: Path, setting: str) -> None:
    """A file written at shutdown must be writable from the start, or the run's result is lost."""
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ConfigError(f"cannot write {path}: the folder {folder} does not exist", setting=setting)
    if path.is_dir():
        raise ConfigError(f"cannot write {path}: it is a folder", setting=setting)
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigError(f"cannot write {path}: permission denied", setting=setting)
