"""mitmproxy's private names that stbproxy uses (the package stbproxy/mitm/internals/): each is there
in the mitmproxy the tests run, and a mitmproxy without them gets a slower proxy, not a crash."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import requests

from stbproxy.errors import ConfigError
from stbproxy.mitm import internals, usable_internals

MISSING = internals.Internal("mitmproxy.http", "MessageData", "no_such_name_in_any_mitmproxy")


@pytest.mark.parametrize("internal", internals.EVERY, ids=str)
def test_every_private_name_is_there(internal):
    assert internal.present(), internals.changed_message([internal], "run with --no-fast-lane")


def test_the_tested_version_is_the_one_running_and_the_one_pinned():
    from mitmproxy.version import VERSION

    pyproject = open(__file__.rsplit("/tests/", 1)[0] + "/pyproject.toml").read()
    assert VERSION == internals.TESTED and f'"mitmproxy=={internals.TESTED}"' in pyproject


def test_a_missing_name_is_found_and_named():
    assert internals.changed((MISSING,)) == [MISSING]
    assert not internals.Internal("no.such.module", None, "x").present()
    message = internals.changed_message([MISSING], "running as with --no-fast-lane")
    assert "mitmproxy.http.MessageData.no_such_name_in_any_mitmproxy" in message and internals.TESTED in message


def test_without_a_fast_lane_name_serve_falls_back_with_one_warning(monkeypatch, caplog):
    monkeypatch.setattr(internals, "FAST_LANE", internals.FAST_LANE + (MISSING,))
    caplog.set_level(logging.WARNING, logger="stbproxy")
    assert usable_internals() is False
    (warning,) = caplog.records
    assert "running as with --no-fast-lane" in warning.getMessage()


def test_without_a_listening_name_serve_stops_with_one_line(monkeypatch):
    monkeypatch.setattr(internals, "LISTENING", internals.LISTENING + (MISSING,))
    with pytest.raises(ConfigError, match="cannot listen with it"):
        usable_internals()


# `stbproxy serve` started as a user does, in a Python whose mitmproxy lacks a fast-lane name.
SERVE_ON_CHANGED_MITMPROXY = textwrap.dedent("""
    import sys
    from stbproxy.mitm import internals
    internals.FAST_LANE += (internals.Internal("mitmproxy.http", "MessageData", "no_such_name_in_any_mitmproxy"),)
    from stbproxy.cli import main
    main(["serve", "--port", "0", "--store", sys.argv[1], "--confdir", sys.argv[2]])
""")


@pytest.mark.integration
def test_a_proxy_on_a_changed_mitmproxy_serves_without_the_fast_lane(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", SERVE_ON_CHANGED_MITMPROXY, str(tmp_path / "store"),
                                str(tmp_path / "certs")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in process.stdout:
            lines.append(line)
            ready = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if ready:
                break
        assert ready, "".join(lines)
        proxy = f"http://127.0.0.1:{ready.group(1)}"
        answer = requests.get("http://127.0.0.1:9/gone", proxies={"http": proxy}, timeout=20)
    finally:
        process.terminate()
        process.wait(timeout=15)
    assert answer.status_code == 200 and answer.headers["X-Stb-Source"] == "simulated"
    warnings = [line for line in lines if "running as with --no-fast-lane" in line]
    assert len(warnings) == 1 and "no_such_name_in_any_mitmproxy" in warnings[0]


def test_only_the_internals_package_names_mitmproxys_private_names():
    """The other modules of stbproxy.mitm (the one user of mitmproxy) name none of the private
    modules and attributes that internals.EVERY lists."""
    package = Path(internals.__file__).parent
    names = {part for internal in internals.EVERY for part in (*internal.module.split("."), internal.name)
             if part.startswith("_") and not part.startswith("__")}
    private = re.compile(r"\b(?:" + "|".join(sorted(names)) + r")\b")
    users = [path.name for path in sorted(package.parent.glob("*.py")) if private.search(path.read_text())]
    assert names and users == []
