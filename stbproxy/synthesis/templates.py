"""The offline simulator core: a deterministic fake API answer without any LLM.

A StableToolBench ``template_response`` is the shape of a real answer with type names as
leaves ("str", "int", "float", "bool", "NoneType", "empty list", "list of str with length
3", ...) and ``_list_length`` markers on list elements. Long templates were cut at 1,000
characters and stored as a string of broken JSON; those are repaired to their longest
valid prefix. Values are shaped by the field name (a "url" gets a URL, a "created_at" a
timestamp) and drawn from a generator seeded by sha256 of the caller's key, so the same
request always gets byte-identical output on every machine.

Generated values avoid the substrings that StableToolBench's default validity rules read
as failures (e.g. "500", "404", "parse"), so a simulated answer is never judged invalid
because of an unlucky random number.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from typing import Any

from stbproxy import jsonsafe

MAX_DEPTH = 16  # deeper than any real template (14); beyond it values become null
MAX_LIST_LENGTH = 10  # templates ask for up to hundreds of elements
LEAF_BUDGET = 2000  # once spent, lists stop at one element so output stays small

_LIST_OF = re.compile(r"list of (\w+) with length (\d+)")
_LIST_MARKER = "_list_length"

# Lower-cased substrings that the default validity rules treat as a failed call.
_TRIPWIRES = (
    "400", "401", "403", "404", "429", "500", "504", "rate limit", "time out", "timed out",
    "does not exist", "internal error", "service not found", "authoriz", "authenticat",
    "blocked", "unsubscribe", "credential", "access_denied", "parameter", "parse",
    "is not defined", "status_code",
)  # fmt: skip

_WORDS = (
    "amber", "harbor", "summit", "river", "cedar", "lumen", "orbit", "meadow", "canyon",
    "willow", "atlas", "ember", "coral", "falcon", "granite", "horizon", "juniper", "lotus",
    "maple", "nova", "opal", "prairie", "quartz", "sierra", "tundra", "violet", "zephyr",
)  # fmt: skip
_FIRST = ("Alice", "Bruno", "Chen", "Dara", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas")
_LAST = ("Novak", "Okafor", "Silva", "Tanaka", "Weber", "Haddad", "Larsen", "Moreau", "Kim")
_COUNTRIES = ("Canada", "Brazil", "Japan", "Kenya", "Norway", "Portugal", "India", "Chile")
_COUNTRY_CODES = ("CA", "BR", "JP", "KE", "NO", "PT", "IN", "CL")
_CITIES = ("Lisbon", "Osaka", "Nairobi", "Toronto", "Santiago", "Bergen", "Pune", "Recife")
_CURRENCIES = ("USD", "EUR", "JPY", "GBP", "CAD", "BRL", "INR")
_LANGUAGES = ("en", "fr", "de", "es", "ja", "pt", "it")
_STATUSES = ("active", "ok", "available", "complete", "success")

_COORDINATES = {"lat", "latitude", "lng", "lon", "long", "longitude"}
# Calendar parts are whole numbers even where a template says "float".
_CALENDAR = {"year", "month", "day", "hour", "minute", "minutes", "second", "seconds"}

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_ISO_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


def _words_of(name: str) -> set[str]:
    """The lower-case words of a field name: "channelId" and "channel_id" -> {channel, id}."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return set(re.split(r"[^a-zA-Z0-9]+", spaced.lower())) - {""}


def _is_safe(value: Any) -> bool:
    text = str(value).lower()
    return not any(t in text for t in _TRIPWIRES)


