"""The shared tier against real redis-server processes on loopback: URLs, writes and reads,
leases, outages (killed, paused, refusing auth), the bounded write queue, a cluster, TLS."""

import asyncio
import logging
import socket
import ssl
import threading
import time

import pytest

from stbproxy.errors import ConfigError, StoreError
from stbproxy.store.redis_process import RedisProcess
from stbproxy.store.shared_bulk import BulkWriter, SharedBulk
from stbproxy.store.shared_client import LEASE_PREFIX, OP_TIMEOUT, STATS_KEY
from stbproxy.store.shared_tier import Lease, SharedTier
from stbproxy.store.shared_url import parse_shared_url, redact_shared_url


@pytest.mark.parametrize("url,tls,cluster,nodes,db", [
    ("redis://127.0.0.1:6380/2", False, False, (("127.0.0.1", 6380),), 2),
    ("redis://cache.internal", False, False, (("cache.internal", 6379),), 0),
    ("rediss://u:p@cache.internal:6390/0?ssl_ca_certs=ca.pem", True, False, (("cache.internal", 6390),), 0),
    ("redis+cluster://a:7000,b:7001,c", False, True, (("a", 7000), ("b", 7001), ("c", 6379)), 0),
    ("rediss+cluster://:pw@a:7000", True, True, (("a", 7000),), 0),
])
def test_url_forms(url, tls, cluster, nodes, db):
    parsed = parse_shared_url(url)
    assert (parsed.tls, parsed.cluster, parsed.nodes, parsed.db) == (tls, cluster, nodes, db)


def test_credentials_come_from_the_url_and_are_never_shown():
    parsed = parse_shared_url("redis://alice:s3cr%40t@h:1/0")
    assert (parsed.username, parsed.password) == ("alice", "s3cr@t")
    assert parsed.redacted == "redis://alice:***@h:1/0"
    assert "s3cr" not in repr(parsed)
    assert parsed.scrub("WRONGPASS for s3cr@t and s3cr%40t") == "WRONGPASS for *** and ***"
    assert redact_shared_url("redis://:pw@h:1") == "redis://:***@h:1"
    assert redact_shared_url("redis://lonely-secret@h:1") == "redis://***@h:1"
    assert redact_shared_url("redis://h:1/0") == "redis://h:1/0"
    assert redact_shared_url("rediss://h:1/0?password=pw&ssl_ca_certs=ca.pem") == \
        "rediss://h:1/0?password=***&ssl_ca_certs=ca.pem"


@pytest.mark.parametrize("url,problem", [
    ("http://u:hunter2@h:1", "scheme 'http'"),
    ("redis://u:hunter2@h:port", "bad port"),
    ("redis://u:hunter2@a:1,b:2", "several hosts need redis+cluster://"),
    ("redis://u:hunter2@h:1/zero", "database 'zero' is not a number"),
    ("redis+cluster://u:hunter2@h:1/3", "database 0 only"),
    ("redis://u:hunter2@", "no host"),
])
def test_bad_urls_are_refused_naming_the_problem_not_the_password(url, problem):
    with pytest.raises(ConfigError) as info:
        parse_shared_url(url)
    assert problem in str(info.value) and "hunter2" not in str(info.value)
    assert info.value.setting == "shared"


# -- the proxy's side, on a real server ------------------------------------------------------------


async def connected(tier: SharedTier, timeout: float = 5.0) -> SharedTier:
    tier.start()
    deadline = time.monotonic() + timeout
    while not tier.up and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return tier


async def back_within(tier: SharedTier, timeout: float) -> float:
    started = time.monotonic()
    while not tier.up:
        assert time.monotonic() - started < timeout, "the shared tier did not reconnect in time"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


def test_writes_reads_and_fleet_counters(redis_server):
    async def main():
        tier = await connected(SharedTier(parse_shared_url(redis_server.url)))
        assert tier.up
        tier.set("http/h/GET/a/1", b"STB1 bytes")
        tier.count("calls_saved", 2)
        assert await tier.flushed()
        assert await tier.get("http/h/GET/a/1") == b"STB1 bytes"
        assert await tier.get("http/h/GET/missing/1") is None
        tier.append_session("run-1", b'{"seq": 1}')
        await tier.flushed()
        await tier.aclose()

    asyncio.run(main())
    with SharedBulk(parse_shared_url(redis_server.url)) as bulk:
        assert bulk.counters()["calls_saved"] == 2
        assert bulk.session_names() == ["run-1"] and bulk.session_records("run-1") == [b'{"seq": 1}']


