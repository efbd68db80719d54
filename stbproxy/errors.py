"""One exception tree for the whole project.

Foreign errors (rocksdict, openai, httpx, mitmproxy) are translated into these once,
at the module that imports the foreign library, so callers only ever catch StbError.
"""


class StbError(Exception):
    """Root of every error stbproxy raises on purpose."""


class ConfigError(StbError):
    """A setting or option has a value that cannot work; the message names it."""

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        super().__init__(message)
        #: The Settings field at fault, when known: front ends map it to their option name.
        self.setting = setting


class StoreError(StbError):
    """The store cannot be opened, read or written."""


class StoreLockedError(StoreError):
    """Another process holds the store's write lock."""


class UpstreamError(StbError):
    """The real API could not be reached or did not answer in time."""

    def __init__(self, message: str, *, kind: str = "unreachable") -> None:
        super().__init__(message)
        #: "unreachable", "timeout", "protocol", "invalid-request", or "tls": a TLS handshake
        #: failure, which is a configuration to fix (a CA to trust), never an API that is down.
        self.kind = kind


class SimulationError(StbError):
    """The simulator could not produce an answer."""


class InputError(StbError):
    """A file or request given to stbproxy is malformed; the message says where and why."""
