"""OpenAPI on real descriptions, fetched by npm from pinned packages (tests/openapi_node):
APIs.guru's directory swept (a fixed sample here, every document in scripts/openapi_sweep.py)
and ReadMe's edge-case examples imported; each document imported, or refused in one line
naming a JSON pointer, never a traceback. Skipped, saying so, only where the npm registry
cannot be reached (tests/openapi/test_openapi_validator.py judges simulated answers)."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest

from tests.openapi_node import conformance

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import openapi_sweep  # noqa: E402

SAMPLE_EVERY = 25  # the default suite sweeps every 25th APIs.guru document (path order): 106 of 2,639


@pytest.fixture(scope="session")
def packages() -> Path:
    return conformance.packages_or_skip()


def test_a_fixed_sample_of_apis_guru_imports_or_is_refused_in_one_line(packages):
    files = openapi_sweep.documents(conformance.DIRECTORY)
    assert len(files) > 2500
    results = [openapi_sweep.sweep_one(path) for path in files[::SAMPLE_EVERY]]
    failed = [f"{r['file']}: {r['line']}" for r in results if r["outcome"] == "failed"]
    assert not failed, "\n".join(failed)
    outcomes = collections.Counter(r["outcome"] for r in results)
    assert outcomes["imported"] >= 0.9 * len(results), outcomes
    for r in results:
        if r["outcome"] == "refused":
            assert "\n" not in r["line"] and ": at /" in r["line"], r["line"]


def test_readmes_edge_case_examples_import_or_are_refused_in_one_line(packages):
    files = sorted((conformance.EXAMPLES / "3.0" / "json").glob("*.json")) + \
        sorted((conformance.EXAMPLES / "3.1" / "json").glob("*.json"))
    assert len(files) > 50
    results = [openapi_sweep.sweep_one(path) for path in files]
    assert [r["line"] for r in results if r["outcome"] == "failed"] == []
    # Some are refused, each in one line: relative servers only, no operation (webhooks alone),
    # a 3.1 schema with 3.0's boolean exclusiveMaximum.
    assert sum(r["outcome"] == "imported" for r in results) >= 0.85 * len(results)