def test_a_read_after_closing_is_a_miss_not_a_wait(redis_server):
    async def main():
        tier = await connected(SharedTier(parse_shared_url(redis_server.url)))
        tier.set("http/h/GET/a/1", b"STB1 bytes")
        assert await tier.flushed()
        await tier.aclose()
        assert await asyncio.wait_for(tier.get("http/h/GET/a/1"), OP_TIMEOUT * 2) is None
        assert not tier.up

    asyncio.run(main())


def test_a_lease_is_exclusive_released_and_an_expired_one_lets_the_next_go(redis_server):
    async def main():
        first = await connected(SharedTier(parse_shared_url(redis_server.url)))
        second = await connected(SharedTier(parse_shared_url(redis_server.url)))
        lease = await first.take_lease("api/c/t/a/1")
        assert lease is not None and await second.take_lease("api/c/t/a/1") is None
        await lease.release()
        again = await second.take_lease("api/c/t/a/1")
        assert again is not None
        await again.release()
        # a holder that died: its lease is only a key with a TTL
        redis_server.cli("set", LEASE_PREFIX + "api/c/t/a/2", "dead-proxy", "nx", "px", "300")
        assert await first.take_lease("api/c/t/a/2") is None
        await asyncio.sleep(0.4)
        taken = await first.take_lease("api/c/t/a/2")
        assert taken is not None
        await taken.release()
        await first.aclose()
        await second.aclose()

    asyncio.run(main())


def test_a_killed_server_is_survived_logged_twice_and_gets_the_kept_writes(redis_server, caplog):
    caplog.set_level(logging.INFO, logger="stbproxy")

    async def main():
        tier = await connected(SharedTier(parse_shared_url(redis_server.url)))
        redis_server.kill()
        started = time.monotonic()
        assert await tier.get("http/h/GET/a/1") is None  # a miss, at once
        assert time.monotonic() - started < OP_TIMEOUT
        for i in range(5):
            tier.set(f"http/h/GET/kept/{i}", b"value %d" % i)
            assert await tier.get(f"http/h/GET/kept/{i}") is None
        lease = await tier.take_lease("http/h/GET/x/1")  # nobody to ask: this proxy makes the call
        await lease.release()
        redis_server.start()
        assert await back_within(tier, 5.0) < 5.0
        assert await tier.flushed(timeout=5)
        await tier.aclose()
        return tier.counters

    counters = asyncio.run(main())
    assert redis_server.cli("get", "http/h/GET/kept/4") == "value 4\n"
    assert counters["outages"] == 1 and counters["writes_pushed_after_outage"] == 5
    messages = [r.getMessage() for r in caplog.records]
    assert sum("is away" in m for m in messages) == 1
    assert sum("is back" in m for m in messages) == 1


def test_the_write_queue_is_bounded_and_drops_are_counted(redis_server):
    async def main():
        tier = await connected(SharedTier(parse_shared_url(redis_server.url), queue_limit=3))
        redis_server.kill()
        await tier.get("http/h/GET/a/1")  # notices the outage
        for i in range(5):
            tier.set(f"http/h/GET/q/{i}", b"v")
        assert tier.counters["writes_dropped"] == 2
        redis_server.start()
        await back_within(tier, 5.0)
        await tier.flushed(timeout=5)
        await tier.aclose()

    asyncio.run(main())
    assert [redis_server.cli("exists", f"http/h/GET/q/{i}").strip() for i in range(5)] == ["1", "1", "1", "0", "0"]
    assert redis_server.cli("hget", STATS_KEY, "writes_dropped").strip() == "2"


def test_a_paused_server_costs_one_timeout_then_nothing(redis_server, caplog):
    async def main():
        tier = await connected(SharedTier(parse_shared_url(redis_server.url)))
        redis_server.pause()
        try:
            started = time.monotonic()
            assert await tier.get("http/h/GET/a/1") is None
            first = time.monotonic() - started
            started = time.monotonic()
            assert await tier.get("http/h/GET/a/2") is None  # marked away: no wait at all
            second = time.monotonic() - started
        finally:
            redis_server.resume()
        await back_within(tier, 5.0)
        await tier.aclose()
        return first, second

    first, second = asyncio.run(main())
    assert first <= OP_TIMEOUT * 1.5 and second < 0.05


