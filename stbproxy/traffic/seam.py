"""What a kind of traffic is to the engine (TrafficKind), what it makes of a request (Call),
and the kinds of one proxy, tried in order (Kinds). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, NamedTuple, Protocol, Sequence

from stbproxy.keys import KeyRules
from stbproxy.models import ApiRef, Request, Response
from stbproxy.stb.api_doc import ApiDoc
from stbproxy.stb.validity import Verdict

ReplyFormat = Literal["http", "virtual"]


@dataclass(frozen=True)
class Call:
    """One call to answer: its key, its API if known, and how to reach the real thing."""

    key: str
    request: Request  # what the client sent (stored redacted)
    upstream: Request | None  # what to send to the real API; None when none is known
    api: ApiRef | None = None
    args: Mapping[str, Any] = field(default_factory=dict)
    host: str = ""  # for fault scoping and passthrough
    reply_format: ReplyFormat = "http"  # "virtual": the upstream answers {error, response}
    no_upstream: str = ""  # why ``upstream`` is None, for the simulator and the user
    kind: str = "http"  # the name of the TrafficKind that made it


class Judged(NamedTuple):
    """A real answer judged: the response to keep, whether it counts as real and why, and
    the facts to keep beside it (its failure kind, an error text)."""

    response: Response
    verdict: Verdict
    meta: dict


class TrafficKind(Protocol):
    """A kind of traffic. ``name`` is what Call.kind holds (it crosses process boundaries
    between workers, so it is a plain string)."""

    name: str

    def call(self, request: Request, rules: KeyRules) -> Call | None:
        """The request as a call of this kind, or None when it is not one."""

    def judge(self, call: Call, response: Response, validity: str) -> Judged:
        """Whether a real answer to ``call`` is valid under the ``--validity`` setting."""

    def miss_document(self, call: Call, explanation: dict) -> dict:
        """The JSON body of a replay miss, in the shape this kind's clients read
        (``explanation``: what was asked, the closest stored request and how it differs)."""

    def describe(self, call: Call) -> ApiDoc | None:
        """The API the call is made to, for a simulator to answer as it would: its name,
        description, parameters and documented answers (ToolBench's doc fields, which every
        kind fills in as it can), or None when this kind knows nothing of it."""


class Kinds:
    """The kinds of traffic one proxy answers, in the order they are tried: the first whose
    ``call`` takes a request makes its Call; the last takes every request."""

    def __init__(self, kinds: Sequence[TrafficKind]) -> None:
        if not kinds:
            raise ValueError("a proxy needs at least one kind of traffic")
        self.ordered = tuple(kinds)
        self._by_name = {kind.name: kind for kind in self.ordered}

    def call(self, request: Request, rules: KeyRules) -> Call:
        for kind in self.ordered:
            call = kind.call(request, rules)
            if call is not None:
                return call
        raise LookupError(f"no kind of traffic takes {request.method} {request.url}")

    def of(self, call: Call) -> TrafficKind:
        """The kind that made ``call`` (the last kind, for a name this proxy does not know)."""
        return self._by_name.get(call.kind, self.ordered[-1])

    def names(self) -> list[str]:
        return [kind.name for kind in self.ordered]
