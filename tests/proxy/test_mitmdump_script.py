"""The addon as users of an existing mitmproxy load it: `mitmdump -s addons/stbproxy_addon.py`."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.proxy.test_integration_proxy import agent

pytestmark = pytest.mark.integration
ADDON = Path(__file__).resolve().parents[2] / "addons" / "stbproxy_addon.py"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def mitmdump(tmp_path, port: int, *options: str) -> subprocess.Popen:
    command = [str(Path(sys.executable).with_name("mitmdump")), "-q", "--listen-host", "127.0.0.1",
               "--listen-port", str(port), "-s", str(ADDON), "--set", f"confdir={tmp_path / 'certs'}",
               "--set", "connection_strategy=lazy"]
    for option in options:
        command += ["--set", option]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"mitmdump exited: {process.stdout.read()}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return process
        time.sleep(0.2)
    process.kill()
    raise AssertionError("mitmdump did not start listening")


def stop(process: subprocess.Popen) -> str:
    process.terminate()
    try:
        return process.communicate(timeout=15)[0]
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()[0]


def test_record_then_replay_with_mitmdump_script(tmp_path, upstream):
    store = tmp_path / "store"
    port = free_port()
    process = mitmdump(tmp_path, port, "stb_mode=record", f"stb_store={store}")
    try:
        env = {"HTTP_PROXY": f"http://127.0.0.1:{port}", "HTTPS_PROXY": f"http://127.0.0.1:{port}"}
        recorded = agent(env, [{"method": "GET", "url": upstream.url("/echo?via=mitmdump")}])
    finally:
        stop(process)
    upstream.stop()
    port = free_port()
    process = mitmdump(tmp_path, port, "stb_mode=replay", f"stb_store={store}")
    try:
        env = {"HTTP_PROXY": f"http://127.0.0.1:{port}"}
        replayed = agent(env, [{"method": "GET", "url": upstream.url("/echo?via=mitmdump")}])
    finally:
        stop(process)
    assert recorded[0]["source"] == "upstream" and replayed[0]["source"] == "cache"
    assert replayed[0]["body"] == recorded[0]["body"]


@pytest.mark.parametrize("option,message", [
    ("stb_mode=sometimes",
     "stbproxy: error: stb_mode: unknown mode 'sometimes': choose one of virtual, record, replay"),
    ("stb_faults=status=999", "stbproxy: error: stb_faults: bad fault spec 'status=999'"),
    ("stb_faults=", "stbproxy: error: stb_faults: empty fault spec '': it names no failure"),
    ("stb_validity=lenient",
     "stbproxy: error: stb_validity: validity policy 'lenient' is not one of auto, stb, strict"),
])
def test_bad_option_value_stops_mitmdump_with_one_line_naming_the_option(tmp_path, option, message):
    command = [str(Path(sys.executable).with_name("mitmdump")), "-q", "--listen-port", str(free_port()),
               "-s", str(ADDON), "--set", option, "--set", f"confdir={tmp_path / 'certs'}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "STBPROXY_STORE": str(tmp_path / "s")})
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output
    ours = [line for line in output.splitlines() if "stbproxy" in line]
    assert len(ours) == 1 and message in ours[0], output
    # the rest is mitmproxy's own word that it stops
    assert ([line for line in output.splitlines() if "stbproxy" not in line]
            == ["Error logged during startup, exiting..."])


def test_list_options_can_be_set_from_the_mitmdump_command_line(tmp_path, upstream):
    port = free_port()
    process = mitmdump(tmp_path, port, f"stb_store={tmp_path / 's'}", "stb_passthrough=127.0.0.1",
                       "stb_secret_fields=session_token")
    try:
        seen = agent({"HTTP_PROXY": f"http://127.0.0.1:{port}"}, [{"method": "GET", "url": upstream.url("/echo?t=1")}])
    finally:
        stop(process)
    assert seen[0]["source"] == "passthrough"
