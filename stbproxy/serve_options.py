"""Every setting of ``stbproxy serve``, declared once (SETTINGS): its Settings field, its
command-line option (type, default, help; the environment variable follows from the name:
STBPROXY_SERVE_<OPTION>), its mitmproxy option under mitmdump (stb_<field>: type, default,
help) and how a value becomes the other's. The command line's options (cli/serving.py),
the addon's mitmproxy options and the reading of them into Settings (mitm/addon.py) are
all made from this table, so a new setting is one entry here and its use.

Pure data and small functions: neither click nor mitmproxy is imported here (each is owned
by its front end, which turns a ``Cli`` into a click option and ``addon`` into
``loader.add_option``). Settings' own checks (settings.py) run on the values read.
"""

from __future__ import annotations

from collections.abc import Sequence  # mitmproxy's --set parses list options typed with this one only
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from stbproxy.engine import DEFAULT_MAX_BODY
from stbproxy.errors import ConfigError
from stbproxy.front.limits import (
    DEFAULT_HEAD_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_HEADERS,
    DEFAULT_MAX_REQUEST_BODY,
    default_max_connections,
)
from stbproxy.front.views import VIEWS
from stbproxy.keys import STB_KEYS
from stbproxy.models import Mode
from stbproxy.settings import SIMULATORS, parse_mode, parse_temperature, parse_timeout
from stbproxy.stb.validity import CHOICES as VALIDITIES
from stbproxy.stb.validity import parse_keep_status
from stbproxy.store.folder import default_store_path
from stbproxy.store.shared_url import shared_url_from_env
from stbproxy.upstream import DEFAULT_MAX_UPSTREAM_BODY

MODES = tuple(mode.value for mode in Mode)
STB_PROMPTS = ("plain", "cot")
MIRRORAPI_PARSE = ("stb", "recover")
MIRRORAPI_UNKNOWN = ("fail", "prompt")


@dataclass(frozen=True)
class Cli:
    """A setting's command-line option, as data: ``value_type`` is text, choice, int, float
    (``low``/``high``, ``low_open``), bytes (10MiB), file or folder (``exists``; a Path when
    ``path_type``) or flag (``negative``: its off form)."""

    value_type: str = "text"
    default: Any = None
    multiple: bool = False
    metavar: str | None = None
    show_default: bool | str | None = None
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    exists: bool = False
    path_type: bool = False
    negative: str | None = None


@dataclass(frozen=True)
class Setting:
    field: str  # the Settings field
    cli: Cli | None  # None: the command declares it with the other commands (--store, --shared)
    help: str = ""
    flag: str = ""  # "": --<field with dashes>
    option: str = ""  # the mitmproxy option; "": stb_<field>
    addon: tuple[Any, Any, str] = (Optional[str], None, "")  # its type, default and help under mitmdump
    to_addon: Callable[[Any], Any] | None = None  # the command line's value as the option's (default: as it is)
    read: Callable[[Any], Any] | None = None  # the option's value as Settings' (may raise ConfigError)

    @property
    def option_name(self) -> str:
        return self.option or f"stb_{self.field}"

    @property
    def flag_name(self) -> str:
        return self.flag or "--" + self.field.replace("_", "-")


# -- conversions -------------------------------------------------------------------------------


def _store_path(value: str) -> Path:
    return Path(value) if value else default_store_path()


def _shared_or_env(value: str | None) -> str | None:
    return value or shared_url_from_env()


def _not_negative(value: int) -> int:
    if value < 0:
        raise ConfigError("must be 0 or more bytes")
    return value


def _existing_file_text(value: str | None) -> str | None:
    if value and not Path(value).is_file():
        raise ConfigError(f"no such file: {value}")
    return value


def _existing_file(value: str | None) -> Path | None:
    text = _existing_file_text(value)
    return Path(text) if text else None


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _temperature(value: str) -> float | None:
    return parse_temperature(value) if value else None


def _text_or_empty(value: float | None) -> str:
    return "" if value is None else str(value)


def _or_plain(value: str | None) -> str:
    return value or "plain"


def _or_default_max_connections(value: int | None) -> int:
    return value or default_max_connections()


# -- the table, in the order of serve --help -----------------------------------------------------

