"""Plain settings shared by the CLI and the mitmproxy addon (no option parsing). The one
piece of I/O: ``catalog_path_for`` brings a catalog from its old place into the store."""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from stbproxy.engine import DEFAULT_MAX_BODY, EngineConfig
from stbproxy.errors import ConfigError
from stbproxy.forensics import drift
from stbproxy.forensics.naming import parse_fork
from stbproxy.front.limits import (
    DEFAULT_HEAD_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_HEADERS,
    DEFAULT_MAX_REQUEST_BODY,
)
from stbproxy.front.views import AUTO as AUTO_VIEWS
from stbproxy.front.views import VIEWS
from stbproxy.keys import EXACT, STB_KEYS, KeyRules
from stbproxy.mcp.endpoints import parse_specs
from stbproxy.models import Mode
from stbproxy.openapi.catalog import openapi_secret_names
from stbproxy.private_files import private_dir
from stbproxy.sessions import safe_session_name
from stbproxy.sim.faults import FaultPlan
from stbproxy.stb.validity import AUTO, CHOICES, parse_keep_status
from stbproxy.store.folder import auth_salt
from stbproxy.store.shared_url import SharedUrl, parse_shared_url
from stbproxy.upstream import DEFAULT_MAX_UPSTREAM_BODY, UpstreamConfig

SIMULATORS = ("auto", "llm", "mirrorapi", "schema", "off")
CATALOG_NAME = "catalog.json"

log = logging.getLogger("stbproxy")


