"""Simulated answers of large real descriptions (GitHub's, Stripe's, Slack's, Spotify's and
other large ones of APIs.guru, from tests/openapi_node's pinned npm packages) judged by an
independent validator: openapi-core, reading the descriptions themselves, not stbproxy's
reading of them. A request that follows each sampled operation is simulated as if its API
were down, and the answer (status, headers, media type, body) must pass at >= 99 %,
no-content and non-JSON operations among them. Skipped, saying so, only where the npm
registry cannot be reached."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from stbproxy.openapi.spec import read_spec
from tests.openapi_node import conformance

# Large real descriptions and the share of their operations judged (every N-th, document order).
JUDGED = [("github", 3), ("stripe.com.json", 2), ("slack.com.json", 1), ("spotify.com.json", 1),
          ("twilio.com/api.json", 4), ("zoom.us.json", 4), ("box.com.json", 3), ("mailchimp.com.json", 6),
          ("zuora.com.json", 6), ("docusign.net.json", 6)]
PASS_RATE = 0.99


@pytest.fixture(scope="session")
def packages() -> Path:
    return conformance.packages_or_skip()


def _description(packages: Path, name: str) -> Path:
    return conformance.GITHUB if name == "github" else conformance.DIRECTORY / name


def test_simulated_answers_of_large_real_descriptions_pass_an_independent_validator(packages):
    counts: collections.Counter = collections.Counter()
    kinds: collections.Counter = collections.Counter()
    broken = []
    for name, every in JUDGED:
        path = _description(packages, name)
        spec = read_spec(path)
        judge = conformance.Judge(spec, json.loads(path.read_text()))
        for op in spec.operations[::every]:
            outcome, seen = judge.judge(op)
            counts[outcome] += 1
            if outcome == "valid":
                kinds[_kind_of(op)] += 1
            elif outcome != "unjudged":
                broken.append(f"{name} {op.id}: {outcome}: {seen[:300]}")
    judged = counts["valid"] + counts["invalid"] + counts["failed"]
    rate = counts["valid"] / judged
    print(f"validator: {dict(counts)}; pass rate {rate:.4f}; valid by kind {dict(kinds)}")
    assert rate >= PASS_RATE, "\n".join(broken[:30])
    assert judged >= 1000 and counts["unrouted"] == 0 and counts["rejected"] <= 0.01 * judged, counts
    assert kinds["no content"] >= 20 and kinds["not JSON"] >= 3, kinds  # both kinds are among the judged


def _kind_of(op) -> str:
    status, reply = op.success()
    media = reply.media() if reply is not None else None
    if media is None or status in (204, 205):
        return "no content"
    return "JSON" if "json" in media[0] or "*" in media[0] else "not JSON"
