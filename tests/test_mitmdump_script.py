"""The addon as users of an existing mitmproxy load it: `mitmdump -s addons/stbproxy_addon.py`."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_integration_proxy import agent

pytestmark = pytest.mark.integration
ADDON = Path(__file__).resolve().parent.parent / "addons" / "stbproxy_addon.py"


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


def test_bad_option_value_stops_mitmdump_naming_the_option(tmp_path):
    command = [str(Path(sys.executable).with_name("mitmdump")), "-q", "--listen-port", str(free_port()),
               "-s", str(ADDON), "--set", "stb_mode=sometimes", "--set", f"confdir={tmp_path / 'certs'}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "STBPROXY_STORE": str(tmp_path / "s")})
    assert result.returncode != 0 and "stb_mode" in result.stdout + result.stderr
