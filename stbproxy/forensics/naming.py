"""How a request names its trial and its fork, beside its session. Pure.

A session may carry two parameters after its name, in any of the places that name a
session (the proxy URL's user, the ``X-Stb-Session`` header, a ``/s/<name>/virtual``
path): ``run-7;trial=2`` and ``run-7b;fork=run-7@12``. The ``X-Stb-Trial`` and
``X-Stb-Fork`` headers say the same on their own. Session names never hold ``;``
(sessions.safe_session_name replaces it), so the engine is handed one string,
``name[;trial=N][;fork=SOURCE@K]``, that crosses the worker link unchanged and is read
back here.

Two more parameters are the proxy's own, never a client's: ``user`` (the ``--proxy-auth``
user, whose sessions, and the sessions it forks, are named ``<user>+<name>``: a user
reaches only its own) and ``view`` (the view of the store its calls are keyed in:
``view_key``). A client that writes them in a session name has them dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from stbproxy.errors import ConfigError
from stbproxy.models import Headers, header_value
from stbproxy.sessions import safe_session_name

TRIAL_HEADER = "X-Stb-Trial"
FORK_HEADER = "X-Stb-Fork"
MAX_TRIAL = 1_000_000
_PARAMETER = re.compile(r";(trial|fork|user|view)=([^;]*)$")
_PROXY_PARAMETERS = ("user", "view")  # set by the proxy alone (scoped)
USER_SEPARATOR = "+"  # between a user and its session's name: never in a name a client gives
VIEW_MARK = "~v"  # a key in a view of the store ends so (view_key)
_FORK = re.compile(r"^(.+)@(\d{1,9})$")


@dataclass(frozen=True)
class Fork:
    """Answer a session's first ``steps`` calls from session ``source``, in order."""

    source: str
    steps: int

    def __str__(self) -> str:
        return f"{self.source}@{self.steps}"


@dataclass(frozen=True)
class SessionRef:
    """A session as the engine is handed it: its name, its trial (None: not a trial) and
    the recorded run it forks (None: no fork)."""

    name: str
    trial: int | None = None
    fork: Fork | None = None
    view: str | None = None  # the view of the store its calls are keyed in (view_key)

    def spec(self) -> str:
        parts = [self.name]
        if self.trial is not None:
            parts.append(f"trial={self.trial}")
        if self.fork is not None:
            parts.append(f"fork={self.fork}")
        return ";".join(parts)


def parse_trial(text: str) -> int:
    """A trial index: a whole number from 1."""
    if not text.strip().isdigit() or not 1 <= int(text) <= MAX_TRIAL:
        raise ConfigError(f"trial {text!r} is not a whole number from 1 to {MAX_TRIAL}")
    return int(text)


def parse_fork(text: str) -> Fork:
    """``SESSION@K``: the recorded session and how many of its calls to replay (K >= 1)."""
    match = _FORK.match(text.strip())
    if not match or int(match.group(2)) < 1:
        raise ConfigError(f"fork {text!r} is not SESSION@K (a recorded session and a step count from 1)")
    source = match.group(1)
    if safe_session_name(source) != source:
        raise ConfigError(f"fork {text!r}: session name {source!r} must use only letters, digits, '.', '_' and '-'")
    return Fork(source, int(match.group(2)))


def split_naming(raw: str) -> tuple[str, dict[str, str]]:
    """A naming text (``run-7;trial=2``) as its name and its parameters (the last of each wins)."""
    params: dict[str, str] = {}
    while True:
        match = _PARAMETER.search(raw)
        if not match:
            return raw, params
        params.setdefault(match.group(1), match.group(2))
        raw = raw[:match.start()]


def session_spec(raw_name: str | None, headers: Headers = ()) -> str | None:
    """The engine's session string for a request that names ``raw_name`` (as sent, None:
    none) with ``headers``; None when it names nothing at all. Malformed parameters are
    left out: a request is never refused for how it names its session."""
    name, params = split_naming(raw_name) if raw_name else (None, {})
    for param in _PROXY_PARAMETERS:
        params.pop(param, None)
    for header, param in ((TRIAL_HEADER, "trial"), (FORK_HEADER, "fork")):
        value = header_value(headers, header)
        if value is not None:
            params[param] = value
    if name is None and not params:
        return None
    ref = SessionRef(safe_session_name(name) if name else "", _or_none(parse_trial, params.get("trial")),
                     _or_none(parse_fork, params.get("fork")))
    return ref.spec()


def _or_none(parse, text: str | None):
    if text is None:
        return None
    try:
        return parse(text)
    except ConfigError:
        return None


@lru_cache(maxsize=4096)  # on every request a session names: the same few strings again and again
def completed(spec: str | None, fallback: str) -> str:
    """``spec`` with what it leaves unsaid taken from ``fallback`` (the session of the
    request's tunnel, or the run's): its name, its trial, its fork."""
    if spec is None:
        return fallback
    ref, base = session_ref(spec), session_ref(fallback)
    return SessionRef(ref.name or base.name, base.trial if ref.trial is None else ref.trial,
                      ref.fork or base.fork).spec()


def scoped(spec: str, user: str | None, view: str | None) -> str:
    """``spec`` as the engine is handed it for an authenticated ``user`` and a ``view`` of
    the store (both None: as it is)."""
    parts = [spec]
    if user:
        parts.append(f"user={safe_session_name(user)}")
    if view:
        parts.append(f"view={view}")
    return ";".join(parts)


@lru_cache(maxsize=4096)
def session_ref(spec: str, default: str = "") -> SessionRef:
    """The session a spec names; an empty name is the run's ``default`` session. A user's
    session, and the one it forks, are named within the user's (``<user>+<name>``)."""
    name, params = split_naming(spec)
    name, fork = name or default, _or_none(parse_fork, params.get("fork"))
    user = params.get("user")
    if user:
        name = f"{user}{USER_SEPARATOR}{name}"
        fork = Fork(f"{user}{USER_SEPARATOR}{fork.source}", fork.steps) if fork else None
    return SessionRef(name, _or_none(parse_trial, params.get("trial")), fork, params.get("view") or None)


def view_key(key: str, view: str | None) -> str:
    """The key of a call in a view of the store (a user's, a credential's): its answers are
    that view's own. Applied twice it changes nothing."""
    if not view:
        return key
    suffix = f"{VIEW_MARK}{view}"
    return key if key.endswith(suffix) else key + suffix


def view_of(key: str) -> str | None:
    """The view a key is in (None: the store's shared part: imports, proxies without views)."""
    head, mark, view = key.rpartition(VIEW_MARK)
    return view if mark and view and "/" not in view and "~" not in view else None


def shared_key(key: str) -> str:
    """The key a view's call has in the shared part of the store (itself, outside a view)."""
    view = view_of(key)
    return key[:-len(VIEW_MARK) - len(view)] if view else key


def trial_key(key: str, trial: int | None) -> str:
    """The key of an agent's own LLM call in ``trial``: trial 1 (and no trial) keeps the key
    a run without trials uses, so an existing recording is trial 1; later trials get
    answers of their own. Applied twice (a worker, then the primary) it changes nothing."""
    if trial is None or trial == 1:
        return key
    suffix = f"~trial{trial}"
    return key if key.endswith(suffix) else key + suffix
