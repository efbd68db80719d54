"""Folders and files only their owner can read: the store (recorded traffic) and the
certs folder (the interception CA's private key) are created 0700, and what a running
proxy writes is created 0600, whatever the umask it was started with."""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_UMASK = 0o077


def private_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` (and any missing parents) readable by the owner only. A folder that
    exists already keeps its mode: it was made by someone, on purpose."""
    path = Path(path)
    missing = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    path.mkdir(parents=True, exist_ok=True)
    for folder in missing:
        os.chmod(folder, 0o700)
    return path


def private_umask() -> int:
    """Make every file this process creates from now on owner-only; returns the old umask.
    For processes that are ours alone (``stbproxy serve``), not for an addon inside someone
    else's mitmproxy."""
    return os.umask(PRIVATE_UMASK)
