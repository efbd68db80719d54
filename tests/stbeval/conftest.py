from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.fake_openai import fake_openai  # noqa: F401  (the fixture)
from tests.stbeval.helpers import STB_DATA


@pytest.fixture
def stb() -> Path:
    """The shared StableToolBench samples, next to the repository."""
    if not STB_DATA.is_dir():
        pytest.skip(f"StableToolBench sample data not found at {STB_DATA} (expected beside the repository)")
    return STB_DATA
