"""Looking after a store: ``stbproxy stats``, ``stbproxy sessions`` and ``stbproxy forget``."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from stbproxy.cli.common import fail, known_session, store_option
from stbproxy.cli.shared_tier import open_bulk, open_reader, print_shared_summary, shared_option, shared_summary
from stbproxy.errors import StbError

# What the logged records (log/<kind>/...) are; none of them is ever served as an answer.
LOGGED_KINDS = {
    "passthrough": "passed through (not served from the store)",
    "invalid": "invalid real answers (kept for the record)",
    "simulated-error": "failed simulations",
    "unavailable": "real API unavailable, no simulator on",
    "injected": "injected faults",
    "miss": "replay misses",
    "upstream": "record mode's copy of each answer, for its session's ordered replay",
}


def _count(n: int, one: str, many: str | None = None) -> str:
    """``1 entry``, ``2 entries``: a count with its noun in the right number."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


@click.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@click.option("--top", type=click.IntRange(1), default=20, show_default=True, help="Hosts to list.")
@click.option("--errors", is_flag=True,
              help="The failure taxonomy of real API calls (success, not available and its kinds, "
                   "not authorised), as counts and shares, connection failures included; TLS set-up "
                   "errors (a configuration to fix) and failures injected with --faults are counted apart.")
@shared_option
def stats(store, as_json, top, errors, shared):
    """Entries by origin and by host, calls by source with hits by origin, simulator use,
    and the store's size.

    Works while a proxy runs (the store is opened read-only).
    """
    from stbproxy.store.embedded import Store
    from stbproxy.store.write_failures import read_status

    try:
        with Store(store, readonly=True) as db:
            result = db.stats(meta_fields=("failure", "fault"), sum_fields=("prompt_tokens", "completion_tokens"))
            calls = _tally(db)
        fleet = shared_summary(shared) if shared else None
    except StbError as exc:
        fail(str(exc))
    failed = read_status(store) or {}  # writes the store refused (a full disk), kept beside it
    if errors:
        _print_taxonomy(result.meta["failure"], result.meta["fault"], calls.errors, as_json, result.imported_failures)
        return
    if as_json:
        click.echo(json.dumps({"store": str(store), **result.to_dict(), "calls": _tally_dict(calls),
                               "failed_writes": failed.get("failed_writes", 0),
                               **({"shared": fleet} if fleet else {})}, indent=2))
        return
    if fleet:
        print_shared_summary(fleet)
    logged_total = sum(result.logged.values())
    click.echo(f"store {store}: {_count(result.entries, 'entry', 'entries')} to serve, "
               f"{_count(logged_total, 'logged record')}"
               + (" (copies kept for the record and never served; 'logged' below says what)" if logged_total else "")
               + f", {result.size_bytes / 1024**2:.1f} MiB on disk")
    if failed:
        click.echo(f"failed writes: {_count(failed['failed_writes'], 'write was', 'writes were')} refused, so "
                   "answers are missing "
                   f"(last: {failed.get('last_error', '?')})")
    if result.damaged:
        click.echo(f"damaged records: {result.damaged}")
    _print_table("entries by origin", result.by_source.most_common(), result.entries)
    if result.failed_by_source:  # served as they are stored, as StableToolBench serves its cached failures
        _print_table("failed answers, by origin (served as stored)",
                     result.failed_by_source.most_common(), result.entries)
    _print_table("host", result.by_host.most_common(top), result.entries)
    _print_table("calls by source (session logs)", calls.by_source.most_common(), calls.calls)
    _print_table("hits by origin", calls.hits_by_origin.most_common(), sum(calls.hits_by_origin.values()))
    _print_tools(calls.tools, top)
    logged = [(f"{kind}: {LOGGED_KINDS[kind]}" if kind in LOGGED_KINDS else kind, n)
              for kind, n in result.logged.most_common()]
    _print_table("logged (never served)", logged, sum(result.logged.values()))
    simulated = result.by_source.get("simulated", 0)
    failed = result.logged.get("simulated-error", 0)
    if simulated or failed:
        click.echo(f"\nsimulator: {_count(simulated, 'answer')} stored, {failed} failed (not stored), "
                   f"{result.sums['prompt_tokens']} prompt + {result.sums['completion_tokens']} completion tokens")
    faulted = sum(result.meta["fault"].values())
    if faulted:
        click.echo(f"injected faults: {_count(faulted, 'record')} made for --faults rules "
                   "('stbproxy forget --faulted' removes the simulated ones)")


