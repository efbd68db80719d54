"""The ``stbproxy`` command (the only importer of click).

Every option can also be set from the environment: ``STBPROXY_<COMMAND>_<OPTION>``
(e.g. ``STBPROXY_SERVE_PORT=9000``), and the store everywhere by ``STBPROXY_STORE``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import shlex
import sys
from pathlib import Path

import click

from stbproxy import __version__
from stbproxy.errors import StbError
from stbproxy.models import Mode

log = logging.getLogger("stbproxy")

SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2,
              "mib": 1024**2, "g": 1024**3, "gb": 1024**3, "gib": 1024**3}


class ByteSize(click.ParamType):
    name = "size"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        text = str(value).strip().lower()
        number = text.rstrip("kmgib")
        unit = text[len(number):]
        try:
            if unit not in SIZE_UNITS:
                raise ValueError
            return int(float(number) * SIZE_UNITS[unit])
        except ValueError:
            self.fail(f"{value!r} is not a size such as 10MiB, 512k or 1048576", param, ctx)


def store_option(func):
    return click.option(
        "--store",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path(".stbproxy") / "store",
        envvar="STBPROXY_STORE",
        show_envvar=True,
        show_default=True,
        help="The store directory (an embedded RocksDB database).",
    )(func)


def shared_option(func):
    return click.option(
        "--shared",
        default=None,
        metavar="URL",
        envvar=["STBPROXY_SHARED_URL", "REDIS_URL"],
        show_envvar=True,
        help="A shared store tier on Redis / Valkey, behind the local store: redis://[user:pass@]host:port/db, "
             "rediss://... (TLS), or redis+cluster://host:port,host:port (Redis Cluster). See docs/scale.md.",
    )(func)


def default_confdir(store: Path) -> Path:
    """The CA lives beside the store (./.stbproxy/certs for the default store)."""
    return store.parent / "certs"


def fail(message: str) -> None:
    click.echo(f"stbproxy: error: {message}", err=True)
    sys.exit(2)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "STBPROXY"})
@click.version_option(__version__, prog_name="stbproxy")
def main() -> None:
    """A transparent, reproducible virtual API server for tool-using LLM agents.

    Quick start: `stbproxy serve`, then in the agent's shell
    `eval "$(stbproxy env)"` and run the agent unmodified.
    """


# -- serve -----------------------------------------------------------------------------------


@main.command()
@click.option("--mode", type=click.Choice([m.value for m in Mode]), default=None, show_default="virtual; replay with --cassette",
              help="virtual: store, else the real API, else the simulator; record: always the real API, "
                   "storing what comes back; replay: the store only, never the network.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. A non-loopback address needs --proxy-auth.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port to listen on (0 picks a free one).")
@store_option
@click.option("--passthrough", multiple=True, metavar="HOST",
              help="Host glob always forwarded, never answered from the store (e.g. an LLM "
                   "provider); its exchanges are still logged, redacted. Repeatable.")
@click.option("--secret-field", multiple=True, metavar="NAME",
              help="Extra query/body field that is secret (redacted, never keyed). Repeatable.")
@click.option("--secret-header", multiple=True, metavar="NAME", help="Extra secret header. Repeatable.")
@click.option("--volatile-field", multiple=True, metavar="NAME",
              help="Query/body field left out of keys (timestamps, nonces). Repeatable.")
@click.option("--max-body", type=ByteSize(), default="10MiB", show_default=True,
              help="Larger bodies are forwarded but not stored.")
@click.option("--upstream-timeout", type=click.FloatRange(0.1, 3600), default=30.0, show_default=True,
              help="Seconds to wait for the real API before it counts as unavailable.")
@click.option("--upstream-ca", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Extra CA bundle trusted for upstream TLS.")
@click.option("--upstream-insecure", is_flag=True, help="Do not verify upstream TLS certificates.")
@click.option("--upstream-proxy", default=None, metavar="URL", help="Outbound proxy for real API calls.")
@click.option("--confdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the interception CA lives [default: 'certs' beside the store].")
@click.option("--proxy-auth", default=None, metavar="USER:PASS",
              help="Require proxy authentication (mandatory off loopback; repeated wrong passwords "
                   "from one address are slowed down).")
@click.option("--allow-host", multiple=True, metavar="GLOB",
              help="Destination host always allowed, even a private address on an exposed proxy; wins "
                   "over --deny-host. Repeatable.")
@click.option("--deny-host", multiple=True, metavar="GLOB",
              help="Destination host refused with 403. With --host beyond loopback, private and loopback "
                   "destinations are refused unless allowed. Repeatable.")
@click.option("--max-headers", type=click.IntRange(1), default=100, show_default=True,
              help="Requests with more header fields are answered 431.")
@click.option("--max-header-bytes", type=ByteSize(), default="64KiB", show_default=True,
              help="Requests whose header fields take more bytes are answered 431.")
@click.option("--session", default=None, metavar="NAME",
              help="Session of requests that name none (by the proxy URL's user, http://NAME@host:port, "
                   "or an X-Stb-Session header) [default: one per run, serve-<time>].")
@click.option("--cassette", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Replay this vcrpy cassette (YAML or JSON) instead of the store, which stays untouched.")
@click.option("--ordered", is_flag=True,
              help="With --cassette: the n-th request with the same key gets the n-th recorded answer.")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With --cassette: write a JSON report (played, never played, not in the cassette) at shutdown.")
@click.option("--validity", type=click.Choice(["stb", "strict"]), default="stb", show_default=True,
              help="Which real answers are valid: stb (StableToolBench's check_result, substring rules) "
                   "or strict (HTTP status first).")
@click.option("--faults", "faults", multiple=True, metavar="SPEC",
              help="Inject failures, e.g. down=0.2, status=503,p=0.1,tool=weather*, timeout,api=*search*, "
                   "latency=lognormal:200ms:0.5. Repeatable.")
@click.option("--fault-seed", type=int, default=0, show_default=True,
              help="The same seed fails the same tools and requests on every run and machine.")
@click.option("--catalog", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Catalog file [default: catalog.json beside the store, written by 'stbproxy import tools'].")
@click.option("--toolbench-url", default=None, metavar="URL",
              help="A ToolBench-style server for the real calls behind /virtual "
                   "(else the API's URL from the catalog; a RapidAPI URL only with $STBPROXY_RAPIDAPI_KEY).")
@click.option("--simulator", type=click.Choice(["auto", "llm", "schema", "off"]), default="auto", show_default=True,
              help="Who answers when the real API cannot: an LLM (any OpenAI-compatible endpoint: "
                   "OPENAI_BASE_URL, OPENAI_API_KEY), the offline schema simulator, or nobody (a clear "
                   "error). auto: llm when an LLM is configured, else schema.")
@click.option("--sim-model", default=None, help="The simulator's model.")
@click.option("--sim-temperature", type=click.FloatRange(0, 2), default=0.0, show_default=True)
@click.option("--sim-max-tokens", type=click.IntRange(1), default=None)
@click.option("--sim-seed", type=int, default=None, help="Seed passed to the LLM, where the backend honours it.")
@click.option("--sim-concurrency", type=click.IntRange(1), default=16, show_default=True,
              help="Most LLM calls in flight at once.")
@click.option("-v", "--verbose", count=True, help="Log each miss (-v) or mitmproxy's own lines too (-vv).")
@shared_option
def serve(mode, host, port, store, passthrough, secret_field, secret_header, volatile_field, max_body,
          upstream_timeout, upstream_ca, upstream_insecure, upstream_proxy, confdir, proxy_auth, allow_host,
          deny_host, max_headers, max_header_bytes, session, cassette,
          ordered, report, validity,
          faults, fault_seed, catalog, toolbench_url, simulator, sim_model, sim_temperature, sim_max_tokens,
          sim_seed, sim_concurrency, verbose, shared):
    """Run the proxy. Point agents at it with `eval "$(stbproxy env)"`.

    \b
    Examples:
      stbproxy serve                          # virtual mode on 127.0.0.1:8080
      stbproxy serve --mode record --store runs/store
      stbproxy serve --mode replay --port 9000
      stbproxy serve --passthrough api.openai.com
      stbproxy serve --faults down=0.2 --fault-seed 7 --simulator schema

    StableToolBench clients: SERVICE_URL=http://127.0.0.1:8080/virtual
    """
    from stbproxy import mitm  # mitmproxy is heavy: imported only by commands that need it

    mode = mode or (Mode.REPLAY.value if cassette else Mode.VIRTUAL.value)
    if not _is_loopback(host) and not proxy_auth:
        fail(f"refusing to listen on {host}, which is not a loopback address, without --proxy-auth USER:PASS")
    if proxy_auth is not None and ":" not in proxy_auth:
        fail("--proxy-auth must be USER:PASS")
    _configure_logging(verbose)
    confdir = confdir or default_confdir(store)
    stb_options = {
        "stb_mode": mode,
        "stb_store": str(store),
        "stb_passthrough": list(passthrough),
        "stb_secret_fields": list(secret_field),
        "stb_secret_headers": list(secret_header),
        "stb_volatile_fields": list(volatile_field),
        "stb_max_body": max_body,
        "stb_upstream_timeout": str(upstream_timeout),
        "stb_upstream_ca": upstream_ca,
        "stb_upstream_insecure": upstream_insecure,
        "stb_upstream_proxy": upstream_proxy,
        "stb_session": session,
        "stb_cassette": str(cassette) if cassette else None,
        "stb_ordered": ordered,
        "stb_report": str(report) if report else None,
        "stb_validity": validity,
        "stb_faults": list(faults),
        "stb_fault_seed": fault_seed,
        "stb_catalog": str(catalog) if catalog else None,
        "stb_toolbench_url": toolbench_url,
        "stb_simulator": simulator,
        "stb_sim_model": sim_model,
        "stb_sim_temperature": str(sim_temperature),
        "stb_sim_max_tokens": sim_max_tokens,
        "stb_sim_seed": sim_seed,
        "stb_sim_concurrency": sim_concurrency,
        "stb_shared": shared,
        "stb_allow_hosts": list(allow_host),
        "stb_deny_hosts": list(deny_host),
        "stb_max_headers": max_headers,
        "stb_max_header_bytes": max_header_bytes,
    }

    def ready(bound_host: str, bound_port: int, details: str) -> None:
        where = f"cassette {cassette}" if cassette else f"store {store}"
        if shared:
            from stbproxy.shared_store import redact_shared_url

            where += f", shared {redact_shared_url(shared)}"
        click.echo(f"stbproxy {__version__} listening on http://{_url_host(bound_host)}:{bound_port} "
                   f"(mode {mode}, {where}, {details}, CA {mitm.ca_cert_path(confdir)})", nl=True)
        sys.stdout.flush()

    try:
        asyncio.run(mitm.serve(stb_options, listen_host=host, listen_port=port, confdir=confdir,
                               proxy_auth=proxy_auth, on_ready=ready))
    except StbError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        pass
    click.echo("stbproxy stopped; store flushed and closed", err=True)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _configure_logging(verbose: int) -> None:
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr,
                        level=logging.INFO if verbose >= 2 else logging.WARNING)
    log.setLevel(logging.INFO if verbose else logging.WARNING)


# -- env -------------------------------------------------------------------------------------


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="The proxy's address.")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True, help="The proxy's port.")
@store_option
@click.option("--confdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the interception CA lives [default: 'certs' beside the store].")
@click.option("--session", default=None, help="Name this client's traffic (sent as the proxy URL's user).")
def env(host, port, store, confdir, session):
    """Print the shell lines that point a client at the proxy.

    \b
    Use: eval "$(stbproxy env --port 8080)"
    The CA certificate is created if it does not exist yet, so the paths are valid.
    """
    from stbproxy import mitm

    confdir = (confdir or default_confdir(store)).resolve()
    ca = mitm.ensure_ca(confdir)
    # "NAME:@" rather than "NAME@": Python's requests sends the proxy URL's user on plain
    # HTTP requests only when a password part is present (HTTPS tunnels send it either way).
    user = f"{session}:@" if session else ""
    proxy = f"http://{user}{_url_host(host)}:{port}"
    lines = {
        "HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy, "https_proxy": proxy,
        "REQUESTS_CA_BUNDLE": str(ca), "SSL_CERT_FILE": str(ca), "NODE_EXTRA_CA_CERTS": str(ca),
    }
    for name, value in lines.items():
        click.echo(f"export {name}={shlex.quote(value)}")


# -- stats -----------------------------------------------------------------------------------


@main.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--top", type=click.IntRange(1), default=20, show_default=True, help="Hosts to list.")
@click.option("--errors", is_flag=True,
              help="The failure taxonomy of real API answers (success, not available and its kinds, "
                   "not authorised), as counts and shares.")
@shared_option
def stats(store, as_json, top, errors, shared):
    """Entries by source and by host, simulator use, and the store's size.

    Works while a proxy runs (the store is opened read-only).
    """
    from stbproxy.store import Store
    from stbproxy.write_failures import read_status

    try:
        with Store(store, readonly=True) as db:
            result = db.stats(meta_fields=("failure",), sum_fields=("prompt_tokens", "completion_tokens"))
        fleet = _shared_summary(shared) if shared else None
    except StbError as exc:
        fail(str(exc))
    failed = read_status(store) or {}  # writes the store refused (a full disk), kept beside it
    if errors:
        _print_taxonomy(result.meta["failure"], as_json)
        return
    if as_json:
        click.echo(json.dumps({"store": str(store), **result.to_dict(), "failed_writes": failed.get("failed_writes", 0),
                               **({"shared": fleet} if fleet else {})}, indent=2))
        return
    if fleet:
        _print_shared_summary(fleet)
    click.echo(f"store {store}: {result.entries} entries, {sum(result.logged.values())} logged records, "
               f"{result.size_bytes / 1024**2:.1f} MiB on disk")
    if failed:
        click.echo(f"failed writes: {failed['failed_writes']} writes were refused, so answers are missing "
                   f"(last: {failed.get('last_error', '?')})")
    if result.damaged:
        click.echo(f"damaged records: {result.damaged}")
    _print_table("source", result.by_source.most_common(), result.entries)
    _print_table("host", result.by_host.most_common(top), result.entries)
    _print_table("logged (never served)", result.logged.most_common(), sum(result.logged.values()))
    simulated = result.by_source.get("simulated", 0)
    failed = result.logged.get("simulated-error", 0)
    if simulated or failed:
        click.echo(f"\nsimulator: {simulated} answers stored, {failed} failed (not stored), "
                   f"{result.sums['prompt_tokens']} prompt + {result.sums['completion_tokens']} completion tokens")


def _shared_summary(url: str) -> dict:
    """The shared tier's size and the fleet's counters (calls saved by waiting on another proxy, ...)."""
    from stbproxy.shared_store import SharedBulk, parse_shared_url

    with SharedBulk(parse_shared_url(url)) as bulk:
        return {"url": bulk.url.redacted, "keys": bulk.key_count(), "memory_bytes": bulk.memory(),
                "counters": bulk.counters()}


def _print_shared_summary(fleet: dict) -> None:
    click.echo(f"shared tier {fleet['url']}: {fleet['keys']} keys, {fleet['memory_bytes'] / 1024**2:.1f} MiB in memory")
    counters = fleet["counters"]
    click.echo(f"  calls saved (waited on another proxy's call): {counters.get('calls_saved', 0)}, "
               f"shared hits (filled the local store): {counters.get('shared_hits', 0)}")
    others = {k: v for k, v in counters.items() if k not in ("calls_saved", "shared_hits")}
    if others:
        click.echo("  " + ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in others.items()))
    click.echo("")


def _open_reader(store: Path, shared: str | None):
    """The local store read-only, with the shared tier behind it when --shared is given."""
    from stbproxy.store import Store

    local = Store(store, readonly=True)
    if not shared:
        return local
    from stbproxy.shared_store import SharedBulk, parse_shared_url
    from stbproxy.tiered_store import TieredReader

    try:
        return TieredReader(local, SharedBulk(parse_shared_url(shared)))
    except StbError:
        local.close()
        raise


def _open_bulk(shared: str | None):
    from stbproxy.shared_store import SharedBulk, parse_shared_url

    return SharedBulk(parse_shared_url(shared)) if shared else None


def _print_taxonomy(counts, as_json: bool) -> None:
    from stbproxy.validity import taxonomy_table

    rows = taxonomy_table(counts)
    if as_json:
        click.echo(json.dumps([{"kind": str(getattr(r.kind, "value", r.kind)), "count": r.count, "share": r.share}
                               for r in rows], indent=2))
        return
    click.echo(f"{'kind':<22} {'count':>8} {'share':>7}")
    for row in rows:
        kind = str(getattr(row.kind, "value", row.kind))
        click.echo(f"{kind:<22} {row.count:>8} {100 * row.share:>6.1f}%")


def _print_table(title: str, rows, total: int) -> None:
    if not rows:
        return
    width = max(len(title), *(len(str(name)) for name, _ in rows))
    click.echo(f"\n{title:<{width}}  {'count':>8}  {'share':>6}")
    for name, count in rows:
        share = 100.0 * count / total if total else 0.0
        click.echo(f"{name:<{width}}  {count:>8}  {share:>5.1f}%")


# -- sessions -------------------------------------------------------------------------------


@main.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@shared_option
def sessions(store, as_json, shared):
    """Sessions with their answers by source and cache hit rate (works while a proxy runs).

    The hit rate counts cache answers among all answers but passthrough ones (an agent's
    own LLM calls), as StableToolBench reports its cache hit rates.
    """
    try:
        with _open_reader(store, shared) as db:
            rows = [_session_summary(name, db.session_records(name)) for name in db.session_names()]
    except StbError as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no sessions yet")
        return
    sources = sorted({source for row in rows for source in row["by_source"]})
    width = max(len("session"), *(len(row["name"]) for row in rows))
    click.echo(f"{'session':<{width}}  {'calls':>6}  " + "  ".join(f"{s:>11}" for s in sources) + "  hit rate")
    for row in rows:
        counts = "  ".join(f"{row['by_source'].get(s, 0):>11}" for s in sources)
        rate = "-" if row["hit_rate"] is None else f"{100 * row['hit_rate']:.1f}%"
        click.echo(f"{row['name']:<{width}}  {row['calls']:>6}  {counts}  {rate:>8}")


def _session_summary(name: str, records) -> dict:
    from collections import Counter

    by_source, first, last = Counter(), None, None
    for record in records:
        by_source[record["source"]] += 1
        first = record["time"] if first is None else first
        last = record["time"]
    served = sum(n for source, n in by_source.items() if source != "passthrough")
    return {"name": name, "calls": sum(by_source.values()), "by_source": dict(by_source),
            "hit_rate": by_source.get("cache", 0) / served if served else None, "first": first, "last": last}


# -- export ----------------------------------------------------------------------------------


@main.command()
@click.option("--session", "session", default=None, metavar="NAME", help="Export this session, in its order.")
@click.option("--all", "pattern", default=None, metavar="GLOB",
              help="Export every stored exchange whose host, category/tool/api or key matches the glob.")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="Cassette file [default: <session>.yaml, or export.yaml for --all, in this directory]; "
                   "with --by-conversation, a folder [default: <session>].")
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default=None,
              help="Cassette format [default: json for a .json output, else yaml].")
@click.option("--exclude-simulated", is_flag=True, help="Leave out answers the simulator made up.")
@click.option("--by-conversation", is_flag=True,
              help="With --session: one cassette per agent conversation, named by query id (--queries) or digest.")
@click.option("--queries", multiple=True, type=click.Path(exists=True, path_type=Path),
              help="StableToolBench query files naming conversations by query id (with --by-conversation). Repeatable.")
@store_option
@shared_option
def export(session, pattern, output, fmt, exclude_simulated, by_conversation, queries, store, shared):
    """Write a vcrpy cassette (format version 1) that plain vcrpy replays.

    Secrets are redacted (again); each answer's origin is kept in an X-Stb-Source
    response header. Works while a proxy runs (the store is opened read-only).

    \b
    Examples:
      stbproxy export --session run-42                  # -> run-42.yaml
      stbproxy export --session run-42 -o run.json --exclude-simulated
      stbproxy export --all 'api.weather.com' -o weather.yaml
      stbproxy export --all 'Data/*' -o data-apis.yaml  # category/tool/api of catalog APIs
      stbproxy export --session run-42 --by-conversation --queries G1_instruction.json -o run-42/
    """
    from stbproxy import cassettes
    from stbproxy.sessions import safe_session_name

    if (session is None) == (pattern is None):
        fail("give exactly one of --session NAME or --all GLOB")
    if by_conversation and session is None:
        fail("--by-conversation needs --session NAME")
    if output is not None and output.is_dir() and not by_conversation:
        fail(f"{output} is a folder; give a cassette file name")
    skipped: list[str] = []
    try:
        with _open_reader(store, shared) as db:
            if session is not None:
                name = _known_session(db, session)
                output = output or Path(f"{safe_session_name(name)}.{cassettes.format_for('', fmt)}")
                exchanges = _session_exchanges(db, name, skipped)
            else:
                output = output or Path(f"export.{cassettes.format_for('', fmt)}")
                exchanges = [ex for ex in db.entries() if _matches(ex, pattern)]
            skipped.extend(getattr(db, "damaged", ()))  # shared values that do not decode
        total = len(exchanges)
        if exclude_simulated:
            exchanges = [ex for ex in exchanges if ex.source.value not in ("simulated", "simulated-error")]
        if by_conversation:
            return _export_conversations(exchanges, output or Path(safe_session_name(name)), fmt, queries,
                                         name, skipped)
        written = cassettes.write_cassette(output, exchanges, cassettes.format_for(output, fmt))
    except StbError as exc:
        fail(str(exc))
    for line in skipped[:50]:
        click.echo(f"  skipped: {line}", err=True)
    if len(skipped) > 50:
        click.echo(f"  ... and {len(skipped) - 50} more", err=True)
    left_out = f", {total - written} simulated left out" if exclude_simulated else ""
    click.echo(f"wrote {written} interactions to {output}{left_out}"
               + (f", {len(skipped)} skipped" if skipped else ""))


def _export_conversations(exchanges, folder: Path, fmt, queries, name: str, skipped: list[str]) -> None:
    from stbeval.errors import EvalError
    from stbeval.sources import load_queries
    from stbproxy.conversation_export import export_by_conversation

    try:
        index, problems = load_queries(queries)
    except EvalError as exc:
        fail(str(exc))
    result = export_by_conversation(exchanges, folder, fmt=fmt or "yaml", queries=index, where=f"session {name}")
    for line in [*problems, *result.notes, *(f"skipped: {s}" for s in skipped)]:
        click.echo(f"  {line}", err=True)
    total = sum(count for _path, count in result.written)
    click.echo(f"wrote {len(result.written)} cassettes ({total} interactions) to {folder}")


def _known_session(db, raw: str) -> str:
    from stbproxy.sessions import safe_session_name

    known = db.session_names()
    for name in (raw, safe_session_name(raw)):
        if name in known:
            return name
    listed = ", ".join(known[:30]) + (f" and {len(known) - 30} more" if len(known) > 30 else "")
    fail(f"no session {raw!r} in {db.path}; known sessions: {listed or 'none yet'}")


def _session_exchanges(db, name: str, skipped: list[str]) -> list:
    """The stored exchanges a session's log points at, in its order; a record whose
    answer is gone (or damaged) is noted in ``skipped`` and left out."""
    from stbproxy.conversation_export import session_exchanges

    exchanges, missing = session_exchanges(db, name)
    skipped.extend(missing)
    return exchanges


def _matches(exchange, pattern: str) -> bool:
    from fnmatch import fnmatchcase

    names = [exchange.request.host, exchange.key]
    if exchange.api is not None:
        names.append(str(exchange.api))
    return any(fnmatchcase(name, pattern) for name in names)


# -- import ----------------------------------------------------------------------------------


@main.group(name="import")
def import_group() -> None:
    """Bring existing data into the store or the catalog."""


@import_group.command(name="stb-cache")
@click.argument("cache_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@store_option
@click.option("--include-invalid", is_flag=True,
              help="Also import cached failures (answers StableToolBench's check_result rejects).")
@click.option("--jobs", type=click.IntRange(1), default=None,
              help="Worker processes that parse and encode files [default: one per core].")
@shared_option
def import_stb_cache(cache_dir, store, include_invalid, jobs, shared):
    """Import StableToolBench's response cache (<category>/<tool>/<api>.json).

    Every entry is re-keyed canonically and marked 'imported'. Running it twice adds
    nothing. Entries that cannot be read are listed with file and reason; they never
    stop the import.

    \b
    Example: stbproxy import stb-cache server/tool_response_cache --store .stbproxy/store
    """
    from stbproxy import stb_cache
    from stbproxy.settings import catalog_path_for
    from stbproxy.store import Store

    try:
        files = stb_cache.cache_files(cache_dir)
        catalog_file = catalog_path_for(store)
        with Store(store) as db, _SharedImport(shared) as writer:
            summary = _import_entries(db, files, cache_dir, catalog_file if catalog_file.exists() else None,
                                      include_invalid, jobs, writer)
        summary.shared_added = writer.added
    except StbError as exc:
        fail(str(exc))
    click.echo(f"files: {summary.files}, entries read: {summary.entries}")
    click.echo(f"imported: {summary.imported}, duplicates: {summary.duplicates}, "
               f"invalid (left out): {summary.invalid}, unparseable: {summary.unparseable}")
    if shared:
        click.echo(f"shared tier: {summary.shared_added} added, "
                   f"{summary.shared_sent - summary.shared_added} already there")
    for problem in summary.problems[:50]:
        click.echo(f"  unparseable: {problem}", err=True)
    if summary.unparseable > 50:
        click.echo(f"  ... and {summary.unparseable - 50} more", err=True)


class _SharedImport:
    """The shared tier's writer during an import (a no-op without --shared)."""

    def __init__(self, shared: str | None) -> None:
        self.bulk = _open_bulk(shared)
        self.writer = self.bulk.writer() if self.bulk is not None else None
        self.added = 0

    def put(self, records) -> None:
        if self.writer is not None:
            self.writer.put(records)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        if self.writer is None:
            return
        try:
            self.writer.__exit__(*exc_info)
            self.added = self.writer.added
        finally:
            self.bulk.close()


