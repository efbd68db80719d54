"""Why a real API gave no answer is a closed set (errors.UpstreamFailure): every UpstreamError
the code raises names one of its members, and any other word is refused at once (a typo
would otherwise take an outage's rules: simulated, where a TLS or size failure never is)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from stbproxy.errors import UpstreamError, UpstreamFailure

PACKAGE = Path(__file__).resolve().parents[2] / "stbproxy"


def test_a_failure_outside_the_set_is_refused_and_members_read_as_their_words():
    with pytest.raises(ValueError):
        UpstreamError("x", failure="timed-out")
    error = UpstreamError("x", failure="timeout")
    assert error.failure is UpstreamFailure.TIMEOUT and error.failure == "timeout" and f"{error.failure}" == "timeout"
    assert UpstreamError("x").failure is UpstreamFailure.UNREACHABLE


def test_no_upstream_error_in_the_code_names_its_failure_by_a_bare_string():
    bare = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "UpstreamError":
                bare += [f"{path.name}:{node.lineno}" for k in node.keywords
                         if k.arg == "kind" and isinstance(k.value, ast.Constant)]
    assert not bare, bare
