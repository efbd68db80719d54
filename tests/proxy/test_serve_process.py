"""ServeProcess believes a ready line only from a live process whose port takes connections."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from stbproxy.serve_process import ServeProcess


class Scripted(ServeProcess):
    """A stand-in for `stbproxy serve` that prints what the test says, then does what it says."""

    def __init__(self, tmp_path, script: str) -> None:
        super().__init__(tmp_path / "store")
        self.script = script

    def launch(self):
        self.process = subprocess.Popen([sys.executable, "-c", self.script], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        return self


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_ready_line_from_a_process_that_then_exits_is_not_believed(tmp_path):
    port = free_port()
    false_line = (f"print('stbproxy 0.1.0 listening on http://127.0.0.1:{port} (mode virtual, store s)', flush=True); "
                  "import sys; sys.exit(1)")
    with pytest.raises(RuntimeError, match="did not start"):
        Scripted(tmp_path, false_line).start(timeout=10)


def test_a_log_line_that_mentions_listening_is_not_a_ready_line(tmp_path):
    port = free_port()
    log_line = (f"print('12:00:01 WARNING mitmproxy: HTTP proxy listening on http://127.0.0.1:{port} (x)', "
                "flush=True); import time; time.sleep(30)")
    process = Scripted(tmp_path, log_line)
    with pytest.raises(RuntimeError, match="did not start"):
        process.start(timeout=2)
    assert process.process.poll() is not None  # stopped by the failed start


def test_a_ready_line_with_a_listening_port_is_believed(tmp_path):
    script = ("import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
              "print(f'stbproxy 0.1.0 listening on http://127.0.0.1:{s.getsockname()[1]} (mode virtual)', flush=True); "
              "time.sleep(30)")
    with Scripted(tmp_path, script) as process:
        assert process.port > 0


@pytest.mark.integration
def test_the_client_environment_trusts_the_proxy_and_what_the_client_trusted_before(tmp_path, tls_upstream, test_ca):
    """The plugin's stb_proxy.env, like `stbproxy env`: an HTTPS host the agent reaches
    directly (NO_PROXY) still verifies against the roots its environment named."""
    import requests

    with ServeProcess(tmp_path / "store", "--upstream-ca", str(test_ca.ca_file),
                      env={"SSL_CERT_FILE": str(test_ca.ca_file)}) as proxy:
        env = proxy.client_env()
        bundle = env["REQUESTS_CA_BUNDLE"]
        assert env["SSL_CERT_FILE"] == bundle != str(proxy.ca_file)
        direct = requests.get(tls_upstream.url("/echo"), verify=bundle, proxies={"https": None}, timeout=10)
        proxied = requests.get(tls_upstream.url("/echo"), verify=bundle, proxies={"https": env["HTTPS_PROXY"]},
                               timeout=20)
    assert direct.status_code == 200 and "X-Stb-Source" not in direct.headers
    assert proxied.status_code == 200 and proxied.headers["X-Stb-Source"] == "upstream"
    assert proxy.ca_file.read_text().strip() in open(bundle).read()