def _import_entries(db, files, root, catalog_file, include_invalid, jobs, shared=None):
    import time

    from tqdm import tqdm

    from stbproxy import stb_cache

    summary = stb_cache.ImportSummary(files=len(files))
    with tqdm(total=len(files), unit="file", desc="importing", disable=None, dynamic_ncols=True) as bar:
        for encoded in stb_cache.encoded_files(files, root, catalog_file=catalog_file,
                                               include_invalid=include_invalid, now=time.time(), jobs=jobs):
            summary.entries += encoded.entries
            summary.invalid += encoded.invalid
            summary.problems.extend(encoded.problems)
            fresh: dict[str, bytes] = {}
            stored = db.existing([key for key, _ in encoded.records])
            for key, value in encoded.records:
                if key in stored or key in fresh:
                    summary.duplicates += 1
                else:
                    fresh[key] = value
            db.put_encoded_many(list(fresh.items()))  # one atomic batch per file
            summary.imported += len(fresh)
            if shared is not None and shared.writer is not None:
                shared.put(encoded.records)  # every record, not only the fresh ones: the shared tier may lack them
                summary.shared_sent += len(encoded.records)
            bar.update(1)
            bar.set_postfix(entries=summary.entries, refresh=False)
    return summary


@import_group.command(name="tools")
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@store_option
@click.option("--catalog", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Catalog file to update [default: catalog.json beside the store].")
@shared_option
def import_tools(sources, store, catalog, shared):
    """Load ToolBench tool docs (a tools/<Category>/<tool>.json folder) and StableToolBench
    query files (G*_*.json, which add parameters and template responses) into the catalog
    that the proxy routes and simulates with.

    \b
    Example: stbproxy import tools data/toolenv/tools solvable_queries/test_instruction/*.json
    """
    from stbproxy.catalog import Catalog
    from stbproxy.settings import catalog_path_for

    target = catalog or catalog_path_for(store)
    try:
        known = Catalog.load(target) if target.exists() else Catalog()
        before = len(known)
        for source in sources:
            report = known.load_tools_dir(source) if source.is_dir() else known.load_query_file(source)
            click.echo(f"{source}: {report.loaded} APIs loaded, {len(report.skipped)} skipped")
            for skipped in report.skipped[:20]:
                click.echo(f"  skipped: {skipped.file}: {skipped.reason}", err=True)
            if len(report.skipped) > 20:
                click.echo(f"  ... and {len(report.skipped) - 20} more", err=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        known.save(target)
        if shared:  # published for the fleet: 'stbproxy sync --pull' fetches it on each machine
            from stbproxy.tier_sync import push_catalog

            with _open_bulk(shared) as bulk:
                push_catalog(bulk, target.read_bytes())
    except StbError as exc:
        fail(str(exc))
    click.echo(f"catalog {target}: {len(known)} APIs ({len(known) - before} new)"
               + (", published to the shared tier" if shared else ""))


@import_group.command(name="cassette")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True, path_type=Path))
@store_option
@click.option("--session", default=None, metavar="NAME",
              help="Also log the imported interactions, in file order, as this session "
                   "(so that 'export --session NAME' gives them back in order).")
