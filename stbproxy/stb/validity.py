"""Is a real API's answer worth keeping? And if not, what kind of failure was it?

Two policies decide validity. ``stb`` is StableToolBench's ``check_result``: substring
tests on the text of the response object, kept exactly (false alarms included) so that
a cache built here agrees with one built by the original server. ``strict`` trusts the
HTTP status first and only then a few gateway messages that cannot be content. The
setting ``auto`` (the default) picks by the kind of traffic: ``stb`` for StableToolBench
traffic, ``strict`` for any other HTTP API, whose 200 answers may well mention "500".

The failure taxonomy (the paper's Appendix D) is for reporting only; it never changes
what is stored.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Literal, Mapping

import ahocorasick_rs

from stbproxy import jsonsafe
from stbproxy.errors import ConfigError, InputError

Policy = Literal["stb", "strict"]
POLICIES: tuple[str, ...] = ("stb", "strict")
AUTO = "auto"
SCHEMA = "schema"  # auto, and an answer that breaks its documented schema is invalid too
CHOICES: tuple[str, ...] = (AUTO, *POLICIES, SCHEMA)  # what a user may set


# Client errors that say nothing of the call itself, only of this moment (a timeout, a rate
# limit): never kept as a real answer, even where an API documents them or a user lists them.
TRANSIENT_CLIENT_ERRORS = frozenset({408, 429})


def parse_keep_status(values: Any) -> tuple[int, ...]:
    """``--keep-status``: 4xx statuses, comma-separated and repeatable (``404,410``), whose
    real answers are kept as real; ConfigError names a value that is no such status."""
    if isinstance(values, str):
        values = [values]
    codes: list[int] = []
    for value in values or ():
        for part in str(value).split(","):
            part = part.strip()
            if not part:
                continue
            if not part.isdigit() or not 400 <= int(part) <= 499:
                raise ConfigError(f"{part!r} is not a 4xx status (give client errors such as 404,410; a 5xx is "
                                  "never kept as real)")
            if int(part) in TRANSIENT_CLIENT_ERRORS:
                raise ConfigError(f"{part} says the call should be made again later (a timeout or a rate limit), "
                                  "so it is never kept as a real answer")
            if int(part) not in codes:
                codes.append(int(part))
    return tuple(sorted(codes))


def replaced_answers(choice: str, keep_status: tuple[int, ...] = ()) -> str:
    """In a few words, which real answers virtual mode replaces under the ``--validity``
    ``choice``, and which client errors it keeps: for the ready line and ``stbproxy env``
    (``real 4xx/5xx answers (...; kept: ...)``)."""
    kept = "kept: " + ", ".join(["4xx an OpenAPI document lists", *map(str, keep_status)])
    if choice == "stb":
        return f"real answers StableToolBench's check_result fails ({kept})"
    if choice == "strict":
        return f"real 4xx/5xx answers and error pages ({kept})"
    schema = "; OpenAPI answers that break their schema too" if choice == SCHEMA else ""
    return f"real 4xx/5xx answers (StableToolBench calls: check_result failures{schema}; {kept})"


def policy_for(choice: str, stb_traffic: bool) -> Policy:
    """The policy for one call: ``choice`` itself, or for ``auto`` (and ``schema``, whose
    schema check is the OpenAPI kind's) the one that fits the traffic (``stb_traffic``: a
    /virtual call, or a call the catalog routes to an API)."""
    if choice in (AUTO, SCHEMA):
        return "stb" if stb_traffic else "strict"
    return choice  # type: ignore[return-value]


class FailureKind(str, enum.Enum):
    NOT_CONNECTED = "not_connected"
    NOT_FOUND = "not_found"
    PARAMETER_CHANGE = "parameter_change"
    PARSING_ERROR = "parsing_error"
    NOT_AUTHORISED = "not_authorised"
    OTHER = "other"
    SUCCESS = "success"


@dataclass(frozen=True, slots=True)
class Verdict:
    valid: bool
    reason: str
    failure: FailureKind


# --- StableToolBench's check_result (STB_FORMATS.md section 5) -----------------------

# (rule number, substrings of the lower-cased text, substrings of the text as is)
_STB_INVALID_RULES: tuple[tuple[int, tuple[str, ...], tuple[str, ...]], ...] = (
    # StableToolBench also looks for "API doesn't exists" in the lower-cased text, which can
    # never hold it: only the answer that is exactly NO_SUCH_API counts (_stb_rules).
    (3, ("rate limit", "time out", "timed out", "does not exist", "404", "504", "500",
         "internal error"), ("Service Not Found",)),
    (4, ("authoriz", "authenticat", "unauthorized", "blocked user", "unsubscribe", "blocked",
         "401", "403", "credential", "unauthenticated", "disabled for your subscription",
         "invalid consumer key"), ("ACCESS_DENIED",)),
    (5, ("parameter", "parse", "is not defined"), ()),
    (6, (), ("status_code=50", "status_code=429")),
)


# The same marks flattened in rule order, so that one plain loop finds the first match:
# (mark, rule, compare with the text as is). Cheaper than a generator per rule, which
# matters when a 165,000-entry cache is imported.
_STB_MARKS: tuple[tuple[str, int, bool], ...] = tuple(
    (mark, rule, exact)
    for rule, lower_marks, exact_marks in _STB_INVALID_RULES
    for mark, exact in [*((m, False) for m in lower_marks), *((m, True) for m in exact_marks)]
)


_UNEXPECTED_KEYWORD = "got an unexpected keyword argument"
NO_SUCH_API = """{'message': "API doesn't exists"}"""  # str() of RapidAPI's answer for an unknown API
# Any mark at all, found in one pass over the lower-cased text (a mark found in the text as
# is is found lower-cased too): most answers hold none, and then the 28 searches of the
# rule loop are skipped. An import judges hundreds of thousands of answers.
_ANY_MARK = ahocorasick_rs.BytesAhoCorasick(
    [m.encode() for m in sorted({_UNEXPECTED_KEYWORD, *(mark.lower() for mark, _, _ in _STB_MARKS)})])
# The only characters beyond ASCII whose lower case holds ASCII letters (İ -> i + dot, the
# Kelvin sign -> k); without them, lower-casing the UTF-8 bytes' ASCII letters finds the
# same ASCII marks as str.lower(), at a fraction of its cost on non-ASCII text.
_LOWER_TO_ASCII = ("\u0130", "\u212a")


def _may_hold_a_mark(text: str) -> bool:
    if not text.isascii() and (_LOWER_TO_ASCII[0] in text or _LOWER_TO_ASCII[1] in text):
        text = text.lower()
    return bool(_ANY_MARK.find_matches_as_indexes(text.encode("utf-8", "surrogatepass").lower()))


def _stb_rules(obj: Any) -> tuple[bool, str]:
    """check_result's decision with the rule that made it."""
    if not isinstance(obj, Mapping):
        return False, "not an {error, response} object"
    if "error" not in obj:
        return False, "rule 1: no 'error' field"
    if obj["error"] != "":
        return False, f"rule 1: error {str(obj['error'])[:120]!r}"
    if "response" not in obj:
        return False, "rule 1: no 'response' field"
    text = str(obj["response"])
    if _may_hold_a_mark(text):
        lowered = text.lower()
        # Checked before the failure markers: ToolBench treats this TypeError as an answer.
        if _UNEXPECTED_KEYWORD in lowered:
            return True, "rule 2: unexpected keyword argument"
        for mark, rule, exact in _STB_MARKS:
            if mark in (text if exact else lowered):
                return False, f"rule {rule}: response contains {mark!r}"
    if text == NO_SUCH_API:
        return False, "rule 3: the response is RapidAPI's \"API doesn't exists\""
    if not text:
        return False, "rule 6: empty response"
    return True, "rule 7: no failure marker"


