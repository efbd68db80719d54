"""What a kind of traffic is to the engine (TrafficKind, with BaseKind's defaults), what it
makes of a request (Call, or the kind's own Reply to a request that asks for no call), and
the kinds of one proxy, tried in order (Kinds). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Literal, Mapping, NamedTuple, Protocol, Sequence

from stbproxy.errors import UpstreamError
from stbproxy.forensics.naming import shared_key
from stbproxy.keys import KeyRules
from stbproxy.models import ApiRef, Request, Response, Source
from stbproxy.stb.api_doc import ApiDoc
from stbproxy.stb.bodies import error_object_response
from stbproxy.stb.validity import Verdict
from stbproxy.synthesis.simulation import Simulation, SimulationRequest, Simulator

# "http": the API's own answer; "virtual": a ToolBench-style API server's {error, response};
# "stb-server": a StableToolBench virtual server's answer, which is the benchmark's answer.
ReplyFormat = Literal["http", "virtual", "stb-server"]


class Reply(NamedTuple):
    """A kind's own whole answer to a request that asks for no call (a /virtual body that is
    no call, a chat with the user): served as it is, and nothing is stored, asked or recorded
    for it; ``source`` is how the engine names it (``error``, ``chat``)."""

    response: Response
    source: Source


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
    keep: bool = True  # False: passed on every time and never stored (without a real API, local_answer)
    streams: bool = False  # its answer is carried as it arrives (an event stream a server keeps open)
    live: bool = False  # its real answer may be events: carried to the client as they arrive, kept once whole
    faultable: bool = True  # whether --faults may fail it
    may_simulate: bool = True  # False: when its real API gives no answer, the client is told; nothing is made up
    private: bool = False  # its answers are its caller's alone: never written to the shared tier
    facts: Mapping[str, Any] = field(default_factory=dict)  # what its kind read of the request and needs again
    own_reply: Reply | None = None  # the request asks for no call: its kind's answer (never crosses the workers' link)

    @property
    def seed(self) -> str:
        """What seeds an answer made up for it: its key outside any view, so the same request
        gets the same made-up answer whoever asks and whichever store's salt keys the view."""
        return shared_key(self.key)


class Judged(NamedTuple):
    """A real answer judged: the response to keep, whether it counts as real and why, the
    facts to keep beside it (its failure kind, an error text), and whether it may be stored
    at all (an answer that only makes sense once is passed on, never kept)."""

    response: Response
    verdict: Verdict
    meta: dict[str, Any]
    keep: bool = True


Send = Callable[[Request], Awaitable[tuple[Response, float]]]  # the engine's upstream client
LIVE = "live"  # Call.facts: the channel of a live call's answer (TrafficKind.live)
LANE = "lane"  # Call.facts: the front end's door its request came in by (Request.lane), for its session record


