"""What the benchmark and reliability scripts share: how to start stbproxy and other
console scripts, a clean environment for measured children, CPU times, percentiles and
medians, free ports, and the frame of a run (a temporary folder, children stopped on exit).

Scripts are run as files (``python scripts/bench/bench_proxy.py``); each puts the
repository root on ``sys.path`` first and imports ``scripts.common``.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

HOST = "127.0.0.1"


def console_script(name: str) -> str:
    """A console script installed beside this interpreter (the project's venv), else on PATH."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if not found:
        sys.exit(f"{name} not found beside {sys.executable} or on PATH")
    return found


def stbproxy_command() -> list[str]:
    """How users start stbproxy: its console script, else the module."""
    script = Path(sys.executable).with_name("stbproxy")
    return [str(script)] if script.exists() else [sys.executable, "-m", "stbproxy"]


def child_env(*, drop_prefixes: tuple[str, ...] = ("STBPROXY_",), **extra: str) -> dict[str, str]:
    """The environment for a measured child: never through the caller's proxy, never with
    the caller's stbproxy settings (or other prefixes named), which would change the runs."""
    env = {k: v for k, v in os.environ.items()
           if not k.lower().endswith("_proxy") and not k.startswith(drop_prefixes)}
    return env | extra


def open_tunnel(sock: socket.socket, authority: str) -> None:
    """CONNECT ``authority`` through the proxy ``sock`` is connected to: its answer's head is
    read to its end and no byte past it (TLS follows); ConnectionError when it is refused or
    the proxy closes first."""
    sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        chunk = sock.recv(1)
        if not chunk:
            raise ConnectionError("the proxy closed the connection before answering the CONNECT")
        head += chunk
    if not head.startswith(b"HTTP/1.1 200"):
        raise ConnectionError(f"CONNECT refused: {head[:100]!r}")


def percentile(ordered: list[float], pct: float) -> float:
    """The pct-th percentile of an ascending list (nearest rank); nan when empty."""
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux /proc; NaN elsewhere), to report work per request."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def tree_pids(pid: int) -> list[int]:
    """A process and every process below it (the workers of ``serve --workers``, an
    import's encoding workers), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(parent, []).append(int(entry.name))
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        pending.extend(parents.get(current, []))
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU of a process and every process below it."""
    return sum(cpu_seconds(current) for current in tree_pids(pid))


def children_cpu() -> float:
    """User + system CPU of this process's finished children: the cost of a timed command."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def median(values) -> float:
    """The median of the figures that are numbers (a NaN is a figure that was not measured)."""
    kept = [v for v in values if not math.isnan(v)]
    return statistics.median(kept) if kept else float("nan")


def free_port() -> int:
    """A loopback port free now, for a server started next."""
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def run_in_workdir(name: str, prefix: str, body: Callable[[Path, contextlib.ExitStack], int],
                   errors: tuple[type[BaseException], ...] = (RuntimeError, subprocess.TimeoutExpired)) -> int:
    """``body(workdir, stack)`` in a temporary folder removed afterwards; ``errors`` print one
    ``NAME: FAILED`` line and give exit status 2. SIGTERM (e.g. a test timing out) unwinds like
    Ctrl-C, so every child whose stop is on the stack gets stopped."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
        try:
            return body(workdir, stack)
        except errors as exc:
            print(f"{name}: FAILED: {exc}", file=sys.stderr)
            return 2
