"""Small helpers the benchmark scripts share (they import it from beside themselves)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


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


def tree_cpu_seconds(pid: int) -> float:
    """CPU of a process and every process below it (the workers of ``serve --workers``)."""
    total, pending = 0.0, [pid]
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(parent, []).append(int(entry.name))
    while pending:
        current = pending.pop()
        total += cpu_seconds(current)
        pending.extend(parents.get(current, []))
    return total
