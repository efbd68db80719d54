"""One exception tree for the whole project.

Foreign errors (rocksdict, openai, httpx, mitmproxy) are translated into these once,
at the module that imports the foreign library, so callers only ever catch StbError.
"""

from enum import StrEnum


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


class UpstreamFailure(StrEnum):
    """Why a real API gave no answer (UpstreamError.failure): a closed set, each with its rule
    in the engine. The values are what session records and logs show (``error_kind``)."""

    UNREACHABLE = "unreachable"  # no connection, or the server went away: the API is down
    TIMEOUT = "timeout"  # no answer within --upstream-timeout
    PROTOCOL = "protocol"  # it answered garbage or reset the connection
    INVALID_REQUEST = "invalid-request"  # the request cannot be sent as it is
    TLS = "tls"  # a TLS handshake failure: a configuration to fix (a CA to trust), never an outage
    TOO_LARGE = "too-large"  # an answer over --max-upstream-body: refused whole, never simulated or stored
    UNDECODABLE = "undecodable"  # an answer in a content coding the proxy does not decode: the same
    SESSION = "session"  # the proxy's own MCP session to the server failed: never simulated
    NO_SESSION = "no-session"  # the session the store opened has not reached the server yet
    DEFERRED = "deferred"  # an upstream that declines a message it need not see yet (a stdio server not started)


class UpstreamError(StbError):
    """The real API could not be reached or did not answer in time."""

    def __init__(self, message: str, *, failure: UpstreamFailure | str = UpstreamFailure.UNREACHABLE) -> None:
        super().__init__(message)
        #: Why (UpstreamFailure; a string that is none of them is refused at once: a typo here
        #: would silently take an outage's rules).
        self.failure = UpstreamFailure(failure)


class SimulationError(StbError):
    """The simulator could not produce an answer."""


class InputError(StbError):
    """A file or request given to stbproxy is malformed; the message says where and why."""
