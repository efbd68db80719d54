"""A session read as conversations: for ``stbproxy eval`` and ``export --by-conversation``.

stbeval never reads the store. For ``stbproxy eval pass-rate --answers SESSION`` this
module hands it the session as the cassette document an export would write (redacted
the same way); stbeval's trajectories then find the conversations in it. For ``export
--by-conversation`` it writes one cassette per conversation, named by the query its
task states or by a digest, each holding the conversation's LLM calls and the tool
requests it made, in the session's order, so each one replays on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from stbeval.cassettes import recorded_from_document
from stbeval.errors import InputError as EvalInputError
from stbeval.queries import QueryIndex
from stbeval.trajectories import name_conversations, read_traffic
from stbproxy.cassettes import vcr_format as cassettes
from stbproxy.cassettes.store import session_answers
from stbproxy.errors import StbError
from stbproxy.models import Exchange
from stbproxy.sessions import SessionTally, safe_session_name
from stbproxy.store.embedded import Store

SERVED_HEADER = "X-Stb-Served"
KEY_HEADER = "X-Stb-Key"


def known_session(db: Store, raw: str) -> str | None:
    """The stored name of session ``raw`` (as typed, or made safe), or None."""
    known = db.session_names()
    return next((name for name in (raw, safe_session_name(raw)) if name in known), None)


def trial_sessions(store: Path, raw: str) -> list[str] | None:
    """The trial sessions ``NAME.t1`` .. ``NAME.tN`` that run ``raw`` stands for (``stbproxy
    run --trials N --session NAME``), in trial order; None when ``raw`` is a session itself,
    or no run of trials (stbeval's expander, sources.py)."""
    if not (Path(store) / "CURRENT").exists():
        return None
    try:
        with Store(store, readonly=True) as db:
            known = db.session_names()
    except StbError:
        return None  # the resolver reports the store's trouble when the name is read
    if raw in known:
        return None
    prefix = f"{raw}.t"
    trials = sorted((int(name[len(prefix):]), name) for name in known
                    if name.startswith(prefix) and name[len(prefix):].isdigit())
    return [name for _trial, name in trials] or None


def session_document(store: Path, raw: str) -> tuple[dict, list[str]]:
    """Session ``raw`` of the store as a cassette document, with notes on records left
    out (stbeval's resolver for names that are not files, sources.py). An unknown
    session or a missing store is an error that says which sessions there are."""
    if not Path(store).is_dir():
        raise EvalInputError(f"{raw}: no such answers file or folder, and no store at {store} to find a session in")
    try:
        with Store(store, readonly=True) as db:
            name = known_session(db, raw)
            if name is None:
                known = db.session_names()
                listed = ", ".join(known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
                raise EvalInputError(f"{raw}: no such answers file or folder, nor a session in {store} "
                                     f"(sessions: {listed or 'none'})")
            answered, skipped = session_answers(db, name)
            fork = fork_note(name, db.session_records(name))
    except StbError as exc:
        raise EvalInputError(f"{raw}: cannot read the session from {store}: {exc}") from exc
    notes = [f"session {name}: record {line}; left out" for line in skipped]
    if fork:
        notes.insert(0, fork)
    return cassettes.exchanges_to_cassette([as_served(record, ex) for record, ex in answered]), notes


def as_served(record: dict, exchange: Exchange) -> Exchange:
    """The exchange with how the proxy served it in the session (``X-Stb-Served``: cache,
    upstream, simulated, ...) and the key of the call it answered (``X-Stb-Key``), for the
    evaluator's trajectories and reports."""
    response = exchange.response.with_header(SERVED_HEADER, str(record.get("source") or exchange.source.value))
    return replace(exchange, response=response.with_header(KEY_HEADER, record.get("call") or exchange.key))


def fork_note(name: str, records) -> str | None:
    """What a trajectory built from a forked session must say: where its first calls came from."""
    tally = SessionTally()
    for record in records:
        tally.add(record)
    fork = tally.fork
    if fork is None:
        return None
    stopped = f" (the fork stopped at {fork['stopped']})" if fork["stopped"] else ""
    return (f"session {name} is a fork of {fork['from']}@{fork['at']}: its first {fork['replayed']} calls are "
            f"{fork['from']}'s recorded answers, replayed{stopped}")


@dataclass
class ConversationExport:
    written: list[tuple[Path, int]] = field(default_factory=list)  # (file, interactions)
    notes: list[str] = field(default_factory=list)
    left_out: list[cassettes.LeftOut] = field(default_factory=list)  # exchanges no cassette could hold


def export_by_conversation(exchanges: list[Exchange], folder: Path, *, fmt: cassettes.Format = "yaml",
                           queries: QueryIndex | None = None, where: str = "session") -> ConversationExport:
    """One cassette per conversation of ``exchanges`` in ``folder``: ``<query id>.<fmt>``
    (under ``<group>/`` when the queries span several groups), else ``<digest>.<fmt>``."""
    result = ConversationExport()
    document = cassettes.exchanges_to_cassette(exchanges, left_out=result.left_out)
    if result.left_out:  # named, and left out of every conversation (the rest keep their places)
        gone = {item.index for item in result.left_out}
        exchanges = [ex for i, ex in enumerate(exchanges) if i not in gone]
        document = cassettes.exchanges_to_cassette(exchanges)
    traffic = read_traffic(recorded_from_document(document))
    names, result.notes = name_conversations(traffic, where=where, queries=queries, unmatched="digest")
    result.notes[:0] = [f"{where}: {reason}" for reason in traffic.unread]
    if not names:
        raise StbError(f"{where} holds no LLM conversation (chat completions, Responses or Messages calls)")
    several_groups = len({n.group for n in names if n.group}) > 1
    last_of: dict[tuple[str | None, str], int] = {}
    for n, name in enumerate(names):
        last_of[(name.group, name.qid)] = n
    folder.mkdir(parents=True, exist_ok=True)
    for n, name in enumerate(names):
        stem = name.qid
        if last_of[(name.group, name.qid)] != n:
            stem = name.conversation.digest() + f"-{n}"
            result.notes.append(f"{where}: query {name.qid} ran in more than one conversation; "
                                f"an earlier one is written as {stem}")
        target = (folder / name.group if several_groups and name.group else folder) / f"{stem}.{fmt}"
        target.parent.mkdir(parents=True, exist_ok=True)
        members = [exchanges[i] for i in name.conversation.members()]
        result.written.append((target, cassettes.write_cassette(target, members, fmt, left_out=result.left_out)))
    if traffic.unattributed:
        result.notes.append(f"{where}: {len(traffic.unattributed)} request(s) made while no conversation was "
                            "waiting for a tool result are in no cassette")
    return result
