"""What the engine asks of a simulator, and what it gets back. Pure."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from stbproxy.forensics.naming import shared_key
from stbproxy.models import ApiRef, Request, Response
from stbproxy.stb.api_doc import ApiDoc
from stbproxy.stb.bodies import error_object_response


class _Undescribed(enum.Enum):
    """The one value saying that the engine gave no description of the call's API."""

    NOT_DESCRIBED = "not described"


# ``SimulationRequest.doc`` when the engine gives none: the simulator looks the API up itself.
NOT_DESCRIBED = _Undescribed.NOT_DESCRIBED


@dataclass(frozen=True)
class SimulationRequest:
    request: Request  # the original request (secrets included: simulators must not store it)
    key: str
    api: ApiRef | None
    reason: str  # why the real API could not answer
    # The API as the call's kind of traffic describes it (an ApiDoc, or None: it knows nothing of it).
    doc: ApiDoc | None | _Undescribed = NOT_DESCRIBED
    args: Mapping[str, Any] | None = None  # the call's arguments as its kind read them; None: from the request
    # A /virtual call's category, tool_name and api_name as its client wrote them (the request
    # is the stored form of the call, which names the API by its keys).
    names: Mapping[str, str] | None = None

    @property
    def seed(self) -> str:
        """What seeds a made-up answer: the key outside any view (Call.seed)."""
        return shared_key(self.key)


@dataclass(frozen=True)
class Simulation:
    response: Response
    ok: bool  # False: a failed simulation, answered but never stored
    meta: dict = field(default_factory=dict)
    attempted: bool = True  # False: no simulator is on, so nothing was tried


class Simulator(Protocol):
    async def simulate(self, job: SimulationRequest) -> Simulation: ...


class NoSimulator:
    """Answers a clear error object: used when no simulator is configured."""

    async def simulate(self, job: SimulationRequest) -> Simulation:
        return Simulation(
            error_object_response(f"The real API is unavailable ({job.reason}) and no simulator is configured."),
            ok=False, attempted=False,
        )
