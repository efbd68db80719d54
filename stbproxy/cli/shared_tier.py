"""The shared store tier from the command line: the ``--shared URL`` option, the helpers
that open the tier beside a local store (stats, sessions, export, import, forget), and
``stbproxy sync``, which copies records between the two tiers."""

from __future__ import annotations

import json
from pathlib import Path

import click

from stbproxy.cli.common import FC, fail, store_option
from stbproxy.errors import StbError
from stbproxy.store.shared_url import ENV_VARS


def shared_option(func: FC) -> FC:
    return click.option(
        "--shared",
        default=None,
        metavar="URL",
        # never REDIS_URL, which is often set for other programs
        envvar=list(ENV_VARS),
        show_envvar=True,
        help="A shared store tier on Redis / Valkey, behind the local store: redis://[user:pass@]host:port/db, "
             "rediss://... (TLS), or redis+cluster://host:port,host:port (Redis Cluster). Only this option or "
             "$STBPROXY_SHARED ($STBPROXY_SHARED_URL, its older name) attach one; $REDIS_URL is ignored. "
             "See docs/scale.md.",
    )(func)


def shared_summary(url: str) -> dict:
    """The shared tier's size and the fleet's counters (calls saved by waiting on another proxy, ...)."""
    from stbproxy.store.shared_bulk import SharedBulk
    from stbproxy.store.shared_url import parse_shared_url

    with SharedBulk(parse_shared_url(url)) as bulk:
        return {"url": bulk.url.redacted, "keys": bulk.key_count(), "memory_bytes": bulk.memory(),
                "counters": bulk.counters()}


def print_shared_summary(fleet: dict) -> None:
    click.echo(f"shared tier {fleet['url']}: {fleet['keys']} keys, {fleet['memory_bytes'] / 1024**2:.1f} MiB in memory")
    counters = fleet["counters"]
    click.echo(f"  calls saved (waited on another proxy's call): {counters.get('calls_saved', 0)}, "
               f"shared hits (filled the local store): {counters.get('shared_hits', 0)}")
    others = {k: v for k, v in counters.items() if k not in ("calls_saved", "shared_hits")}
    if others:
        click.echo("  " + ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in others.items()))
    click.echo("")


def open_reader(store: Path, shared: str | None):
    """The local store read-only, with the shared tier behind it when --shared is given."""
    from stbproxy.store.embedded import Store

    local = Store(store, readonly=True)
    if not shared:
        return local
    from stbproxy.store.shared_bulk import SharedBulk
    from stbproxy.store.shared_url import parse_shared_url
    from stbproxy.store.tiered import TieredReader

    try:
        return TieredReader(local, SharedBulk(parse_shared_url(shared)))
    except StbError:
        local.close()
        raise


def open_bulk(shared: str | None):
    from stbproxy.store.shared_bulk import SharedBulk
    from stbproxy.store.shared_url import parse_shared_url

    return SharedBulk(parse_shared_url(shared)) if shared else None


class SharedImport:
    """The shared tier's writer during an import (a no-op without --shared)."""

    def __init__(self, shared: str | None) -> None:
        self.bulk = open_bulk(shared)
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


class SharedCopies:
    """What an import also sends to the shared tier (when there is one), in pipelined batches."""

    def __init__(self, bulk) -> None:
        self.bulk = bulk
        self.entries: list[tuple[str, bytes]] = []
        self.sessions: list[tuple[str, bytes]] = []
        self.added = 0

    def entry(self, exchange) -> None:
        from stbproxy.store.record_format import encode_exchange

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


# -- sync: the local store and the shared tier ------------------------------------------------------


@click.command()
@store_option
@shared_option
@click.option("--push", "do_push", is_flag=True, help="Copy local records the shared tier lacks up to it.")
@click.option("--pull", "do_pull", is_flag=True, help="Copy shared records the local store lacks down to it.")
def sync(store, shared, do_push, do_pull):
    """Copy cache entries and logged records between the local store and the shared tier.

    Each side keeps what it holds already, so running it twice copies nothing. The catalog
    goes along too: --push publishes the store's catalog.json, --pull fetches the
    published one when the store has none. Session logs are not copied (a
    proxy with --shared appends them to the shared tier as it runs).

    \b
    Examples:
      stbproxy sync --push --shared redis://cache.internal:6379/0   # seed a new fleet
      stbproxy sync --pull --shared "$STBPROXY_SHARED"              # warm a new machine
    """
    from tqdm import tqdm

    from stbproxy.settings import catalog_path_for
    from stbproxy.store import sync as tier_sync
    from stbproxy.store.embedded import Store

    if not shared:
        fail("give the shared tier: --shared URL (or $STBPROXY_SHARED)")
    if not (do_push or do_pull):
        fail("give --push, --pull or both")
    catalog = catalog_path_for(store)
    damaged: list[str] = []
    try:
        with Store(store) as db, open_bulk(shared) as bulk:
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
