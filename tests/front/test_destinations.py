"""The proxy's own address in any spelling, destination rules, and the auth slow-down."""

import asyncio
import ipaddress

import pytest

from stbproxy.front.auth_throttle import AuthThrottle
from stbproxy.front.destinations import DestinationRules, own_address, parse_ip

LISTENING = ("127.0.0.1", 8080)


@pytest.mark.parametrize("host,expected", [
    ("127.0.0.1", "plain"), ("localhost", "plain"), ("::1", "other"),
    ("127.1", "other"), ("2130706433", "other"), ("0x7f.1", "other"), ("0177.0.0.1", "other"),
    ("0.0.0.0", "other"), ("0", "other"), ("[::1]", "other"), ("::", "other"), ("[::ffff:127.0.0.1]", "other"),
    ("LOCALHOST.", "other"), ("api.localhost", "other"), ("127.0.0.2", "other"),
    ("10.0.0.1", None), ("example.com", None), ("deadbeef", None), ("", None),
])
def test_own_address_in_any_spelling(host, expected):
    assert own_address(host, 8080, LISTENING) == expected
    assert own_address(host, 8081, LISTENING) is None  # another port is another service


def test_own_address_on_a_wildcard_bind_is_the_address_the_client_reached():
    assert own_address("192.168.1.5", 8080, ("192.168.1.5", 8080)) == "plain"
    assert own_address("3232235781", 8080, ("192.168.1.5", 8080)) == "other"  # 192.168.1.5 as one number
    assert own_address("192.168.1.6", 8080, ("192.168.1.5", 8080)) is None
    assert own_address("127.0.0.1", 8080, ("::ffff:127.0.0.1", 8080)) == "plain"  # a dual-stack socket
    assert own_address("[::1]", 8080, ("::1", 8080)) == "plain"


def test_parse_ip_reads_what_resolvers_read():
    assert parse_ip("0x7f.0.0.1") == ipaddress.ip_address("127.0.0.1")
    assert parse_ip("[fe80::1%eth0]") == ipaddress.ip_address("fe80::1")
    assert parse_ip("api.example.com") is None and parse_ip("1.2.3.4.5") is None


def test_exposed_proxies_refuse_internal_destinations_unless_allowed():
    exposed = DestinationRules(allow=("10.0.0.*", "db.internal"), deny=("*.evil.example", "8.8.*"),
                               deny_internal=True)
    refused = {h: exposed.verdict(h) for h in ("127.0.0.1", "127.1", "2130706433", "localhost", "[::1]",
                                                "169.254.169.254", "192.168.0.10", "10.0.1.1", "x.evil.example",
                                                "8.8.4.4")}
    assert all(refused.values()), refused
    assert "--allow-host" in refused["169.254.169.254"] and "127.0.0.1" in refused["2130706433"]
    for allowed in ("10.0.0.7", "db.internal", "api.example.com", "1.1.1.1"):
        assert exposed.verdict(allowed) is None
    # a name: decided by what it resolves to, unless a glob decides first
    assert exposed.needs_addresses("api.example.com") and not exposed.needs_addresses("db.internal")
    assert exposed.verdict("api.example.com", [ipaddress.ip_address("10.9.9.9")]) is not None
    assert exposed.verdict("api.example.com", [ipaddress.ip_address("93.184.216.34")]) is None


def test_loopback_proxies_allow_internal_destinations_and_allow_wins_over_deny():
    local = DestinationRules(deny=("*",), allow=("api.example.com",))
    assert local.verdict("127.0.0.1") is not None and local.verdict("api.example.com") is None
    assert DestinationRules().verdict("127.0.0.1") is None and not DestinationRules().active


def test_wrong_credentials_are_slowed_down_per_address():
    now = [0.0]
    throttle = AuthThrottle(clock=lambda: now[0])
    assert [throttle.delay(n) for n in range(1, 9)] == [0, 0, 0, 0.25, 0.5, 1.0, 2.0, 4.0]

    async def attempts():
        waits = [await throttle.hold("198.51.100.7", failed=True) for _ in range(5)]
        other = await throttle.hold("198.51.100.8", failed=True)  # another address: its own record
        right = await throttle.hold("198.51.100.7", failed=False)  # waits its turn once, then clears
        after = await throttle.hold("198.51.100.7", failed=False)
        now[0] += 3600
        forgotten = [await throttle.hold("198.51.100.8", failed=True) for _ in range(3)]
        return waits, other, right, after, forgotten

    waits, other, right, after, forgotten = asyncio.run(attempts())
    assert waits == [0, 0, 0, 0.25, 0.5] and other == 0 and right == 0.5 and after == 0
    assert forgotten == [0, 0, 0]  # an hour later the earlier failure no longer counts


def test_parallel_guesses_from_one_address_wait_in_line():
    throttle = AuthThrottle()

    async def burst():
        for _ in range(3):
            await throttle.hold("203.0.113.9", failed=True)  # the free ones
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.gather(*(throttle.hold("203.0.113.9", failed=True) for _ in range(3)))
        return loop.time() - started

    assert asyncio.run(burst()) >= 0.25 + 0.5 + 1.0 - 0.05  # held one after another, not side by side