@dataclass(frozen=True)
class Settings:
    store: Path
    mode: Mode = Mode.VIRTUAL
    passthrough: tuple[str, ...] = ()
    secret_fields: tuple[str, ...] = ()
    secret_headers: tuple[str, ...] = ()
    volatile_fields: tuple[str, ...] = ()
    not_secret_fields: tuple[str, ...] = ()  # default secret names taken out
    not_secret_headers: tuple[str, ...] = ()
    max_body_bytes: int = DEFAULT_MAX_BODY
    upstream_timeout: float = 30.0
    upstream_ca: str | None = None
    upstream_insecure: bool = False
    upstream_proxy: str | None = None
    validity: str = AUTO  # stb for StableToolBench traffic, strict for other HTTP
    stb_keys: str = EXACT  # StableToolBench calls keyed as its server looks them up, or canonical
    views: str = AUTO_VIEWS  # one view of the store, or one per --proxy-auth user or credential (front/views.py)
    refresh_simulated: bool = False  # virtual mode: ask the real API again for stored simulated answers
    keep_status: tuple[int, ...] = ()  # 4xx statuses whose real answers are kept as real (--keep-status)
    faults: tuple[str, ...] = ()
    fault_seed: int = 0
    catalog: Path | None = None  # None: catalog.json in the store's folder, when it exists
    toolbench_url: str | None = None
    mcp: tuple[str, ...] = ()  # NAME=URL: MCP servers answered at the proxy's own /mcp/NAME
    session: str | None = None  # for requests that name none; None: one per run
    cassette: Path | None = None  # replay this cassette instead of the store
    # the n-th request with a key gets the n-th answer (of the cassette, or of the session's namesake)
    ordered: bool = False
    fork: str | None = None  # SESSION@K: every other session starts as a fork of this recorded one
    update: bool = False  # verify mode: a changed real answer replaces the stored one
    drift_ignore: tuple[str, ...] = ()  # verify mode: rules for what differs on every call
    drift_defaults: bool = True  # verify mode: the default rules (timestamps, request ids) too
    report: Path | None = None  # cassette replay: where to write the playback report (JSON)
    allow_empty: bool = False  # replay: start even when the store holds nothing to replay
    rapidapi_key: str | None = field(default=None, repr=False)  # a secret: never printed
    simulator: str = "auto"
    sim_model: str | None = None
    sim_temperature: float | None = None  # None: the simulator's own (0; 0.1 for mirrorapi)
    sim_max_tokens: int | None = None
    sim_seed: int | None = None
    sim_concurrency: int = 16
    sim_timeout: float = 60.0
    sim_system_prompt: Path | None = None  # a file holding the model's system prompt
    stb_dir: Path | None = None  # a StableToolBench checkout, whose server's system prompts MirrorAPI needs
    stb_prompt: str = "plain"  # which of them: "plain" or "cot"
    sim_prompt: Path | None = None  # a prompt template (sim/prompt_file.py)
    mirrorapi_parse: str = "stb"  # mirrorapi replies read as StableToolBench's server does, or "recover"
    mirrorapi_unknown: str = "fail"  # mirrorapi for an API the catalog does not hold: HTTP 500, or "prompt"
    shared: str | None = field(default=None, repr=False)  # the shared tier's URL (may hold a password)
    max_headers: int = DEFAULT_MAX_HEADERS  # more header fields: 431
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES  # more header bytes: 431
    max_request_body: int = DEFAULT_MAX_REQUEST_BODY  # a larger request body: 413, never read
    max_upstream_body: int = DEFAULT_MAX_UPSTREAM_BODY  # a larger real answer (decoded too): 502, read no further
    head_timeout: float = DEFAULT_HEAD_TIMEOUT  # a request head slower than this: connection closed
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT  # no request for this long: connection closed
    max_connections: int = DEFAULT_MAX_CONNECTIONS  # more open client connections: 503, closed
    allow_hosts: tuple[str, ...] = ()  # destination globs always allowed
    deny_hosts: tuple[str, ...] = ()  # destination globs refused (403)

    def __post_init__(self) -> None:
        if self.validity not in CHOICES:
            raise ConfigError(f"validity policy {self.validity!r} is not one of {', '.join(CHOICES)}",
                              setting="validity")
        if self.views not in VIEWS:
            raise ConfigError(f"views {self.views!r} are not one of {', '.join(VIEWS)}", setting="stb_views")
        if self.stb_keys not in STB_KEYS:
            raise ConfigError(f"StableToolBench keys {self.stb_keys!r} are not one of {', '.join(STB_KEYS)}",
                              setting="stb_keys")
        if self.simulator not in SIMULATORS:
            raise ConfigError(f"simulator {self.simulator!r} is not one of {', '.join(SIMULATORS)}",
                              setting="simulator")
        if self.sim_concurrency < 1:
            raise ConfigError("simulator concurrency must be at least 1", setting="sim_concurrency")
        if self.max_headers < 1:
            raise ConfigError("the header field limit must be at least 1", setting="max_headers")
        if self.max_header_bytes < 1024:
            raise ConfigError("the header size limit must be at least 1024 bytes", setting="max_header_bytes")
        if self.max_request_body < 1024:
            raise ConfigError("the request body limit must be at least 1024 bytes", setting="max_request_body")
        if self.max_upstream_body < 1024:
            raise ConfigError("the upstream answer limit must be at least 1024 bytes", setting="max_upstream_body")
        for name in ("head_timeout", "idle_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"the {name.replace('_', ' ')} must be more than 0 seconds", setting=name)
        if self.max_connections < 1:
            raise ConfigError("the connection limit must be at least 1", setting="max_connections")
        try:
            self.fault_plan()  # a malformed spec is refused at start, naming the bad part
        except ConfigError as exc:
            raise ConfigError(str(exc), setting="faults") from exc
        if self.cassette is not None and self.mode is not Mode.REPLAY:
            raise ConfigError(f"a cassette is only replayed: use mode replay with cassette {self.cassette}",
                              setting="cassette")
        check_url(self.upstream_proxy, "upstream_proxy", ("http", "https", "socks5", "socks5h"))
        check_url(self.toolbench_url, "toolbench_url", ("http", "https"))
        self.mcp_servers()  # a malformed NAME=URL is refused at start
        try:
            parse_keep_status([str(code) for code in self.keep_status])  # each a 4xx that may be kept
        except ConfigError as exc:
            raise ConfigError(str(exc), setting="keep_status") from exc
        if self.refresh_simulated and self.mode is not Mode.VIRTUAL:
            raise ConfigError(f"refreshing simulated answers needs mode virtual (mode {self.mode.value} never "
                              "simulates)", setting="refresh_simulated")
        if self.shared is not None:
            self.shared_url()  # a malformed URL is refused at start, never shown with its password
            if self.cassette is not None:
                raise ConfigError("a cassette is replayed on its own: leave out the shared tier with a cassette",
                                  setting="shared")
        self._check_forensics()
        if self.session is not None and safe_session_name(self.session) != self.session:
            raise ConfigError(f"session name {self.session!r} must use only letters, digits, '.', '_' and '-'",
                              setting="session")

    def _check_forensics(self) -> None:
        """Options of run forensics that would silently do nothing are refused."""
        verify = self.mode is Mode.VERIFY
        if self.update and not verify:
            raise ConfigError("updating the store from the real APIs needs mode verify", setting="update")
        if self.drift_ignore and not verify:
            raise ConfigError("drift rules apply in mode verify only", setting="drift_ignore")
        try:
            self.drift_rules()  # a malformed rule is refused at start, naming it
        except ConfigError as exc:
            raise ConfigError(str(exc), setting="drift_ignore") from exc
        if self.ordered and verify:
            raise ConfigError("mode verify asks the real API for every call: it plays nothing in order",
                              setting="ordered")
        if self.fork is not None:
            parse_fork(self.fork)
            if self.cassette is not None:
                raise ConfigError("a fork plays a session of the store; a cassette holds none", setting="fork")

    def drift_rules(self) -> drift.Rules:
        return drift.Rules.build(self.drift_ignore, defaults=self.drift_defaults)

    def mcp_servers(self) -> dict[str, str]:
        """``--mcp`` as {name: URL}."""
        return parse_specs(self.mcp)

    def shared_url(self) -> SharedUrl | None:
        return None if self.shared is None else parse_shared_url(self.shared)

    def fault_plan(self) -> FaultPlan:
        return FaultPlan.from_specs(self.faults, self.fault_seed)

    def catalog_path(self) -> Path:
        return self.catalog or catalog_path_for(self.store)

    def key_rules(self) -> KeyRules:
        # The names an imported OpenAPI spec carries credentials in (its apiKey schemes) are
        # secret too: never keyed, never stored.
        spec_secrets = openapi_secret_names(self.store)
        fields = (*self.secret_fields, *spec_secrets.get("query", ()), *spec_secrets.get("cookie", ()))
        headers = (*self.secret_headers, *spec_secrets.get("header", ()))
        rules = KeyRules.build(fields, headers, self.volatile_fields, self.not_secret_fields, self.not_secret_headers)
        rules = replace(rules, stb_keys=self.stb_keys)
        salt = auth_salt(self.store) if self.cassette is None else b""
        return replace(rules, auth_salt=salt) if salt else rules

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            mode=self.mode,
            passthrough=tuple(h.lower() for h in self.passthrough),
            rules=self.key_rules(),
            max_body_bytes=self.max_body_bytes,
            validity=self.validity,
            keep_status=frozenset(self.keep_status),
            refresh_simulated=self.refresh_simulated,
            ordered=self.ordered and self.cassette is None,  # a cassette plays in order itself
            fork=parse_fork(self.fork) if self.fork else None,
            update=self.update,
            drift_rules=self.drift_rules(),
        )

    def upstream_config(self) -> UpstreamConfig:
        return UpstreamConfig(
            timeout=self.upstream_timeout,
            ca_file=self.upstream_ca,
            insecure=self.upstream_insecure,
            proxy=self.upstream_proxy,
            max_body=self.max_upstream_body,
        )