def test_refused_auth_keeps_the_proxy_going_and_never_shows_the_password(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="stbproxy")
    with RedisProcess(tmp_path / "auth", "--requirepass", "right-pw") as server:
        async def main(url):
            tier = SharedTier(parse_shared_url(url))
            tier.start()
            await asyncio.sleep(0.3)
            result = (tier.up, await tier.get("http/h/GET/a/1"))
            await tier.aclose()
            return result

        wrong = f"redis://:wrong-pw@127.0.0.1:{server.port}/0"
        assert asyncio.run(main(wrong)) == (False, None)
        assert asyncio.run(main(f"redis://:right-pw@127.0.0.1:{server.port}/0"))[0] is True
        with pytest.raises(StoreError) as info:
            SharedBulk(parse_shared_url(wrong))
    text = caplog.text + str(info.value)
    assert "wrong-pw" not in text and "right-pw" not in text
    assert "redis://:***@127.0.0.1" in text and "not reachable" in text


@pytest.mark.integration
def test_a_three_node_cluster_serves_the_same_calls(redis_cluster):
    url = parse_shared_url(redis_cluster.url)

    async def main():
        tier = await connected(SharedTier(url))
        assert tier.up
        for i in range(50):  # keys land on all three nodes
            tier.set(f"api/c/t/a/{i}", b"v%d" % i)
        assert await tier.flushed(timeout=5)
        assert [await tier.get(f"api/c/t/a/{i}") for i in (0, 17, 49)] == [b"v0", b"v17", b"v49"]
        lease = await tier.take_lease("api/c/t/a/0")
        assert lease is not None and await tier.take_lease("api/c/t/a/0") is None
        await lease.release()
        await tier.aclose()

    asyncio.run(main())
    assert all(int(node.cli("dbsize")) > 0 for node in redis_cluster.nodes)
    with SharedBulk(url) as bulk:
        assert sorted(bulk.keys(["api/"])) == sorted(f"api/c/t/a/{i}" for i in range(50))
        assert bulk.get_many(["api/c/t/a/3", "api/c/t/a/40", "api/none"]) == [b"v3", b"v40", None]
        assert bulk.put_many([("api/c/t/a/3", b"other"), ("api/c/t/a/99", b"new")]) == 1
        assert bulk.key_count() == 51


# -- TLS: rediss:// through a TLS front on a real server ------------------------------------------


class TlsFront:
    """Terminates TLS (the test CA's certificate) and relays bytes to a plain redis-server,
    as a TLS-terminating load balancer in front of Redis does."""

    def __init__(self, ca, target_port: int) -> None:
        self.context = ca.server_context()
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.threads: list[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
                tls = self.context.wrap_socket(client, server_side=True)
            except (OSError, ssl.SSLError):
                if self.listener.fileno() == -1:
                    return
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((tls, upstream), (upstream, tls)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source, sink) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.close()
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()


def test_rediss_url_talks_tls_and_checks_the_certificate(redis_server, test_ca):
    front = TlsFront(test_ca, redis_server.port)
    try:
        trusted = f"rediss://127.0.0.1:{front.port}/0?ssl_ca_certs={test_ca.ca_file}"

        async def main(url, wait=0.5):
            tier = SharedTier(parse_shared_url(url))
            tier.start()
            # a TLS handshake on a loaded machine may take longer than half a second: the
            # trusted tier is given time to come up, the untrusted one half a second
            deadline = asyncio.get_running_loop().time() + wait
            while not tier.up and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
            if tier.up:
                tier.set("http/h/GET/tls/1", b"over tls")
                await tier.flushed()
            up = tier.up
            await tier.aclose()
            return up

        assert asyncio.run(main(trusted, wait=20)) is True
        assert redis_server.cli("get", "http/h/GET/tls/1") == "over tls\n"
        # without the private CA the certificate is not trusted: the tier stays away
        assert asyncio.run(main(f"rediss://127.0.0.1:{front.port}/0")) is False
    finally:
        front.close()


def test_the_documented_acl_user_can_do_everything_the_fleet_does(redis_server):
    """docs/scale.md's ACL line, applied to a real server: the proxy's and the commands'
    operations all work as that user (and nothing is counted as refused)."""
    import shlex
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "scale.md").read_text()
    line = next(text.strip() for text in doc.splitlines() if text.strip().startswith("ACL SETUSER stbproxy"))
    assert redis_server.cli(*shlex.split(line.replace("LONG-RANDOM-PASSWORD", "acl-pw"))).strip() == "OK"
    url = parse_shared_url(f"redis://stbproxy:acl-pw@127.0.0.1:{redis_server.port}/0")

    async def main():
        tier = await connected(SharedTier(url))
        assert tier.up
        tier.set("api/c/t/a/1", b"entry")
        tier.append_session("run", b"{}")
        tier.count("calls_saved")
        lease = await tier.take_lease("api/c/t/a/2")
        assert isinstance(lease, Lease)
        await lease.release()
        assert await tier.flushed() and await tier.get("api/c/t/a/1") == b"entry"
        await tier.aclose()
        return tier.counters

    counters = asyncio.run(main())
    assert not counters["errors"] and not counters["writes_refused"]
    with SharedBulk(url) as bulk:
        assert bulk.put_many([("http/h/GET/p/1", b"v"), ("api/c/t/a/1", b"other")]) == 1
        assert sorted(bulk.keys(["http/", "api/"])) == ["api/c/t/a/1", "http/h/GET/p/1"]
        assert bulk.get_many(["api/c/t/a/1"]) == [b"entry"]
        assert bulk.key_count() >= 4 and bulk.memory() > 0
        assert bulk.counters()["calls_saved"] == 1 and bulk.session_names() == ["run"]
        bulk.put_document("stbproxy:catalog", b"{}")
        # outside stbproxy's keys the user can do nothing
        with pytest.raises(StoreError, match="NOPERM|permission"):
            bulk.put_document("other-app:key", b"x")