def check_result(obj: Any) -> bool:
    """StableToolBench's validity test of a ``{"error", "response"}`` object."""
    return _stb_rules(obj)[0]


# --- the failure taxonomy -------------------------------------------------------------

_PARSING_PREFIX = "Function executing from"

# Tried in this order; the first kind with a keyword in the text wins.
_TAXONOMY_BEFORE_PARSING: tuple[tuple[FailureKind, tuple[str, ...]], ...] = (
    (FailureKind.NOT_CONNECTED, ("http error", "connection", "rate limit", "time out",
                                 "timed out")),
    (FailureKind.NOT_FOUND, ("not found", "not available", "api doesn't exist",
                             "service not found", "internal error", "404")),
    (FailureKind.PARAMETER_CHANGE, ("parameter", "parse", "is not defined")),
)
_NOT_AUTHORISED_KEYS = ("authoriz", "authoris", "unauthoriz", "blocked user", "unsubscribe",
                        "credential", "disabled for your subscription", "access_denied",
                        "401", "403")


def classify(error_text: str, response_text: str = "") -> FailureKind:
    """The paper's failure kind of an answer, by keywords (case-insensitive)."""
    error_text = error_text or ""
    parsing = error_text.startswith(_PARSING_PREFIX)
    # The first line of such an error names the tool's module and function, whose
    # names ("parse_address", "connection_test") would otherwise match keywords.
    searched = error_text.partition("\n")[2] if parsing else error_text
    text = f"{searched}\n{response_text or ''}".lower()
    for kind, keys in _TAXONOMY_BEFORE_PARSING:
        if any(k in text for k in keys):
            return kind
    if parsing:
        return FailureKind.PARSING_ERROR
    if any(k in text for k in _NOT_AUTHORISED_KEYS):
        return FailureKind.NOT_AUTHORISED
    return FailureKind.OTHER if error_text.strip() else FailureKind.SUCCESS