@shared_option
def import_cassette(files, store, session, shared):
    """Import vcrpy cassettes (YAML or JSON) and mitmproxy flow files (mitmdump -w).

    Each interaction is keyed as the proxy keys that request, redacted, and stored with
    source 'imported'; what is stored already is left alone, so running it twice adds
    nothing. YAML is loaded safely (tags such as !!python/object are refused). A bad
    interaction or file is reported with its place and never stops the rest; the exit
    status is 1 when anything was reported.

    \b
    Examples:
      stbproxy import cassette tests/cassettes/*.yaml
      mitmdump -w flows.mitm ...; stbproxy import cassette flows.mitm --session captured
    """
    import time

    from stbproxy import cassettes
    from stbproxy.runtime import load_catalog
    from stbproxy.sessions import SessionRecord, safe_session_name
    from stbproxy.settings import Settings
    from stbproxy.store import Store

    if session is not None and safe_session_name(session) != session:
        fail(f"session name {session!r} must use only letters, digits, '.', '_' and '-'")
    imported = duplicates = shared_added = 0
    problems: list[str] = []
    try:
        settings = Settings(store=store)
        catalog, rules = load_catalog(settings), settings.key_rules()
        with Store(store) as db, _SharedCopies(_open_bulk(shared)) as copies:
            for path in files:
                now = time.time()
                for pair in _interactions_of(path, problems):
                    if isinstance(pair, str):
                        problems.append(f"{path}: {pair}")
                        continue
                    index, request, response = pair
                    exchange = cassettes.imported_exchange(request, response, catalog=catalog, rules=rules, now=now,
                                                           meta={"imported_from": path.name, "index": index})
                    if db.put_new(exchange):
                        imported += 1
                    else:
                        duplicates += 1
                    copies.entry(exchange)
                    if session is not None:
                        record = SessionRecord(0, now, exchange.request.method, exchange.request.url,
                                               response.status, exchange.source.value, exchange.key, 0.0)
                        seq = db.append_session(session, record.to_stored())
                        copies.session(session, {**record.to_stored(), "seq": seq})
            shared_added = copies.flush()
    except StbError as exc:
        fail(str(exc))
    click.echo(f"files: {len(files)}, imported: {imported}, duplicates: {duplicates}, problems: {len(problems)}"
               + (f", shared tier: {shared_added} added" if shared else ""))
    for problem in problems[:50]:
        click.echo(f"  problem: {problem}", err=True)
    if len(problems) > 50:
        click.echo(f"  ... and {len(problems) - 50} more", err=True)
    if problems:
        sys.exit(1)


