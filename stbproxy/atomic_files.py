"""Files written whole or not at all. A reader (another process, a crash-restarted proxy)
sees the old file or the new one, never half of one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(target: Path, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to an owner-only temporary file beside ``target``, flush it to disk,
    then rename it over ``target``; on any failure the temporary file is removed."""
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding=encoding) as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
