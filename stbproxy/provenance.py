"""Where an answer came from, as the headers tell a client. Pure.

``X-Stb-Source`` says how this answer was made now (``cache`` for a hit). ``X-Stb-Origin``
says where its content came from: on a hit, the stored entry's origin (``upstream``,
``simulated``, ``imported``, ``injected``), otherwise the same as the source. A simulated
answer also names its simulator (``X-Stb-Simulator``), and one made for an injected fault
its rule (``X-Stb-Fault``), when it is served fresh and on every later hit: a simulated
answer never passes for a real one. An answer that is a failed one (a cached failure that
StableToolBench's server would serve too) names its failure kind (``X-Stb-Failure``).
"""

from __future__ import annotations

from typing import Mapping

from stbproxy.models import Response, Source

SOURCE_HEADER = "X-Stb-Source"
ORIGIN_HEADER = "X-Stb-Origin"
SIMULATOR_HEADER = "X-Stb-Simulator"
FAULT_HEADER = "X-Stb-Fault"
FAILURE_HEADER = "X-Stb-Failure"  # the failure kind of an answer that is a failed one (a cached failure)


def simulator_name(meta: Mapping | None) -> str | None:
    """The simulator that made an answer, from its stored facts: ``llm MODEL``, ``mirrorapi
    MODEL`` or ``schema``."""
    if not meta or not meta.get("simulator"):
        return None
    name = str(meta["simulator"])
    model = meta.get("model")
    return f"{name} {model}" if name in ("llm", "mirrorapi") and model else name


def marked(response: Response, source: Source, origin: Source, meta: Mapping | None = None) -> Response:
    """The response with the headers that say how it was made and where it came from."""
    response = response.with_header(SOURCE_HEADER, source.value).with_header(ORIGIN_HEADER, origin.value)
    if origin is Source.SIMULATED:
        simulator = simulator_name(meta)
        if simulator:
            response = response.with_header(SIMULATOR_HEADER, _header_safe(simulator))
    if not meta:
        return response
    fault = meta.get("fault")
    if fault:
        response = response.with_header(FAULT_HEADER, _header_safe(str(fault)))
    failure = meta.get("failure")
    if failure and failure != "success":
        response = response.with_header(FAILURE_HEADER, _header_safe(str(failure)))
    return response


def _header_safe(text: str) -> str:
    """A value that fits in one header line (a model name is the backend's text)."""
    return "".join(c if " " <= c <= "~" else "?" for c in text)[:200]