def _tally(db):
    """Every session record of the store, counted (sessions.SessionTally)."""
    from stbproxy.sessions import SessionTally

    tally = SessionTally()
    for name in db.session_names():
        for record in db.session_records(name):
            tally.add(record)
    return tally


def _tally_dict(tally) -> dict:
    return {"total": tally.calls, "by_source": dict(tally.by_source.most_common()),
            "hits_by_origin": dict(tally.hits_by_origin.most_common()), "hit_rate": tally.hit_rate,
            "mcp_tools": _tools_rows(tally.tools)}


def _tools_rows(tools) -> list[dict]:
    """MCP tool calls by server and tool, each with its calls by source, most called first."""
    rows: dict[tuple[str, str], dict] = {}
    for (server, tool, source), n in tools.items():
        row = rows.setdefault((server, tool), {"server": server, "tool": tool, "calls": 0, "by_source": {}})
        row["calls"] += n
        row["by_source"][source] = row["by_source"].get(source, 0) + n
    return sorted(rows.values(), key=lambda r: (-r["calls"], r["server"], r["tool"]))


def _print_tools(tools, top: int) -> None:
    rows = _tools_rows(tools)
    if not rows:
        return
    width = max(len("MCP server / tool"), *(len(f"{r['server']} {r['tool']}") for r in rows[:top]))
    click.echo(f"\n{'MCP server / tool':<{width}}  {'calls':>8}  by source")
    for row in rows[:top]:
        sources = ", ".join(f"{source} {n}" for source, n in sorted(row["by_source"].items()))
        click.echo(f"{row['server'] + ' ' + row['tool']:<{width}}  {row['calls']:>8}  {sources}")
    if len(rows) > top:
        click.echo(f"... and {len(rows) - top} more tools (--top)")


def _print_taxonomy(counts, faults, errors, as_json: bool, imported=None) -> None:
    """Real API calls by failure kind: stored answers by their taxonomy, and calls that got
    no answer (a record-mode connection failure: not connected). TLS set-up errors, failures
    injected on purpose and the failed answers of an imported cache apart."""
    from collections import Counter

    from stbproxy.stb.validity import FailureKind, taxonomy_table

    counts = Counter(counts)
    configuration: Counter = Counter()
    for (kind, host), n in errors.items():
        if kind == "tls":
            configuration[host] += n
        else:
            counts[FailureKind.NOT_CONNECTED.value] += n
    rows = taxonomy_table(counts)
    # each: its total and its counts by rule, host or kind (as --json gives them)
    injected: dict[str, Any] = {"total": sum(faults.values()), "by_rule": dict(faults.most_common())}
    tls: dict[str, Any] = {"total": sum(configuration.values()), "by_host": dict(configuration.most_common())}
    cached: dict[str, Any] = {"total": sum((imported or {}).values()),
                              "by_kind": dict(Counter(imported or {}).most_common())}
    if as_json:
        real = [{"kind": str(getattr(r.kind, "value", r.kind)), "count": r.count, "share": r.share} for r in rows]
        click.echo(json.dumps({"real": real, "tls_errors": tls, "injected": injected, "imported_failures": cached},
                              indent=2))
        return
    click.echo(f"{'kind':<22} {'count':>8} {'share':>7}")
    for row in rows:
        kind = str(getattr(row.kind, "value", row.kind))
        click.echo(f"{kind:<22} {row.count:>8} {100 * row.share:>6.1f}%")
    if tls["total"]:
        click.echo(f"\nTLS set-up errors (fix with --upstream-ca or --upstream-insecure; not counted above): "
                   f"{tls['total']}")
        for host, n in tls["by_host"].items():
            click.echo(f"  {host:<38} {n:>8}")
    click.echo(f"\ninjected (--faults, not real failures, not counted above): {injected['total']}")
    for rule, n in injected["by_rule"].items():
        click.echo(f"  {rule:<38} {n:>8}")
    if cached["total"]:
        click.echo(f"\nimported failed answers (an imported cache's, served as stored; not counted above): "
                   f"{cached['total']}")
        for kind, n in cached["by_kind"].items():
            click.echo(f"  {kind:<38} {n:>8}")


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
@shared_option
def sessions(store, as_json, shared):
    """Sessions with their answers by source, hits by origin and cache hit rate (works while
    a proxy runs).

    The hit rate counts cache answers among all answers but passthrough ones (an agent's
    own LLM calls, counted apart), as StableToolBench reports its cache hit rates. Hits are
    counted by the origin of the answer they served (upstream, simulated, imported, ...).
    """
    try:
        with open_reader(store, shared) as db:
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
    click.echo(f"{'session':<{width}}  {'calls':>6}  " + "  ".join(f"{s:>11}" for s in sources)
               + "  hit rate  hits by origin")
    for row in rows:
        counts = "  ".join(f"{row['by_source'].get(s, 0):>11}" for s in sources)
        rate = "-" if row["hit_rate"] is None else f"{100 * row['hit_rate']:.1f}%"
        origins = ", ".join(f"{origin} {n}" for origin, n in row["hits_by_origin"].items()) or "-"
        click.echo(f"{row['name']:<{width}}  {row['calls']:>6}  {counts}  {rate:>8}  {origins}")
    for row in rows:
        fork = row["fork"]
        if fork:
            stopped = f"; stopped early at {fork['stopped']}" if fork["stopped"] else ""
            click.echo(f"  {row['name']}: fork of {fork['from']}@{fork['at']}, "
                       f"{fork['replayed']} calls replayed{stopped}")
        for tool in row["mcp_tools"]:
            sources = ", ".join(f"{source} {n}" for source, n in sorted(tool["by_source"].items()))
            click.echo(f"  {row['name']}: MCP {tool['server']} {tool['tool']}: {tool['calls']} calls ({sources})")


