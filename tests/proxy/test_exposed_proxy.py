"""A proxy that others can reach (listening beyond loopback, behind --proxy-auth) is no open
door to the host's other services: the addon inside mitmproxy's own test harness."""

import asyncio
import ipaddress
import json
import socket

import pytest
from mitmproxy.addons import proxyauth
from mitmproxy.test import taddons

from stbproxy.mitm import StbAddon
from tests.proxy.test_mitm_addon import flow_for


def answer(tmp_path, url: str, **options):
    async def scenario():
        addon = StbAddon()
        with taddons.context(proxyauth.ProxyAuth(), addon) as tctx:
            tctx.configure(addon, stb_store=str(tmp_path / "s"), stb_mode="record", **options)
            flow = flow_for(url)
            await addon.request(flow)
            await addon.done()
            return flow.response

    return asyncio.run(scenario())


EXPOSED = {"listen_host": "0.0.0.0", "proxyauth": "agent:secret"}


def test_internal_destinations_are_refused_on_an_exposed_proxy(tmp_path, upstream):
    for url in (upstream.url("/echo?a=1"), f"http://2130706433:{upstream.port}/echo", "http://localhost:6379/",
                "http://169.254.169.254/latest/meta-data/"):
        response = answer(tmp_path, url, **EXPOSED)
        assert response.status_code == 403, url
        assert "listens beyond loopback" in json.loads(response.content)["error"]
    assert not upstream.requests  # nothing was sent
    allowed = answer(tmp_path, upstream.url("/echo?a=2"), stb_allow_hosts=["127.0.0.1"], **EXPOSED)
    assert allowed.status_code == 200 and allowed.headers["X-Stb-Source"] == "upstream"


def test_names_are_judged_by_the_addresses_they_resolve_to(tmp_path):
    name = socket.gethostname()
    try:
        resolved = {ipaddress.ip_address(info[4][0].split("%")[0]) for info in socket.getaddrinfo(name, None)}
    except OSError:
        pytest.skip("this machine's own name does not resolve")
    if all(address.is_global for address in resolved):
        pytest.skip(f"this machine's name resolves to public addresses only: {resolved}")
    response = answer(tmp_path, f"http://{name}:9/", **EXPOSED)
    assert response.status_code == 403 and "resolves to" in json.loads(response.content)["error"], resolved


def test_loopback_proxies_reach_local_services_unless_denied(tmp_path, upstream):
    assert answer(tmp_path, upstream.url("/echo?b=1"), listen_host="127.0.0.1").status_code == 200
    denied = answer(tmp_path, upstream.url("/echo?b=2"), listen_host="127.0.0.1", stb_deny_hosts=["127.0.0.*"])
    assert denied.status_code == 403 and "--deny-host" in json.loads(denied.content)["error"]
    assert upstream.hits["/echo"] == 1


@pytest.mark.parametrize("spec", [":", "milo:", ":secret"])
def test_mitmdump_s_proxyauth_with_an_empty_part_is_refused(tmp_path, spec):
    """Under mitmdump the addon refuses what mitmproxy itself takes: a user or a password
    left empty, which a client sending 'Basic Og==' (':') passes."""
    from mitmproxy import exceptions

    addon = StbAddon()
    with taddons.context(proxyauth.ProxyAuth(), addon) as tctx:
        with pytest.raises(exceptions.OptionsError, match="neither of them empty"):
            tctx.configure(addon, proxyauth=spec, stb_store=str(tmp_path / "store"))