SETTINGS: tuple[Setting, ...] = (
    Setting('mode', Cli("choice", choices=MODES, show_default="virtual; replay with --cassette"),
            help='virtual: store, else the real API, else the simulator; record: always the real API, storing '
                 'what comes back; replay: the store only, never the network; verify: always the real API, '
                 "compared with the stored answer, which is what the client gets ('stbproxy drift').",
            addon=(str, "virtual",
                   'How to answer: virtual (store, else upstream, else simulator), record (always upstream, '
                   'store it), replay (store only) or verify (always upstream, compared with the stored answer, '
                   'which is served).'),
            read=parse_mode),
    Setting('store', None,
            addon=(str, "",
                   'Store directory (default: $STBPROXY_STORE or ./.stbproxy/store).'),
            read=_store_path),
    Setting('passthrough', Cli(multiple=True, metavar="HOST"),
            help='Host glob always forwarded, never answered from the store (e.g. an LLM provider); its '
                 'exchanges are still logged, redacted. Repeatable.',
            addon=(Sequence[str], [],
                   'Host globs always forwarded and never answered from the store (still logged, redacted).')),
    Setting('secret_fields', Cli(multiple=True, metavar="NAME"),
            flag='--secret-field',
            help='Extra query/body field that is secret (redacted, never keyed). Repeatable.',
            addon=(Sequence[str], [],
                   'Extra query/body field names that are secret: redacted and never part of a key.')),
    Setting('secret_headers', Cli(multiple=True, metavar="NAME"),
            flag='--secret-header',
            help='Extra secret header. Repeatable.',
            addon=(Sequence[str], [],
                   'Extra header names that are secret: redacted and never stored.')),
    Setting('not_secret_fields', Cli(multiple=True, metavar="NAME"),
            flag='--not-secret-field',
            help='A default secret field that is an ordinary argument here (kept and keyed), e.g. token. '
                 'Repeatable.',
            addon=(Sequence[str], [],
                   'Default secret query/body field names that are not secret here (kept and keyed).')),
    Setting('not_secret_headers', Cli(multiple=True, metavar="NAME"),
            flag='--not-secret-header',
            help='A default secret header that is kept here. Repeatable.',
            addon=(Sequence[str], [],
                   'Default secret header names that are not secret here (kept).')),
    Setting('volatile_fields', Cli(multiple=True, metavar="NAME"),
            flag='--volatile-field',
            help='Query/body field left out of keys (timestamps, nonces). Repeatable.',
            addon=(Sequence[str], [],
                   'Query/body field names left out of keys (timestamps, nonces).')),
    Setting('max_body_bytes', Cli("bytes", default="10MiB", show_default=True),
            flag='--max-body',
            help='Larger bodies are forwarded but not stored.',
            option='stb_max_body',
            addon=(int, DEFAULT_MAX_BODY,
                   'Bodies larger than this many bytes are forwarded but not stored.'),
            read=_not_negative),
    Setting('upstream_timeout', Cli("float", default=30.0, low=0.1, high=3600, show_default=True),
            help='Seconds to wait for the real API before it counts as unavailable.',
            addon=(str, "30",
                   'Seconds to wait for the real API.'),
            to_addon=str, read=parse_timeout),
    Setting('upstream_ca', Cli("file", exists=True),
            help='Extra CA bundle trusted for upstream TLS.',
            addon=(Optional[str], None,
                   "A CA bundle to trust for upstream TLS, besides the system's."),
            read=_existing_file_text),
    Setting('upstream_insecure', Cli("flag"),
            help='Do not verify upstream TLS certificates.',
            addon=(bool, False,
                   'Do not verify upstream TLS certificates.')),
    Setting('upstream_proxy', Cli(metavar="URL"),
            help='Outbound proxy for real API calls.',
            addon=(Optional[str], None,
                   'An outbound proxy URL for real API calls.')),
    Setting('allow_hosts', Cli(multiple=True, metavar="GLOB"),
            flag='--allow-host',
            help='Destination host always allowed, even a private address on an exposed proxy; wins over '
                 '--deny-host. Repeatable.',
            addon=(Sequence[str], [],
                   'Destination host globs always allowed (they win over stb_deny_hosts and the private-address '
                   'rule).')),
    Setting('deny_hosts', Cli(multiple=True, metavar="GLOB"),
            flag='--deny-host',
            help='Destination host refused with 403. With --host beyond loopback, private and loopback '
                 'destinations are refused unless allowed. Repeatable.',
            addon=(Sequence[str], [],
                   'Destination host globs refused with 403.')),
    Setting('max_headers', Cli("int", default=100, low=1, show_default=True),
            help='Requests with more header fields are answered 431.',
            addon=(int, DEFAULT_MAX_HEADERS,
                   'Requests with more header fields are answered 431.')),
    Setting('max_header_bytes', Cli("bytes", default="64KiB", show_default=True),
            help='Requests whose header fields take more bytes are answered 431.',
            addon=(int, DEFAULT_MAX_HEADER_BYTES,
                   'Requests whose header fields take more bytes are answered 431.')),
    Setting('max_request_body', Cli("bytes", default="32MiB", show_default=True),
            help='Requests with a larger body are answered 413 before the body is read.',
            addon=(int, DEFAULT_MAX_REQUEST_BODY,
                   'Requests with a larger body (bytes) are answered 413 before it is read (stbproxy serve; '
                   'under mitmdump set body_size_limit).')),
    Setting('max_upstream_body', Cli("bytes", default="64MiB", show_default=True),
            help="A real API's answer larger than this, on the wire or decoded (a compression bomb), is read "
                 'no further and answered 502, never stored.',
            addon=(int, DEFAULT_MAX_UPSTREAM_BODY,
                   'A real answer larger than this (bytes, on the wire or decoded) is read no further and '
                   'answered 502, never stored.')),
    Setting('head_timeout', Cli("float", default=30, low=0, high=3600, low_open=True,
                                    show_default=True, metavar="SECONDS"),
            help="A request's line and header fields must arrive within this time of its first byte; a slower "
                 'connection is closed.',
            addon=(str, str(DEFAULT_HEAD_TIMEOUT),
                   "Seconds from a request's first byte to the end of its head; slower connections are closed "
                   '(stbproxy serve).'),
            to_addon=str, read=parse_timeout),
    Setting('idle_timeout', Cli("float", default=120, low=0, high=3600, low_open=True,
                                    show_default=True, metavar="SECONDS"),
            help='A connection waiting this long for its next request is closed.',
            addon=(str, str(DEFAULT_IDLE_TIMEOUT),
                   'Seconds a connection may wait for its next request before it is closed (stbproxy serve).'),
            to_addon=str, read=parse_timeout),
    Setting('max_connections', Cli("int", low=1, metavar="N"),
            help='Most open client connections per process; more are answered 503 and closed [default: 4096, '
                 'less where the open-file limit is lower].',
            addon=(int, DEFAULT_MAX_CONNECTIONS,
                   'Most open client connections per process; more are answered 503 and closed (stbproxy serve).'),
            to_addon=_or_default_max_connections),
    Setting('session', Cli(metavar="NAME"),
            help="Session of requests that name none (by the proxy URL's user, http://NAME@host:port, or an "
                 'X-Stb-Session header) [default: one per run, serve-<time>].',
            addon=(Optional[str], None,
                   'Session for requests that name none (default: one per run, serve-<time>).')),
    Setting('cassette', Cli("file", exists=True, path_type=True),
            help='Replay this vcrpy cassette (YAML or JSON) instead of the store, which stays untouched.',
            addon=(Optional[str], None,
                   'Replay this vcrpy cassette instead of the store (mode replay).'),
            read=_existing_file),
    Setting('ordered', Cli("flag"),
            help='The n-th request with the same key gets the n-th recorded answer: of the --cassette, or of '
                 "the store's session of the same name (past its end: the last one), so polling replays as "
                 'recorded.',
            addon=(bool, False,
                   'The n-th identical request gets the n-th recorded answer: of the cassette, or (store) of the'
                   ' session of the same name.')),
    Setting('fork', Cli(metavar="SESSION@K"),
            help='Every other session starts as a fork of the recorded SESSION: its first K calls are answered'
                 ' from it in order, then the mode decides (per session: X-Stb-Fork header, or '
                 "';fork=SESSION@K' after the session's name).",
            addon=(Optional[str], None,
                   'SESSION@K: every other session starts as a fork of that recorded session, its first K calls '
                   'answered from it in order.')),
    Setting('update', Cli("flag"),
            help='With --mode verify: a real answer that changed replaces the stored one (the old one is kept '
                 'as history).',
            addon=(bool, False,
                   'Mode verify: a real answer that changed replaces the stored one (the old kept as history).')),
    Setting('drift_ignore', Cli(multiple=True, metavar="RULE"),
            help='With --mode verify: what differs on every call and is no drift: path:GLOB (a JSON pointer '
                 "glob), value:REGEX, optionally after '@HOST_OR_API_GLOB '. Repeatable.",
            addon=(Sequence[str], [],
                   "Mode verify: what differs on every call, e.g. path:*/etag, value:REGEX, '@api.example.com "
                   "path:/meta/*'.")),
    Setting('drift_defaults', Cli("flag", default=True, negative="--no-drift-defaults", show_default=True),
            help='With --mode verify: also ignore the usual timestamp and request-id members.',
            addon=(bool, True,
                   'Mode verify: ignore the usual timestamp and request-id members too.')),
    Setting('report', Cli("file", path_type=True),
            help='With --cassette: write a JSON report (played, never played, not in the cassette) at '
                 'shutdown.',
            addon=(Optional[str], None,
                   'Cassette replay: write a JSON playback report here at shutdown.'),
            read=_path),
    Setting('allow_empty', Cli("flag"),
            help='With --mode replay: start even when the store does not exist or holds no entries (every '
                 'request is then a miss) [default: refuse, since nothing could be replayed].',
            addon=(bool, False,
                   'Replay: start even when the store does not exist or holds no entries (every request a miss).')),
    Setting('validity', Cli("choice", choices=VALIDITIES, default="auto", show_default=True),
            help="Which real answers are valid. auto: StableToolBench's rules (check_result, substring tests) "
                 'for /virtual calls and calls the catalog routes to an API, the status-based strict rule for '
                 'any other HTTP; stb or strict: that policy for all traffic; schema: auto, and a real answer '
                 'to an OpenAPI operation that breaks its documented schema is invalid too (by default it is '
                 "kept and reported as drift by 'stbproxy check').",
            addon=(str, "auto",
                   'Which real answers are valid: auto (stb for /virtual and catalog-routed calls, strict for '
                   "other HTTP), stb (StableToolBench's check_result) or strict (HTTP status first), or schema "
                   "(auto, and an OpenAPI operation's answer that breaks its documented schema is invalid).")),
    Setting('keep_status', Cli(multiple=True, metavar="CODES"),
            help='4xx statuses (comma-separated, repeatable: --keep-status 404,410) whose real answers are '
                 'kept as real, stored with origin upstream and served, where virtual mode would replace them '
                 'with simulated ones [default: none; a 4xx an imported OpenAPI document lists is kept '
                 'anyway]. 408 and 429 never are.',
            addon=(Sequence[str], [],
                   '4xx statuses (e.g. 404,410) whose real answers are kept as real, stored with origin upstream'
                   ' and served, where virtual mode would replace them.'),
            read=parse_keep_status),
    Setting('stb_keys', Cli("choice", choices=STB_KEYS, default="exact", show_default=True),
            help='How StableToolBench calls (/virtual, and calls the catalog routes) are keyed. exact: as '
                 'StableToolBench\'s server looks them up, by the arguments\' text, so {"id": 294} misses an '
                 "entry cached under {'id': '294'} and arguments in another order miss too; canonical: "
                 'arguments compared as text in any order, so both hit (more hits, other observations than '
                 "StableToolBench's; docs/stabletoolbench.md). A store is made under one of them: 'import "
                 "stb-cache' takes the same option.",
            option='stb_keys',
            addon=(str, "exact",
                   "How StableToolBench calls are keyed: exact (as StableToolBench's server looks them up: the "
                   "arguments' text, order and types) or canonical (arguments compared as text, in any order).")),
    Setting('views', Cli("choice", choices=VIEWS, default="auto", show_default=True),
            help="Who sees which stored answers. shared: every client sees all (one user's benchmark: a "
                 'rotated API key still hits); user: each --proxy-auth user sees what it recorded, and its '
                 'sessions are its own; credential: also a view per credential a request carries '
                 '(Authorization and the other secret headers); auto: user behind --proxy-auth, else shared. '
                 'An imported cache is seen from every view (docs/security.md).',
            addon=(str, "auto",
                   'Views of the store: shared (one for all), user (one per proxyauth user), credential (one per'
                   ' user and per credential a request carries), auto (user behind proxyauth, else shared).')),
    Setting('refresh_simulated', Cli("flag"),
            help='Virtual mode: when a stored answer was simulated (the API was down or invalid), ask the real'
                 ' API again (at most once a minute per answer); a valid real answer replaces the simulated '
                 'one, anything else leaves it.',
            addon=(bool, False,
                   'Virtual mode: ask the real API again for stored simulated answers; a valid real answer '
                   'replaces them.')),
    Setting('faults', Cli(multiple=True, metavar="SPEC"),
            help='Inject failures, e.g. down=0.2, status=503,p=0.1,tool=weather*, timeout,api=*search*, '
                 'latency=lognormal:200ms:0.5. Repeatable.',
            addon=(Sequence[str], [],
                   'Fault injection rules, e.g. down=0.2 or status=503,p=0.1,tool=weather*.')),
    Setting('fault_seed', Cli("int", default=0, show_default=True),
            help='The same seed fails the same tools and requests on every run and machine.',
            addon=(int, 0,
                   'Seed for fault decisions: the same seed fails the same tools and requests.')),
    Setting('catalog', Cli("file", exists=True, path_type=True),
            help="Catalog file [default: catalog.json in the store's folder, written by 'stbproxy import "
                 "tools'].",
            addon=(Optional[str], None,
                   "Catalog file (default: catalog.json in the store's folder, if present)."),
            read=_existing_file),
    Setting('toolbench_url', Cli(metavar="URL"),
            help="A ToolBench-style server for the real calls behind /virtual (else the API's URL from the "
                 'catalog; a RapidAPI URL only with $STBPROXY_RAPIDAPI_KEY).',
            addon=(Optional[str], None,
                   'A ToolBench-style server for real /virtual calls.')),
    Setting('mcp', Cli(multiple=True, metavar="NAME=URL"),
            help="Answer the MCP server at URL at this proxy's own http://HOST:PORT/mcp/NAME, for MCP clients "
                 'that ignore proxy variables (the same store entries as through the proxy). Repeatable.',
            addon=(Sequence[str], [],
                   "NAME=URL: an MCP server answered at this proxy's own /mcp/NAME (for clients that ignore "
                   'proxy variables).')),
    Setting('simulator', Cli("choice", choices=SIMULATORS, default="auto", show_default=True),
            help='Who answers when the real API cannot: an LLM (any OpenAI-compatible endpoint: '
                 "OPENAI_BASE_URL, OPENAI_API_KEY), StableToolBench's trained MirrorAPI model behind such an "
                 'endpoint (with --stb-dir or --sim-system-prompt), the offline schema simulator, or nobody (a'
                 ' clear error). auto: llm when an LLM is configured, else schema.',
            addon=(str, "auto",
                   'auto, llm, mirrorapi, schema or off (auto: llm when an LLM is configured, else schema).')),
    Setting('sim_model', Cli(),
            help="The simulator's model.",
            addon=(Optional[str], None,
                   "The simulator's model name.")),
    Setting('sim_temperature', Cli("float", low=0, high=2),
            help="The simulator LLM's sampling temperature (0: the same call gets the same answer, as far as "
                 "the backend allows) [default: 0; 0.1 with mirrorapi, as StableToolBench's MirrorAPI "
                 'configuration].',
            addon=(str, "",
                   "The simulator's sampling temperature (empty: 0, or 0.1 for mirrorapi)."),
            to_addon=_text_or_empty, read=_temperature),
    Setting('sim_max_tokens', Cli("int", low=1),
            help='Most tokens the simulator LLM may write per answer [default: 1024 with llm, as '
                 "StableToolBench's server asks; mirrorapi always asks 2048, as its MirrorAPI server does].",
            addon=(Optional[int], None,
                   'Most tokens per simulated answer.')),
    Setting('sim_seed', Cli("int"),
            help='Seed passed to the LLM, where the backend honours it.',
            addon=(Optional[int], None,
                   "Seed passed to the simulator's LLM.")),
    Setting('sim_concurrency', Cli("int", default=16, low=1, show_default=True),
            help='Most LLM calls in flight at once.',
            addon=(int, 16,
                   'Most simulator LLM calls in flight at once.')),
    Setting('stb_dir', Cli("folder", exists=True, path_type=True),
            help="Your StableToolBench checkout: the mirrorapi simulator's system prompt is read from its "
                 'server/system_prompts.py (never copied into stbproxy).',
            option='stb_dir',
            addon=(Optional[str], None,
                   "A StableToolBench checkout: the mirrorapi simulator's system prompt is read from it."),
            read=_path),
    Setting('stb_prompt', Cli("choice", choices=STB_PROMPTS),
            help='With --stb-dir: the plain prompt (SFT_SYSTEM, the default) or the chain-of-thought one '
                 '(COT_SYSTEM).',
            option='stb_prompt',
            addon=(str, "plain",
                   'With stb_dir: plain (SFT_SYSTEM) or cot (COT_SYSTEM).'),
            to_addon=_or_plain),
    Setting('sim_system_prompt', Cli("file", exists=True, path_type=True),
            help="A file holding the simulator model's system prompt (llm or mirrorapi).",
            addon=(Optional[str], None,
                   "A file holding the simulator model's system prompt."),
            read=_path),
    Setting('sim_prompt', Cli("file", exists=True, path_type=True),
            help='A prompt template for the simulator model (llm or mirrorapi): [system] and [user] sections, '
                 'placeholders {api_doc}, {api_doc_json}, {documentation}, {request}, {request_json}, '
                 '{examples} (docs/simulators.md).',
            addon=(Optional[str], None,
                   'A prompt template for the simulator model (docs/simulators.md).'),
            read=_path),
    Setting('mirrorapi_parse', Cli("choice", choices=MIRRORAPI_PARSE, default="stb", show_default=True),
            help="How the mirrorapi simulator reads its model's replies. stb: as StableToolBench's MirrorAPI "
                 "server does, once (JSON, else its patterns; a reply without an answer is answered 'Failed to"
                 " generate fake response'); recover: malformed replies read further, up to 3 attempts "
                 '(docs/simulators.md).',
            addon=(str, "stb",
                   "mirrorapi replies read as StableToolBench's server reads them, once (stb), or recovered over"
                   ' up to 3 attempts (recover).')),
    Setting('mirrorapi_unknown', Cli("choice", choices=MIRRORAPI_UNKNOWN, default="fail", show_default=True),
            help='The mirrorapi simulator for an API the catalog does not hold. fail: HTTP 500 without asking '
                 "the model, as StableToolBench's MirrorAPI server; prompt: the model is asked, the API "
                 'described by its request.',
            addon=(str, "fail",
                   "mirrorapi for an API the catalog does not hold: HTTP 500 unasked, as StableToolBench's "
                   'server (fail), or ask the model (prompt).')),
    Setting('shared', None,
            addon=(Optional[str], None,
                   'A shared store tier: redis://, rediss:// or redis+cluster:// URL (default: $STBPROXY_SHARED,'
                   ' or its older name $STBPROXY_SHARED_URL; never $REDIS_URL).'),
            read=_shared_or_env),
)

BY_FIELD = {setting.field: setting for setting in SETTINGS}
BY_OPTION = {setting.option_name: setting for setting in SETTINGS}


def addon_options(values: Mapping[str, Any]) -> dict[str, Any]:
    """The command line's values (by field) as the addon's stb_ options."""
    options = {}
    for setting in SETTINGS:
        value = values[setting.field]
        if setting.to_addon is not None:
            value = setting.to_addon(value)
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Path):
            value = str(value)
        options[setting.option_name] = value
    return options


def read_options(option: Callable[[str], Any]) -> dict[str, Any]:
    """Settings' fields from the stb_ options (``option``: an option's value by name); a
    ConfigError names the option at fault (``setting``)."""
    values = {}
    for setting in SETTINGS:
        value = option(setting.option_name)
        try:
            if setting.read is not None:
                value = setting.read(value)
            elif isinstance(value, list):
                value = tuple(value)
        except ConfigError as exc:
            raise ConfigError(str(exc), setting=setting.option_name) from exc
        values[setting.field] = value
    return values


def flag_of(option: str) -> str | None:
    """The command-line flag of an stb_ option, or None."""
    setting = BY_OPTION.get(option)
    return setting.flag_name if setting is not None and setting.cli is not None else None
