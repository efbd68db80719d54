"""The interception CA: one per user (its folder, the confdir), created once, whole."""

from __future__ import annotations

import logging
from pathlib import Path

from stbproxy.errors import ConfigError
from stbproxy.private_files import exclusive, private_dir

log = logging.getLogger("stbproxy")

CA_CERT_NAME = "mitmproxy-ca-cert.pem"


def ca_cert_path(confdir: Path) -> Path:
    return confdir / CA_CERT_NAME


CA_LOCK = ".stbproxy-ca.lock"


def ensure_ca(confdir: Path) -> Path:
    """Create the interception CA in ``confdir`` if missing (key readable by the owner only);
    ConfigError names the folder when that cannot be done."""
    from mitmproxy.certs import CertStore

    try:
        private_dir(confdir)
        with exclusive(confdir / CA_LOCK):  # one process creates the CA; the others then read it whole
            CertStore.from_store(confdir, "mitmproxy", 2048)
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(f"cannot keep the CA in {confdir}: {reason}; choose a folder you can write to with "
                          "--confdir or STBPROXY_CONFDIR", setting="confdir") from exc
    return ca_cert_path(confdir)
