"""Reliability: scripts that attack a running `stbproxy serve` and the fuzz kit they share.

Scripts (each docstring says what it measures and against which baseline):
- reliability.py: load, kill -9, hostile input and a full disk;
- fuzz_proxy.py: the larger per-lane fuzz run of hostile requests (issue 24, item 10);
- h2_flood.py: another client's latency during an HTTP/2 rapid-reset flood, and SIGTERM under it;
  h2_hostile.py (the flooding client), h2_upstream.py (its slow upstream) and h2_other_client.py
  (the client it measures) are its parts;
- bombs.py: the proxy's peak RSS under a compression bomb and answers larger than --max-upstream-body;
- fuzz_secrets.py: a secret in every place a request carries one, echoed in every form, then
  looked for in every place the proxy keeps or shows anything (secret_echo.py: the upstream
  that echoes it).

The fuzz kit, one job per module (also used by the fuzz tests):
- fuzzkit.py: ``Case``, the seeded hostile content of ``cases()`` and ``send()``;
- fuzz_carriers.py: the valid requests hostile framing is made from;
- fuzz_hostile.py: the hostile case classes, byte mutations and ``hostile_cases()``;
- fuzz_upstream.py: ``FuzzUpstream``, the loopback upstream that remembers what reached it;
- fuzz_judge.py: the outcomes, ``Result`` and ``judge()``;
- fuzz_runner.py: the asyncio client that sends cases (``run_case``, ``run_cases``);
- fuzz_lane.py: one proxy lane end to end (``fuzz_lane()``, ``LaneRun``).
"""
