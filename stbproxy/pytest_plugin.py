"""pytest plugin: replay a cassette through a real stbproxy for the length of a test.

    @pytest.mark.stb_cassette("weather_paris")          # cassettes/weather_paris.yaml
    def test_agent(stb_proxy):
        result = subprocess.run(["python", "agent.py"], env={**os.environ, **stb_proxy.env}, ...)

``stb_proxy`` starts ``stbproxy serve --cassette FILE --ordered`` on a free loopback port
and hands the test the environment for an agent (HTTP(S)_PROXY and the CA bundle). A
request the cassette does not hold fails the test, naming the closest recorded request
and how it differs. ``pytest --stb-record`` records the cassette again instead: the proxy
runs in record mode (or virtual, with the simulator, per ``--stb-record-mode``) and the
test's session is exported over the cassette when the test ends.
Registered through the ``pytest11`` entry point, so installing stbproxy enables it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stbproxy.serve_process import ServeProcess
from stbproxy.sessions import safe_session_name

@dataclass
class StbProxy:
    """What a test gets: the proxy's URL, the agent environment, and the cassette."""

    url: str
    env: dict[str, str]
    cassette: Path
    recording: bool
    process: ServeProcess = field(repr=False)


def pytest_addoption(parser) -> None:
    group = parser.getgroup("stbproxy")
    group.addoption("--stb-record", action="store_true",
                    help="Record stb_cassette cassettes again through the real APIs instead of replaying them.")
    group.addoption("--stb-record-mode", choices=("record", "virtual"), default="record",
                    help="How --stb-record reaches APIs: record (always the real API) or virtual (store, "
                         "real API, else the simulator).")
    parser.addini("stb_cassette_dir", "Folder of stb_cassette cassettes, relative to the rootdir.", default="cassettes")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "stb_cassette(name): replay <stb_cassette_dir>/<name>.yaml through stbproxy")


def cassette_path(config, name: str) -> Path:
    folder = Path(config.rootpath) / config.getini("stb_cassette_dir")
    for suffix in (".yaml", ".yml", ".json"):
        if (folder / f"{name}{suffix}").exists():
            return folder / f"{name}{suffix}"
    return folder / f"{name}.yaml"


@pytest.fixture
def stb_proxy(request, tmp_path_factory):
    marker = request.node.get_closest_marker("stb_cassette")
    name = marker.args[0] if marker and marker.args else safe_session_name(request.node.name)
    cassette = cassette_path(request.config, name)
    recording = request.config.getoption("--stb-record")
    work = tmp_path_factory.mktemp("stbproxy")
    store, report = work / "store", work / "report.json"
    if recording:
        mode = request.config.getoption("--stb-record-mode")
        args = ["--mode", mode, "--session", safe_session_name(name)]
    elif not cassette.exists():
        pytest.fail(f"no cassette {cassette}: record it with `pytest --stb-record`", pytrace=False)
    else:
        args = ["--cassette", str(cassette), "--ordered", "--report", str(report)]
    with ServeProcess(store, *args) as process:
        yield StbProxy(process.url, process.client_env(), cassette, recording, process)
    if recording:
        _export(store, safe_session_name(name), cassette)
        return
    problems = _unrecorded_requests(report)
    if problems:
        pytest.fail(problems, pytrace=False)


def _export(store: Path, session: str, cassette: Path) -> None:
    cassette.parent.mkdir(parents=True, exist_ok=True)
    result = subprocess.run([sys.executable, "-m", "stbproxy", "export", "--session", session, "-o", str(cassette),
                             "--store", str(store)], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        pytest.fail(f"could not export the recorded session to {cassette}:\n{result.stderr}", pytrace=False)


def _unrecorded_requests(report: Path) -> str:
    """A failure message for requests the cassette did not hold, with the closest one."""
    if not report.exists():
        return f"stbproxy wrote no playback report ({report}): the proxy did not stop cleanly"
    unmatched = json.loads(report.read_text())["unmatched"]
    lines = []
    for miss in unmatched:
        request = miss["request"]
        lines.append(f"not in the cassette: {request['method']} {request['url']}")
        closest = miss.get("closest")
        if closest:
            lines.append(f"  closest recorded: {closest['method']} {closest['url']}")
            lines.extend(f"    {d['part']}: recorded {d['stored']!r}, got {d['got']!r}" for d in closest["differences"])
        else:
            lines.append("  the cassette holds nothing close")
    return "\n".join(lines)
