#!/usr/bin/env python3
"""Compression bombs and huge answers: the peak RSS of `stbproxy serve` while an upstream
answers 1 GiB of gzip (about 1 MiB on the wire) or 1 GiB plain (its length announced, or
chunked without one), against its own idle RSS.

On 127.0.0.1 only, in a temporary folder removed afterwards. A loopback upstream (this
script's ``_upstream`` role, in a process of its own) serves HTTP and HTTPS. For each lane, a
fresh proxy (so that its peak, VmHWM, is this case's alone):

- ``fast``: plain HTTP through the fast lane (the default);
- ``mitmproxy``: plain HTTP with ``--no-fast-lane`` (mitmproxy's own layers);
- ``tunnel``: HTTPS through a CONNECT tunnel (the fast lane's tunnel lane);

one client asks for ``small`` (1 KiB: the baseline), then ``gzip`` (the bomb), ``plain`` (with a
Content-Length) or ``chunked`` (none, so that only reading tells its size) and reads the whole
answer while the RSS of the proxy's process tree is sampled every 10 ms.
Reported per case: the status, X-Stb-Source and bytes the client got, the tree's RSS when
idle (after the small answer), its peak (the largest sample, or the process's VmHWM if
larger), the RSS a second after the answer, and the entries stored for that answer.

Checks (exit status 1 when one fails): a bomb or a huge answer is refused, 502 with
``X-Stb-Source: error`` and a text naming --max-upstream-body, nothing is stored, and the
peak stays within --budget-mib of the idle RSS. Exit status 2 when the run itself failed.

Baseline (measured in the same run): each proxy's own RSS once it has served a small
answer, and the small answer's row of each lane.

Usage: python scripts/reliability/bombs.py [--quick] [--size-mib N] [--limit BYTES] [--lanes fast,mitmproxy,tunnel]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.common import HOST, child_env, open_tunnel, run_in_workdir, tree_pids  # noqa: E402
from stbproxy.serve_process import ServeProcess  # noqa: E402
from stbproxy.store.embedded import Store  # noqa: E402

LANES = ("fast", "mitmproxy", "tunnel")
ANSWERS = ("gzip", "plain", "chunked")
READY = re.compile(r"listening on http://127\.0\.0\.1:(\d+) and https://127\.0\.0\.1:(\d+)")
SLICE = 1 << 20  # the upstream writes (and compresses) 1 MiB at a time


# -- the upstream ------------------------------------------------------------------------------


_bombs: dict[int, bytes] = {}
_bomb_lock = threading.Lock()


def gzip_bomb(size: int) -> bytes:
    """``size`` zero bytes, gzip-compressed (about 1/1000 of it), made once per size."""
    with _bomb_lock:
        if size not in _bombs:
            deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            zeros = bytes(SLICE)
            parts = [deflate.compress(zeros[:min(SLICE, size - at)]) for at in range(0, size, SLICE)]
            _bombs[size] = b"".join(parts) + deflate.flush()
        return _bombs[size]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        parts = urlsplit(self.path)
        size = int(dict(parse_qsl(parts.query)).get("bytes", "1024"))
        try:
            if parts.path == "/gzip":
                body = gzip_bomb(size)
                self._head("application/json", len(body), ("Content-Encoding", "gzip"))
                self.wfile.write(body)
            elif parts.path == "/plain":
                self._head("text/plain", size)
                zeros = memoryview(bytes(SLICE))
                for at in range(0, size, SLICE):
                    self.wfile.write(zeros[:min(SLICE, size - at)])
            elif parts.path == "/chunked":
                self._head("text/plain", None)
                zeros = bytes(SLICE)
                for at in range(0, size, SLICE):
                    piece = min(SLICE, size - at)
                    self.wfile.write(b"%x\r\n%s\r\n" % (piece, zeros[:piece]))
                self.wfile.write(b"0\r\n\r\n")
            else:
                body = b'{"small": "' + b"s" * 1000 + b'"}'
                self._head("application/json", len(body))
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True  # the proxy stopped reading: what it should do with a bomb

    def _head(self, content_type: str, length: int | None, *extra: tuple[str, str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header(*("Content-Length", str(length)) if length is not None else ("Transfer-Encoding", "chunked"))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # a proxy that stops reading a bomb resets the connection: expected


def run_upstream(cert_folder: str, size: int) -> None:
    gzip_bomb(size)  # made before the first request: not timed as the proxy's
    plain = _Server((HOST, 0), _Handler)
    tls = _Server((HOST, 0), _Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(Path(cert_folder) / "server.pem", Path(cert_folder) / "server.key")
    tls.socket = context.wrap_socket(tls.socket, server_side=True)
    threading.Thread(target=tls.serve_forever, daemon=True).start()
    print(f"listening on http://{HOST}:{plain.server_address[1]} and https://{HOST}:{tls.server_address[1]}",
          flush=True)
    plain.serve_forever()


# -- the client and the proxy's memory ------------------------------------------------------------


def rss_mib(pids: list[int], field: str = "VmRSS") -> list[float]:
    found = []
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith(field + ":"):
                    found.append(int(line.split()[1]) / 1024)
        except OSError:
            pass
    return found


class Sampler:
    """The largest RSS of a process tree, sampled every 10 ms while it runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, sum(rss_mib(tree_pids(self.pid))))
            self._stop.wait(0.01)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        # a peak between two samples: the kernel's own high-water mark of each process
        self.peak = max(self.peak, *rss_mib(tree_pids(self.pid), "VmHWM"), 0.0)