class ValueGenerator:
    """Seeded values for one answer: leaves drawn by their field names (from_template,
    from_example here; from_schema.py for JSON Schemas)."""

    def __init__(self, seed_key: str | bytes) -> None:
        raw = seed_key.encode("utf-8") if isinstance(seed_key, str) else seed_key
        self.rng = random.Random(int.from_bytes(hashlib.sha256(raw).digest()[:8], "big"))
        self.budget = LEAF_BUDGET

    # -- leaves --------------------------------------------------------------------

    def _safe(self, make: Any, fallback: Any) -> Any:
        """Draw until the value trips no validity rule; rare, so a few tries suffice."""
        for _ in range(8):
            value = make()
            if _is_safe(value):
                return value
        return fallback

    def _digits(self, n: int) -> str:
        return str(self.rng.randint(1, 9)) + "".join(str(self.rng.randint(0, 9)) for _ in range(n - 1))

    def _slug(self) -> str:
        return f"{self.rng.choice(_WORDS)}-{self.rng.randint(1, 999)}"

    def _sentence(self) -> str:
        words = [self.rng.choice(_WORDS) for _ in range(self.rng.randint(6, 12))]
        return " ".join(words).capitalize() + "."

    def date(self) -> str:
        r = self.rng
        return f"{r.randint(2015, 2024)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"

    def datetime(self) -> str:
        r = self.rng
        return f"{self.date()}T{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}Z"

    def string_for(self, words: set[str]) -> str:
        r = self.rng
        if words & {"image", "img", "thumbnail", "avatar", "photo", "picture", "icon", "logo", "poster"}:
            return f"https://img.example.com/{self._slug()}.jpg"
        if words & {"url", "link", "href", "uri", "website", "homepage", "permalink"}:
            return f"https://www.example.com/{r.choice(_WORDS)}/{self._slug()}"
        if words & {"email", "mail"}:
            return f"{r.choice(_FIRST).lower()}.{r.choice(_LAST).lower()}@example.com"
        if words & {"uuid", "guid"}:
            hexes = "%032x" % r.getrandbits(128)
            return "-".join((hexes[:8], hexes[8:12], hexes[12:16], hexes[16:20], hexes[20:]))
        if words & {"hash", "token", "sha", "md5", "checksum"}:
            return "%032x" % r.getrandbits(128)
        if words & {"id", "ids", "code"} and not words & {"country", "currency", "language", "lang"}:
            return self._digits(r.randint(6, 10))
        if words & {"time", "timestamp", "datetime", "at", "created", "updated", "modified"}:
            return self.datetime()
        if words & {"date", "published", "released", "birthday", "expires", "expiry"}:
            return self.date()
        if words & {"phone", "mobile", "tel", "telephone", "fax"}:
            return f"+1 555 {self._digits(3)} {self._digits(4)}"
        if "country" in words:
            return r.choice(_COUNTRY_CODES) if words & {"code", "iso"} else r.choice(_COUNTRIES)
        if words & {"city", "town", "location", "place"}:
            return r.choice(_CITIES)
        if words & {"address", "street"}:
            return f"{r.randint(1, 299)} {r.choice(_WORDS).capitalize()} Street, {r.choice(_CITIES)}"
        if words & {"zip", "postal", "postcode", "zipcode"}:
            return self._digits(5)
        if "currency" in words:
            return r.choice(_CURRENCIES)
        if words & {"language", "lang", "locale"}:
            return r.choice(_LANGUAGES)
        if words & {"username", "user", "handle", "login", "nickname", "slug"}:
            return f"{r.choice(_WORDS)}_{r.randint(10, 99)}"
        if words & {"name", "author", "artist", "owner", "creator", "person"}:
            return f"{r.choice(_FIRST)} {r.choice(_LAST)}"
        if words & {"title", "label", "headline", "caption", "subject"}:
            return " ".join(r.choice(_WORDS) for _ in range(r.randint(2, 4))).title()
        if words & {"description", "summary", "text", "content", "message", "overview",
                    "bio", "comment", "review", "body", "snippet", "details", "about"}:  # fmt: skip
            return self._sentence()
        if words & {"status", "state"}:
            return r.choice(_STATUSES)
        if words & {"color", "colour"}:
            return "#%06x" % r.getrandbits(24)
        if "version" in words:
            return f"{r.randint(1, 9)}.{r.randint(0, 20)}.{r.randint(0, 9)}"
        if words & {"price", "amount", "cost", "total", "value"}:
            return f"{r.randint(1, 499)}.{r.randint(0, 99):02d}"
        if words & _COORDINATES:
            return f"{self._float_for(words):.4f}"
        if "year" in words:
            return str(r.randint(1990, 2024))
        return " ".join(r.choice(_WORDS) for _ in range(r.randint(1, 3)))

    def _int_for(self, words: set[str]) -> int:
        r = self.rng
        if words & _COORDINATES:
            return round(self._float_for(words))
        if "year" in words:
            return r.randint(1990, 2024)
        if "month" in words:
            return r.randint(1, 12)
        if "day" in words:
            return r.randint(1, 28)
        if "hour" in words:
            return r.randint(0, 23)
        if words & {"minute", "minutes", "second", "seconds"}:
            return r.randint(0, 59)
        if words & {"timestamp", "time", "created", "updated", "date", "at", "unix", "epoch"}:
            return r.randint(1_600_000_000, 1_720_000_000)
        if words & {"id", "ids"}:
            return r.randint(100_000, 99_999_999)
        if words & {"page", "index", "rank", "position"}:
            return r.randint(1, 20)
        if words & {"rating", "stars"}:
            return r.randint(1, 5)
        if words & {"percent", "percentage"}:
            return r.randint(0, 100)
        if words & {"age"}:
            return r.randint(18, 80)
        if words & {"width", "height"}:
            return r.randint(120, 1920)
        return r.randint(0, 1000)

    def _float_for(self, words: set[str]) -> float:
        r = self.rng
        if words & _CALENDAR:
            return float(self._int_for(words))
        if words & {"lat", "latitude"}:
            return round(r.uniform(-60, 70), 4)
        if words & {"lng", "lon", "long", "longitude"}:
            return round(r.uniform(-170, 170), 4)
        if words & {"rating", "score", "stars"}:
            return round(r.uniform(1, 5), 1)
        if words & {"percent", "ratio", "proportion", "probability", "rate", "share"}:
            return round(r.random(), 3)
        if words & {"price", "amount", "cost", "value", "total", "balance"}:
            return round(r.uniform(1, 500), 2)
        return round(r.uniform(0, 1000), 2)

    def leaf(self, type_name: str, key: str) -> Any:
        """A value for a template type name; unknown names come back as they are."""
        self.budget -= 1
        words = _words_of(key)
        if type_name == "str":
            return self._safe(lambda: self.string_for(words), "sample")
        if type_name == "int":
            return self._safe(lambda: self._int_for(words), 7)
        if type_name == "float":
            return self._safe(lambda: self._float_for(words), 7.5)
        if type_name == "bool":
            return self.rng.random() < 0.5
        if type_name == "NoneType":
            return None
        if type_name in ("empty list", "list", "tuple"):
            return []
        if type_name == "dict":
            return {}
        match = _LIST_OF.fullmatch(type_name)
        if match:
            inner, count = match[1], int(match[2])
            inner = {"list": "empty list", "dict": "dict"}.get(inner, inner)
            return [self.leaf(inner, key) for _ in range(self._list_count(count))]
        return type_name

    def _list_count(self, wanted: int) -> int:
        return min(max(wanted, 0), MAX_LIST_LENGTH if self.budget > 0 else 1)

    # -- templates -----------------------------------------------------------------

    def from_template(self, node: Any, key: str = "", depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            return None
        if isinstance(node, dict):
            return {k: self.from_template(v, k, depth + 1) for k, v in node.items() if k != _LIST_MARKER}
        if isinstance(node, list):
            return self._list_from_template(node, key, depth)
        if isinstance(node, str):
            return self.leaf(node.strip(), key)
        return self.from_example(node, key, depth)  # a literal: keep its type only

    def _list_from_template(self, node: list, key: str, depth: int) -> list:
        if len(node) == 1:
            (only,) = node
            if isinstance(only, str) and _LIST_OF.fullmatch(only.strip()):
                return self.leaf(only.strip(), key)  # ["list of str with length 3"]
            if isinstance(only, dict) and _LIST_MARKER in only:
                count = only[_LIST_MARKER]
                count = self._list_count(count if isinstance(count, int) else 1)
                return [self.from_template(only, key, depth + 1) for _ in range(count)]
        return [self.from_template(item, key, depth + 1) for item in node[: self._list_count(len(node))]]

    # -- examples ------------------------------------------------------------------

    def from_example(self, node: Any, key: str = "", depth: int = 0) -> Any:
        """A fresh value with the example's shape: same keys, lengths and value kinds."""
        if depth > MAX_DEPTH:
            return None
        if isinstance(node, dict):
            return {k: self.from_example(v, k, depth + 1) for k, v in node.items()}
        if isinstance(node, list):
            return [self.from_example(item, key, depth + 1) for item in node[: self._list_count(len(node))]]
        if isinstance(node, bool):
            return self.leaf("bool", key)
        if isinstance(node, int):
            return self.leaf("int", key)
        if isinstance(node, float):
            return self.leaf("float", key)
        if isinstance(node, str):
            return self._string_like(node, key, depth)
        return None

    def _string_like(self, text: str, key: str, depth: int) -> str:
        """A string shaped like the example one: JSON text stays JSON text, a date a date."""
        stripped = text.strip()
        if stripped[:1] in ("{", "["):
            try:
                parsed = jsonsafe.loads(stripped)
            except ValueError:
                pass
            else:
                return json.dumps(self.from_example(parsed, key, depth), ensure_ascii=False)
        words = _words_of(key)
        if stripped.startswith(("http://", "https://")):
            words |= {"url"}
        elif "@" in stripped and " " not in stripped:
            words |= {"email"}
        elif _ISO_DATETIME.match(stripped):
            words = {"datetime"}
        elif _ISO_DATE.fullmatch(stripped):
            words = {"date"}
        elif stripped.isdigit():
            return self._safe(lambda: self._digits(len(stripped)), "7" * len(stripped))
        self.budget -= 1
        return self._safe(lambda: self.string_for(words), "sample")


@functools.lru_cache(maxsize=512)
def repair_truncated_json(text: str) -> Any:
    """The longest valid JSON value that ``text`` (cut off mid-way) starts with, or None.

    StableToolBench stores long templates as their first 1,000 characters; cutting at the
    last comma outside a string and closing the open brackets keeps every complete member.
    """
    found = truncated_json(text)
    return None if found is None else found[1]


def truncated_json(text: str) -> tuple[str, Any] | None:
    """``text`` cut after its last complete member and its open brackets closed, written as
    it was written (a simulator model's reply cut at its token limit keeps its own
    spelling), with its value; ``text`` itself when it is valid JSON; None when no member
    is complete."""
    try:
        return text, jsonsafe.loads(text)
    except ValueError:
        pass
    cuts: list[tuple[int, str]] = []  # (position of a comma, closers needed there)
    stack: list[str] = []
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
        elif ch == "," and stack:
            cuts.append((i, "".join(reversed(stack))))
    for pos, closers in reversed(cuts[-200:]):
        closed = text[:pos] + closers
        try:
            return closed, jsonsafe.loads(closed)
        except ValueError:
            continue
    return None


def _as_template(template_response: Any) -> Any:
    """The usable template: None when absent, repaired when stored as broken JSON text."""
    if isinstance(template_response, str):
        text = template_response.strip()
        if text[:1] in ("{", "["):
            return repair_truncated_json(text)
        return text or None
    if template_response in ({}, []):
        return None  # an empty template says nothing; an example may say more
    return template_response


def simulate_from_template(template_response: Any, seed_key: str | bytes, example: Any = None) -> Any:
    """A deterministic fake answer for one request.

    The template decides the shape when there is one; otherwise a stored real answer
    (``example``, parsed JSON; a ``{"error", "response"}`` object is unwrapped) lends its
    shape; with neither, a short message object. The result is a dict for every dict
    template; following an example keeps the example's type (a list stays a list).
    """
    gen = ValueGenerator(seed_key)
    template = _as_template(template_response)
    if template is not None:
        return gen.from_template(template)
    if isinstance(example, dict) and set(example) == {"error", "response"}:
        example = example["response"]
    if example is not None and example != "":
        return gen.from_example(example)
    return {"message": gen.leaf("str", "message")}


def virtual_answer(template_response: Any, seed_key: str | bytes, example: Any = None) -> dict[str, Any]:
    """The StableToolBench response object ``{"error": "", "response": ...}`` for a request."""
    return {"error": "", "response": simulate_from_template(template_response, seed_key, example)}
