"""pytest plugin: replay a cassette for the length of a test, through a real stbproxy or
in-process.

    @pytest.mark.stb_cassette("weather_paris")          # cassettes/weather_paris.yaml
    def test_agent(stb_proxy):
        result = subprocess.run(["python", "agent.py"], env={**os.environ, **stb_proxy.env}, ...)

    @pytest.mark.stb_cassette("weather_paris")
    def test_tool(stb_replay):                          # no proxy: requests-mock, in this process
        assert my_tool.forecast("Paris")["days"]

``stb_proxy`` starts ``stbproxy serve --cassette FILE --ordered`` on a free loopback port
and hands the test the environment for an agent: exactly the variables ``stbproxy env``
prints for that proxy (HTTP(S)_PROXY, the CA bundle, NODE_EXTRA_CA_CERTS; client_env.py).
``stb_replay`` answers this process's `requests` calls from the same cassette with the
same engine, in milliseconds. Either way a request the cassette does not hold fails the
test (not its teardown), naming the closest recorded request and how it differs.
``pytest --stb-record`` records stb_proxy cassettes again instead: the proxy runs in
record mode (or virtual, with the simulator, per ``--stb-record-mode``) and the test's
session is exported over the cassette when the test ends. Options of that ``stbproxy serve``
(``--upstream-ca ca.pem``, ``--upstream-timeout 60``) go in the ``stb_serve_args`` ini option
or ``pytest --stb-serve-args "..."``; they are appended to the fixture's own arguments.
Registered through the ``pytest11`` entry point, so installing stbproxy enables it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stbproxy.cassettes.store import describe_miss
from stbproxy.serve_process import ServeProcess
from stbproxy.sessions import safe_session_name


@dataclass
class StbProxy:
    """What a test gets: the proxy's URL, the agent environment (``env``: what ``stbproxy env
    --port PORT --confdir CONFDIR`` prints for this proxy), and the cassette."""

    url: str
    env: dict[str, str]
    cassette: Path
    recording: bool
    process: ServeProcess = field(repr=False)
    report: Path | None = field(default=None, repr=False)
    checked: bool = field(default=False, repr=False)
    session: str = ""  # recording: the session the test's traffic is logged as
    problems: str = field(default="", repr=False)

    def finish(self) -> str:
        """Stop the proxy and say what went wrong ("" if nothing): the requests the cassette
        did not answer, or, when recording, the calls that got no answer to record. Said once:
        the call phase reports it, and the teardown only when the call phase never ran."""
        if self.checked:
            return ""
        self.checked = True
        self.process.stop()
        self.problems = (_failed_calls(self.process.store, self.session) if self.recording
                         else _unanswered_requests(self.report))
        return self.problems


def pytest_addoption(parser) -> None:
    group = parser.getgroup("stbproxy")
    group.addoption("--stb-record", action="store_true",
                    help="Record stb_cassette cassettes again through the real APIs instead of replaying them.")
    group.addoption("--stb-record-mode", choices=("record", "virtual"), default="record",
                    help="How --stb-record reaches APIs: record (always the real API) or virtual (store, "
                         "real API, else the simulator).")
    group.addoption("--stb-serve-args", default="", metavar="ARGS",
                    help="More arguments for the `stbproxy serve` the stb_proxy fixture starts, as a shell would "
                         "split them (e.g. \"--upstream-ca ca.pem\"); after those of the stb_serve_args ini option.")
    parser.addini("stb_cassette_dir", "Folder of stb_cassette cassettes, relative to the rootdir.", default="cassettes")
    parser.addini("stb_serve_args", "More arguments for the `stbproxy serve` the stb_proxy fixture starts "
                  "(e.g. --upstream-ca ca.pem).", type="args", default=[])


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "stb_cassette(name): replay <stb_cassette_dir>/<name>.yaml through stbproxy")
    serve_args(config)  # arguments that cannot be split stop the run at once, not each test


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Requests the cassette did not answer fail the test itself, in its call phase."""
    try:
        result = yield
    except BaseException:
        problems = _finish(item)
        if problems:  # the test failed on its own; say what the cassette could not answer
            item.add_report_section("call", "stbproxy", problems)
        raise
    problems = _finish(item)
    if problems:
        pytest.fail(problems, pytrace=False)
    return result


