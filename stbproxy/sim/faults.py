"""Fault injection: parse fault specs and decide, per request, which fault applies.

Pure and seeded. Every random choice comes from sha256 of the seed and a stable identity
(never Python's ``hash()``, which changes per process), so a run can be repeated on any
machine and fail in exactly the same places.

Spec grammar (one rule per spec; ``;`` separates several rules in one string)::

    rule   := kind ["=" value] ("," scope)*
    kind   := down=FRACTION | refuse | timeout | status=CODE | malformed | empty
            | tool-error | rpc-error | latency=DURATION | latency=lognormal:DURATION:SIGMA
    scope  := host=GLOB | tool=GLOB | api=GLOB | p=PROBABILITY
    FRACTION, PROBABILITY := 0.25 or 25%      DURATION := 200ms or 1.5s

Examples: ``down=0.2``, ``status=503,p=0.1,tool=weather*``, ``timeout,api=*forecast*``,
``latency=lognormal:200ms:0.5``. Globs use fnmatch and ignore case; a rule with several
scopes needs all of them to match.

``tool-error`` and ``rpc-error`` fail an MCP tool call as MCP does: a result with
``isError: true``, or a JSON-RPC error (-32603). On other traffic both answer HTTP 500.
"""

from __future__ import annotations

import enum
import fnmatch
import hashlib
import json
import math
import random
import re
from dataclasses import dataclass
from typing import Iterable

from stbproxy.errors import ConfigError, UpstreamError, UpstreamFailure
from stbproxy.models import Response, Source

ALLOWED_STATUSES = (401, 403, 404, 429, 500, 503)
#: One log-normal draw never exceeds this, so a wide sigma cannot hang a run.
MAX_LATENCY_SECONDS = 60.0

_GRAMMAR_HINT = (
    "a fault spec is KIND[,SCOPE...] with KIND one of down=FRACTION, refuse, timeout, "
    f"status=CODE ({', '.join(map(str, ALLOWED_STATUSES))}), malformed, empty, tool-error, rpc-error, "
    "latency=DURATION, latency=lognormal:DURATION:SIGMA and SCOPE one of host=GLOB, "
    "tool=GLOB, api=GLOB, p=PROBABILITY (e.g. 'status=503,p=0.1,tool=weather*')"
)


class Fault(str, enum.Enum):
    DOWN = "down"
    REFUSE = "refuse"
    TIMEOUT = "timeout"
    STATUS = "status"
    MALFORMED = "malformed"
    EMPTY = "empty"
    TOOL_ERROR = "tool-error"  # MCP: a CallToolResult with isError
    RPC_ERROR = "rpc-error"  # MCP: a JSON-RPC error
    LATENCY = "latency"

    @property
    def answers(self) -> bool:
        """True for kinds that produce an HTTP answer; the others mean no answer at all."""
        return self in (Fault.STATUS, Fault.MALFORMED, Fault.EMPTY, Fault.TOOL_ERROR,
                        Fault.RPC_ERROR)


# Which kinds take a value after "=", and which must have one.
_VALUE_REQUIRED = {Fault.DOWN, Fault.STATUS, Fault.LATENCY}
_SCOPES = ("host", "tool", "api", "p")


@dataclass(frozen=True, slots=True)
class Latency:
    """A fixed delay, or a log-normal one when ``sigma`` is set (``seconds`` is its median)."""

    seconds: float
    sigma: float | None = None

    def __str__(self) -> str:
        median = _format_duration(self.seconds)
        return median if self.sigma is None else f"lognormal:{median}:{_format_number(self.sigma)}"