class TrafficKind(Protocol):
    """A kind of traffic. ``name`` is what Call.kind holds (it crosses process boundaries
    between workers, so it is a plain string)."""

    name: str
    keyed_per_trial: bool  # its calls are an agent's own turns: keyed per trial (forensics/naming.py)

    def call(self, request: Request, rules: KeyRules) -> Call | None:
        """The request as a call of this kind, or None when it is not one."""

    def judge(self, call: Call, response: Response, validity: str) -> Judged:
        """Whether a real answer to ``call`` is valid under the ``--validity`` setting."""

    def miss_document(self, call: Call, explanation: dict[str, Any]) -> dict[str, Any]:
        """The JSON body of a replay miss, in the shape this kind's clients read
        (``explanation``: what was asked, the closest stored request and how it differs)."""

    def describe(self, call: Call) -> ApiDoc | None:
        """The API the call is made to, for a simulator to answer as it would: its name,
        description, parameters and documented answers (ToolBench's doc fields, which every
        kind fills in as it can), or None when this kind knows nothing of it."""

    def served(self, call: Call, response: Response, source: Source, meta: Mapping[str, Any]) -> Response:
        """The answer as this request's client must get it (a stored answer given the
        request's own JSON-RPC id, say); ``source``: how the engine made it. The session's
        record holds what this gives."""

    def client_reply(self, call: Call, response: Response, source: Source, meta: Mapping[str, Any]) -> Response:
        """The answer in the shape the client reads, made once the engine has recorded it
        (its session's record and any copy kept hold the answer as ``served`` gave it):
        StableToolBench's /virtual answer object with its X-Stb-* headers. Called for every
        answer, so a kind that has nothing to shape gives ``response`` itself."""

    def failure_reply(self, request: Request) -> Response | None:
        """The answer this kind's client reads when the proxy failed on ``request`` (an
        internal error): a /virtual client's answer object; None for the front end's own."""

    def local_answer(self, call: Call) -> Response:
        """The proxy's own answer to a call that is never kept (``keep`` False) when no real
        API can be asked (replay mode, or it is down)."""

    async def simulate(self, call: Call, simulator: Simulator, reason: str) -> Simulation:
        """A made-up answer in this kind's shape, from ``simulator``."""

    def injected(self, call: Call, fault: str, rule: str) -> Response | None:
        """The answer for an injected ``fault`` (sim/faults.Fault's value) in this kind's shape,
        or None for the engine's own (HTTP statuses, no answer at all)."""

    async def send_upstream(self, call: Call, send: Send) -> tuple[Response, float]:
        """The real API's answer to ``call``, sent with ``send``."""

    def live(self, call: Call, send: Send, open_stream: Send) -> Any:
        """For a ``live`` call: the channel that carries its real answer's events to the client
        as they arrive (mcp/live.py: ``started``, ``rest``); the engine puts it in the call's
        facts under LIVE for ``send_upstream``."""


class BaseKind:
    """What a kind that needs nothing more does: a kind subclasses it and overrides what it
    shapes itself."""

    name = "base"
    keyed_per_trial = False  # a tool's answer is the same in every trial

    def miss_document(self, call: Call, explanation: dict[str, Any]) -> dict[str, Any]:
        return explanation

    def describe(self, call: Call) -> ApiDoc | None:
        return None

    def served(self, call: Call, response: Response, source: Source, meta: Mapping[str, Any]) -> Response:
        return response

    def client_reply(self, call: Call, response: Response, source: Source, meta: Mapping[str, Any]) -> Response:
        return response

    def failure_reply(self, request: Request) -> Response | None:
        return None

    def local_answer(self, call: Call) -> Response:
        return error_object_response(f"stbproxy: no real API can be asked for {call.request.method} "
                                     f"{call.host or 'this call'}", status=502)

    async def simulate(self, call: Call, simulator: Simulator, reason: str) -> Simulation:
        # The arguments as the kind read them (a /virtual call's typed tool_input, which the
        # stored request may only hold as query text), else as the request gives them.
        return await simulator.simulate(SimulationRequest(call.request, call.key, call.api, reason,
                                                          doc=self.describe(call), args=call.args or None))

    def injected(self, call: Call, fault: str, rule: str) -> Response | None:
        return None

    async def send_upstream(self, call: Call, send: Send) -> tuple[Response, float]:
        if call.upstream is None:  # the engine asks only for calls with a real API
            raise UpstreamError(call.no_upstream or "no real API is known for this call")
        return await send(call.upstream)

    def live(self, call: Call, send: Send, open_stream: Send) -> Any:
        # The engine asks only for a ``live`` call, which a kind without live answers never makes.
        raise NotImplementedError(f"the {self.name} kind makes no live calls")


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

    def failure_reply(self, request: Request) -> Response | None:
        """The first kind's answer to a request the proxy failed on (TrafficKind.failure_reply)."""
        for kind in self.ordered:
            reply = kind.failure_reply(request)
            if reply is not None:
                return reply
        return None

    def of(self, call: Call) -> TrafficKind:
        """The kind that made ``call`` (the last kind, for a name this proxy does not know)."""
        return self._by_name.get(call.kind, self.ordered[-1])

    def names(self) -> list[str]:
        return [kind.name for kind in self.ordered]