def _failure_of_invalid(error_text: str, response_text: str) -> FailureKind:
    # An answer judged invalid is never reported as a success.
    kind = classify(error_text, response_text)
    return FailureKind.OTHER if kind is FailureKind.SUCCESS else kind


def failure_of_status(status: int, response_text: str) -> FailureKind:
    if status in (408, 429) or status in (502, 503, 504):
        return FailureKind.NOT_CONNECTED
    if status in (404, 410, 500, 501):  # the paper files internal errors under not found
        return FailureKind.NOT_FOUND
    if status in (401, 403, 407):
        return FailureKind.NOT_AUTHORISED
    if status in (400, 422):
        return FailureKind.PARAMETER_CHANGE
    return _failure_of_invalid("", response_text)


NOT_AVAILABLE_KINDS: tuple[FailureKind, ...] = (
    FailureKind.NOT_CONNECTED, FailureKind.NOT_FOUND, FailureKind.PARAMETER_CHANGE,
    FailureKind.PARSING_ERROR, FailureKind.OTHER)


@dataclass(frozen=True, slots=True)
class TaxonomyRow:
    kind: str
    count: int
    share: float


def taxonomy_table(counts: Mapping[FailureKind | str, int]) -> list[TaxonomyRow]:
    """Counts by failure kind as the paper's Tables 10 and 11.

    The first three rows (success, not_available, not_authorised) are shares of all
    answers; the rest break not_available down, as shares of the not-available answers.
    """
    by_kind = dict.fromkeys(FailureKind, 0)
    for kind, n in counts.items():
        try:
            by_kind[FailureKind(kind)] += n
        except ValueError:
            raise InputError(f"unknown failure kind {kind!r}") from None
    total = sum(by_kind.values())
    not_available = sum(by_kind[k] for k in NOT_AVAILABLE_KINDS)

    def share(n: int, of: int) -> float:
        return n / of if of else 0.0

    success, denied = by_kind[FailureKind.SUCCESS], by_kind[FailureKind.NOT_AUTHORISED]
    rows = [
        TaxonomyRow("success", success, share(success, total)),
        TaxonomyRow("not_available", not_available, share(not_available, total)),
        TaxonomyRow("not_authorised", denied, share(denied, total)),
    ]
    rows += [TaxonomyRow(k.value, by_kind[k], share(by_kind[k], not_available))
             for k in NOT_AVAILABLE_KINDS]
    return rows


# --- policies over HTTP answers and /virtual objects ---------------------------------

