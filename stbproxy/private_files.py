"""Folders and files only their owner can read: the store (recorded traffic) and the
certs folder (the interception CA's private key) are created 0700, and what a running
proxy writes is created 0600, whatever the umask it was started with."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

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


@contextlib.contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_file`` (created owner-only) for the block, across
    processes: two proxies started at once on a new folder must not both write its CA,
    or one of them reads the other's half-written key. Where the platform has no flock,
    the block runs without the lock."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    handle = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # closing the descriptor releases the lock
