"""Serving commands: ``stbproxy serve`` (the proxy) and ``stbproxy env`` (the client's side)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from stbproxy import __version__
from stbproxy.cli.common import (
    FC,
    ByteSize,
    confdir_option,
    fail,
    log,
    missing_roots,
    remove_new,
    resolve_confdir,
    store_option,
)
from stbproxy.cli.shared_tier import shared_option
from stbproxy.errors import StbError
from stbproxy.models import Mode
from stbproxy.serve_options import SETTINGS, Cli, Setting, addon_options, flag_of


def setting_options(first: str, last: str) -> Callable[[FC], FC]:
    """The command-line options of the settings from ``first`` to ``last``, in SETTINGS' order
    (serve_options.py: each declared there once)."""
    fields = [setting.field for setting in SETTINGS]
    chosen = [(s, s.cli) for s in SETTINGS[fields.index(first):fields.index(last) + 1] if s.cli is not None]

    def decorate(command: FC) -> FC:
        for setting, cli in reversed(chosen):
            command = _click_option(setting, cli)(command)
        return command

    return decorate


def _param_of(setting: Setting) -> str:
    """The click parameter of a setting: its flag's name (--secret-field: secret_field)."""
    return setting.flag_name.split("/")[0].lstrip("-").replace("-", "_") if setting.cli else setting.field


def _click_option(setting: Setting, cli: Cli) -> Callable[[FC], FC]:
    kwargs: dict[str, Any] = {"default": cli.default, "help": setting.help}
    if cli.multiple:
        kwargs["multiple"] = True
    if cli.metavar:
        kwargs["metavar"] = cli.metavar
    if cli.show_default is not None:
        kwargs["show_default"] = cli.show_default
    declarations = [setting.flag_name]
    if cli.value_type == "flag":
        if cli.negative:
            declarations = [f"{setting.flag_name}/{cli.negative}"]
        else:
            kwargs["is_flag"] = True
            kwargs.pop("default")
    elif cli.value_type == "choice":
        kwargs["type"] = click.Choice(list(cli.choices))
    elif cli.value_type == "int":
        kwargs["type"] = (click.IntRange(_whole(cli.low), _whole(cli.high)) if (cli.low, cli.high) != (None, None)
                          else int)
    elif cli.value_type == "float":
        kwargs["type"] = click.FloatRange(cli.low, cli.high, min_open=cli.low_open)
    elif cli.value_type == "bytes":
        kwargs["type"] = ByteSize()
    elif cli.value_type in ("file", "folder"):
        kwargs["type"] = click.Path(exists=cli.exists, file_okay=cli.value_type == "file",
                                    dir_okay=cli.value_type == "folder", path_type=Path if cli.path_type else None)
    return click.option(*declarations, **kwargs)


def _whole(bound: float | None) -> int | None:
    """An int option's bound, declared as a number (Cli's bounds serve float options too)."""
    if bound is None:
        return None
    if bound != int(bound):
        raise ValueError(f"an int option's bound must be whole, not {bound}")
    return int(bound)


@click.command()
@setting_options("mode", "mode")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. A non-loopback address needs --proxy-auth.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port to listen on (0 picks a free one).")
@store_option
@setting_options("passthrough", "upstream_proxy")
@confdir_option
@click.option("--proxy-auth", default=None, metavar="USER:PASS|@HTPASSWD",
              help="Require proxy authentication (mandatory off loopback; repeated wrong passwords "
                   "from one address are slowed down): one user, or the users of an htpasswd file "
                   "(@FILE), each of whom sees only what it recorded (--views).")
@setting_options("allow_hosts", "mirrorapi_unknown")
@click.option("--workers", default="1", show_default=True, metavar="N|auto",
              help="Processes answering on the port (auto: one per CPU core). One of them owns the store's "
                   "writes and every miss; the others answer hits from the store and hand it the rest.")
@click.option("--fast-lane/--no-fast-lane", default=True, show_default=True,
              help="Answer plain HTTP/1.1 requests (/virtual calls, http:// APIs) without mitmproxy's protocol "
                   "layers, which costs a cache hit about half the CPU. --no-fast-lane sends every request "
                   "through mitmproxy, as HTTPS always is.")