# Gateway and framework messages that mean "no answer" whatever the status says. Only
# looked for in short bodies: a long body quoting them is content.
_STRICT_MARKERS: tuple[tuple[str, FailureKind], ...] = (
    ("You are not subscribed to this API", FailureKind.NOT_AUTHORISED),
    ("Invalid API key", FailureKind.NOT_AUTHORISED),
    ("disabled for your subscription", FailureKind.NOT_AUTHORISED),
    ("ACCESS_DENIED", FailureKind.NOT_AUTHORISED),
    ("You have exceeded the", FailureKind.NOT_CONNECTED),
    ("Too many requests", FailureKind.NOT_CONNECTED),
    ("API doesn't exists", FailureKind.NOT_FOUND),
    ("Service Not Found", FailureKind.NOT_FOUND),
)
_MARKER_BODY_LIMIT = 1024


def _strict_marker(text: str) -> tuple[str, FailureKind] | None:
    if len(text) > _MARKER_BODY_LIMIT:
        return None
    return next(((m, kind) for m, kind in _STRICT_MARKERS if m in text), None)


def _status_text(status: int) -> str:
    try:
        return f"HTTP {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def _charset(content_type: str | None) -> str:
    for part in (content_type or "").split(";")[1:]:
        name, _, value = part.strip().partition("=")
        if name.lower() == "charset" and value:
            return value.strip('"')
    return "utf-8"


def _parse_body(body: bytes, content_type: str | None) -> tuple[Any, str]:
    """(JSON value or text, text): what a RapidAPI client makes of the body."""
    try:
        text = body.decode(_charset(content_type), errors="replace")
    except LookupError:  # an unknown charset name
        text = body.decode("utf-8", errors="replace")
    try:
        return jsonsafe.loads(text), text
    except ValueError:
        return text, text


def _check_policy(policy: str) -> None:
    if policy not in POLICIES:
        raise ConfigError(f"validity policy must be one of {', '.join(POLICIES)}, not {policy!r}")


def judge(status: int, body: bytes, content_type: str | None = None,
          policy: Policy = "stb") -> Verdict:
    """Whether an HTTP answer from a real API is valid under ``policy``, and why."""
    _check_policy(policy)
    response, text = _parse_body(body, content_type)
    ok_status = 200 <= status < 300
    if policy == "stb":
        error = "" if ok_status else _status_text(status)
        valid, reason = _stb_rules({"error": error, "response": response})
        if valid:
            return Verdict(True, f"stb {reason}", FailureKind.SUCCESS)
        failure = _failure_of_invalid("", text) if ok_status else failure_of_status(status, text)
        return Verdict(False, f"stb {reason}", failure)
    if status == 429 or not 200 <= status < 400:
        return Verdict(False, f"strict: {_status_text(status)}", failure_of_status(status, text))
    if not text.strip():
        return Verdict(False, f"strict: empty body with {_status_text(status)}", FailureKind.OTHER)
    marker = _strict_marker(text)
    if marker:
        return Verdict(False, f"strict: body says {marker[0]!r}", marker[1])
    return Verdict(True, f"strict: {_status_text(status)}", FailureKind.SUCCESS)


def judge_object(obj: Any, policy: Policy = "stb") -> Verdict:
    """Whether a /virtual-style ``{"error", "response"}`` object is a valid answer."""
    _check_policy(policy)
    if not isinstance(obj, Mapping) or "error" not in obj or "response" not in obj:
        return Verdict(False, f"{policy}: not an {{error, response}} object", FailureKind.OTHER)
    error = "" if obj["error"] is None else str(obj["error"])
    text = str(obj["response"])
    if policy == "stb":
        valid, reason = _stb_rules(obj)
        failure = FailureKind.SUCCESS if valid else _failure_of_invalid(error, text)
        return Verdict(valid, f"stb {reason}", failure)
    if error:
        return Verdict(False, f"strict: error {error[:120]!r}", _failure_of_invalid(error, text))
    if obj["response"] is None or not text.strip():
        return Verdict(False, "strict: empty response", FailureKind.OTHER)
    marker = _strict_marker(text)
    if marker:
        return Verdict(False, f"strict: response says {marker[0]!r}", marker[1])
    return Verdict(True, "strict: no error", FailureKind.SUCCESS)
