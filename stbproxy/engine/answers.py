"""What the engine answers a call with (Answer: the response, how it was made, where it is
kept, the facts for the session's record)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from stbproxy.models import BodyStream, Response, Source


@dataclass(frozen=True)
class Answer:
    response: Response  # carries the X-Stb-Source header
    source: Source
    key: str | None = None  # the call's key
    meta: Mapping = field(default_factory=dict)  # the entry's facts (error text, taxonomy, model)
    record_key: str | None = None  # where these answer bytes are kept (an entry or a log/ record)
    stored_source: Source | None = None  # a hit: the source of the stored entry
    write_failed: bool = False  # the store refused a write this answer needed
    stream: BodyStream | None = None  # a body still arriving: the response carries only the head
    note: Mapping = field(default_factory=dict)  # facts for the session's record (drift, fork)


async def made(answer: Answer) -> Answer:
    """An answer already made, for ``_run``, which awaits how an answer is made."""
    return answer
