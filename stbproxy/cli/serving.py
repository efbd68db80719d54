"""Serving commands: ``stbproxy serve`` (the proxy) and ``stbproxy env`` (the client's side)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import shlex
import sys
from pathlib import Path

import click

from stbproxy import __version__
from stbproxy.cli.common import (ByteSize, confdir_option, fail, log, missing_roots, remove_new, resolve_confdir,
                                  store_option)
from stbproxy.cli.shared_tier import shared_option
from stbproxy.errors import StbError
from stbproxy.front.limits import default_max_connections
from stbproxy.models import Mode


@click.command()
@click.option("--mode", type=click.Choice([m.value for m in Mode]), default=None, show_default="virtual; replay with --cassette",
              help="virtual: store, else the real API, else the simulator; record: always the real API, "
                   "storing what comes back; replay: the store only, never the network; verify: always the "
                   "real API, compared with the stored answer, which is what the client gets ('stbproxy drift').")
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
@click.option("--not-secret-field", multiple=True, metavar="NAME",
              help="A default secret field that is an ordinary argument here (kept and keyed), e.g. token. "
                   "Repeatable.")
@click.option("--not-secret-header", multiple=True, metavar="NAME",
              help="A default secret header that is kept here. Repeatable.")
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
@confdir_option
@click.option("--proxy-auth", default=None, metavar="USER:PASS|@HTPASSWD",
              help="Require proxy authentication (mandatory off loopback; repeated wrong passwords "
                   "from one address are slowed down): one user, or the users of an htpasswd file "
                   "(@FILE), each of whom sees only what it recorded (--views).")
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
@click.option("--max-request-body", type=ByteSize(), default="32MiB", show_default=True,
              help="Requests with a larger body are answered 413 before the body is read.")
@click.option("--max-upstream-body", type=ByteSize(), default="64MiB", show_default=True,
              help="A real API's answer larger than this, on the wire or decoded (a compression bomb), is read "
                   "no further and answered 502, never stored.")
@click.option("--head-timeout", type=click.FloatRange(0, 3600, min_open=True), default=30, show_default=True,
              metavar="SECONDS", help="A request's line and header fields must arrive within this time of its "
                                      "first byte; a slower connection is closed.")
@click.option("--idle-timeout", type=click.FloatRange(0, 3600, min_open=True), default=120, show_default=True,
              metavar="SECONDS", help="A connection waiting this long for its next request is closed.")
@click.option("--max-connections", type=click.IntRange(1), default=None, metavar="N",
              help="Most open client connections per process; more are answered 503 and closed "
                   "[default: 4096, less where the open-file limit is lower].")
@click.option("--session", default=None, metavar="NAME",
              help="Session of requests that name none (by the proxy URL's user, http://NAME@host:port, "
                   "or an X-Stb-Session header) [default: one per run, serve-<time>].")
@click.option("--cassette", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Replay this vcrpy cassette (YAML or JSON) instead of the store, which stays untouched.")
@click.option("--ordered", is_flag=True,
              help="The n-th request with the same key gets the n-th recorded answer: of the --cassette, or of "
                   "the store's session of the same name (past its end: the last one), so polling replays "
                   "as recorded.")
@click.option("--fork", default=None, metavar="SESSION@K",
              help="Every other session starts as a fork of the recorded SESSION: its first K calls are "
                   "answered from it in order, then the mode decides (per session: X-Stb-Fork header, or "
                   "';fork=SESSION@K' after the session's name).")
@click.option("--update", is_flag=True,
              help="With --mode verify: a real answer that changed replaces the stored one (the old one is "
                   "kept as history).")
@click.option("--drift-ignore", multiple=True, metavar="RULE",
              help="With --mode verify: what differs on every call and is no drift: path:GLOB (a JSON pointer "
                   "glob), value:REGEX, optionally after '@HOST_OR_API_GLOB '. Repeatable.")
@click.option("--drift-defaults/--no-drift-defaults", default=True, show_default=True,
              help="With --mode verify: also ignore the usual timestamp and request-id members.")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With --cassette: write a JSON report (played, never played, not in the cassette) at shutdown.")
@click.option("--allow-empty", is_flag=True,
              help="With --mode replay: start even when the store does not exist or holds no entries (every "
                   "request is then a miss) [default: refuse, since nothing could be replayed].")
@click.option("--validity", type=click.Choice(["auto", "stb", "strict", "schema"]), default="auto", show_default=True,
              help="Which real answers are valid. auto: StableToolBench's rules (check_result, substring "
                   "tests) for /virtual calls and calls the catalog routes to an API, the status-based strict "
                   "rule for any other HTTP; stb or strict: that policy for all traffic; schema: auto, and "
                   "a real answer to an OpenAPI operation that breaks its documented schema is invalid too "
                   "(by default it is kept and reported as drift by 'stbproxy check').")
@click.option("--keep-status", "keep_status", multiple=True, metavar="CODES",
              help="4xx statuses (comma-separated, repeatable: --keep-status 404,410) whose real answers are "
                   "kept as real, stored with origin upstream and served, where virtual mode would replace them "
                   "with simulated ones [default: none; a 4xx an imported OpenAPI document lists is kept "
                   "anyway]. 408 and 429 never are.")
@click.option("--stb-keys", type=click.Choice(["exact", "canonical"]), default="exact", show_default=True,
              help="How StableToolBench calls (/virtual, and calls the catalog routes) are keyed. exact: as "
                   "StableToolBench's server looks them up, by the arguments' text, so {\"id\": 294} misses an "
                   "entry cached under {'id': '294'} and arguments in another order miss too; canonical: "
                   "arguments compared as text in any order, so both hit (more hits, other observations than "
                   "StableToolBench's; docs/stabletoolbench.md). A store is made under one of them: "
                   "'import stb-cache' takes the same option.")
@click.option("--views", type=click.Choice(["auto", "shared", "user", "credential"]), default="auto",
              show_default=True,
              help="Who sees which stored answers. shared: every client sees all (one user's benchmark: a "
                   "rotated API key still hits); user: each --proxy-auth user sees what it recorded, and its "
                   "sessions are its own; credential: also a view per credential a request carries (Authorization "
                   "and the other secret headers); auto: user behind --proxy-auth, else shared. An imported "
                   "cache is seen from every view (docs/security.md).")
@click.option("--refresh-simulated", is_flag=True,
              help="Virtual mode: when a stored answer was simulated (the API was down or invalid), ask the "
                   "real API again (at most once a minute per answer); a valid real answer replaces the "
                   "simulated one, anything else leaves it.")
@click.option("--faults", "faults", multiple=True, metavar="SPEC",
              help="Inject failures, e.g. down=0.2, status=503,p=0.1,tool=weather*, timeout,api=*search*, "
                   "latency=lognormal:200ms:0.5. Repeatable.")
@click.option("--fault-seed", type=int, default=0, show_default=True,
              help="The same seed fails the same tools and requests on every run and machine.")
@click.option("--catalog", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Catalog file [default: catalog.json in the store's folder, written by 'stbproxy import tools'].")
@click.option("--toolbench-url", default=None, metavar="URL",
              help="A ToolBench-style server for the real calls behind /virtual "
                   "(else the API's URL from the catalog; a RapidAPI URL only with $STBPROXY_RAPIDAPI_KEY).")
@click.option("--mcp", "mcp", multiple=True, metavar="NAME=URL",
              help="Answer the MCP server at URL at this proxy's own http://HOST:PORT/mcp/NAME, for MCP clients "
                   "that ignore proxy variables (the same store entries as through the proxy). Repeatable.")
@click.option("--simulator", type=click.Choice(["auto", "llm", "mirrorapi", "schema", "off"]), default="auto",
              show_default=True,
              help="Who answers when the real API cannot: an LLM (any OpenAI-compatible endpoint: "
                   "OPENAI_BASE_URL, OPENAI_API_KEY), StableToolBench's trained MirrorAPI model behind such an "
                   "endpoint (with --stb-dir or --sim-system-prompt), the offline schema simulator, or nobody "
                   "(a clear error). auto: llm when an LLM is configured, else schema.")
@click.option("--sim-model", default=None, help="The simulator's model.")
@click.option("--sim-temperature", type=click.FloatRange(0, 2), default=None,
              help="The simulator LLM's sampling temperature (0: the same call gets the same answer, "
                   "as far as the backend allows) [default: 0; 0.1 with mirrorapi, as StableToolBench's "
                   "MirrorAPI configuration].")
@click.option("--sim-max-tokens", type=click.IntRange(1), default=None,
              help="Most tokens the simulator LLM may write per answer [default: 1024 with llm, as "
                   "StableToolBench's server asks; mirrorapi always asks 2048, as its MirrorAPI server does].")
@click.option("--sim-seed", type=int, default=None, help="Seed passed to the LLM, where the backend honours it.")
@click.option("--sim-concurrency", type=click.IntRange(1), default=16, show_default=True,
              help="Most LLM calls in flight at once.")
@click.option("--stb-dir", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              help="Your StableToolBench checkout: the mirrorapi simulator's system prompt is read from its "
                   "server/system_prompts.py (never copied into stbproxy).")
@click.option("--stb-prompt", type=click.Choice(["plain", "cot"]), default=None,
              help="With --stb-dir: the plain prompt (SFT_SYSTEM, the default) or the chain-of-thought one "
                   "(COT_SYSTEM).")
@click.option("--sim-system-prompt", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="A file holding the simulator model's system prompt (llm or mirrorapi).")
@click.option("--sim-prompt", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="A prompt template for the simulator model (llm or mirrorapi): [system] and [user] sections, "
                   "placeholders {api_doc}, {api_doc_json}, {documentation}, {request}, {request_json}, "
                   "{examples} (docs/simulators.md).")
@click.option("--mirrorapi-parse", type=click.Choice(["stb", "recover"]), default="stb", show_default=True,
              help="How the mirrorapi simulator reads its model's replies. stb: as StableToolBench's MirrorAPI "
                   "server does, once (JSON, else its patterns; a reply without an answer is answered 'Failed to "
                   "generate fake response'); recover: malformed replies read further, up to 3 attempts "
                   "(docs/simulators.md).")
@click.option("--mirrorapi-unknown", type=click.Choice(["fail", "prompt"]), default="fail", show_default=True,
              help="The mirrorapi simulator for an API the catalog does not hold. fail: HTTP 500 without asking "
                   "the model, as StableToolBench's MirrorAPI server; prompt: the model is asked, the API described "
                   "by its request.")
@click.option("--workers", default="1", show_default=True, metavar="N|auto",
              help="Processes answering on the port (auto: one per CPU core). One of them owns the store's "
                   "writes and every miss; the others answer hits from the store and hand it the rest.")
@click.option("--fast-lane/--no-fast-lane", default=True, show_default=True,
              help="Answer plain HTTP/1.1 requests (/virtual calls, http:// APIs) without mitmproxy's protocol "
                   "layers, which costs a cache hit about half the CPU. --no-fast-lane sends every request "
                   "through mitmproxy, as HTTPS always is.")
@click.option("-v", "--verbose", count=True, help="Log each miss (-v) or mitmproxy's own lines too (-vv).")
@shared_option
def serve(mode, host, port, store, passthrough, secret_field, secret_header, not_secret_field, not_secret_header,
          volatile_field, max_body,
          upstream_timeout, upstream_ca, upstream_insecure, upstream_proxy, confdir, proxy_auth, allow_host,
          deny_host, max_headers, max_header_bytes, max_request_body, max_upstream_body, head_timeout, idle_timeout,
          max_connections, session, cassette,
          ordered, fork, update, drift_ignore, drift_defaults, report, allow_empty, validity, keep_status, stb_keys,
          views,
          refresh_simulated,
          faults, fault_seed, catalog, toolbench_url, mcp, simulator, sim_model, sim_temperature, sim_max_tokens,
          sim_seed, sim_concurrency, stb_dir, stb_prompt, sim_system_prompt, sim_prompt, mirrorapi_parse,
          mirrorapi_unknown, workers, fast_lane,
          verbose, shared):
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
    mode = mode or (Mode.REPLAY.value if cassette else Mode.VIRTUAL.value)
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
    if stb_prompt is not None and stb_dir is None:  # else the choice would silently do nothing
        fail("--stb-prompt chooses one of the prompts of a StableToolBench checkout: give --stb-dir DIR too")
    from stbproxy.workers.pool import worker_count

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
    stb_options = {
        "stb_mode": mode,
        "stb_store": str(store),
        "stb_passthrough": list(passthrough),
        "stb_secret_fields": list(secret_field),
        "stb_secret_headers": list(secret_header),
        "stb_volatile_fields": list(volatile_field),
        "stb_not_secret_fields": list(not_secret_field),
        "stb_not_secret_headers": list(not_secret_header),
        "stb_max_body": max_body,
        "stb_upstream_timeout": str(upstream_timeout),
        "stb_upstream_ca": upstream_ca,
        "stb_upstream_insecure": upstream_insecure,
        "stb_upstream_proxy": upstream_proxy,
        "stb_session": session,
        "stb_cassette": str(cassette) if cassette else None,
        "stb_ordered": ordered,
        "stb_fork": fork,
        "stb_update": update,
        "stb_drift_ignore": list(drift_ignore),
        "stb_drift_defaults": drift_defaults,
        "stb_report": str(report) if report else None,
        "stb_allow_empty": allow_empty,
        "stb_validity": validity,
        "stb_keep_status": list(keep_status),
        "stb_keys": stb_keys,
        "stb_views": views,
        "stb_refresh_simulated": refresh_simulated,
        "stb_faults": list(faults),
        "stb_fault_seed": fault_seed,
        "stb_catalog": str(catalog) if catalog else None,
        "stb_toolbench_url": toolbench_url,
        "stb_mcp": list(mcp),
        "stb_simulator": simulator,
        "stb_sim_model": sim_model,
        "stb_sim_temperature": "" if sim_temperature is None else str(sim_temperature),
        "stb_sim_max_tokens": sim_max_tokens,
        "stb_sim_seed": sim_seed,
        "stb_sim_concurrency": sim_concurrency,
        "stb_dir": str(stb_dir) if stb_dir else None,
        "stb_prompt": stb_prompt or "plain",
        "stb_sim_system_prompt": str(sim_system_prompt) if sim_system_prompt else None,
        "stb_sim_prompt": str(sim_prompt) if sim_prompt else None,
        "stb_mirrorapi_parse": mirrorapi_parse,
        "stb_mirrorapi_unknown": mirrorapi_unknown,
        "stb_shared": shared,
        "stb_allow_hosts": list(allow_host),
        "stb_deny_hosts": list(deny_host),
        "stb_max_headers": max_headers,
        "stb_max_header_bytes": max_header_bytes,
        "stb_max_request_body": max_request_body,
        "stb_max_upstream_body": max_upstream_body,
        "stb_head_timeout": str(head_timeout),
        "stb_idle_timeout": str(idle_timeout),
        "stb_max_connections": max_connections or default_max_connections(),
    }

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
        from stbproxy.workers.pool import Workers

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


# stb_ options whose flag is not simply --<name>
_FLAGS = {"stb_secret_fields": "--secret-field", "stb_secret_headers": "--secret-header",
          "stb_not_secret_fields": "--not-secret-field", "stb_not_secret_headers": "--not-secret-header",
          "stb_volatile_fields": "--volatile-field", "stb_allow_hosts": "--allow-host", "stb_deny_hosts": "--deny-host",
          "stb_keys": "--stb-keys"}


def cli_message(text: str) -> str:
    """An addon message names its stb_ option; the command line names the flag."""
    name, sep, rest = text.partition(": ")
    if sep and name.startswith("stb_") and " " not in name:
        flag = _FLAGS.get(name) or "--" + name.removeprefix("stb_").replace("_", "-")
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
