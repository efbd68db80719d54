"""Text made safe for an HTML page (html_report.py and exec_html.py write with it)."""

from __future__ import annotations

import html
import re
from typing import Any

_SURROGATES = re.compile("[\ud800-\udfff]")


def esc(value: Any) -> str:
    """Text for HTML (content or a quoted attribute); a lone surrogate becomes U+FFFD."""
    return html.escape(_SURROGATES.sub("\ufffd", "" if value is None else str(value)), quote=True)
