"""Task profiles of execution-scored REST tasks: data plus small pure functions.

A profile says, for one task of ToolBench (SambaNova)'s kind: which hosts its commands
may reach, where its key comes from (an environment variable, named here by default and
by ``--key-env`` otherwise) and which headers carry it, how a command is fitted before it
is sent (``prepare``), when an answer counts as crashed (``failure``) and which top-level
fields are left out of the comparison (``dropped``). Another REST task is one more entry
in PROFILES.

The rules of ``openweather`` and ``thecatapi`` are those of ToolBench's evaluator:
- OpenWeather: ``%20`` in the URL becomes ``+``, and ``lang=en``, ``units=standard`` and
  ``mode=json`` are added when the query lacks them, except on the air-pollution and
  direct-geocoding calls; an answer whose ``cod`` is not 200 crashed.
- The Cat API: an answer whose ``message`` is not ``SUCCESS`` crashed; its ``id`` (a new
  one on every favourite or vote) is not compared.
``generic`` compares any JSON API's answers with no rule of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable
from urllib.parse import parse_qsl, urlsplit

from .exec_curl import CurlRequest


def _unchanged(request: CurlRequest) -> CurlRequest:
    return request


def _never(_answer: Any) -> str | None:
    return None


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    hosts: tuple[str, ...] = ()  # hosts its commands may reach ("host" any port, "host:port" that one)
    key_env: str | None = None  # the environment variable holding its key, unless --key-env names another
    key_headers: tuple[str, ...] = ()  # headers set to the key (taken out when there is none)
    prepare: Callable[[CurlRequest], CurlRequest] = _unchanged  # the task's rules, before the key is put in
    failure: Callable[[Any], str | None] = _never  # why a JSON answer counts as crashed, or None
    dropped: frozenset[str] = frozenset()  # top-level fields never compared


# -- OpenWeather ---------------------------------------------------------------------------------

OPENWEATHER_DEFAULTS = (("lang", "en"), ("units", "standard"), ("mode", "json"))


def openweather_takes_defaults(path: str) -> bool:
    """Every call but air pollution (current, forecast, history) and direct geocoding."""
    path = path.rstrip("/")
    return "/air_pollution" not in path and not path.endswith("/geo/1.0/direct")


def openweather_prepare(request: CurlRequest) -> CurlRequest:
    url = request.url.replace("%20", "+")
    parts = urlsplit(url)
    if openweather_takes_defaults(parts.path):
        present = {name for name, _ in parse_qsl(parts.query, keep_blank_values=True)}
        missing = [f"{name}={value}" for name, value in OPENWEATHER_DEFAULTS if name not in present]
        if missing:
            base, _, fragment = url.partition("#")
            joiner = "" if base.endswith(("?", "&")) else ("&" if parts.query else "?")
            url = base + joiner + "&".join(missing) + (f"#{fragment}" if fragment else "")
    return replace(request, url=url)


def openweather_failure(answer: Any) -> str | None:
    if isinstance(answer, dict) and "cod" in answer and str(answer["cod"]) != "200":
        message = answer.get("message")
        return f"cod {answer['cod']}" + (f" ({message})" if isinstance(message, str) and message else "")
    return None


# -- The Cat API ----------------------------------------------------------------------------------

def thecatapi_failure(answer: Any) -> str | None:
    if isinstance(answer, dict) and "message" in answer and answer["message"] != "SUCCESS":
        return f"message {answer['message']!r}, not 'SUCCESS'"
    return None


PROFILES: dict[str, Profile] = {
    "openweather": Profile(
        "openweather", "OpenWeather: defaults lang, units, mode; crashed unless cod is 200",
        hosts=("api.openweathermap.org",), key_env="OPENWEATHER_API_KEY",
        prepare=openweather_prepare, failure=openweather_failure),
    "thecatapi": Profile(
        "thecatapi", "The Cat API: key in x-api-key; crashed unless message is SUCCESS; id not compared",
        hosts=("api.thecatapi.com",), key_env="THECATAPI_API_KEY", key_headers=("x-api-key",),
        failure=thecatapi_failure, dropped=frozenset({"id"})),
    "generic": Profile("generic", "any JSON API: no rules of its own (hosts from --allow-host)"),
}