class _SharedCopies:
    """What an import also sends to the shared tier (when there is one), in pipelined batches."""

    def __init__(self, bulk) -> None:
        self.bulk = bulk
        self.entries: list[tuple[str, bytes]] = []
        self.sessions: list[tuple[str, bytes]] = []
        self.added = 0

    def entry(self, exchange) -> None:
        from stbproxy.store import encode_exchange

        if self.bulk is not None:
            self.entries.append((exchange.key, encode_exchange(exchange)))
            if len(self.entries) >= 1000:
                self.flush()

    def session(self, name: str, record: dict) -> None:
        if self.bulk is not None:
            self.sessions.append((name, json.dumps(record).encode()))

    def flush(self) -> int:
        if self.bulk is not None:
            self.added += self.bulk.put_many(self.entries)
            self.bulk.append_sessions(self.sessions)
            self.entries, self.sessions = [], []
        return self.added

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        if self.bulk is not None:
            self.bulk.close()


def _interactions_of(path: Path, problems: list[str]):
    """(index, request, response) per usable interaction of a cassette or flow file, and a
    text per unusable one; a file that cannot be read at all is one problem."""
    from stbproxy import cassettes

    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
    except OSError as exc:
        problems.append(f"{path}: cannot read: {exc.strerror or exc}")
        return
    try:
        if cassettes.is_flow_file(head):
            from stbproxy import mitm  # mitmproxy is heavy: loaded only for flow files
            from stbproxy.redact import redact_request

            for index, (request, response) in enumerate(mitm.read_flow_file(path)):
                if response is None:
                    url = redact_request(request).url  # a flow file holds the secrets as sent
                    yield f"flow {index}: {request.method} {url}: no response was recorded"
                else:
                    yield index, request, response
            return
        interactions, bad = cassettes.read_cassette(path)
    except StbError as exc:
        problems.append(str(exc))
        return
    for item in interactions:
        yield item.index, item.request, item.response
    for problem in bad:
        yield str(problem)


