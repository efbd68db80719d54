from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import STB_SOURCES
from tests.fakes.fake_openai import fake_openai  # noqa: F401  (the fixture)
from tests.stb_samples import require_real_stb_data


@pytest.fixture(params=STB_SOURCES)
def stb(request) -> Path:
    """A StableToolBench data folder: the small generated sample (tests/stb_samples.py), then
    the real one ($STBPROXY_STB_DATA or ../shared/data/stabletoolbench) when it is there."""
    return request.getfixturevalue("stb_sample") if request.param == "sample" else require_real_stb_data()
