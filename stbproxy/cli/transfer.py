"""Moving data in and out of a store: ``stbproxy export`` and ``stbproxy import ...``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from stbproxy.cli.common import ctrl_c_between_writes, fail, interrupted, known_session, store_option
from stbproxy.cli.shared_tier import SharedCopies, SharedImport, open_bulk, open_reader, shared_option
from stbproxy.errors import StbError

# -- export ----------------------------------------------------------------------------------


@click.command()
@click.option("--session", "session", default=None, metavar="NAME", help="Export this session, in its order.")
@click.option("--all", "pattern", default=None, metavar="GLOB",
              help="Export every stored exchange whose host (or host:port, example.com:443 for https), "
                   "category/tool/api or key matches the glob; none matching is an error.")
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
    from stbproxy.cassettes import vcr_format as cassettes
    from stbproxy.cassettes.store import session_exchanges
    from stbproxy.sessions import safe_session_name

    if (session is None) == (pattern is None):
        fail("give exactly one of --session NAME or --all GLOB")
    if by_conversation and session is None:
        fail("--by-conversation needs --session NAME")
    if output is not None and output.is_dir() and not by_conversation:
        fail(f"{output} is a folder; give a cassette file name")
    if output is not None and not by_conversation and not output.parent.is_dir():  # before any work
        fail(f"cannot write {output}: the directory {output.parent} does not exist")
    skipped: list[str] = []
    left_out: list = []  # exchanges that could not be written: named, the rest are written
    try:
        with open_reader(store, shared) as db:
            if session is not None:
                name = known_session(db, session)
                output = output or Path(f"{safe_session_name(name)}.{cassettes.format_for('', fmt)}")
                exchanges, missing = session_exchanges(db, name)
                skipped.extend(missing)
            else:
                exchanges = [ex for ex in db.entries() if _matches(ex, pattern)]
                if not exchanges:
                    fail(_nothing_matches(db, pattern))
                output = output or Path(f"export.{cassettes.format_for('', fmt)}")
            skipped.extend(getattr(db, "damaged", ()))  # shared values that do not decode
        total = len(exchanges)
        if exclude_simulated:
            exchanges = [ex for ex in exchanges if ex.source.value not in MADE_UP]
        if by_conversation:
            return _export_conversations(exchanges, output or Path(safe_session_name(name)), fmt, queries,
                                         name, skipped)
        written = cassettes.write_cassette(output, exchanges, cassettes.format_for(output, fmt), left_out=left_out)
    except StbError as exc:
        fail(str(exc))
    for line in skipped[:50]:
        click.echo(f"  skipped: {line}", err=True)
    if len(skipped) > 50:
        click.echo(f"  ... and {len(skipped) - 50} more", err=True)
    _report_left_out(left_out)
    simulated = f", {total - len(exchanges)} simulated left out" if exclude_simulated else ""
    left_out_ids = {item.index for item in left_out}
    click.echo(f"wrote {written} interactions to {output}{simulated}"
               + (f", {len(skipped)} skipped" if skipped else "")
               + (f", {len(left_out)} not exported" if left_out else "")
               + f" (by origin: {_origins(ex for i, ex in enumerate(exchanges) if i not in left_out_ids)})")
    if left_out:
        fail(f"{len(left_out)} of {len(exchanges)} entries could not be exported (each is named above); "
             f"the other {written} are in {output}", 1)


# Answers the proxy made up because no real one was had: --exclude-simulated leaves them out.
MADE_UP = frozenset({"simulated", "simulated-error", "unavailable"})


def _report_left_out(left_out) -> None:
    """One line per exchange an export could not write: its method, redacted URL, key and why."""
    for item in left_out[:50]:
        click.echo(f"  not exported: {item}", err=True)
    if len(left_out) > 50:
        click.echo(f"  ... and {len(left_out) - 50} more not exported", err=True)


def _origins(exchanges) -> str:
    """How many exported answers came from where (upstream, simulated, imported, ...)."""
    from collections import Counter

    counts = Counter(ex.source.value for ex in exchanges)
    return ", ".join(f"{origin} {n}" for origin, n in counts.most_common()) or "none"


def _export_conversations(exchanges, folder: Path, fmt, queries, name: str, skipped: list[str]) -> None:
    from stbeval.errors import EvalError
    from stbeval.sources import load_queries
    from stbproxy.cassettes.conversations import export_by_conversation

    try:
        index, problems = load_queries(queries)
    except EvalError as exc:
        fail(str(exc))
    result = export_by_conversation(exchanges, folder, fmt=fmt or "yaml", queries=index, where=f"session {name}")
    for line in [*problems, *result.notes, *(f"skipped: {s}" for s in skipped)]:
        click.echo(f"  {line}", err=True)
    _report_left_out(result.left_out)
    total = sum(count for _path, count in result.written)
    click.echo(f"wrote {len(result.written)} cassettes ({total} interactions) to {folder}"
               + (f", {len(result.left_out)} not exported" if result.left_out else ""))
    if result.left_out:
        fail(f"{len(result.left_out)} entries could not be exported (each is named above); "
             f"the other {total} are in {folder}", 1)


def _matches(exchange, pattern: str) -> bool:
    """Whether ``--all GLOB`` picks an exchange: by its host, its host and port as a user
    writes them (``example.com:443`` for https too), its category/tool/api or its key; a
    pattern equal to one of them picks it even where it reads as a glob (``[::1]:8443``)."""
    from fnmatch import fnmatchcase

    hosts = _host_names(exchange.request.url)
    names = [exchange.key, *([str(exchange.api)] if exchange.api is not None else [])]
    lowered = pattern.lower()  # host names are case-insensitive
    return (any(name == pattern or fnmatchcase(name, pattern) for name in names)
            or any(host == lowered or fnmatchcase(host, lowered) for host in hosts))


_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def _host_names(url: str) -> list[str]:
    """A URL's host as a user writes it: alone, and with its port (the scheme's default
    port when the URL names none); an IPv6 address bare and in brackets."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host, port = (parts.hostname or "").lower(), parts.port
    except ValueError:
        return []
    if not host:
        return []
    port = port if port is not None else _DEFAULT_PORTS.get(parts.scheme.lower())
    shown = f"[{host}]" if ":" in host else host
    names = [host] if shown == host else [host, shown]
    return names + ([f"{shown}:{port}"] if port is not None else [])


