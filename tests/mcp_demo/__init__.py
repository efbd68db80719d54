"""A real MCP server and client (the official SDK's) for the tests, run as processes, and
the helpers that start and stop them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from tests import processes

HERE = Path(__file__).resolve().parent
SERVER = HERE / "server.py"
CLIENT = HERE / "client.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class McpServer:
    """The demo server on a loopback port (Streamable HTTP at /mcp), as a process of its own."""

    def __init__(self, folder: Path, *flags: str, scheme: str = "http") -> None:
        self.port = free_port()
        self.scheme = scheme
        self.calls_file = folder / f"calls-{self.port}.txt"
        self.flags = flags
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/mcp"

    def calls(self) -> list[str]:
        """The tools/call requests that reached the server, in order."""
        return [line for line in self._lines() if line != "started"]

    def starts(self) -> int:
        return self._lines().count("started")

    def _lines(self) -> list[str]:
        return self.calls_file.read_text().split() if self.calls_file.exists() else []

    def __enter__(self) -> McpServer:
        self.process = subprocess.Popen([sys.executable, str(SERVER), "--port", str(self.port), "--calls",
                                         str(self.calls_file), *self.flags], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True)
        processes.wait_listening(self.process, self.port, "the MCP server")
        return self

    def stop(self) -> None:
        processes.stop(self.process)

    def __exit__(self, *exc_info) -> None:
        self.stop()


def run_client(plan: dict, env: dict[str, str], expect_ok: bool = True) -> list:
    """Run the SDK client with the proxy environment ``env`` (and none of the caller's own
    proxy settings); what it printed."""
    clean = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "no_proxy")}
    result = subprocess.run([sys.executable, str(CLIENT), json.dumps(plan)], env={**clean, **env},
                            capture_output=True, text=True, timeout=120)
    if expect_ok:
        assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


class StdioCommand:
    """The demo server over stdio, behind ``stbproxy mcp-stdio`` (a client starts it)."""

    def __init__(self, folder: Path) -> None:
        self.calls_file = folder / "stdio-calls.txt"
        self.server = [sys.executable, str(SERVER), "--stdio", "--calls", str(self.calls_file)]

    def behind_proxy(self, store: Path, *options: str) -> list[str]:
        script = Path(sys.executable).with_name("stbproxy")
        return [str(script), "mcp-stdio", "--store", str(store), *options, "--", *self.server]

    def lines(self) -> list[str]:
        return self.calls_file.read_text().split() if self.calls_file.exists() else []


def rpc(method: str, params=None, message_id=1) -> dict:
    """A JSON-RPC message: a request, or a notification when ``message_id`` is None."""
    body: dict = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        body["params"] = params
    if message_id is not None:
        body["id"] = message_id
    return body