def _session_summary(name: str, records) -> dict:
    from stbproxy.sessions import SessionTally

    tally = SessionTally()
    for record in records:
        tally.add(record)
    return {"name": name, "calls": tally.calls, "by_source": dict(tally.by_source),
            "hits_by_origin": dict(tally.hits_by_origin.most_common()),
            "passthrough": tally.by_source.get("passthrough", 0), "hit_rate": tally.hit_rate,
            "mcp_tools": _tools_rows(tally.tools), "fork": tally.fork, "first": tally.first, "last": tally.last}


# -- forget ---------------------------------------------------------------------------------

FEW = 10  # forgetting more entries than this asks first (unless --yes)
FORGETTABLE_SOURCES = ("upstream", "simulated", "imported")


@click.command()
@store_option
@click.option("--source", "sources", multiple=True, type=click.Choice(FORGETTABLE_SOURCES),
              help="Forget entries with this source (repeatable).")
@click.option("--faulted", is_flag=True,
              help="Forget only answers simulated because --faults injected a failure: exactly what a "
                   "fault experiment added.")
@click.option("--host", "hosts", multiple=True, metavar="GLOB", help="Forget entries of this host (repeatable).")
@click.option("--api", "apis", multiple=True, metavar="PREFIX",
              help="Forget entries of catalog APIs under Category[/tool[/api]] (a prefix, or a glob such as "
                   "'*/weather_for_data/*'; repeatable).")
@click.option("--session", default=None, metavar="NAME", help="Forget the entries this session's log points at.")
@click.option("--key", "keys", multiple=True, metavar="PREFIX",
              help="Forget entries whose store key starts with PREFIX (or matches it as a glob; repeatable).")
@click.option("--older-than", default=None, metavar="AGE",
              help="Forget entries stored more than AGE ago (30m, 12h, 7d).")
@click.option("--newer-than", default=None, metavar="AGE",
              help="Forget entries stored less than AGE ago (30m, 12h, 7d).")