def _nothing_matches(db, pattern: str) -> str:
    """The one line of an --all that picks nothing, naming a few stored hosts to choose from."""
    from collections import Counter

    hosts: Counter = Counter()
    for exchange in db.entries():
        names = _host_names(exchange.request.url)
        if names:
            hosts[names[-1]] += 1
    known = ", ".join(host for host, _n in hosts.most_common(5))
    more = f" and {len(hosts) - 5} more" if len(hosts) > 5 else ""
    return (f"--all {pattern!r} matches no stored exchange (compared with each host, host:port, "
            "category/tool/api and store key); nothing written"
            + (f"; stored hosts: {known}{more}" if hosts else "; the store holds no entries"))


# -- import ----------------------------------------------------------------------------------


@click.group(name="import")
def import_group() -> None:
    """Bring existing data into the store or the catalog."""


@import_group.command(name="stb-cache")
@click.argument("cache_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@store_option
@click.option("--skip-failures", is_flag=True,
              help="Leave out cached failures (answers StableToolBench's check_result rejects), so that a call "
                   "that meets one asks the real API again, or the simulator [default: import them, as "
                   "StableToolBench's server serves whatever its cache holds].")
@click.option("--include-invalid", is_flag=True,
              help="No effect, accepted for old scripts: cached failures are imported by default now.")
@click.option("--stb-keys", type=click.Choice(["exact", "canonical"]), default="exact", show_default=True,
              help="How entries are keyed: exact, by the cache's own key text, as StableToolBench's server looks "
                   "a call up; canonical, by the arguments compared as text in any order. Serve the store with "
                   "the same --stb-keys.")
@click.option("--jobs", type=click.IntRange(1), default=None,
              help="Worker processes that parse and encode files [default: one per core].")
@click.option("--strict", is_flag=True,
              help="Import nothing when a folder or file is named so that no request reaches it (or only under "
                   "a spelling the catalog does not use) [default: leave those out, name them, import the rest].")
@shared_option
def import_stb_cache(cache_dir, store, skip_failures, include_invalid, stb_keys, jobs, strict, shared):
    """Import StableToolBench's response cache (<category>/<tool>/<api>.json).

    Every entry is keyed as StableToolBench's server looks it up (or canonically, with
    --stb-keys canonical) and marked 'imported'; cached failures are kept and served as
    that server serves them (unless --skip-failures). Running it twice adds nothing.
    Entries that cannot be read are listed with file and reason; they never stop the
    import. A folder or file whose name no request can produce (a tool folder
    without its _for_<category> suffix, a category folder spelt otherwise than its tool
    folders say, an API file name that is not standardized) is left out and named, with
    the name it should have. The exit status is 1 when nothing could be imported, and
    130 after Ctrl-C, which stops between two files and leaves the store consistent.

    \b
    Example: stbproxy import stb-cache server/tool_response_cache --store .stbproxy/store
    """
    from stbproxy.keys import KeyRules
    from stbproxy.stb_cache import importer as stb_cache
    from stbproxy.store.embedded import Store

    rules = KeyRules(stb_keys=stb_keys)
    try:
        files, placement, catalog_file = _placed_cache_files(cache_dir, store)
        _report_misplaced(placement, strict)
        summary = stb_cache.ImportSummary(files=len(files))
        with ctrl_c_between_writes() as ctrl_c:
            try:
                # bulk_load: unlogged writes, flushed to disk before the summary is printed
                with Store(store) as db, db.bulk_load(), SharedImport(shared) as writer:
                    _check_keys_of(db, store, stb_keys)
                    with ctrl_c.stoppable():
                        _import_entries(db, placement.reachable, cache_dir, catalog_file, rules, skip_failures,
                                        jobs, summary, ctrl_c, writer)
                summary.shared_added = writer.added
            except KeyboardInterrupt:
                if not ctrl_c.requested:  # not a Ctrl-C that this import handles
                    raise
                # a second Ctrl-C: the store was flushed and closed on the way out all the same
            _end_import(summary, placement, shared, ctrl_c.requested, store)
    except StbError as exc:
        fail(str(exc))


def _end_import(summary, placement, shared, stopped: bool, store: Path) -> None:
    _print_import_summary(summary, placement, shared)
    if stopped:
        interrupted(f"{summary.imported} entries imported from {summary.files_done} of {len(placement.reachable)} "
                    f"files, and the store at {store} is consistent (each file is one atomic write, and the store "
                    "was flushed and closed); the same command imports the rest")
    if summary.imported + summary.duplicates == 0:
        fail(f"nothing imported: {_why_nothing(summary)}", 1)


def _check_keys_of(db, store: Path, stb_keys: str) -> None:
    """Entries under other keys than the store holds would never meet its calls: refused."""
    from stbproxy.keys import stb_keys_of

    first = next(iter(db.keys("api/")), None)
    made = stb_keys_of(first) if first is not None else None
    if made is not None and made != stb_keys:
        fail(f"the store at {store} holds StableToolBench calls under {made} keys, and this import would add "
             f"{stb_keys} keys, which no proxy serving it would meet: import with --stb-keys {made}, or into "
             "a new store")


def _placed_cache_files(cache_dir: Path, store: Path):
    """The cache files, which of them a request can reach, and the catalog file to key them with."""
    from stbproxy.settings import catalog_path_for
    from stbproxy.stb.catalog import Catalog
    from stbproxy.stb_cache import importer as stb_cache
    from stbproxy.stb_cache import placement as cache_placement

    files = stb_cache.cache_files(cache_dir)
    if not files:
        fail(f"nothing imported: no <category>/<tool>/<api>.json files in {cache_dir}"
             f"{cache_placement.missing_layout_hint(cache_dir)}", 1)
    catalog_file = catalog_path_for(store)
    catalog_file = catalog_file if catalog_file.exists() else None
    catalog = Catalog.load(catalog_file) if catalog_file is not None else None
    return files, cache_placement.check(files, cache_dir, catalog), catalog_file


def _report_misplaced(placement, strict: bool) -> None:
    """Every misnamed folder and file, with the name it should have: all of them, as they are
    what a user (or a renaming script) works through."""
    for item in placement.misplaced:
        click.echo(f"  {'other spelling' if item.reachable else 'unreachable'}: {item}", err=True)
    if strict and placement.misplaced:
        fail(f"nothing imported (--strict): {len(placement.misplaced)} folders and files are named so that no "
             "request reaches them, or only under a spelling the catalog does not use (listed above)", 1)
    if not placement.reachable:
        fail(f"nothing imported: no request can reach any of the {placement.unreachable_files} cache files "
             "(their folders and names, and the names they should have, are listed above)", 1)


def _print_import_summary(summary, placement, shared) -> None:
    click.echo(f"files: {summary.files}, entries read: {summary.entries}")
    unreachable = placement.unreachable_files
    failures = (f"failed answers left out (--skip-failures): {summary.skipped}" if summary.skipped
                else f"failed answers kept (served as StableToolBench serves them): {summary.failures}")
    click.echo(f"imported: {summary.imported}, duplicates: {summary.duplicates}, {failures}, "
               f"unparseable: {summary.unparseable}"
               + (f", unreachable files (left out): {unreachable}" if unreachable else ""))
    if shared:
        click.echo(f"shared tier: {summary.shared_added} added, "
                   f"{summary.shared_sent - summary.shared_added} already there")
    for problem in summary.problems:
        click.echo(f"  unparseable: {problem}", err=True)
    if summary.unparseable > len(summary.problems):
        click.echo(f"  ... and {summary.unparseable - len(summary.problems)} more", err=True)


def _why_nothing(summary) -> str:
    if summary.entries == 0 and not summary.unparseable:
        return "the cache files hold no entries"
    if summary.skipped:
        return (f"the {summary.skipped} entries that could be read are failed answers (StableToolBench's "
                "check_result rejects them), left out by --skip-failures")
    return "no entry could be read (the reasons are above)"


def _import_entries(db, files, root, catalog_file, rules, skip_failures, jobs, summary, ctrl_c, shared=None) -> None:
    """Import ``files`` into ``summary``, one atomic write per file; stops between two files
    once Ctrl-C was pressed."""
    import time
    from contextlib import closing

    from tqdm import tqdm

    from stbproxy.stb_cache import importer as stb_cache
    encoded_files = stb_cache.encoded_files(files, root, catalog_file=catalog_file, rules=rules,
                                            skip_failures=skip_failures, now=time.time(), jobs=jobs,
                                            shield=ctrl_c.holding)
    with tqdm(total=len(files), unit="file", desc="importing", disable=None, dynamic_ncols=True) as bar, \
            closing(encoded_files):
        for encoded in encoded_files:
            with ctrl_c.holding():
                _import_file(db, encoded, summary, shared)
            bar.update(1)
            bar.set_postfix(entries=summary.entries, refresh=False)
            if ctrl_c.requested:
                break


def _import_file(db, encoded, summary, shared) -> None:
    summary.entries += encoded.entries
    summary.failures += encoded.failures
    summary.skipped += encoded.skipped
    summary.add_problems(encoded.unparseable, encoded.problems)
    fresh: dict[str, bytes] = {}
    stored = db.existing([key for key, _ in encoded.records])
    for key, value in encoded.records:
        if key in stored or key in fresh:
            summary.duplicates += 1
        else:
            fresh[key] = value
    db.put_encoded_many(list(fresh.items()))  # one atomic batch per file
    summary.imported += len(fresh)
    summary.files_done += 1
    if shared is not None and shared.writer is not None:
        shared.put(encoded.records)  # every record, not only the fresh ones: the shared tier may lack them
        summary.shared_sent += len(encoded.records)


@import_group.command(name="tools")
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@store_option
@click.option("--catalog", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Catalog file to update [default: catalog.json in the store's folder].")
@shared_option
def import_tools(sources, store, catalog, shared):
    """Load ToolBench tool docs (a tools/<Category>/<tool>.json folder) and StableToolBench
    query files (G*_*.json, which add parameters and template responses) into the catalog
    that the proxy routes and simulates with.

    \b
    Example: stbproxy import tools data/toolenv/tools solvable_queries/test_instruction/*.json
    """
    from stbproxy.private_files import private_dir
    from stbproxy.settings import catalog_path_for
    from stbproxy.stb.catalog import Catalog

    target = catalog or catalog_path_for(store)
    saved = False
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
        private_dir(target.parent)  # a store folder made here is the store's: owner-only
        known.save(target)  # atomic: a Ctrl-C leaves the old catalog or the new one
        saved = True
        if shared:  # published for the fleet: 'stbproxy sync --pull' fetches it on each machine
            from stbproxy.store.sync import push_catalog

            with open_bulk(shared) as bulk:
                push_catalog(bulk, target.read_bytes())
    except StbError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        interrupted(f"the catalog {target} was saved with {len(known)} APIs, but not published to the shared tier"
                    if saved else f"nothing saved: the catalog {target} is as it was")
    click.echo(f"catalog {target}: {len(known)} APIs ({len(known) - before} new)"
               + (", published to the shared tier" if shared else ""))


@import_group.command(name="cassette")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True, path_type=Path))
@store_option
@click.option("--session", default=None, metavar="NAME",
              help="Also log the imported interactions, in file order, as this session "
                   "(so that 'export --session NAME' gives them back in order); a cassette already "
                   "logged there is not logged again.")
@shared_option
def import_cassette(files, store, session, shared):
    """Import vcrpy cassettes (YAML or JSON) and mitmproxy flow files (mitmdump -w).

    Each interaction is keyed as the proxy keys that request, redacted, and stored with
    source 'imported'; what is stored already is left alone, so running it twice adds
    nothing, to the store or to the session's log (which logs each cassette's calls once, and
    after Ctrl-C logs only the rest when the same command runs again). YAML is loaded safely
    (tags such as !!python/object are refused). A bad interaction or file is reported with
    its place and never stops the rest; the exit status is 1 when anything was reported.

    \b
    Examples:
      stbproxy import cassette tests/cassettes/*.yaml
      mitmdump -w flows.mitm ...; stbproxy import cassette flows.mitm --session captured
    """
    from stbproxy.runtime import load_catalog, load_openapi
    from stbproxy.sessions import safe_session_name
    from stbproxy.settings import Settings
    from stbproxy.store.embedded import Store

    if session is not None and safe_session_name(session) != session:
        fail(f"session name {session!r} must use only letters, digits, '.', '_' and '-'")
    counts = _CassetteCounts()
    problems: list[str] = []
    shared_added = files_done = 0
    try:
        settings = Settings(store=store)
        catalog, rules, openapi = load_catalog(settings), settings.key_rules(), load_openapi(settings)
        keying = {"catalog": catalog, "rules": rules, "openapi": openapi}
        with ctrl_c_between_writes() as ctrl_c:
            try:
                with Store(store) as db, SharedCopies(open_bulk(shared)) as copies, ctrl_c.stoppable():
                    for path in files:
                        if _import_one_cassette(db, copies, path, session, keying, counts, problems, ctrl_c):
                            files_done += 1  # every interaction of the file is in
                        if ctrl_c.requested:
                            break
                    shared_added = copies.flush()
            except KeyboardInterrupt:
                if not ctrl_c.requested:
                    raise
            click.echo(f"files: {len(files)}, imported: {counts.imported}, duplicates: {counts.duplicates}, "
                       f"problems: {len(problems)}" + (f", shared tier: {shared_added} added" if shared else "")
                       + (f"; session {session}: {counts.logged} calls logged" if session is not None else "")
                       + (f", {counts.logged_before} were logged already by an earlier import of the same "
                          "cassette (left as they are)" if counts.logged_before else ""))
            if ctrl_c.requested:
                logged = f" ({counts.logged} calls logged in session {session})" if session is not None else ""
                interrupted(f"{counts.imported} interactions imported{logged}, {files_done} of {len(files)} files "
                            f"whole, and the store at {store} is consistent (flushed and closed); the same command "
                            "imports the rest" + (", and logs only the calls not logged yet" if session else ""))
    except StbError as exc:
        fail(str(exc))
    for problem in problems[:50]:
        click.echo(f"  problem: {problem}", err=True)
    if len(problems) > 50:
        click.echo(f"  ... and {len(problems) - 50} more", err=True)
    if problems:
        sys.exit(1)


class _CassetteCounts:
    """What an import of cassettes did: entries stored and found stored, calls logged in the
    session and calls left out of it because an earlier import of the same cassette logged them."""

    def __init__(self) -> None:
        self.imported = self.duplicates = self.logged = self.logged_before = 0


# Interactions written to the store in one atomic batch (entries, session records and the mark).
_IMPORT_BATCH = 1000


def _import_one_cassette(db, copies, path: Path, session: str | None, keying: dict, counts: _CassetteCounts,
                         problems: list[str], ctrl_c) -> bool:
    """Import one cassette or flow file; True when every interaction of it is in.

    With a session, its calls are logged once however often the import runs: a cassette is
    known by the SHA-256 of its bytes, each session record says which cassette and which
    interaction it logs (``cassette``, ``interaction``), and a mark in the store
    (``meta/imports/<session>/<sha256>``) holds the last interaction logged and the sequence
    number of its record, written in the same atomic batch as the records. A later import of
    the same cassette into that session, whole or cut short by Ctrl-C or a crash, logs only
    the interactions after the mark (entries are stored only where their key is free anyway).
    A mark whose record is not in the log (a store put back from an older copy) counts for nothing.
    """
    import time

    from stbproxy.cassettes import reading as cassette_reading
    from stbproxy.sessions import SessionRecord

    now = time.time()
    digest = _file_digest(path) if session is not None else None
    mark_name = f"imports/{session}/{digest}" if digest is not None else None
    logged_through = _logged_through(db, session, mark_name, digest) if mark_name is not None else -1
    pending: list[tuple] = []  # (exchange, its session record or None, its index)

    def write() -> None:
        if not pending:
            return
        records = [record for _ex, record, _index in pending if record is not None]
        last = max((index for _ex, record, index in pending if record is not None), default=None)
        mark = (mark_name, {"file": path.name, "interaction": last}) if last is not None else None
        with ctrl_c.holding():  # the entries, their session records, the mark and the counts together
            stored = db.put_imported([ex for ex, _record, _index in pending], session, records, mark)
            counts.imported += stored
            counts.duplicates += len(pending) - stored
            counts.logged += len(records)
        for exchange, record, _index in pending:
            copies.entry(exchange)
        for record in records:
            copies.session(session, record)
        pending.clear()

    whole = False
    for pair in _interactions_of(path, problems):
        if ctrl_c.requested:
            break
        if isinstance(pair, str):
            problems.append(f"{path}: {pair}")
            continue
        index, request, response, recorded_source = pair
        exchange = cassette_reading.imported_exchange(
            request, response, now=now, meta={"imported_from": path.name, "index": index},
            recorded_source=recorded_source, **keying)
        record = None
        if session is not None:
            if index <= logged_through:
                counts.logged_before += 1
            else:
                record = SessionRecord(0, now, exchange.request.method, exchange.request.url, response.status,
                                       exchange.source.value, exchange.key, 0.0,
                                       facts={"cassette": (digest or "")[:16], "interaction": index}).to_stored()
        pending.append((exchange, record, index))
        if len(pending) >= _IMPORT_BATCH:
            write()
    else:
        whole = True
    write()
    return whole


def _file_digest(path: Path) -> str | None:
    """The SHA-256 of a file's bytes (None when it cannot be read: the reader reports that)."""
    import hashlib

    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def _logged_through(db, session: str, mark_name: str, digest: str) -> int:
    """The last interaction of this cassette that an earlier import logged in the session
    (-1: none), from the import mark, checked against the record it names."""
    mark = db.get_meta(mark_name)
    if not isinstance(mark, dict) or not isinstance(mark.get("seq"), int):
        return -1
    record = db.session_record(session, mark["seq"])
    if record is None or record.get("cassette") != digest[:16] or record.get("interaction") != mark.get("interaction"):
        return -1
    return mark["interaction"]


def _interactions_of(path: Path, problems: list[str]):
    """(index, request, response, the origin it was recorded with) per usable interaction of
    a cassette or flow file, and a text per unusable one; a file that cannot be read at all
    is one problem."""
    from stbproxy.cassettes import reading as cassette_reading
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
    except OSError as exc:
        problems.append(f"{path}: cannot read: {exc.strerror or exc}")
        return
    try:
        if cassette_reading.is_flow_file(head):
            from stbproxy import mitm  # mitmproxy is heavy: loaded only for flow files
            from stbproxy.redact import redact_request

            for index, (request, response) in enumerate(mitm.read_flow_file(path)):
                if response is None:
                    url = redact_request(request).url  # a flow file holds the secrets as sent
                    yield f"flow {index}: {request.method} {url}: no response was recorded"
                else:
                    yield index, request, response, None
            return
        interactions, bad = cassette_reading.read_cassette(path)
    except cassette_reading.NotACassette as exc:
        problems.append(exc.accepting("import cassette reads vcrpy cassettes (YAML or JSON, format version 1) "
                                      "and mitmproxy flow files (mitmdump -w)"))
        return
    except StbError as exc:
        problems.append(str(exc))
        return
    for item in interactions:
        yield item.index, item.request, item.response, item.source
    for problem in bad:
        yield str(problem)