def _finish(item) -> str:
    found = []
    proxy = item.funcargs.get("stb_proxy")
    if isinstance(proxy, StbProxy):
        found.append(proxy.finish())
    player = item.funcargs.get("stb_replay")
    if player is not None and hasattr(player, "explain"):
        found.append(player.explain())
    return "\n".join(text for text in found if text)


def cassette_path(config, name: str) -> Path:
    folder = Path(config.rootpath) / config.getini("stb_cassette_dir")
    for suffix in (".yaml", ".yml", ".json"):
        if (folder / f"{name}{suffix}").exists():
            return folder / f"{name}{suffix}"
    return folder / f"{name}.yaml"


def _cassette_for(request) -> tuple[str, Path]:
    marker = request.node.get_closest_marker("stb_cassette")
    name = marker.args[0] if marker and marker.args else safe_session_name(request.node.name)
    return name, cassette_path(request.config, name)


@pytest.fixture
def stb_replay(request):
    """The test's cassette played in-process through requests-mock (no proxy process)."""
    from stbproxy.cassettes.inprocess import replay

    _name, cassette = _cassette_for(request)
    if not cassette.exists():
        pytest.fail(f"no cassette {cassette}: record it through stbproxy (the stb_proxy fixture with "
                    "`pytest --stb-record`, or `stbproxy serve --mode record` and `stbproxy export`)", pytrace=False)
    with replay(cassette) as player:
        yield player


@pytest.fixture
def stb_proxy(request, tmp_path_factory):
    name, cassette = _cassette_for(request)
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
    with ServeProcess(store, *args, *serve_args(request.config)) as process:
        proxy = StbProxy(process.url, process.agent_env(), cassette, recording, process, report,
                         session=safe_session_name(name))
        yield proxy
    problems = proxy.finish()  # the call phase has checked already, unless it never ran
    if problems:
        pytest.fail(problems, pytrace=False)
    if recording and not proxy.problems:  # only a recording whose every call was answered is kept
        _export(store, proxy.session, cassette)


def serve_args(config) -> list[str]:
    """The user's own serve arguments, ini first: they come after the fixture's, so a
    repeated option such as --mode is the user's."""
    try:
        return [*config.getini("stb_serve_args"), *shlex.split(config.getoption("--stb-serve-args"))]
    except ValueError as exc:  # an unclosed quote
        raise pytest.UsageError(f"--stb-serve-args cannot be split as a shell would: {exc}") from None


def _export(store: Path, session: str, cassette: Path) -> None:
    """Export the session over ``cassette``: only a whole export replaces it (an export that
    could not write every entry leaves the cassette as it was, and fails the test)."""
    cassette.parent.mkdir(parents=True, exist_ok=True)
    fresh = cassette.with_name(f".{cassette.name}.{os.getpid()}.recording{cassette.suffix}")
    try:
        result = subprocess.run([sys.executable, "-m", "stbproxy", "export", "--session", session, "-o", str(fresh),
                                 "--store", str(store)], capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            pytest.fail(f"could not export the recorded session to {cassette} (left as it was):\n{result.stderr}",
                        pytrace=False)
        os.replace(fresh, cassette)
    finally:
        fresh.unlink(missing_ok=True)


def _failed_calls(store: Path, session: str) -> str:
    """A failure message for the recorded calls that got no answer (the API could not be
    reached, its certificate not verified): a cassette without them would not replay."""
    from stbproxy.errors import StbError
    from stbproxy.store.embedded import Store

    try:
        with Store(store, readonly=True) as db:
            failed = [r for r in db.session_records(session) if r.get("source") == "error"]
    except StbError as exc:
        return f"stbproxy could not read the recording: {exc}"
    if not failed:
        return ""
    lines = [f"  {r.get('method')} {r.get('url')}: {r.get('error') or 'no answer'}" for r in failed]
    return "\n".join([f"the recording is not saved: {len(failed)} call(s) got no answer from the real API "
                      "(see the proxy's log; a TLS error is fixed with --stb-serve-args=--upstream-ca=FILE):",
                      *lines])


def _unanswered_requests(report: Path | None) -> str:
    """A failure message for requests the cassette did not answer, with the closest one."""
    if report is None or not report.exists():
        return f"stbproxy wrote no playback report ({report}): the proxy did not stop cleanly"
    unmatched = json.loads(report.read_text())["unmatched"]
    return "\n".join(line for miss in unmatched for line in describe_miss(miss))