# -- sync: the local store and the shared tier ------------------------------------------------------


@main.command()
@store_option
@shared_option
@click.option("--push", "do_push", is_flag=True, help="Copy local records the shared tier lacks up to it.")
@click.option("--pull", "do_pull", is_flag=True, help="Copy shared records the local store lacks down to it.")
def sync(store, shared, do_push, do_pull):
    """Copy cache entries and logged records between the local store and the shared tier.

    Each side keeps what it holds already, so running it twice copies nothing. The catalog
    goes along too: --push publishes catalog.json beside the store, --pull fetches the
    published one when there is none beside the store. Session logs are not copied (a
    proxy with --shared appends them to the shared tier as it runs).

    \b
    Examples:
      stbproxy sync --push --shared redis://cache.internal:6379/0   # seed a new fleet
      stbproxy sync --pull --shared "$REDIS_URL"                    # warm a new machine
    """
    from tqdm import tqdm

    from stbproxy import tier_sync
    from stbproxy.settings import catalog_path_for
    from stbproxy.store import Store

    if not shared:
        fail("give the shared tier: --shared URL (or STBPROXY_SHARED_URL / REDIS_URL)")
    if not (do_push or do_pull):
        fail("give --push, --pull or both")
    catalog = catalog_path_for(store)
    damaged: list[str] = []
    try:
        with Store(store) as db, _open_bulk(shared) as bulk:
            if do_push:
                with tqdm(total=tier_sync.local_count(db), unit="rec", desc="push", disable=None,
                          dynamic_ncols=True) as bar:
                    summary = tier_sync.push(db, bulk, bar.update)
                click.echo(summary.line("push"))
                damaged += summary.damaged
                if catalog.exists():
                    tier_sync.push_catalog(bulk, catalog.read_bytes())
                    click.echo(f"catalog {catalog} published")
            if do_pull:
                with tqdm(unit="rec", desc="pull", disable=None, dynamic_ncols=True) as bar:
                    summary = tier_sync.pull(db, bulk, bar.update)
                click.echo(summary.line("pull"))
                damaged += summary.damaged
                document = tier_sync.shared_catalog(bulk)
                if document is not None and not catalog.exists():
                    catalog.write_bytes(document)
                    click.echo(f"catalog fetched to {catalog}")
    except StbError as exc:
        fail(str(exc))
    for problem in damaged[:20]:
        click.echo(f"  damaged: {problem}", err=True)


# -- eval: the offline evaluation package (stbeval) provides the whole group ----------------------

from stbeval.cli import eval_group  # noqa: E402  (stbeval never imports the proxy side)

main.add_command(eval_group, name="eval")


def _sessions_as_answers(group: click.Group) -> None:
    """`stbproxy eval` reads a session of the store wherever it reads answers (--store)."""
    from stbeval.sources import add_resolver
    from stbproxy.conversation_export import session_document

    chosen = {"store": Path(".stbproxy") / "store"}

    def remember(_ctx, _param, value):
        chosen["store"] = value
        return value

    for command in group.commands.values():
        if any(p.name in ("answers", "candidate", "reference") for p in command.params):
            command.params.append(click.Option(
                ["--store"], type=click.Path(file_okay=False, path_type=Path), default=chosen["store"],
                envvar="STBPROXY_STORE", show_default=True, expose_value=False, callback=remember,
                help="The store whose sessions --answers (--candidate, --reference) may name."))
    add_resolver(lambda name: session_document(chosen["store"], name))


_sessions_as_answers(eval_group)


if __name__ == "__main__":
    main()