@dataclass(frozen=True, slots=True)
class FaultRule:
    fault: Fault
    fraction: float | None = None  # down
    status: int | None = None  # status
    latency: Latency | None = None  # latency
    p: float = 1.0
    host: str | None = None
    tool: str | None = None
    api: str | None = None

    def __str__(self) -> str:
        """The rule in canonical spec form; parsing it gives back an equal rule."""
        value: float | Latency | str | None = {
            Fault.DOWN: self.fraction,
            Fault.STATUS: self.status,
            Fault.LATENCY: self.latency,
        }.get(self.fault)
        if isinstance(value, float):
            value = _format_number(value)
        parts = [self.fault.value if value is None else f"{self.fault.value}={value}"]
        parts += [f"{name}={glob}" for name, glob in self._globs() if glob is not None]
        if self.p != 1.0:
            parts.append(f"p={_format_number(self.p)}")
        return ",".join(parts)

    def _globs(self) -> tuple[tuple[str, str | None], ...]:
        return (("host", self.host), ("tool", self.tool), ("api", self.api))

    def matches(self, host: str | None, tool: str | None, api: str | None) -> bool:
        """Whether every scope of the rule matches; a scope never matches a missing name."""
        for glob, name in ((self.host, host), (self.tool, tool), (self.api, api)):
            if glob is not None and (name is None or not _glob_match(glob, name)):
                return False
        return True


def _glob_match(glob: str, name: str) -> bool:
    return fnmatch.fnmatchcase(name.lower(), glob.lower())


# --- parsing -----------------------------------------------------------------------


def _bad(spec: str, part: str, why: str) -> ConfigError:
    return ConfigError(f"bad fault spec {spec!r}: {part!r} {why}; {_GRAMMAR_HINT}")


def _parse_share(spec: str, part: str, text: str) -> float:
    """A number in [0, 1], written as 0.25 or 25%."""
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise _bad(spec, part, "is not a number like 0.2 or 20%") from None
    if not 0.0 <= value <= 1.0:  # also rejects nan
        raise _bad(spec, part, "must be between 0 and 1 (or 0% and 100%)")
    return value


_DURATION = re.compile(r"(?P<num>\d+(?:\.\d*)?|\.\d+)(?P<unit>ms|s)")


def _parse_duration(spec: str, part: str, text: str) -> float:
    m = _DURATION.fullmatch(text.strip().lower())
    if not m:
        raise _bad(spec, part, "needs a duration with a unit, like 200ms or 1.5s")
    seconds = float(m["num"]) / (1000 if m["unit"] == "ms" else 1)
    if seconds > MAX_LATENCY_SECONDS:
        raise _bad(spec, part, f"is longer than the {MAX_LATENCY_SECONDS:g}s limit")
    return seconds


def _parse_latency(spec: str, part: str, text: str) -> Latency:
    if not text.lower().startswith("lognormal:"):
        return Latency(_parse_duration(spec, part, text))
    pieces = text.split(":")
    if len(pieces) != 3:
        raise _bad(spec, part, "must look like lognormal:MEDIAN:SIGMA, e.g. lognormal:200ms:0.5")
    median = _parse_duration(spec, part, pieces[1])
    try:
        sigma = float(pieces[2])
    except ValueError:
        raise _bad(spec, part, "has a sigma that is not a number") from None
    if not 0.0 <= sigma <= 5.0:
        raise _bad(spec, part, "has a sigma outside 0..5")
    return Latency(median, sigma)


def parse_fault_spec(text: str) -> FaultRule:
    """Parse one rule, e.g. ``status=503,p=0.1,tool=weather*``; raise ConfigError if malformed."""
    spec = text.strip()
    parts = [part.strip() for part in spec.split(",")]
    if not spec:
        raise ConfigError(f"empty fault spec {text!r}: it names no failure; {_GRAMMAR_HINT}")
    if any(not part for part in parts):
        raise _bad(spec, spec, "has an empty part between commas")
    head, _, value = parts[0].partition("=")
    try:
        fault = Fault(head.strip().lower())
    except ValueError:
        if head.strip().lower() in _SCOPES:  # "p=0.5" alone: where and how often, but not what
            raise _bad(spec, parts[0], "is a scope, not a fault kind: a spec starts with the failure") from None
        raise _bad(spec, parts[0], "is not a fault kind") from None
    value = value.strip()
    has_value = "=" in parts[0]
    if fault in _VALUE_REQUIRED and not value:
        raise _bad(spec, parts[0], f"needs a value ({fault.value}=...)")
    if fault not in _VALUE_REQUIRED and has_value:
        raise _bad(spec, parts[0], f"takes no value (write just '{fault.value}')")

    fields: dict[str, object] = {"fault": fault}
    if fault is Fault.DOWN:
        fields["fraction"] = _parse_share(spec, parts[0], value)
    elif fault is Fault.STATUS:
        if not value.isdigit() or int(value) not in ALLOWED_STATUSES:
            raise _bad(spec, parts[0], "is not an allowed status code")
        fields["status"] = int(value)
    elif fault is Fault.LATENCY:
        fields["latency"] = _parse_latency(spec, parts[0], value)

    for part in parts[1:]:
        name, eq, scope_value = (s.strip() for s in part.partition("="))
        name = name.lower()
        if name not in _SCOPES or not eq:
            raise _bad(spec, part, "is not a scope (host=, tool=, api= or p=)")
        if not scope_value:
            raise _bad(spec, part, "has an empty value")
        if name in fields:
            raise _bad(spec, part, "repeats a scope")
        if fault is Fault.DOWN and name in ("api", "p"):
            # A tool is down as a whole and on every request, so neither applies.
            raise _bad(spec, part, "does not apply to down (scope it by host or tool)")
        fields[name] = _parse_share(spec, part, scope_value) if name == "p" else scope_value
    return FaultRule(**fields)  # type: ignore[arg-type]


