"""The variables that point a client at a proxy: one function for every place that hands
them out, so ``stbproxy env``, ``stbproxy run`` and the pytest plugin's ``stb_proxy.env``
cannot drift apart (the plugin once left out NODE_EXTRA_CA_CERTS, and a Node agent
failed with UNABLE_TO_VERIFY_LEAF_SIGNATURE).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from stbproxy.sessions import proxy_url
from stbproxy.trust_bundle import write_client_bundle


def client_variables(host: str, port: int, ca_cert: Path, session: str | None = None, params: str = "",
                     environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The proxy for HTTP_PROXY/HTTPS_PROXY (both cases, with ``session`` as the URL's user),
    and the CA to trust: REQUESTS_CA_BUNDLE, SSL_CERT_FILE and CURL_CA_BUNDLE name a bundle of
    ``ca_cert`` and the roots ``environ`` (default: this process's) trusted before, written
    beside it (trust_bundle.py); NODE_EXTRA_CA_CERTS names ``ca_cert`` alone, which Node adds
    to its own roots. NO_PROXY is not among them: hosts the client's NO_PROXY names skip the
    proxy. OSError when the bundle cannot be written."""
    bundle = str(write_client_bundle(ca_cert, environ))
    proxy = proxy_url(host, port, session, params)
    return {
        "HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy, "https_proxy": proxy,
        "REQUESTS_CA_BUNDLE": bundle, "SSL_CERT_FILE": bundle, "CURL_CA_BUNDLE": bundle,
        "NODE_EXTRA_CA_CERTS": str(ca_cert),
    }
