"""The stateless era of MCP (2026-07-28) with the official SDK 2.x, which needs an h11 that
mitmproxy 11 refuses, so it lives in a venv of its own: made once, beside the project's
(``.venv-mcp2``, or where STBPROXY_MCP2_VENV says), by the first test that needs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SERVER = HERE / "server.py"
CLIENT = HERE / "client.py"
REQUIREMENT = "mcp>=2,<3"


def modern_python() -> str:
    """The python of a venv with MCP SDK 2.x: made (pip, from the package index) when missing;
    the test is skipped, naming how to make it, when that cannot be done here."""
    venv = Path(os.environ.get("STBPROXY_MCP2_VENV") or ROOT / ".venv-mcp2")
    python = venv / "bin" / "python"
    if _has_sdk2(python):
        return str(python)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
        subprocess.run([str(python), "-m", "pip", "install", "-q", REQUIREMENT], check=True, capture_output=True,
                       timeout=600)
    except (subprocess.SubprocessError, OSError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        pytest.skip(f"MCP SDK 2.x could not be installed in {venv} ({exc}; {detail.decode()[-300:]}); make it with "
                    f"'python3 -m venv {venv} && {venv}/bin/pip install \"{REQUIREMENT}\"'")
    if not _has_sdk2(python):
        pytest.skip(f"{venv} has no MCP SDK 2.x; make it with '{venv}/bin/pip install \"{REQUIREMENT}\"'")
    return str(python)


def _has_sdk2(python: Path) -> bool:
    if not python.exists():
        return False
    check = subprocess.run([str(python), "-c", "import mcp.server.mcpserver"], capture_output=True, timeout=60)
    return check.returncode == 0
