"""Looking after a store: ``stbproxy stats`` and ``stbproxy sessions``."""

from __future__ import annotations

import json

import click

from stbproxy.cli.common import fail, store_option
from stbproxy.errors import StbError


@click.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--top", type=click.IntRange(1), default=20, show_default=True, help="Hosts to list.")
@click.option("--errors", is_flag=True,
              help="The failure taxonomy of real API answers (success, not available and its kinds, "
                   "not authorised), as counts and shares.")
def stats(store, as_json, top, errors):
    """Entries by source and by host, simulator use, and the store's size.

    Works while a proxy runs (the store is opened read-only).
    """
    from stbproxy.store import Store

    try:
        with Store(store, readonly=True) as db:
            result = db.stats(meta_fields=("failure",), sum_fields=("prompt_tokens", "completion_tokens"))
    except StbError as exc:
        fail(str(exc))
    if errors:
        _print_taxonomy(result.meta["failure"], as_json)
        return
    if as_json:
        click.echo(json.dumps({"store": str(store), **result.to_dict()}, indent=2))
        return
    click.echo(f"store {store}: {result.entries} entries, {sum(result.logged.values())} logged records, "
               f"{result.size_bytes / 1024**2:.1f} MiB on disk")
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


@click.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def sessions(store, as_json):
    """Sessions with their answers by source and cache hit rate (works while a proxy runs).

    The hit rate counts cache answers among all answers but passthrough ones (an agent's
    own LLM calls), as StableToolBench reports its cache hit rates.
    """
    from stbproxy.store import Store

    try:
        with Store(store, readonly=True) as db:
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