# --- deciding ------------------------------------------------------------------------


def _unit(*parts: object) -> float:
    """A stable number in [0, 1) from the parts: the same on every run and machine."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


_NO_ANSWER_ERRORS = {
    Fault.DOWN: (UpstreamFailure.UNREACHABLE, "tool is down (injected fault)"),
    Fault.REFUSE: (UpstreamFailure.UNREACHABLE, "connection refused (injected fault)"),
    Fault.TIMEOUT: (UpstreamFailure.TIMEOUT, "upstream timed out (injected fault)"),
}

# Each message carries a word the StableToolBench validity rules count as a failure,
# so an injected answer is never mistaken for a good one downstream.
_STATUS_MESSAGES = {
    401: "Unauthorized: the API key was rejected",
    403: "Forbidden: blocked for this subscription",
    404: "Not found: the endpoint does not exist",
    429: "Too many requests: rate limit exceeded",
    500: "Internal error on the API server",
    503: "Service unavailable: the API is overloaded or down (status_code=503)",
}
_REASONS = {401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            429: "Too Many Requests", 500: "Internal Server Error",
            503: "Service Unavailable", 200: "OK"}  # fmt: skip
# Cut mid-value on purpose: a client must fail to parse it.
_MALFORMED_BODY = b'{"error": "", "response": {"data": [{"id": 7, "name": "tru'


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one request: delay it, and maybe fail it in one way."""

    latency: float = 0.0
    fault: Fault | None = None
    status: int | None = None
    rule: str = ""  # the failing rule in spec form, for logs and metadata

    @property
    def failed(self) -> bool:
        return self.fault is not None

    @property
    def answers(self) -> bool:
        """True when the failure comes with an HTTP answer (see make_response)."""
        return self.fault is not None and self.fault.answers

    def make_response(self) -> Response | None:
        """The injected HTTP answer, or None when there is no failure or it has no answer."""
        if not self.answers:
            return None
        status = 200
        if self.fault is Fault.STATUS:
            assert self.status is not None
            status = self.status
            payload = {"message": _STATUS_MESSAGES[status], "status": status}
            body = json.dumps(payload).encode()
        elif self.fault in (Fault.TOOL_ERROR, Fault.RPC_ERROR):
            status = 500  # MCP's shapes are the MCP kind's (mcp/traffic.py); other traffic gets a 500
            body = json.dumps({"message": f"injected {self.fault.value}", "status": status}).encode()
        elif self.fault is Fault.MALFORMED:
            body = _MALFORMED_BODY
        else:
            body = b""
        headers = (
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            ("X-Stb-Source", Source.INJECTED.value),
            ("X-Stb-Fault", self.rule),
        )
        return Response(status=status, headers=headers, body=body, reason=_REASONS[status])

    def upstream_error(self) -> UpstreamError | None:
        """For no-answer kinds (down, refuse, timeout), the error the engine should act on."""
        if self.fault not in _NO_ANSWER_ERRORS:
            return None
        failure, message = _NO_ANSWER_ERRORS[self.fault]
        return UpstreamError(f"{message}: {self.rule}", failure=failure)


