"""Moving data into a store or the catalog: ``stbproxy import stb-cache``, ``import tools`` and
``import cassette`` (``import openapi`` is openapi.py's). The work is the lower layers':
stb_cache/ reads StableToolBench's cache and loads it, cassettes/importing.py imports
cassettes and flow files, stb/catalog.py loads tool docs; here are the options, the
progress, what is printed and the exit status."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from stbproxy.cli.common import CtrlC, ctrl_c_between_writes, echo_listed, fail, interrupted, store_option
from stbproxy.cli.shared_tier import SharedCopies, SharedImport, open_bulk, shared_option
from stbproxy.errors import StbError

if TYPE_CHECKING:
    from stbproxy.keys import KeyRules
    from stbproxy.models import Request, Response
    from stbproxy.stb_cache.importer import ImportSummary
    from stbproxy.stb_cache.placement import Placement
    from stbproxy.store.embedded import Store


@click.group(name="import")
def import_group() -> None:
    """Bring existing data into the store or the catalog."""


# -- StableToolBench's response cache ---------------------------------------------------------


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
def import_stb_cache(cache_dir: Path, store: Path, skip_failures: bool, include_invalid: bool, stb_keys: str,
                     jobs: int | None, strict: bool, shared: str | None) -> None:
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


def _end_import(summary: ImportSummary, placement: Placement, shared: str | None, stopped: bool,
                store: Path) -> None:
    _print_import_summary(summary, placement, shared)
    if stopped:
        interrupted(f"{summary.imported} entries imported from {summary.files_done} of {len(placement.reachable)} "
                    f"files, and the store at {store} is consistent (each file is one atomic write, and the store "
                    "was flushed and closed); the same command imports the rest")
    if summary.imported + summary.duplicates == 0:
        fail(f"nothing imported: {_why_nothing(summary)}", 1)


def _check_keys_of(db: Store, store: Path, stb_keys: str) -> None:
    """Entries under other keys than the store holds would never meet its calls: refused."""
    from stbproxy.keys import stb_keys_of

    first = next(iter(db.keys("api/")), None)
    made = stb_keys_of(first) if first is not None else None
    if made is not None and made != stb_keys:
        fail(f"the store at {store} holds StableToolBench calls under {made} keys, and this import would add "
             f"{stb_keys} keys, which no proxy serving it would meet: import with --stb-keys {made}, or into "
             "a new store")


def _placed_cache_files(cache_dir: Path, store: Path) -> tuple[list[Path], Placement, Path | None]:
    """The cache files, which of them a request can reach, and the catalog file to key them with."""
    from stbproxy.settings import catalog_path_for
    from stbproxy.stb.catalog import Catalog
    from stbproxy.stb_cache import importer as stb_cache
    from stbproxy.stb_cache import placement as cache_placement

    files = stb_cache.cache_files(cache_dir)
    if not files:
        fail(f"nothing imported: no <category>/<tool>/<api>.json files in {cache_dir}"
             f"{cache_placement.missing_layout_hint(cache_dir)}", 1)
    beside_store = catalog_path_for(store)
    catalog_file = beside_store if beside_store.exists() else None
    catalog = Catalog.load(catalog_file) if catalog_file is not None else None
    return files, cache_placement.check(files, cache_dir, catalog), catalog_file


def _report_misplaced(placement: Placement, strict: bool) -> None:
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


def _print_import_summary(summary: ImportSummary, placement: Placement, shared: str | None) -> None:
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


def _why_nothing(summary: ImportSummary) -> str:
    if summary.entries == 0 and not summary.unparseable:
        return "the cache files hold no entries"
    if summary.skipped:
        return (f"the {summary.skipped} entries that could be read are failed answers (StableToolBench's "
                "check_result rejects them), left out by --skip-failures")
    return "no entry could be read (the reasons are above)"


def _import_entries(db: Store, files: list[Path], root: Path, catalog_file: Path | None, rules: KeyRules,
                    skip_failures: bool, jobs: int | None, summary: ImportSummary, ctrl_c: CtrlC,
                    shared: SharedImport | None = None) -> None:
    """Import ``files`` into ``summary``, one atomic write per file, with a progress bar;
    stops between two files once Ctrl-C was pressed."""
    import time
    from contextlib import closing

    from tqdm import tqdm

    from stbproxy.stb_cache import importer as stb_cache
    from stbproxy.stb_cache.loading import load_files

    encoded_files = stb_cache.encoded_files(files, root, catalog_file=catalog_file, rules=rules,
                                            skip_failures=skip_failures, now=time.time(), jobs=jobs,
                                            shield=ctrl_c.holding)

    with tqdm(total=len(files), unit="file", desc="importing", disable=None, dynamic_ncols=True) as bar, \
            closing(encoded_files):
        def advance() -> None:
            bar.update(1)
            bar.set_postfix(entries=summary.entries, refresh=False)

        load_files(db, encoded_files, summary, ctrl_c, shared, on_file=advance)


# -- tool docs and query files ----------------------------------------------------------------


@import_group.command(name="tools")
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@store_option
@click.option("--catalog", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Catalog file to update [default: catalog.json in the store's folder].")
@shared_option
def import_tools(sources: tuple[Path, ...], store: Path, catalog: Path | None, shared: str | None) -> None:
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


# -- vcrpy cassettes and mitmproxy flow files -------------------------------------------------


@import_group.command(name="cassette")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True, path_type=Path))
@store_option
@click.option("--session", default=None, metavar="NAME",
              help="Also log the imported interactions, in file order, as this session "
                   "(so that 'export --session NAME' gives them back in order); a cassette already "
                   "logged there is not logged again.")
@shared_option
def import_cassette(files: tuple[Path, ...], store: Path, session: str | None, shared: str | None) -> None:
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
    from stbproxy.cassettes import importing
    from stbproxy.runtime import load_catalog, load_openapi
    from stbproxy.sessions import safe_session_name
    from stbproxy.settings import Settings
    from stbproxy.store.embedded import Store

    if session is not None and safe_session_name(session) != session:
        fail(f"session name {session!r} must use only letters, digits, '.', '_' and '-'")
    counts = importing.Counts()
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
                        if importing.import_file(db, copies, path, session, keying, counts, problems, ctrl_c,
                                                 _read_flows):
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
    echo_listed("problem", problems)
    if problems:
        sys.exit(1)


def _read_flows(path: Path) -> Iterable[tuple[Request, Response | None]]:
    """The exchanges of a mitmproxy flow file; mitmproxy is heavy, so it is loaded only for one."""
    from stbproxy import mitm

    return mitm.read_flow_file(path)
