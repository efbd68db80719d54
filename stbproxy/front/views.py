"""Who is asking, as far as the store is concerned: the view of the store a request's calls
are keyed in. Pure.

One user's benchmark wants one view: a rotated API key must still hit what the old one
recorded. A proxy that several users reach (``--proxy-auth`` with an htpasswd file) must
keep each one's answers from the others, so each ``--proxy-auth`` user gets a view of its
own; ``--views credential`` goes further and gives each credential a request carries (its
secret header fields) one too. What no view wrote (an imported cache, a store recorded
without views) is the shared part, seen from every view (engine.Engine.scoped). A view is
a digest salted with the store's own salt, so a key says nothing of who made it.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

from stbproxy.keys import KeyRules, credentials_digest

AUTO, SHARED, USER, CREDENTIAL = "auto", "shared", "user", "credential"
VIEWS = (AUTO, SHARED, USER, CREDENTIAL)


def view_mode(setting: str, proxy_auth: bool) -> str:
    """``auto``: a view per user behind ``--proxy-auth``, else the one shared view."""
    if setting == AUTO:
        return USER if proxy_auth else SHARED
    return setting


def view_for(mode: str, user: str | None, headers: Iterable[tuple[str, str]], rules: KeyRules) -> str | None:
    """The view of a request (None: the shared one): its user's, or its user's and
    credentials' together."""
    if mode == SHARED:
        return None
    parts = [f"user:{user}"] if user else []
    if mode == CREDENTIAL:
        credentials = credentials_digest(headers, rules)
        if credentials:
            parts.append(f"credentials:{credentials}")
    if not parts:
        return None
    material = "\n".join(parts).encode("utf-8", "surrogatepass")
    return hashlib.sha256(rules.auth_salt + b"view\n" + material).hexdigest()[:16]
