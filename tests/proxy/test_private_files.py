"""Files only their owner reads (stbproxy/private_files.py): a transient file for an API that
reads secrets from a path is there, private, for its block only."""

from __future__ import annotations

import os
import stat

import pytest

from stbproxy.private_files import transient_file

SECRET = b"-----BEGIN PRIVATE KEY-----\nnot a real key\n-----END PRIVATE KEY-----\n" * 200


def check_transient(leaves_disk: bool) -> str:
    with transient_file(SECRET) as path:
        with open(path, "rb") as handle:
            assert handle.read() == SECRET
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        if leaves_disk:
            assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert not os.path.exists(path)
    if leaves_disk:
        assert not os.path.exists(os.path.dirname(path))
    return path


def test_a_transient_file_holds_its_bytes_for_its_block_only():
    path = check_transient(leaves_disk=not hasattr(os, "memfd_create") or not os.path.isdir("/proc/self/fd"))
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        assert path.startswith("/proc/self/fd/")  # in memory: never on a disk


def test_without_memory_files_it_is_a_private_file_removed_after(monkeypatch):
    monkeypatch.delattr(os, "memfd_create", raising=False)
    check_transient(leaves_disk=True)


def test_a_transient_file_goes_when_its_block_fails(monkeypatch):
    for memory in (True, False):
        if not memory:
            monkeypatch.delattr(os, "memfd_create", raising=False)
        with pytest.raises(RuntimeError):
            with transient_file(SECRET) as path:
                raise RuntimeError("the reader failed")
        assert not os.path.exists(path)