def parse_mode(value: str) -> Mode:
    try:
        return Mode(value.strip().lower())
    except ValueError:
        choices = ", ".join(m.value for m in Mode)
        raise ConfigError(f"unknown mode {value!r}: choose one of {choices}") from None


def parse_timeout(value: str | float) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"timeout {value!r} is not a number of seconds") from None
    if not 0 < seconds <= 3600:
        raise ConfigError(f"timeout {value!r} must be between 0 and 3600 seconds")
    return seconds


def check_url(url: str | None, setting: str, schemes: tuple[str, ...]) -> None:
    """A URL setting must name a scheme we can use and a host, or it fails on every request."""
    if url is None:
        return
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        host = None
        parts = None
    if parts is None or parts.scheme.lower() not in schemes or not host:
        raise ConfigError(f"{url!r} is not a URL such as {schemes[0]}://host:port (schemes: {', '.join(schemes)})",
                          setting=setting)


def catalog_path_for(store: Path) -> Path:
    """The catalog `stbproxy import tools` writes and the proxy loads: in the store's own
    folder, so that stores side by side never share one. RocksDB leaves alone the files
    whose names are not its own (rocksdict keeps its config file there too). A catalog
    still in its old place, beside the store, is brought in on first use."""
    path = Path(store) / CATALOG_NAME
    old = Path(store).parent / CATALOG_NAME
    if old.is_file() and not path.exists():
        return adopt_old_catalog(old, path)
    return path


def adopt_old_catalog(old: Path, new: Path) -> Path:
    """Move the catalog from beside the store into it; copy it while other stores beside
    it have none of their own (it is theirs too: the last of them takes it). The path to
    use: the old one, with a warning, when it cannot be moved."""
    others = stores_without_catalog(old.parent, besides=new.parent)
    try:
        private_dir(new.parent)
        if others:
            staged = new.with_name(new.name + ".tmp")
            shutil.copyfile(old, staged)
            os.replace(staged, new)  # a reader never sees half a file
        else:
            shutil.move(old, new)
    except OSError as exc:
        log.warning("catalog %s stays where it is, beside the store: cannot bring it to %s (%s)", old, new,
                    exc.strerror or exc)
        return old
    if others:
        log.warning("catalog copied from %s to %s (each store keeps its own now; the old one stays for %d "
                    "other store(s) beside it)", old, new, len(others))
    else:
        log.warning("catalog moved from %s to %s (each store keeps its own now)", old, new)
    return new


def stores_without_catalog(folder: Path, *, besides: Path) -> list[Path]:
    """The stores in ``folder`` other than ``besides`` that have no catalog of their own."""
    try:
        children = [child for child in folder.iterdir() if child.name != besides.name and child.is_dir()]
    except OSError:
        return []
    return [child for child in children if (child / "CURRENT").exists() and not (child / CATALOG_NAME).exists()]


def parse_temperature(value: str | float) -> float:
    try:
        temperature = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"temperature {value!r} is not a number") from None
    if not 0 <= temperature <= 2:
        raise ConfigError(f"temperature {value!r} must be between 0 and 2")
    return temperature