@click.option("-v", "--verbose", count=True, help="Log each miss (-v) or mitmproxy's own lines too (-vv).")
@shared_option
def serve(host, port, confdir, proxy_auth, workers, fast_lane, verbose, **given):
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
    values = {setting.field: given[_param_of(setting)] for setting in SETTINGS}
    values["mode"] = values["mode"] or (Mode.REPLAY.value if values["cassette"] else Mode.VIRTUAL.value)
    store, cassette = values["store"], values["cassette"]
    if not _is_loopback(host) and not proxy_auth:
        fail(f"refusing to listen on {host}, which is not a loopback address, without --proxy-auth USER:PASS")
    if proxy_auth is not None and proxy_auth.startswith("@"):
        if not Path(proxy_auth[1:]).expanduser().is_file():
            fail(f"--proxy-auth {proxy_auth}: no such htpasswd file")
    elif proxy_auth is not None and ":" not in proxy_auth:
        fail("--proxy-auth must be USER:PASS or @HTPASSWD_FILE")
    elif proxy_auth is not None and not all(proxy_auth.partition(":")[::2]):
        # mitmproxy would take ':' for a user and a password, both empty: an open proxy
        fail("--proxy-auth needs a user name and a password, neither of them empty")
    if values["stb_prompt"] is not None and values["stb_dir"] is None:  # else the choice would silently do nothing
        fail("--stb-prompt chooses one of the prompts of a StableToolBench checkout: give --stb-dir DIR too")
    from stbproxy.mitm.worker_pool import worker_count

    try:
        worker_total = worker_count(workers)
    except StbError as exc:
        fail(f"--workers: {exc}")
    if worker_total > 1 and cassette:
        fail("--workers needs the embedded store: a --cassette is replayed by one process")
    from stbproxy import mitm  # mitmproxy is heavy (a second): imported once the cheap checks pass
    _configure_logging(verbose)
    default_confdir = confdir is None
    confdir = resolve_confdir(confdir)
    stb_options = addon_options(values)

    started = []  # set once the proxy is ready: from then on, what it made is the user's
    # What a start makes that was not there (the store's folder, the CA's, their parents) is
    # removed again when the start is refused: a refused start leaves nothing behind.
    new_paths = missing_roots(Path(store), confdir)

    def ready(bound_host: str, bound_port: int, runtime) -> None:
        started.append(True)
        processes = [f"{worker_total} workers"] if worker_total > 1 else []
        details = ", ".join([*runtime.description(), *processes, f"CA {mitm.ca_cert_path(confdir)}"])
        client = ["stbproxy", "env", "--port", str(bound_port)]
        if bound_host != "127.0.0.1":
            client += ["--host", bound_host]
        if not default_confdir:
            client += ["--confdir", str(confdir)]
        click.echo(f"stbproxy {__version__} listening on http://{_url_host(bound_host)}:{bound_port} ({details})\n"
                   f"point clients at it: eval \"$({shlex.join(client)})\"")
        sys.stdout.flush()

    hooks = None
    if worker_total > 1:
        from stbproxy.mitm.worker_pool import Workers

        hooks = Workers(worker_total, {"stb_options": stb_options, "confdir": str(confdir),
                                       "proxy_auth": proxy_auth, "verbose": verbose,
                                       "fast_lane": fast_lane}).hooks()
    try:
        asyncio.run(mitm.serve(stb_options, listen_host=host, listen_port=port, confdir=confdir,
                               proxy_auth=proxy_auth, on_ready=ready, hooks=hooks, fast_lane=fast_lane))
    except StbError as exc:
        if not started:
            remove_new(new_paths)
        fail(cli_message(str(exc)))
    except KeyboardInterrupt:
        pass
    click.echo("stbproxy stopped; store flushed and closed", err=True)


def cli_message(text: str) -> str:
    """An addon message names its stb_ option; the command line names the flag."""
    name, sep, rest = text.partition(": ")
    if sep and name.startswith("stb_") and " " not in name:
        flag = flag_of(name) or "--" + name.removeprefix("stb_").replace("_", "-")
        return f"{flag}: {rest}"
    return text


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


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="The proxy's address.")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True, help="The proxy's port.")
@confdir_option
@click.option("--session", default=None, metavar="NAME",
              help="Name this client's traffic: sent as the proxy URL's user, percent-encoded, so any "
                   "name works ('my run/2', 'a:b@c').")
def env(host, port, confdir, session):
    """Print the shell lines that point a client at the proxy.

    \b
    Use: eval "$(stbproxy env --port 8080)"
    The proxy for HTTP_PROXY/HTTPS_PROXY (both cases), and the CA to trust for every client
    that reads one. REQUESTS_CA_BUNDLE (requests), SSL_CERT_FILE (httpx, urllib, OpenSSL) and
    CURL_CA_BUNDLE (curl) name a bundle of the proxy's CA and the roots trusted before (the
    system's, and files these variables named), so hosts in NO_PROXY still verify;
    NODE_EXTRA_CA_CERTS (Node, which adds it to its own roots) names the proxy's CA. The CA is
    the one every 'stbproxy serve' of this user intercepts with (~/.stbproxy, or --confdir /
    STBPROXY_CONFDIR); it and the bundle are created or refreshed first, so the paths are
    valid. NO_PROXY is left as it is: hosts it names skip the proxy and are not recorded.
    A comment line first says which real answers a proxy in virtual mode replaces.
    """
    from stbproxy.stb.validity import replaced_answers

    variables = client_env(host, port, confdir, session)
    click.echo(f"# stbproxy: in virtual mode (serve's default) the proxy replaces {replaced_answers('auto')} "
               "with simulated ones (serve --keep-status 404,410 keeps those too); X-Stb-Source says who answered")
    for name, value in variables.items():
        click.echo(f"export {name}={shlex.quote(value)}")


def client_env(host: str, port: int, confdir: Path | None, session: str | None, params: str = "") -> dict[str, str]:
    """The variables that point a client at the proxy (see ``env``); fails with one line
    when the CA or its bundle cannot be written."""
    from stbproxy import mitm
    from stbproxy.client_env import client_variables

    try:
        ca = mitm.ensure_ca(resolve_confdir(confdir))
    except StbError as exc:
        fail(str(exc))
    try:
        return client_variables(host, port, ca, session, params)
    except OSError as exc:
        fail(f"cannot write the CA bundle in {ca.parent}: {exc.strerror or exc}; choose a folder you can "
             "write to with --confdir or STBPROXY_CONFDIR")
