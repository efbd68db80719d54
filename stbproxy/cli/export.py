"""Moving data out of a store: ``stbproxy export`` (the exchanges it picks: cassettes/selection.py)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from stbproxy.cli.common import echo_listed, fail, known_session, store_option
from stbproxy.cli.shared_tier import open_reader, shared_option
from stbproxy.errors import StbError

if TYPE_CHECKING:
    from stbproxy.cassettes.vcr_format import LeftOut
    from stbproxy.models import Exchange
    from stbproxy.store.embedded import Store
    from stbproxy.store.tiered import TieredReader


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
def export(session: str | None, pattern: str | None, output: Path | None, fmt: str | None, exclude_simulated: bool,
           by_conversation: bool, queries: tuple[Path, ...], store: Path, shared: str | None) -> None:
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
    from stbproxy.cassettes.selection import MADE_UP, matches
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
    left_out: list[LeftOut] = []  # exchanges that could not be written: named, the rest are written
    try:
        with open_reader(store, shared) as db:
            if session is not None:
                name = known_session(db, session)
                output = output or Path(f"{safe_session_name(name)}.{cassettes.format_for('', fmt)}")
                exchanges, missing = session_exchanges(db, name)
                skipped.extend(missing)
            else:
                assert pattern is not None  # exactly one of the two is given
                exchanges = [ex for ex in db.entries() if matches(ex, pattern)]
                if not exchanges:
                    fail(_nothing_matches(db, pattern))
                output = output or Path(f"export.{cassettes.format_for('', fmt)}")
            skipped.extend(getattr(db, "damaged", ()))  # shared values that do not decode
        total = len(exchanges)
        if exclude_simulated:
            exchanges = [ex for ex in exchanges if ex.source.value not in MADE_UP]
        if by_conversation:
            _export_conversations(exchanges, output or Path(safe_session_name(name)), fmt, queries, name, skipped)
            return
        written = cassettes.write_cassette(output, exchanges, cassettes.format_for(output, fmt), left_out=left_out)
    except StbError as exc:
        fail(str(exc))
    echo_listed("skipped", skipped)
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


def _report_left_out(left_out: list[LeftOut]) -> None:
    """One line per exchange an export could not write: its method, redacted URL, key and why."""
    echo_listed("not exported", left_out, more="more not exported")


def _origins(exchanges: Iterable[Exchange]) -> str:
    """How many exported answers came from where (upstream, simulated, imported, ...)."""
    from collections import Counter

    counts = Counter(ex.source.value for ex in exchanges)
    return ", ".join(f"{origin} {n}" for origin, n in counts.most_common()) or "none"


def _export_conversations(exchanges: list[Exchange], folder: Path, fmt: str | None, queries: tuple[Path, ...],
                          name: str, skipped: list[str]) -> None:
    from stbeval.errors import EvalError
    from stbeval.sources import load_queries
    from stbproxy.cassettes.conversations import export_by_conversation
    from stbproxy.cassettes.vcr_format import format_for

    try:
        index, problems = load_queries(queries)
    except EvalError as exc:
        fail(str(exc))
    result = export_by_conversation(exchanges, folder, fmt=format_for("", fmt), queries=index,
                                    where=f"session {name}")
    for line in [*problems, *result.notes, *(f"skipped: {s}" for s in skipped)]:
        click.echo(f"  {line}", err=True)
    _report_left_out(result.left_out)
    total = sum(count for _path, count in result.written)
    click.echo(f"wrote {len(result.written)} cassettes ({total} interactions) to {folder}"
               + (f", {len(result.left_out)} not exported" if result.left_out else ""))
    if result.left_out:
        fail(f"{len(result.left_out)} entries could not be exported (each is named above); "
             f"the other {total} are in {folder}", 1)


def _nothing_matches(db: Store | TieredReader, pattern: str) -> str:
    """The one line of an --all that picks nothing, naming a few stored hosts to choose from."""
    from stbproxy.cassettes.selection import stored_hosts

    hosts = stored_hosts(db.entries())
    known = ", ".join(host for host, _n in hosts.most_common(5))
    more = f" and {len(hosts) - 5} more" if len(hosts) > 5 else ""
    return (f"--all {pattern!r} matches no stored exchange (compared with each host, host:port, "
            "category/tool/api and store key); nothing written"
            + (f"; stored hosts: {known}{more}" if hosts else "; the store holds no entries"))
