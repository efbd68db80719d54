"""The calling rules, independent of mitmproxy and of the kinds of traffic.

virtual (default): store hit -> answer; else upstream: a valid answer is stored and
    returned; an unreachable upstream or an invalid answer goes to the simulator.
record: always upstream; whatever comes back is stored.
verify: always upstream, and the stored answer served: the real one is compared with it
    (forensics/drift.py) and the difference kept in the session's record; the store
    changes only with ``update`` (a changed answer replaces the stored one, which is kept
    under log/history/). A call with no stored answer gets the real one.
replay: store only; a miss answers 404 naming the closest stored request (in the OpenAI
    error shape on an OpenAI-compatible endpoint, so that its client shows why).
A transport failure is not an answer: in record mode and for passthrough hosts it is
answered 502 with ``X-Stb-Source: error``, logged in the session, and never stored. A TLS
handshake failure (a certificate that cannot be verified) is a configuration to fix, not
an API that is down: in every mode it is answered the same way, with the fix in its text,
and never simulated.
With refresh_simulated (virtual mode), a hit on a simulated answer asks the real API
again, at most once per REFRESH_INTERVAL per key: a valid real answer replaces it.
Hosts marked passthrough are always forwarded and never served from the store; their
exchanges are logged (redacted) so that a run's record stays complete.
Identical concurrent misses share one upstream (or simulator) call.
Sessions may take answers from recorded sessions first (forensics/playback.py: the first K
calls of a fork, ordered replay), and an agent's own LLM calls are keyed per trial
(forensics/naming.py).

A write the store refuses is never silent: it is counted (write_failures.py); in record
mode the client gets 507 instead of an answer that was not recorded, in the other modes
the answer is served with ``X-Stb-Stored: no``. Every text kept or logged about a call
(an upstream error, a reason) is scrubbed of the call's secrets, those of the request
sent upstream included. An answer is recorded as the engine made it, then put in the shape
its client reads by the call's kind (TrafficKind.client_reply: a /virtual answer object).

The engine is one class, Engine (calling_rules.py: its entry points and the order of the
rules), made of a part per job: hits.py (stored answers, and replay's explained misses),
misses.py (a miss answered once per key, from the real API or the simulator), faults.py
(injected faults), verify.py (verify mode), passing_on.py (passthrough hosts and calls
never kept), session_records.py (the session's record of each call) and keeping.py (what
is stored, under which key, scrubbed of secrets); config.py holds its settings,
answers.py what it answers with, and parts.py what the parts share (EnginePart: the
engine's state, and the helpers one part calls on another).
"""

from stbproxy.engine.answers import Answer, made
from stbproxy.engine.calling_rules import Engine
from stbproxy.engine.config import DEFAULT_MAX_BODY, EngineConfig, UpstreamClient

__all__ = ["Answer", "DEFAULT_MAX_BODY", "Engine", "EngineConfig", "UpstreamClient", "made"]
