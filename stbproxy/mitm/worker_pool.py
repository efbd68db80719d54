"""``stbproxy serve --workers N``: N processes answering on one port, one writer for the store.

The serve process is the primary: it opens the store read-write, listens on the port with
SO_REUSEPORT, and starts N-1 reader workers (this module run as ``python -m
stbproxy.mitm.worker_pool``), each an embedded proxy on the same port that opens the store as a
RocksDB secondary. The kernel spreads new connections over the N listening sockets.
Readers answer hits themselves and hand everything that writes or calls out to the
primary over a Unix socket (link.py, reader_engine.py), so calling rules, sessions
and single-flight are those of one process. The ready line is printed once every reader
listens. A reader that dies is started again (and logged); Ctrl-C or SIGTERM stops the
readers first (they send their last session records), then the primary, which flushes
the store.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from stbproxy import mitm
from stbproxy.cassettes.store import CassetteStore
from stbproxy.errors import ConfigError
from stbproxy.runtime import Runtime
from stbproxy.store.tiered import TieredStore
from stbproxy.workers.link import LinkClient, LinkServer
from stbproxy.workers.reader_engine import ReaderStore

log = logging.getLogger("stbproxy")

START_TIMEOUT = 120.0  # a reader imports mitmproxy and opens the store: seconds on a busy machine
STOP_TIMEOUT = 10.0
RESTART_DELAYS = (0.0, 0.5, 2.0, 5.0, 10.0)  # after quick successive crashes, wait longer
STABLE_SECONDS = 30.0  # a reader that ran this long starts its restart count anew


def worker_count(text: str) -> int:
    """``--workers``: a number from 1, or ``auto`` for one per CPU core."""
    if text.strip().lower() == "auto":
        return max(1, os.cpu_count() or 1)
    try:
        count = int(text)
    except ValueError:
        raise ConfigError(f"must be a number of processes or 'auto', not {text!r}", setting="workers") from None
    if not 1 <= count <= 256:
        raise ConfigError(f"must be between 1 and 256, not {count}", setting="workers")
    return count


class Workers:
    """The primary's side: the link server and the reader processes (started, watched, stopped)."""

    def __init__(self, count: int, reader_config: dict) -> None:
        self.count = count
        self.reader_config = reader_config
        self.folder: str | None = None
        self.link: LinkServer | None = None
        self.processes: dict[int, asyncio.subprocess.Process] = {}
        self.watchers: list[asyncio.Task] = []
        self.stopping = False

    def hooks(self) -> mitm.ServeHooks:
        return mitm.ServeHooks(listening=self.start, stopping=self.stop, reuse_port=True)

    async def start(self, runtime: Runtime, host: str, port: int, stop) -> None:
        """Once the primary listens: the link, then every reader, each listening, or ConfigError."""
        if isinstance(runtime.store, (CassetteStore, TieredStore)):
            raise ConfigError("--workers needs the embedded store alone: it cannot be combined with --cassette "
                              "or a shared tier (--shared or $STBPROXY_SHARED)", setting="workers")
        self.folder = tempfile.mkdtemp(prefix="stbproxy-workers-")  # 0700: the link carries secrets
        self.link = LinkServer(runtime.engine, runtime.store, runtime.write_failures, Path(self.folder) / "link")
        await self.link.start()
        self.reader_config = {**self.reader_config, "link": str(self.link.path), "host": host, "port": port,
                              # every worker names unnamed traffic as the primary does
                              "stb_options": {**self.reader_config["stb_options"], "stb_session": runtime.session}}
        started = await asyncio.gather(*(self._start_reader(n) for n in range(1, self.count)),
                                       return_exceptions=True)
        failed = [str(result) for result in started if isinstance(result, BaseException)]
        if failed:
            raise ConfigError(f"a worker did not start: {failed[0]}", setting="workers")
        for index in range(1, self.count):
            self.watchers.append(asyncio.ensure_future(self._watch(index)))

    async def _start_reader(self, index: int) -> None:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "stbproxy.mitm.worker_pool", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL, stderr=None)  # its log lines go where the primary's go
        self.processes[index] = process
        assert self.link is not None and process.stdin is not None  # start() made the link; stdin is a pipe
        hello = self.link.expect(process.pid)
        process.stdin.write(json.dumps(self.reader_config).encode())  # by pipe: it holds --proxy-auth
        await process.stdin.drain()
        process.stdin.close()
        exited = asyncio.ensure_future(process.wait())
        listening = asyncio.ensure_future(hello.wait())
        done, _ = await asyncio.wait({exited, listening}, timeout=START_TIMEOUT,
                                     return_when=asyncio.FIRST_COMPLETED)
        if listening in done:
            exited.cancel()
            return
        listening.cancel()
        if exited in done:
            raise ConfigError(f"worker {index} exited with status {process.returncode} while starting (see above)")
        exited.cancel()
        process.kill()
        raise ConfigError(f"worker {index} did not listen within {START_TIMEOUT:.0f} s")

    async def _watch(self, index: int) -> None:
        """Start a reader again whenever it ends while the proxy runs."""
        crashes = 0
        while not self.stopping:
            process = self.processes[index]
            started = time.monotonic()
            status = await process.wait()
            if self.stopping:
                return
            crashes = 1 if time.monotonic() - started > STABLE_SECONDS else crashes + 1
            delay = RESTART_DELAYS[min(crashes, len(RESTART_DELAYS)) - 1]
            log.warning("stbproxy: worker %d (pid %d) exited with status %s; starting it again%s",
                        index, process.pid, status, f" in {delay:.1f} s" if delay else "")
            await asyncio.sleep(delay)
            if self.stopping:
                return
            try:
                await self._start_reader(index)
            except ConfigError as exc:
                log.error("stbproxy: %s", exc)
            else:
                log.warning("stbproxy: worker %d is back (pid %d)", index, self.processes[index].pid)

    async def stop(self) -> None:
        """Stop every reader (each sends its last session records first), then the link."""
        self.stopping = True
        for watcher in self.watchers:
            watcher.cancel()
        running = [p for p in self.processes.values() if p.returncode is None]
        for process in running:
            try:
                process.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        if running:
            _, late = await asyncio.wait([asyncio.ensure_future(p.wait()) for p in running], timeout=STOP_TIMEOUT)
            for process in running:
                if process.returncode is None:
                    log.warning("stbproxy: worker pid %d ignored SIGTERM for %.0f s; killing it", process.pid,
                                STOP_TIMEOUT)
                    process.kill()
                    await process.wait()
        if self.link is not None:
            await self.link.close()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