@click.option("--dry-run", is_flag=True, help="List what would be forgotten, and forget nothing.")
@click.option("-y", "--yes", is_flag=True, help=f"Do not ask before forgetting more than {FEW} entries.")
@shared_option
def forget(store, sources, faulted, hosts, apis, session, keys, older_than, newer_than, dry_run, yes, shared):
    """Remove stored answers, so that the next request asks the real API again.

    Every option given must hold; repeating one means either value. Typical: the API was
    down, answers were simulated, it is back:

    \b
      stbproxy forget --source simulated --dry-run      # what would go
      stbproxy forget --source simulated --host api.example.com
      stbproxy forget --faulted                         # what a --faults run added
      stbproxy forget --api Finance/stock_quotes --older-than 30d

    The store must not be in use by a running proxy (stop it first, or use
    'stbproxy serve --refresh-simulated' to replace simulated answers while serving).
    Session logs and logged records are kept; an export skips answers that are gone.
    With --shared the selection covers the shared tier too and is forgotten from both;
    the local stores of other machines keep their copies.
    """
    from contextlib import nullcontext

    from stbproxy.forgetting import Selection
    from stbproxy.store.embedded import Store
    from stbproxy.store.tiered import TieredReader

    if not (store / "CURRENT").exists():
        fail(f"no store at {store} (pass --store, or set STBPROXY_STORE)")
    try:
        older = _age("--older-than", older_than)
        newer = _age("--newer-than", newer_than)
        with Store(store, readonly=dry_run) as local, \
                (TieredReader(local, open_bulk(shared)) if shared else nullcontext(local)) as db:
            where = f"{store} and the shared tier {db.shared.url.redacted}" if shared else str(store)
            session_keys = None
            if session is not None:
                name = known_session(db, session)
                session_keys = frozenset(r.get("key") or "" for r in db.session_records(name))
            selection = Selection(tuple(sources), tuple(hosts), tuple(apis), tuple(keys), faulted, older, newer,
                                  session_keys)
            if selection.is_empty():
                fail("say what to forget: --source, --faulted, --host, --api, --session, --key, --older-than "
                     "or --newer-than (see 'stbproxy forget --help')")
            now = time.time()
            chosen = [ex for ex in db.entries() if selection.matches(ex, now)]
            if dry_run:
                _list_forgotten(chosen, "would forget")
                click.echo(f"{len(chosen)} entries would be forgotten from {where} (dry run: nothing changed)")
                return
            if not chosen:
                click.echo(f"nothing to forget in {where}")
                return
            if len(chosen) > FEW and not yes:
                _list_forgotten(chosen, "forget", limit=FEW)
                if not click.confirm(f"forget {len(chosen)} entries from {where}?", default=False, err=True):
                    fail("nothing forgotten", 1)
            chosen_keys = [ex.key for ex in chosen]
            local.delete_many(chosen_keys)
            if shared:
                for start in range(0, len(chosen_keys), 1000):  # one pipelined round trip per batch
                    db.shared.delete(chosen_keys[start:start + 1000])
    except StbError as exc:
        fail(str(exc))
    by_source: dict[str, int] = {}
    for ex in chosen:
        by_source[ex.source.value] = by_source.get(ex.source.value, 0) + 1
    counts = ", ".join(f"{n} {source}" for source, n in sorted(by_source.items()))
    click.echo(f"forgot {len(chosen)} entries from {where} ({counts})")
    if shared:
        click.echo("note: the local stores of other machines keep their copies of these answers and serve "
                   "them; run the same 'stbproxy forget' there (without --shared) to forget them everywhere",
                   err=True)


def _age(flag: str, text: str | None) -> float | None:
    from stbproxy.forgetting import parse_age

    try:
        return parse_age(text) if text else None
    except StbError as exc:
        fail(f"{flag}: {exc}")


def _list_forgotten(chosen, verb: str, limit: int = 50) -> None:
    for ex in chosen[:limit]:
        what = str(ex.api) if ex.api is not None else f"{ex.request.method} {ex.request.url}"
        stored = time.strftime("%Y-%m-%d %H:%M", time.localtime(ex.stored_at))
        mark = f", fault {ex.meta['fault']}" if ex.meta.get("fault") else ""
        click.echo(f"  {verb}: {ex.source.value} {what} (stored {stored}{mark})", err=True)
    if len(chosen) > limit:
        click.echo(f"  ... and {len(chosen) - limit} more", err=True)
