"""Moving data in and out of a store: ``stbproxy export`` and ``stbproxy import ...``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from stbproxy.cli.common import fail, known_session, store_option
from stbproxy.cli.shared_tier import SharedCopies, SharedImport, open_bulk, open_reader, shared_option
from stbproxy.errors import StbError


# -- export ----------------------------------------------------------------------------------


@click.command()
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
    from stbproxy.cassette_store import session_exchanges
    from stbproxy.sessions import safe_session_name

    if (session is None) == (pattern is None):
        fail("give exactly one of --session NAME or --all GLOB")
    if by_conversation and session is None:
        fail("--by-conversation needs --session NAME")
    if output is not None and output.is_dir() and not by_conversation:
        fail(f"{output} is a folder; give a cassette file name")
    skipped: list[str] = []
    try:
        with open_reader(store, shared) as db:
            if session is not None:
                name = known_session(db, session)
                output = output or Path(f"{safe_session_name(name)}.{cassettes.format_for('', fmt)}")
                exchanges, missing = session_exchanges(db, name)
                skipped.extend(missing)
            else:
                output = output or Path(f"export.{cassettes.format_for('', fmt)}")
                exchanges = [ex for ex in db.entries() if _matches(ex, pattern)]
            skipped.extend(getattr(db, "damaged", ()))  # shared values that do not decode
        total = len(exchanges)
        if exclude_simulated:
            exchanges = [ex for ex in exchanges if ex.source.value not in MADE_UP]
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
               + (f", {len(skipped)} skipped" if skipped else "") + f" (by origin: {_origins(exchanges)})")


# Answers the proxy made up because no real one was had: --exclude-simulated leaves them out.
MADE_UP = frozenset({"simulated", "simulated-error", "unavailable"})


def _origins(exchanges) -> str:
    """How many exported answers came from where (upstream, simulated, imported, ...)."""
    from collections import Counter

    counts = Counter(ex.source.value for ex in exchanges)
    return ", ".join(f"{origin} {n}" for origin, n in counts.most_common()) or "none"


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


def _matches(exchange, pattern: str) -> bool:
    from fnmatch import fnmatchcase

    names = [exchange.request.host, exchange.key]
    if exchange.api is not None:
        names.append(str(exchange.api))
    return any(fnmatchcase(name, pattern) for name in names)


# -- import ----------------------------------------------------------------------------------


@click.group(name="import")
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
        # bulk_load: unlogged writes, flushed to disk before the summary is printed
        with Store(store) as db, db.bulk_load(), SharedImport(shared) as writer:
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

            with open_bulk(shared) as bulk:
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
        with Store(store) as db, SharedCopies(open_bulk(shared)) as copies:
            for path in files:
                now = time.time()
                for pair in _interactions_of(path, problems):
                    if isinstance(pair, str):
                        problems.append(f"{path}: {pair}")
                        continue
                    index, request, response, recorded_source = pair
                    exchange = cassettes.imported_exchange(request, response, catalog=catalog, rules=rules, now=now,
                                                           meta={"imported_from": path.name, "index": index},
                                                           recorded_source=recorded_source)
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


def _interactions_of(path: Path, problems: list[str]):
    """(index, request, response, the origin it was recorded with) per usable interaction of
    a cassette or flow file, and a text per unusable one; a file that cannot be read at all
    is one problem."""
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
                    yield index, request, response, None
            return
        interactions, bad = cassettes.read_cassette(path)
    except StbError as exc:
        problems.append(str(exc))
        return
    for item in interactions:
        yield item.index, item.request, item.response, item.source
    for problem in bad:
        yield str(problem)