@dataclass
class Fetched:
    status: int
    source: str
    size: int  # bytes of the answer after its head, as the client got them
    text: str  # the answer's first bytes
    seconds: float


def fetch(proxy_port: int, scheme: str, upstream_port: int, target: str, ca_file: Path) -> Fetched:
    """One GET through the proxy (absolute-form for http, inside a CONNECT tunnel for https),
    the whole answer read and counted, not kept."""
    started = time.perf_counter()
    authority = f"{HOST}:{upstream_port}"
    conn: socket.socket = socket.create_connection((HOST, proxy_port), timeout=600)
    try:
        if scheme == "https":
            open_tunnel(conn, authority)
            conn = ssl.create_default_context(cafile=str(ca_file)).wrap_socket(conn, server_hostname=HOST)
            line = f"GET {target} HTTP/1.1\r\n"
        else:
            line = f"GET http://{authority}{target} HTTP/1.1\r\n"
        conn.sendall(f"{line}Host: {authority}\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            more = conn.recv(65536)
            if not more:
                raise RuntimeError(f"no answer: {data[:200]!r}")
            data += more
        head, _, body = data.partition(b"\r\n\r\n")
        size, text = len(body), body[:300]
        while more := conn.recv(1 << 20):
            size += len(more)
            if len(text) < 300:
                text += more[:300 - len(text)]
    finally:
        conn.close()
    source = re.search(rb"\r\nx-stb-source: *([^\r]*)", head, re.I)
    return Fetched(int(head[9:12]), source.group(1).decode() if source else "-", size,
                   text.decode("latin-1"), time.perf_counter() - started)


# -- the run -----------------------------------------------------------------------------------


@dataclass
class Row:
    lane: str
    answer: str
    fetched: Fetched
    idle: float
    peak: float
    after: float
    stored: int
    problems: list[str]


class Run:
    def __init__(self, args, workdir: Path, stack: contextlib.ExitStack) -> None:
        self.args = args
        self.workdir = workdir
        self.stack = stack
        self.rows: list[Row] = []

    def upstream(self) -> tuple[int, int, Path]:
        from tests.servers import TestCA  # the tests' throw-away CA (a certificate for 127.0.0.1)

        ca = TestCA(self.workdir / "upstream-ca")
        process = subprocess.Popen([sys.executable, __file__, "_upstream", str(ca.cert_file.parent),
                                    str(self.args.size_mib << 20)],
                                   stdout=subprocess.PIPE, text=True, env=child_env())
        self.stack.callback(lambda: (process.terminate(), process.wait(10)))
        match = READY.search(process.stdout.readline())
        if not match:
            raise RuntimeError("the upstream server did not start")
        return int(match.group(1)), int(match.group(2)), ca.ca_file

    def case(self, lane: str, answer: str, ports: tuple[int, int], upstream_ca: Path, index: int) -> Row:
        a = self.args
        store = self.workdir / f"case{index}" / "store"
        args = ["--upstream-ca", str(upstream_ca)]
        args += ["--no-fast-lane"] if lane == "mitmproxy" else []
        args += ["--max-upstream-body", str(a.limit)] if a.limit else []
        proxy = ServeProcess(store, *args, env=child_env())
        self.stack.callback(proxy.stop)
        proxy.start()
        scheme, port = ("https", ports[1]) if lane == "tunnel" else ("http", ports[0])
        pid = proxy.process.pid
        small = fetch(proxy.port, scheme, port, "/small", proxy.ca_file)
        time.sleep(0.5)
        idle = sum(rss_mib(tree_pids(pid)))
        if answer == "small":
            fetched, peak = small, max(idle, *rss_mib(tree_pids(pid), "VmHWM"))
        else:
            with Sampler(pid) as sampler:
                fetched = fetch(proxy.port, scheme, port, f"/{answer}?bytes={a.size_mib << 20}", proxy.ca_file)
            peak = sampler.peak
        time.sleep(1.0)
        after = sum(rss_mib(tree_pids(pid)))
        code = proxy.stop()
        with Store(store, readonly=True) as db:
            stored = sum(1 for entry in db.entries() if f"/{answer}" in entry.request.url)
        problems = [f"the proxy exited {code}"] if code else []
        if answer == "small":
            problems += [] if fetched.status == 200 else [f"the small answer got {fetched.status}"]
        else:
            if fetched.status != 502 or fetched.source != "error" or "--max-upstream-body" not in fetched.text:
                problems.append(f"not refused: {fetched.status} {fetched.source}, {fetched.size:,} bytes, "
                                f"{fetched.text[:40]!r}")
            problems += [f"{stored} entries stored"] if stored else []
            if peak - idle > a.budget_mib:
                problems.append(f"peak {peak:.0f} MiB is {peak - idle:.0f} MiB over idle (budget {a.budget_mib})")
        row = Row(lane, answer, fetched, idle, peak, after, stored, problems)
        print(f"  done: {lane} {answer}: {fetched.status}, peak {peak:.0f} MiB (idle {idle:.0f})", flush=True)
        return row

    def main(self) -> int:
        a = self.args
        http_port, https_port, upstream_ca = self.upstream()
        limit = f"--max-upstream-body {a.limit}" if a.limit else "the default --max-upstream-body"
        print(f"bombs: {a.size_mib} MiB answers (gzip: {len(gzip_bomb(a.size_mib << 20)):,} bytes on the wire), "
              f"lanes {', '.join(a.lanes)}, {limit}; {os.cpu_count()} cores, load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)
        started = time.monotonic()
        index = 0
        for lane in a.lanes:
            for answer in ("small", *ANSWERS):
                index += 1
                self.rows.append(self.case(lane, answer, (http_port, https_port), upstream_ca, index))
        print(f"\n{'lane':<11}{'answer':<8}{'status':>7} {'source':<10}{'to client':>15}{'idle MiB':>10}"
              f"{'peak MiB':>10}{'peak-idle':>10}{'after MiB':>10}{'stored':>7}{'seconds':>9}")
        for r in self.rows:
            f = r.fetched
            print(f"{r.lane:<11}{r.answer:<8}{f.status:>7} {f.source:<10}{f.size:>15,}{r.idle:>10.0f}"
                  f"{r.peak:>10.0f}{r.peak - r.idle:>10.0f}{r.after:>10.0f}{r.stored:>7}{f.seconds:>9.1f}")
        print(f"\ntotal time {time.monotonic() - started:.0f} s")
        problems = [f"{r.lane} {r.answer}: {p}" for r in self.rows for p in r.problems]
        for line in problems:
            print(f"  problem: {line}")
        print("all checks passed" if not problems else f"{len(problems)} problems found")
        return 1 if problems else 0


def options(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="256 MiB answers, for smoke tests (seconds)")
    p.add_argument("--size-mib", type=int, help="the size of each answer, decoded [1024; --quick: 256]")
    p.add_argument("--limit", type=int, default=None, metavar="BYTES",
                   help="pass --max-upstream-body BYTES to each proxy [the proxy's default]")
    p.add_argument("--budget-mib", type=float, default=256.0,
                   help="the most a refused answer may raise the proxy's RSS over idle [256]")
    p.add_argument("--lanes", default=",".join(LANES), help=f"a comma-separated subset of {','.join(LANES)}")
    a = p.parse_args(argv)
    a.size_mib = a.size_mib or (256 if a.quick else 1024)
    a.lanes = [lane for lane in a.lanes.split(",") if lane]
    if not set(a.lanes) <= set(LANES) or a.size_mib < 1:
        p.error(f"--lanes takes {', '.join(LANES)}; --size-mib 1 or more")
    return a


def main(argv: list[str]) -> int:
    if argv[:1] == ["_upstream"]:
        run_upstream(argv[1], int(argv[2]))
        return 0
    args = options(argv)
    return run_in_workdir("bombs", "stb-bombs-", lambda workdir, stack: Run(args, workdir, stack).main(),
                          errors=(RuntimeError, OSError, subprocess.SubprocessError))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
