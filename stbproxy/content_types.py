"""What a body's declared Content-Type says it is: JSON, or a URL-encoded form (a multipart
one: multipart.is_multipart_type). Pure."""

from __future__ import annotations


def is_json_type(content_type: str | None) -> bool:
    if not content_type:
        return False
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime.endswith("/json") or mime.endswith("+json")


def is_form_type(content_type: str | None) -> bool:
    if not content_type:
        return False
    return content_type.split(";", 1)[0].strip().lower() == "application/x-www-form-urlencoded"
