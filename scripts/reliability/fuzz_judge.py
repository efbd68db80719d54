"""What a fuzz case came to: the outcomes, ``Result`` and ``judge``.

``judge`` decides an answered case's outcome from its status, its X-Stb-Source and what the
``FuzzUpstream`` remembers: a 5xx is the upstream's only when the upstream failed that very
case (else it is a proxy-made 5xx, but for 501 and 505, which a proxy may make for a request it
does not support), and an answer that names the upstream, or was made because it failed, is a
lie when a case aimed at the live upstream never reached it. ``FINE`` lists the outcomes that
are not the proxy's failure; ``Result`` holds one case's outcome and describes it for a report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from scripts.reliability.fuzz_upstream import FuzzUpstream
from scripts.reliability.fuzzkit import Case

# What a case came to. The first three are fine; every other one is the proxy's failure.
ANSWERED, CLOSED, GONE = "answered", "closed", "client left"
PROXY_5XX = "proxy-made 5xx"  # a 5xx the upstream did not make (see judge)
BLAMED = "blamed the upstream"  # an answer that says the upstream failed, though the case never reached it
NO_ANSWER = "closed without an answer"  # a whole request, and the proxy closed (or reset) without a word
HANG = "hang"  # neither an answer nor a close within the case's timeout
GARBLED = "not HTTP"  # bytes came back, but no status line
REFUSED = "connection refused"
TUNNEL = "tunnel refused"  # the CONNECT or the TLS handshake with the proxy failed
FINE = (ANSWERED, CLOSED, GONE)
# 5xx a proxy may make for the client's own request: 501 (a method or coding it does not
# implement, as item 7 allows for trailers) and 505 (an HTTP version it does not speak).
UNSUPPORTED = (501, 505)
# Sources that say an answer came from the upstream or was made because it failed (the proxy's
# own refusals, 4xx with X-Stb-Source: error, say neither).
BLAMING_SOURCES = ("upstream", "unavailable", "simulated", "simulated-error")


@dataclass
class Result:
    case: Case
    outcome: str
    status: int | None = None
    answer: bytes = b""  # the answer's head and the start of its body (or what came back)
    seconds: float = 0.0
    detail: str = ""

    @property
    def source(self) -> str:
        match = re.search(rb"(?im)^x-stb-source: *([^\r\n]*)", self.answer)
        return match.group(1).decode("latin-1") if match else "-"

    @property
    def failed(self) -> bool:
        return self.outcome not in FINE

    def describe(self, width: int = 300) -> str:
        head, _, body = self.answer.partition(b"\r\n\r\n")
        first_body_line = body.split(b"\n", 1)[0][:160]
        status_line = head.split(b"\r\n", 1)[0]
        via = f", via CONNECT {self.case.tunnel.decode()}" if self.case.tunnel else ""
        return (f"[{self.case.cls} / {self.case.kind} / expects {self.case.expect}"
                f"{' / ' + self.case.leave if self.case.leave else ''}] {self.outcome}"
                f"{': ' + self.detail if self.detail else ''} after {self.seconds:.2f}s\n"
                f"    sent: {self.case.raw[:width]!r}{' ...' if len(self.case.raw) > width else ''}"
                f" ({len(self.case.raw)} bytes{via})\n"
                f"    got:  status {self.status}, X-Stb-Source {self.source}, "
                f"{status_line!r}, body {first_body_line!r}")


def judge(case: Case, status: int | None, answer: bytes, upstream: FuzzUpstream) -> tuple[str, str]:
    """An answered case's outcome and why. A 5xx is the upstream's only when it failed this
    very case; an answer naming the upstream (or made because it failed) is a lie when a case
    aimed at the live upstream never reached it."""
    if status is None:
        return GARBLED, ""
    source = re.search(rb"(?im)^x-stb-source: *([^\r\n]*)", answer)
    source = source.group(1).decode("latin-1").strip() if source else "-"
    if status >= 500 and not upstream.failed(case.number):
        if status in UNSUPPORTED:
            return ANSWERED, f"{status} (unsupported)"
        reached = "the upstream answered it fine" if upstream.reached(case.number) else "nothing reached the upstream"
        return PROXY_5XX, f"{status} with X-Stb-Source {source}; {reached}"
    if case.live and not upstream.reached(case.number) and source in BLAMING_SOURCES:
        return BLAMED, f"{status} with X-Stb-Source {source}, but nothing reached the upstream"
    return ANSWERED, ""
