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


@contextlib.contextmanager
def transient_file(data: bytes) -> Iterator[str]:
    """A path whose file holds ``data`` for the block only, readable by its owner alone:
    for an API that reads secrets from a path and nowhere else (``ssl.SSLContext.
    load_cert_chain`` takes no bytes). Where the system has anonymous memory files (Linux's
    memfd, reached through /proc) the bytes never reach a disk; elsewhere the file is 0600,
    in a 0700 folder of its own, and both are removed when the block ends, however it ends."""
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None:
        handle = memfd_create("stbproxy-transient", getattr(os, "MFD_CLOEXEC", 0))
        try:
            path = f"/proc/self/fd/{handle}"
            if os.path.exists(path):
                os.fchmod(handle, 0o600)
                _write_all(handle, data)
                yield path
                return
        finally:
            os.close(handle)
    import tempfile

    folder = tempfile.mkdtemp(prefix="stbproxy-")  # 0700
    path = os.path.join(folder, "transient")
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_all(handle, data)
        finally:
            os.close(handle)
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        os.rmdir(folder)


def _write_all(handle: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(handle, view):]