def test_a_bulk_writer_hands_the_servers_failure_to_its_caller(redis_server):
    with SharedBulk(parse_shared_url(redis_server.url)) as bulk:
        writer = bulk.writer()
        writer.put([("api/c/t/a/1", b"one"), ("api/c/t/a/2", b"two")])
        writer.put([("api/c/t/a/1", b"again")])
        assert writer.close() == 2  # the repeat was left alone
        writer = bulk.writer()
        redis_server.kill()
        writer.put([("api/c/t/a/3", b"three")])
        with pytest.raises(StoreError, match=r"shared tier redis://127\.0\.0\.1"):
            writer.close()


def test_bulk_writes_leave_stored_keys_alone_and_the_first_of_a_repeated_key_counts(redis_server):
    """All new keys (one MSETNX), some stored already (the SET NX loop): the same result."""
    with SharedBulk(parse_shared_url(redis_server.url)) as bulk:
        assert bulk.put_many([("api/c/t/a/1", b"first"), ("api/c/t/a/2", b"two"), ("api/c/t/a/1", b"second")]) == 2
        assert bulk.get_many(["api/c/t/a/1", "api/c/t/a/2"]) == [b"first", b"two"]
        assert bulk.put_many([("api/c/t/a/3", b"three"), ("api/c/t/a/2", b"changed"), ("api/c/t/a/3", b"3")]) == 1
        assert bulk.get_many(["api/c/t/a/2", "api/c/t/a/3"]) == [b"two", b"three"]
        assert bulk.put_many([("api/c/t/a/1", b"x"), ("api/c/t/a/2", b"y")]) == 0
        assert bulk.key_count() == 3


def test_a_bulk_writer_gathers_small_puts_into_batches_and_writes_the_rest_on_closing(redis_server):
    with SharedBulk(parse_shared_url(redis_server.url)) as bulk:
        with BulkWriter(bulk, batch=3) as writer:
            for i in range(7):  # batches of 3, 3, then 1 on closing
                writer.put([(f"api/c/t/a/{i}", b"v%d" % i)])
            writer.put([("api/c/t/a/0", b"again")])
        assert writer.added == 7 and bulk.key_count() == 7
        assert bulk.get_many(["api/c/t/a/0", "api/c/t/a/6"]) == [b"v0", b"v6"]


def test_a_cluster_node_whose_bus_port_was_taken_starts_on_another_port(tmp_path, monkeypatch):
    """Between choosing a port and binding it, another process may take the node's bus port
    (port + 10000): the node is started again on a new port, never reported as broken."""
    import socket

    from stbproxy.store import redis_process

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    blocked = taken.getsockname()[1] - 10000
    real_free_port = redis_process.free_port
    chosen = iter([blocked])
    monkeypatch.setattr(redis_process, "free_port", lambda cluster=False: next(chosen, None) or real_free_port(
        cluster=cluster))
    node = redis_process.RedisProcess(tmp_path / "node", "--cluster-enabled", "yes")
    assert node.port == blocked
    try:
        node.start()
        assert node.port != blocked and redis_process.answers(node.port)
    finally:
        node.stop()
        taken.close()