# -- a reader worker (python -m stbproxy.mitm.worker_pool, started by Workers) --------------------------


async def run_reader(config: dict) -> None:
    link = LinkClient()
    await link.connect(config["link"])
    following: list[asyncio.Task] = []

    async def listening(runtime: Runtime, host: str, port: int, stop) -> None:
        link.on_lost(stop)  # the primary is gone: so is this worker
        store = runtime.store
        assert isinstance(store, ReaderStore), "a reader worker's runtime opens a reader's store"
        following.append(asyncio.ensure_future(store.follow()))
        await link.hello(os.getpid())

    async def stopping() -> None:
        for task in following:
            task.cancel()
        await link.close()

    hooks = mitm.ServeHooks(make_runtime=lambda settings: Runtime(settings, link=link), listening=listening,
                            stopping=stopping, reuse_port=True)
    await mitm.serve(config["stb_options"], listen_host=config["host"], listen_port=config["port"],
                     confdir=Path(config["confdir"]), proxy_auth=config.get("proxy_auth"), hooks=hooks,
                     fast_lane=config.get("fast_lane", True))


def reader_main() -> int:
    config = json.loads(sys.stdin.read())
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr,
                        level=logging.INFO if config.get("verbose", 0) >= 2 else logging.WARNING)
    log.setLevel(logging.INFO if config.get("verbose", 0) else logging.WARNING)
    try:
        asyncio.run(run_reader(config))
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # one line for the primary's log, not a traceback
        print(f"stbproxy: worker {os.getpid()}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(reader_main())
