"""``stbproxy serve`` as a child process on a free loopback port, started as users start it.

Used by the pytest plugin, the project's tests and the benchmark scripts, so that there
is one way to start a proxy and learn its port: the ready line it prints.
"""

from __future__ import annotations

import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from stbproxy.client_env import client_variables

# The ready line, and only it: its start, not any line that mentions listening.
_READY = re.compile(r"^stbproxy \S+ listening on http://(\S+?):(\d+) ")


class ServeProcess:
    """``stbproxy serve`` as a subprocess on a free loopback port, as users start it."""

    def __init__(self, store: Path, *args: str, env: dict | None = None, confdir: Path | None = None,
                 user_ca: bool = False) -> None:
        self.store = Path(store)
        if user_ca:  # the user's own CA, ~/.stbproxy of the HOME in ``env``, as a user's serve finds it
            self.confdir = Path((env or {}).get("HOME") or Path.home()) / ".stbproxy"
            confdir_args = []
        else:  # the CA beside the store: a test run never writes into the home folder
            self.confdir = Path(confdir) if confdir is not None else self.store.parent / "certs"
            confdir_args = ["--confdir", str(self.confdir)]
        self.args = ["--store", str(self.store), "--port", "0", *confdir_args, *args]
        # Neither the caller's proxy nor their STBPROXY_* settings: they would change the run.
        inherited = {k: v for k, v in os.environ.items()
                     if not k.lower().endswith("_proxy") and not k.startswith("STBPROXY_")}
        self.env = {**inherited, **(env or {})}
        self.process: subprocess.Popen[str] | None = None
        self.port = 0
        self.output: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.confdir / "mitmproxy-ca-cert.pem"

    def agent_env(self, session: str | None = None) -> dict[str, str]:
        """What an unmodified agent needs, exactly as ``stbproxy env --port PORT --confdir
        CONFDIR`` prints it (client_env.client_variables): the proxy for HTTP and HTTPS, and
        the CA to trust beside the roots it trusted already (so a host it reaches directly
        still verifies), for Node too. The pytest plugin's ``stb_proxy.env``."""
        return client_variables("127.0.0.1", self.port, self.ca_file, session, environ=self.env)

    def client_env(self, session: str | None = None) -> dict[str, str]:
        """``agent_env`` with NO_PROXY emptied: the project's tests send their loopback
        upstreams' calls through the proxy whatever NO_PROXY the machine sets."""
        return {**self.agent_env(session), "NO_PROXY": "", "no_proxy": ""}

    def launch(self) -> ServeProcess:
        """Start the process without waiting (several can then start up side by side)."""
        script = Path(sys.executable).with_name("stbproxy")
        command = [str(script)] if script.exists() else [sys.executable, "-m", "stbproxy"]
        self.process = subprocess.Popen([*command, "serve", *self.args], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, env=self.env)
        # Lines are read on a thread, so a proxy that hangs silently cannot block a caller
        # past its deadline, and a chatty one never fills the pipe.
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def wait_ready(self, timeout: float = 60) -> ServeProcess:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:  # the process ended
                break
            match = _READY.search(line)
            if match and self._accepts(int(match.group(2)), deadline):
                self.port = int(match.group(2))
                return self
        self.stop()
        raise RuntimeError("stbproxy serve did not start:\n" + "".join(self.output[-40:]))

    def _accepts(self, port: int, deadline: float) -> bool:
        """A ready line is believed only if the process lives and its port takes a connection."""
        process = self.process  # (a ready line comes only from a process launched)
        while process is not None and process.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def start(self, timeout: float = 60) -> ServeProcess:
        return self.launch().wait_ready(timeout)

    def _read(self) -> None:
        stdout = self.process.stdout if self.process is not None else None  # (launched, its output piped)
        for line in stdout or ():
            self.output.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def stop(self, timeout: float = 15) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
