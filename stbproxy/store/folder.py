"""The embedded store's folder, around what RocksDB keeps in it: where it is by default
(STBPROXY_STORE), its own salt for digests of credentials, its size on disk, and why a
folder cannot hold a store, in words a user can act on."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from stbproxy.errors import StoreError, StoreLockedError

DEFAULT_STORE = Path(".stbproxy") / "store"
AUTH_SALT_FILE = "auth-salt"  # beside RocksDB's files, which it ignores (as catalog.json)


def default_store_path() -> Path:
    return Path(os.environ.get("STBPROXY_STORE") or DEFAULT_STORE)


def ensure_auth_salt(path: Path) -> None:
    """Give the store its own random salt for digests of credentials (keys.KeyRules.auth_salt),
    written once, readable by its owner alone."""
    try:
        fd = os.open(path / AUTH_SALT_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise StoreError(f"cannot write {path / AUTH_SALT_FILE}: {exc}") from exc
    with os.fdopen(fd, "wb") as handle:
        handle.write(secrets.token_bytes(32))


def auth_salt(path: str | os.PathLike[str]) -> bytes:
    """The store's salt for digests of credentials; empty for a store that has none yet."""
    try:
        return (Path(path) / AUTH_SALT_FILE).read_bytes()
    except OSError:
        return b""


def directory_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass  # RocksDB may delete an obsolete file while we walk
    return total


def open_failure(path: Path, exc: Exception) -> StoreError:
    """Why a store cannot be opened, and what to do about it, in one line."""
    text = str(exc)
    # Classified by RocksDB's words, not the path's: a folder named "blocks" is no lock.
    detail = text.replace(str(path.absolute()), "<store>").replace(str(path), "<store>").lower()
    if "lock" in detail and not ("read-only" in detail or "permission denied" in detail):
        return StoreLockedError(
            f"the store at {path} is locked by another process ({path / 'LOCK'}): "
            "another stbproxy is writing to it; stop it, use another --store, "
            "or use a read-only command such as 'stbproxy stats'")
    absolute = path.absolute()
    if absolute.parts[1:2] in (("proc",), ("sys",)):
        return StoreError(f"cannot create the store at {path}: /{absolute.parts[1]} is the kernel's virtual "
                          "file system, where no store can live; choose another folder with --store")
    blocking = next((parent for parent in (absolute, *absolute.parents) if parent.exists()), None)
    if blocking is not None and not blocking.is_dir():
        return StoreError(f"cannot create the store at {path}: {blocking} is a file, not a folder; "
                          "choose another folder with --store")
    errno_text = getattr(exc, "strerror", None) or text
    if isinstance(exc, PermissionError) or "permission denied" in detail or "read-only" in detail:
        return StoreError(f"cannot create the store at {path}: {errno_text} ({blocking} is not writable); "
                          "choose a folder you can write to with --store")
    if "corruption" in detail or "invalid argument" in detail:
        return StoreError(f"the store at {path} cannot be read: {text}; it is not an stbproxy store or it "
                          "is damaged (choose another --store, or move this folder away)")
    return StoreError(f"cannot open the store at {path}: {errno_text}; choose another folder with --store")
