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
@click.option("--mode", type=click.Choice([m.value for m in Mode]), default=Mode.VIRTUAL.value, show_default=True,
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
              help="Require proxy authentication (mandatory off loopback).")
@click.option("-v", "--verbose", count=True, help="Log each miss (-v) or mitmproxy's own lines too (-vv).")
def serve(mode, host, port, store, passthrough, secret_field, secret_header, volatile_field, max_body,
          upstream_timeout, upstream_ca, upstream_insecure, upstream_proxy, confdir, proxy_auth, verbose):
    """Run the proxy. Point agents at it with `eval "$(stbproxy env)"`.

    \b
    Examples:
      stbproxy serve                          # virtual mode on 127.0.0.1:8080
      stbproxy serve --mode record --store runs/store
      stbproxy serve --mode replay --port 9000
      stbproxy serve --passthrough api.openai.com
    """
    from stbproxy import mitm  # mitmproxy is heavy: imported only by commands that need it

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
    }

    def ready(bound_host: str, bound_port: int) -> None:
        click.echo(f"stbproxy {__version__} listening on http://{_url_host(bound_host)}:{bound_port} "
                   f"(mode {mode}, store {store}, CA {mitm.ca_cert_path(confdir)})", nl=True)
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
    user = f"{session}@" if session else ""
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
def stats(store, as_json, top):
    """Entries by source and by host, and the store's size (works while a proxy runs)."""
    from stbproxy.store import Store

    try:
        with Store(store, readonly=True) as db:
            result = db.stats()
    except StbError as exc:
        fail(str(exc))
    if as_json:
        click.echo(json.dumps({"store": str(store), **result.to_dict()}, indent=2))
        return
    click.echo(f"store {store}: {result.entries} entries, {result.logged} logged passthrough exchanges, "
               f"{result.size_bytes / 1024**2:.1f} MiB on disk")
    if result.damaged:
        click.echo(f"damaged records: {result.damaged}")
    _print_table("source", result.by_source.most_common(), result.entries)
    _print_table("host", result.by_host.most_common(top), result.entries)


def _print_table(title: str, rows, total: int) -> None:
    if not rows:
        return
    width = max(len(title), *(len(str(name)) for name, _ in rows))
    click.echo(f"\n{title:<{width}}  {'count':>8}  {'share':>6}")
    for name, count in rows:
        share = 100.0 * count / total if total else 0.0
        click.echo(f"{name:<{width}}  {count:>8}  {share:>5.1f}%")


if __name__ == "__main__":
    main()
