"""Reading multipart/form-data bodies: where each field's value lies, by its name and file
name. Pure and never raising; keys.py keys such a body by its fields and redact.py
redacts its secret ones."""

from __future__ import annotations

import email.utils
import re
from dataclasses import dataclass
from email.message import Message
from typing import TypeGuard


def is_multipart_type(content_type: str | None) -> TypeGuard[str]:
    return content_type is not None and content_type.split(";", 1)[0].strip().lower() == "multipart/form-data"


@dataclass(frozen=True, slots=True)
class Part:
    """One field of a multipart/form-data body: its name, its file name if any, and where
    its value lies in the body (``body[start:end]``)."""

    name: str
    filename: str | None
    start: int
    end: int


MAX_PARTS = 1000


def multipart_parts(body: bytes, content_type: str | None) -> list[Part] | None:
    """The fields of a multipart/form-data body, or None when it is not one that can be
    read (no boundary, no part, a part without its blank line). Never raises."""
    try:
        return _multipart_parts(body, content_type)
    except Exception:  # noqa: BLE001 - whatever the client wrote, a body is never an error here
        return None


def _multipart_parts(body: bytes, content_type: str | None) -> list[Part] | None:
    if not body or not is_multipart_type(content_type):
        return None
    boundary = _header_param(content_type, "boundary")
    if not boundary or len(boundary) > 200:
        return None
    delimiter = b"--" + boundary.encode("latin-1")
    # Delimiters start a line: the body's first line, or after CRLF (LF alone accepted).
    starts = [m.start() for m in re.finditer(re.escape(delimiter), body)
              if m.start() == 0 or body[m.start() - 1:m.start()] == b"\n"]
    parts: list[Part] = []
    # A body cut short (no closing delimiter) still has its last part: an upstream may read
    # it all the same, and it must be redacted and keyed like the others.
    for here, following in zip(starts, [*starts[1:], None]):
        section = here + len(delimiter)
        if body[section:section + 2] == b"--":  # the closing delimiter
            break
        stop = len(body) if following is None else following
        head_end = body.find(b"\r\n\r\n", section, stop)
        gap = 4
        if head_end < 0:
            head_end, gap = body.find(b"\n\n", section, stop), 2
        if head_end < 0:
            if following is None:
                break  # trailing bytes that are no part
            return None
        if following is None:  # up to the end, but for a last line break
            end = stop - (2 if body.endswith(b"\r\n") else 1 if body.endswith(b"\n") else 0)
        else:
            end = following - 1  # the LF before the next delimiter, and a CR before it
            if end > head_end + gap and body[end - 1:end] == b"\r":
                end -= 1
        end = max(end, head_end + gap)
        head = body[section:head_end].decode("latin-1")
        disposition = next((line.split(":", 1)[1] for line in head.splitlines()
                            if line.lower().startswith("content-disposition:")), "")
        name = _header_param("x;" + disposition, "name")
        if name is None:
            continue
        parts.append(Part(name, _header_param("x;" + disposition, "filename"), head_end + gap, end))
        if len(parts) > MAX_PARTS:
            return None
    return parts or None


def _header_param(value: str, name: str) -> str | None:
    """One parameter of a header value (``boundary`` of a Content-Type, ``name`` of a
    Content-Disposition), quoted or not, as email's parser reads it."""
    message = Message()
    message["content-type"] = value
    found = message.get_param(name, header="content-type")
    if isinstance(found, tuple):  # RFC 2231: (charset, language, text)
        found = email.utils.collapse_rfc2231_value(found)
    return found if isinstance(found, str) else None

