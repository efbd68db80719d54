"""Answers taken from recorded sessions, in their order: the first K calls of a fork, and
ordered replay (the n-th identical request of a session gets the n-th answer its
namesake recorded for that key). What a recorded session holds is read once per process,
when a session first needs it; records written later (by this very replay) are not read.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

from stbcore.llm_apis import is_openai_compatible
from stbproxy.errors import StbError
from stbproxy.forensics.naming import Fork, SessionRef
from stbproxy.models import Exchange, Request

log = logging.getLogger("stbproxy")

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
NO_ANSWER = frozenset({"error"})  # records of calls that got no answer: never replayed


@dataclass(frozen=True)
class CallShape:
    """What a fork compares step by step: whether it is the agent's own LLM call or a tool
    call, and for a tool call its host and whether its method reads or writes. An LLM call
    matches any LLM call: the model that continues a run may be served from elsewhere."""

    host: str
    reads: bool
    llm: bool

    def matches(self, other: CallShape) -> bool:
        return self.llm == other.llm and (self.llm or (self.host, self.reads) == (other.host, other.reads))

    def __str__(self) -> str:
        if self.llm:
            return f"an agent LLM call (to {self.host or '?'})"
        return f"a tool call ({'read' if self.reads else 'write'}) to {self.host or '?'}"


@dataclass(frozen=True)
class Step:
    """One answered call of a recorded session: the call's key, where its answer is kept,
    and what kind of call it was (its answer is read when it is played, not held)."""

    seq: int
    call_key: str
    record_key: str
    shape: CallShape


def call_shape(request: Request) -> CallShape:
    try:
        host = urlsplit(request.url).netloc.rpartition("@")[2].lower()  # with its port: two APIs may share a host
    except ValueError:
        host = ""
    llm = is_openai_compatible(request.method, request.url.split("?", 1)[0])  # as the llm kind tells them
    return CallShape(host, request.method.upper() in SAFE_METHODS, llm)


@dataclass(frozen=True)
class Played:
    """A recorded answer to serve, and what the session's record says about it."""

    exchange: Exchange
    record: Mapping = field(default_factory=dict)


@dataclass
class _ForkState:
    fork: Fork
    served: int = 0
    stopped: str = ""


class Recordings:
    """Recorded sessions of one store, read once each."""

    def __init__(self, store, call_key: Callable[[Request], str]) -> None:
        self.store = store
        self.call_key = call_key
        self._steps: dict[str, list[Step]] = {}

    def steps(self, name: str) -> list[Step]:
        if name not in self._steps:
            self._steps[name] = self._read(name)
        return self._steps[name]

    def _read(self, name: str) -> list[Step]:
        steps: list[Step] = []
        for record in self.store.session_records(name):
            key = record.get("key") or ""
            if not key or record.get("source") in NO_ANSWER:
                continue
            try:
                exchange = self.store.get(key)
            except StbError as exc:
                log.warning("stbproxy: session %s, record %s: %s; left out of its playback",
                            name, record.get("seq"), exc)
                continue
            if exchange is None:
                continue  # forgotten since: nothing to play
            steps.append(Step(int(record.get("seq") or 0), self._key_of(record, exchange), key,
                              call_shape(exchange.request)))
        return steps

    def answer(self, step: Step) -> Exchange | None:
        """A step's answer as the store holds it now (None: forgotten, or unreadable)."""
        try:
            return self.store.get(step.record_key)
        except StbError:
            return None

    def _key_of(self, record: Mapping, exchange: Exchange) -> str:
        """The call key a record answered: named in the record when its answer is a copy kept
        apart (log/...), else the entry's own key; records written before calls were named
        have it worked out again from the stored request."""
        if record.get("call"):
            return record["call"]
        if not exchange.key.startswith("log/"):
            return exchange.key
        return self.call_key(exchange.request)


class SessionPlayback:
    """Which calls of which session are answered from a recording (see the module docstring)."""

    def __init__(self, recordings: Recordings, *, ordered: bool = False, fork: Fork | None = None) -> None:
        self.recordings = recordings
        self.ordered = ordered
        self.default_fork = fork
        self._forks: dict[str, _ForkState] = {}
        self._positions: dict[str, Counter] = defaultdict(Counter)
        self._by_key: dict[str, dict[str, list[Step]]] = {}

    def fork_of(self, ref: SessionRef) -> Fork | None:
        fork = ref.fork or self.default_fork
        return None if fork is None or fork.source == ref.name else fork

    def involves(self, ref: SessionRef | None) -> bool:
        """Whether calls of this session may be answered here (else the usual rules alone)."""
        return ref is not None and (self.ordered or self.fork_of(ref) is not None)

    def answer(self, ref: SessionRef, call_key: str, request: Request) -> Played | None:
        played = self._forked(ref, request)
        if played is None and self.ordered:
            played = self._in_order(ref.name, call_key)
        return played

    # forks -------------------------------------------------------------------------------
    def _forked(self, ref: SessionRef, request: Request) -> Played | None:
        fork = self.fork_of(ref)
        if fork is None:
            return None
        state = self._forks.get(ref.name)
        if state is None:
            state = self._forks[ref.name] = _ForkState(fork)
        if state.stopped or state.served >= state.fork.steps:
            return None
        steps = self.recordings.steps(state.fork.source)
        number = state.served + 1
        if state.served >= len(steps):
            self._stop(ref, state, f"step {number}: the recording has only {len(steps)} answered calls")
            return None
        step = steps[state.served]
        got = call_shape(request)
        if not step.shape.matches(got):
            self._stop(ref, state, f"step {number}: expected {step.shape}, got {got}")
            return None
        exchange = self.recordings.answer(step)
        if exchange is None:
            self._stop(ref, state, f"step {number}: the recorded answer is no longer stored")
            return None
        state.served = number
        record: dict = {"forked": f"{state.fork.source}#{step.seq}"}
        if number == 1:
            record["fork"] = {"from": state.fork.source, "at": state.fork.steps}
        return Played(exchange, record)

    def _stop(self, ref: SessionRef, state: _ForkState, why: str) -> None:
        state.stopped = why
        log.warning("stbproxy: session %s stops following %s: %s; from here it is answered as the mode says",
                    ref.name, state.fork, why)

    def stop_note(self, ref: SessionRef) -> dict:
        """For the record of the call that stopped a fork (once): why it stopped."""
        state = self._forks.get(ref.name)
        if state is None or not state.stopped or state.served < 0:
            return {}
        state.served = -1  # noted: never again
        note: dict[str, Any] = {"fork_stopped": state.stopped}
        if state.stopped.startswith("step 1:"):
            note["fork"] = {"from": state.fork.source, "at": state.fork.steps}
        return note

    # ordered replay -----------------------------------------------------------------------
    def _in_order(self, name: str, call_key: str) -> Played | None:
        by_key = self._by_key.get(name)
        if by_key is None:
            by_key = self._by_key[name] = defaultdict(list)
            for step in self.recordings.steps(name):
                by_key[step.call_key].append(step)
        recorded = by_key.get(call_key)
        if not recorded:
            return None
        position = self._positions[name][call_key]
        self._positions[name][call_key] += 1
        step = recorded[min(position, len(recorded) - 1)]  # past the end: the last one again
        exchange = self.recordings.answer(step)
        return None if exchange is None else Played(exchange, {"ordered": f"{position + 1} of {len(recorded)}"})