NO_FAULT = Decision()


def _rules_of(spec: str) -> list[FaultRule]:
    """The rules of one spec (``;`` separates them). An empty rule is refused, not skipped:
    ``--faults ''`` or ``"$A;$B"`` with B unset would otherwise run without the faults asked for."""
    parts = spec.split(";")
    if len(parts) > 1 and any(not part.strip() for part in parts):
        raise ConfigError(f"bad fault spec {spec!r}: it has an empty rule between semicolons; {_GRAMMAR_HINT}")
    return [parse_fault_spec(part) for part in parts]


@dataclass(frozen=True, slots=True)
class FaultPlan:
    rules: tuple[FaultRule, ...] = ()
    seed: int = 0

    @classmethod
    def from_specs(cls, specs: Iterable[str] | str | None, seed: int = 0) -> FaultPlan:
        """Parse every spec (a single string is one spec; ``;`` separates rules in one)."""
        if specs is None:
            specs = ()
        elif isinstance(specs, str):
            specs = (specs,)
        return cls(tuple(rule for spec in specs for rule in _rules_of(spec)), seed)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def describe(self) -> str:
        if not self.rules:
            return "faults: none"
        return f"faults (seed {self.seed}): " + "; ".join(map(str, self.rules))

    def _down_score(self, identity: str) -> float:
        return _unit(self.seed, identity.strip().lower())

    def _is_down(self, rule: FaultRule, host: str | None, tool: str | None) -> bool:
        # Comparing one per-tool score with the fraction makes the down set grow
        # monotonically with it: a tool down at 0.1 is also down at 0.2. An unmapped
        # request has no tool, so its host stands in as the identity.
        assert rule.fraction is not None
        identity = tool if tool is not None else host or ""
        return rule.matches(host, tool, None) and self._down_score(identity) < rule.fraction

    def down_tools(self, tools: Iterable[str]) -> list[str]:
        """The given tools that are down, in the given order (host-scoped rules need a host,
        so they do not count here)."""
        downs = [r for r in self.rules if r.fault is Fault.DOWN]
        return [t for t in tools if any(self._is_down(r, None, t) for r in downs)]

    def decide(
        self,
        host: str | None,
        tool: str | None,
        api: str | None,
        request_key: str,
        occurrence: int = 0,
    ) -> Decision:
        """The decision for one request.

        ``request_key`` (the canonical request key) and ``occurrence`` (how many times the
        caller has seen it before) make per-request draws repeatable. Latency rules add up;
        the first matching failure rule, in spec order, is the failure.
        """
        if not self.rules:
            return NO_FAULT
        latency = 0.0
        failure: FaultRule | None = None
        for index, rule in enumerate(self.rules):
            if rule.fault is Fault.DOWN:
                if failure is None and self._is_down(rule, host, tool):
                    failure = rule
                continue
            if not rule.matches(host, tool, api):
                continue
            if rule.fault is not Fault.LATENCY and failure is not None:
                continue
            draw_id = (self.seed, index, request_key, occurrence)
            if rule.p < 1.0 and _unit(*draw_id) >= rule.p:
                continue
            if rule.fault is Fault.LATENCY:
                latency += self._latency_seconds(rule, draw_id)
            else:
                failure = rule
        if failure is None:
            return Decision(latency=latency) if latency else NO_FAULT
        return Decision(latency=latency, fault=failure.fault, status=failure.status, rule=str(failure))

    @staticmethod
    def _latency_seconds(rule: FaultRule, draw_id: tuple[object, ...]) -> float:
        assert rule.latency is not None
        lat = rule.latency
        if lat.sigma is None or lat.seconds == 0.0:
            return lat.seconds
        # A private generator keyed like the probability draw (plus a tag, so the two
        # are independent) keeps the delay repeatable and leaves the global RNG alone.
        digest = hashlib.sha256(":".join(map(str, (*draw_id, "latency"))).encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        return min(rng.lognormvariate(math.log(lat.seconds), lat.sigma), MAX_LATENCY_SECONDS)


def _format_number(x: float) -> str:
    return f"{x:.10g}"


def _format_duration(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.10g}ms" if ms < 1000 else f"{seconds:.10g}s"
