"""The CA bundle ``stbproxy env`` hands to clients: the proxy's CA plus the roots they trusted before.

The variables ``env`` exports (REQUESTS_CA_BUNDLE, SSL_CERT_FILE, CURL_CA_BUNDLE) replace a
client's trusted roots instead of adding to them. Holding the proxy's CA alone, they would
break every HTTPS host the client reaches directly (a host in NO_PROXY, such as an LLM
server). So the bundle carries, besides the proxy's CA:

- the files those variables named before ``env`` replaced them: the user's own choice of
  roots, such as a company CA. A bundle of ours found there (a shell that ran ``env``
  already) stands for the files it was made from, which its header lists;
- the system's roots: the file OpenSSL was built to read (what curl and urllib trust by
  default, kept current by the operating system, with any CA an administrator added), else,
  where the system has no such file (macOS python.org builds, Windows, slim containers),
  certifi's copy of Mozilla's roots (what requests and httpx trust by default).

The bundle is written beside the CA, owner-only, by an atomic replace, and only when its
content changes: a client that reads it meanwhile sees the old or the new file, never half.
Each set of user files gets a bundle of its own, so shells that trust different roots
never rewrite each other's.
"""

from __future__ import annotations

import hashlib
import os
import re
import ssl
from collections.abc import Iterable, Mapping
from pathlib import Path

from stbproxy.atomic_files import write_atomically

BUNDLE_PREFIX = "stbproxy-ca-bundle"
# Variables whose roots the exported ones would otherwise silently replace.
USER_ROOT_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]+?-----END CERTIFICATE-----")
_SOURCE_LINE = "# roots: "


def write_client_bundle(ca_cert: Path, environ: Mapping[str, str] | None = None) -> Path:
    """Write (or keep, when up to date) the bundle beside ``ca_cert``; returns its path.
    OSError when the folder cannot be written."""
    environ = os.environ if environ is None else environ
    system = system_roots_file()
    users = user_root_files(environ, ca_cert.parent, system)
    bundle = bundle_path(ca_cert.parent, users)
    content = bundle_text(ca_cert, _unique([*users, system]))
    if _read_or_none(bundle) != content:
        write_atomically(bundle, content, encoding="ascii")
    return bundle


def user_root_files(environ: Mapping[str, str], confdir: Path, system: Path | None) -> list[Path]:
    """The files of roots the user's variables name, other than the system's. A bundle of ours stands
    for the files it was made from (a shell that ran ``env`` before); the CA's own folder adds
    nothing."""
    found: list[Path] = []
    for variable in USER_ROOT_VARIABLES:
        value = environ.get(variable, "").strip()
        if not value:
            continue
        path = Path(value).expanduser()
        if path.name.startswith(BUNDLE_PREFIX):
            found.extend(_listed_sources(path))
        elif path.resolve().parent != confdir.resolve():
            found.append(path)
    return [p for p in _unique(found)
            if (system is None or p.resolve() != system.resolve()) and _certificates_in(p)]


def bundle_path(confdir: Path, user_files: list[Path]) -> Path:
    """One file per set of user roots, so shells that trust different roots never rewrite
    each other's bundle; the plain name when the system's roots are all there is."""
    if not user_files:
        return confdir / f"{BUNDLE_PREFIX}.pem"
    digest = hashlib.sha256("\n".join(sorted(str(p.resolve()) for p in user_files)).encode()).hexdigest()
    return confdir / f"{BUNDLE_PREFIX}-{digest[:12]}.pem"


def system_roots_file() -> Path | None:
    """OpenSSL's own default file when it holds certificates, else certifi's, else None."""
    built_in = Path(ssl.get_default_verify_paths().openssl_cafile)  # ignores SSL_CERT_FILE: that may be ours
    if _certificates_in(built_in):
        return built_in
    try:
        import certifi
    except ImportError:  # installed with httpx and requests, so only in an unusual setup
        return None
    return Path(certifi.where())


def bundle_text(ca_cert: Path, sources: Iterable[Path]) -> str:
    """The proxy's CA, then every usable root of ``sources``, each certificate once."""
    sources = list(sources)
    seen: set[str] = set()
    blocks = []
    checker = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    for block in [*_certificates_in(ca_cert), *(c for s in sources for c in _certificates_in(s))]:
        fingerprint = "".join(block.split())
        if fingerprint not in seen and _loads(checker, block):
            seen.add(fingerprint)
            blocks.append(block)
    header = ["# stbproxy's client CA bundle: the proxy's CA, then the trusted roots of these files.",
              *(f"{_SOURCE_LINE}{source}" for source in sources),
              "# Written by `stbproxy env`, rewritten whenever one of them changes: edits are lost."]
    return "\n".join(header) + "\n\n" + "\n\n".join(blocks) + "\n"


def _listed_sources(bundle: Path) -> list[Path]:
    text = _read_or_none(bundle) or ""
    return [Path(line.removeprefix(_SOURCE_LINE)) for line in text.splitlines() if line.startswith(_SOURCE_LINE)]


def _unique(paths: Iterable[Path | None]) -> list[Path]:
    """Each file once (by where it really is), in order; None left out."""
    kept, seen = [], set()
    for path in paths:
        if path is not None and path.resolve() not in seen:
            seen.add(path.resolve())
            kept.append(path)
    return kept


def _certificates_in(path: Path) -> list[str]:
    """The PEM certificates of a file, or of the files directly in a folder (requests takes a
    folder in REQUESTS_CA_BUNDLE); nothing for what cannot be read."""
    try:
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    except OSError:
        return []
    found: list[str] = []
    for file in files:
        text = _read_or_none(file)
        if text is not None:
            found.extend(m.group(0).replace("\r\n", "\n") for m in _PEM_CERT.finditer(text))
    return found


def _loads(checker: ssl.SSLContext, block: str) -> bool:
    """One damaged certificate in a bundle makes some clients refuse the whole file."""
    try:
        checker.load_verify_locations(cadata=block)
    except (ssl.SSLError, ValueError):
        return False
    return True


def _read_or_none(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None


