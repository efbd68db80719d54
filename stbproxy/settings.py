"""Plain settings shared by the CLI and the mitmproxy addon (no I/O, no option parsing)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stbproxy.engine import DEFAULT_MAX_BODY, EngineConfig
from stbproxy.errors import ConfigError
from stbproxy.keys import KeyRules
from stbproxy.models import Mode
from stbproxy.upstream import UpstreamConfig


@dataclass(frozen=True)
class Settings:
    store: Path
    mode: Mode = Mode.VIRTUAL
    passthrough: tuple[str, ...] = ()
    secret_fields: tuple[str, ...] = ()
    secret_headers: tuple[str, ...] = ()
    volatile_fields: tuple[str, ...] = ()
    max_body_bytes: int = DEFAULT_MAX_BODY
    upstream_timeout: float = 30.0
    upstream_ca: str | None = None
    upstream_insecure: bool = False
    upstream_proxy: str | None = None

    def key_rules(self) -> KeyRules:
        return KeyRules.build(self.secret_fields, self.secret_headers, self.volatile_fields)

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            mode=self.mode,
            passthrough=tuple(h.lower() for h in self.passthrough),
            rules=self.key_rules(),
            max_body_bytes=self.max_body_bytes,
        )

    def upstream_config(self) -> UpstreamConfig:
        return UpstreamConfig(
            timeout=self.upstream_timeout,
            ca_file=self.upstream_ca,
            insecure=self.upstream_insecure,
            proxy=self.upstream_proxy,
        )


def parse_mode(value: str) -> Mode:
    try:
        return Mode(value.strip().lower())
    except ValueError:
        choices = ", ".join(m.value for m in Mode)
        raise ConfigError(f"unknown mode {value!r}: choose one of {choices}") from None


def parse_timeout(value: str | float) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"timeout {value!r} is not a number of seconds") from None
    if not 0 < seconds <= 3600:
        raise ConfigError(f"timeout {value!r} must be between 0 and 3600 seconds")
    return seconds
