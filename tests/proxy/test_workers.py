"""``stbproxy serve --workers N``: real processes on one port, one writer for the store."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner

from stbproxy.cli import main
from stbproxy.serve_process import ServeProcess

START = 120  # two processes import mitmproxy side by side on a busy machine


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fetch(proxy: ServeProcess, url: str) -> tuple[int, str | None, bytes]:
    """One request on a connection of its own (so the kernel spreads them over the workers)."""
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    try:
        connection.request("GET", url, headers={"Connection": "close"})
        response = connection.getresponse()
        return response.status, response.getheader("X-Stb-Source"), response.read()
    finally:
        connection.close()


def sessions(store: Path) -> dict:
    result = CliRunner().invoke(main, ["sessions", "--json", "--store", str(store)])
    assert result.exit_code == 0, result.output
    return {s["name"]: s for s in json.loads(result.output)}


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_two_workers_share_one_store_single_flight_and_sessions(tmp_path, upstream):
    store = tmp_path / "store"
    proxy = ServeProcess(store, "--workers", "2", "--session", "run").start(START)
    try:
        assert "2 workers" in "".join(proxy.output)
        readers = children(proxy.process.pid)
        assert len(readers) == 1, readers

        # Identical misses arriving at once, on both workers: one real call.
        with ThreadPoolExecutor(24) as pool:
            slow = list(pool.map(lambda _: fetch(proxy, upstream.url("/slow?seconds=1")), range(24)))
        assert [status for status, _, _ in slow] == [200] * 24
        assert upstream.hits["/slow"] == 1

        # Distinct misses, stored once each; then hits, answered by both workers.
        urls = [upstream.url(f"/api/item{i}?q={i}") for i in range(10)]
        with ThreadPoolExecutor(10) as pool:
            first = list(pool.map(lambda u: fetch(proxy, u), urls))
        assert {source for _, source, _ in first} == {"upstream"}
        reader_cpu = cpu_seconds(readers[0])
        with ThreadPoolExecutor(16) as pool:
            again = list(pool.map(lambda n: fetch(proxy, urls[n % 10]), range(300)))
        assert {(status, source) for status, source, _ in again} == {(200, "cache")}
        assert [body for _, _, body in again[:10]] == [body for _, _, body in first]
        assert all(upstream.hits[f"/api/item{i}"] == 1 for i in range(10))
        assert cpu_seconds(readers[0]) - reader_cpu > 0.02, "the reader worker answered nothing"
    finally:
        status = proxy.stop(timeout=30)
    output = "".join(proxy.output)
    assert status == 0, output
    assert "store flushed and closed" in output
    assert not Path(f"/proc/{readers[0]}").exists(), "SIGTERM left the reader worker running"
    # Every worker's traffic is in the store's session log (the readers' records included).
    assert sessions(store)["run"]["calls"] == 24 + 10 + 300


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_crashed_worker_is_started_again_and_logged(tmp_path, upstream):
    # A temporary directory of the test's own (short: the link is a Unix socket in it).
    scratch = Path(tempfile.mkdtemp(prefix="stbw-"))
    proxy = ServeProcess(tmp_path / "store", "--workers", "2", env={"TMPDIR": str(scratch)}).start(START)
    try:
        (reader,) = children(proxy.process.pid)
        os.kill(reader, signal.SIGKILL)
        deadline = time.monotonic() + START
        replaced: list[int] = []
        while time.monotonic() < deadline and not replaced:
            replaced = [pid for pid in children(proxy.process.pid) if pid != reader]
            time.sleep(0.2)
        assert replaced, "no new worker was started"
        while time.monotonic() < deadline and "is back" not in "".join(proxy.output):
            time.sleep(0.2)
        output = "".join(proxy.output)
        assert f"worker 1 (pid {reader}) exited with status -9; starting it again" in output, output
        assert f"worker 1 is back (pid {replaced[0]})" in output, output
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda n: fetch(proxy, upstream.url(f"/api/after{n % 4}")), range(40)))
        assert {status for status, _, _ in answers} == {200}
        assert all(upstream.hits[f"/api/after{i}"] == 1 for i in range(4))
    finally:
        assert proxy.stop(timeout=30) == 0
    # Nothing left behind, not even by the killed worker (its RocksDB secondary's folder).
    leftovers = [p.name for p in scratch.iterdir()]
    shutil.rmtree(scratch, ignore_errors=True)
    assert leftovers == []


@pytest.mark.parametrize("args,message", [
    (["--workers", "0"], "--workers: must be between 1 and 256, not 0"),
    (["--workers", "many"], "--workers: must be a number of processes or 'auto', not 'many'"),
])
def test_bad_worker_counts_are_one_line(tmp_path, args, message):
    result = CliRunner().invoke(main, ["serve", "--store", str(tmp_path / "store"), *args])
    assert result.exit_code != 0
    assert message in result.output


def test_workers_and_a_cassette_are_refused(tmp_path):
    cassette = tmp_path / "c.yaml"
    cassette.write_text("interactions: []\nversion: 1\n")
    result = CliRunner().invoke(main, ["serve", "--store", str(tmp_path / "store"), "--workers", "2",
                                       "--cassette", str(cassette)])
    assert result.exit_code != 0
    assert "--workers needs the embedded store" in result.output
