"""Text for the HTML report: escaped, and numbers as the report shows them (html_report.py,
the modules that draw its parts, and exec_html.py write with it)."""

from __future__ import annotations

import html
import re
from typing import Any

from .lenient import number

_SURROGATES = re.compile("[\ud800-\udfff]")


def esc(value: Any) -> str:
    """Text for HTML (content or a quoted attribute); a lone surrogate becomes U+FFFD."""
    return html.escape(_SURROGATES.sub("\ufffd", "" if value is None else str(value)), quote=True)


def number_text(value: Any, digits: int = 1) -> str:
    """A number with ``digits`` decimals; "–" for a value that is no finite number."""
    found = number(value)
    return "–" if found is None else f"{found:.{digits}f}"
