"""Running the hit benchmarks (bench_proxy.py, bench_virtual.py): servers under the shared
load generator (hitload.py), the server's CPU per request from its process times (every
worker of ``serve --workers`` counted), the load generator's own CPU, and medians of
interleaved repeats printed as one table per path.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.common import child_env, console_script, median, tree_cpu_seconds  # noqa: E402
from stbproxy.serve_process import ServeProcess  # noqa: E402

HITLOAD = Path(__file__).resolve().with_name("hitload.py")
HITLOAD_C = HITLOAD.with_suffix(".c")
START_TIMEOUT = 120.0
BASELINE = "mitmdump + dict"
LEAN = "lean mitmproxy + dict"


@dataclass
class Subject:
    """A server under test: its name in the tables, its port, the process whose CPU counts."""

    name: str
    port: int
    pid: int | None  # None: not measured (the direct upstream)
    ca: str | None = None
    stop: object = None

    def cpu(self) -> float:
        return tree_cpu_seconds(self.pid) if self.pid else float("nan")


BEFORE = "stbproxy (before)"
MITMPROXY_PATH = "stbproxy --no-fast-lane"  # every request through mitmproxy's layers
WORKERS = "stbproxy --workers 2"


def stbproxy_subject(name: str, store: Path, *args: str, confdir: Path, source: Path | None = None) -> Subject:
    """``stbproxy serve --mode replay`` on ``store``; ``source``: run the stbproxy package of
    another source tree (an older commit, for a before/after comparison in one run)."""
    kind = ServeProcess if source is None else _from_source(Path(source).resolve())
    server = kind(store, "--mode", "replay", "--simulator", "off", *args, confdir=confdir).start(START_TIMEOUT)
    return Subject(name, server.port, server.process.pid, str(server.ca_file), server.stop)


def _from_source(source: Path) -> type[ServeProcess]:
    """ServeProcess running ``python -m stbproxy`` in ``source`` (``-m`` puts the working folder
    first on the path, so that tree's stbproxy is the one imported; the console script would
    import this one's entry point)."""

    class FromSource(ServeProcess):
        def launch(self) -> ServeProcess:
            import threading

            self.process = subprocess.Popen([sys.executable, "-m", "stbproxy", "serve", *self.args], cwd=source,
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                            env=self.env)
            threading.Thread(target=self._read, daemon=True).start()
            return self

    return FromSource


def mitmdump_subject(addon: Path, port: int, confdir: Path) -> Subject:
    """mitmdump with every default addon and a dict-backed script: the baseline. Lazy
    connections, as stbproxy's, so an HTTPS tunnel is answered without reaching the host."""
    argv = [console_script("mitmdump"), "-q", "--listen-host", "127.0.0.1", "--listen-port", str(port),
            "-s", str(addon), "--set", f"confdir={confdir}", "--set", "connection_strategy=lazy"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=child_env(),
                               start_new_session=True)
    return _listening(BASELINE, process, port, confdir)


def _listening(name: str, process: subprocess.Popen, port: int, confdir: Path) -> Subject:
    import socket

    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with status {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        process.kill()
        raise RuntimeError(f"{name} did not listen")

    def stop() -> int:
        process.terminate()
        try:
            return process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    return Subject(name, port, process.pid, str(confdir / "mitmproxy-ca-cert.pem"), stop)


def lean_subject(addon: Path, port: int, confdir: Path) -> Subject:
    """The dict script in an embedded master with only the addons a proxy needs (the master
    stbproxy embeds, as mitmproxy ships it): mitmproxy's own cost per request, for context."""
    argv = [sys.executable, str(Path(__file__).resolve()), "_lean", str(addon), str(port), str(confdir)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=child_env(),
                               start_new_session=True)
    return _listening(LEAN, process, port, confdir)


async def _run_lean(addon: str, port: int, confdir: str) -> None:
    import asyncio
    import runpy
    import signal

    from mitmproxy import options
    from mitmproxy.addons import core, next_layer, proxyserver, tlsconfig
    from mitmproxy.master import Master

    opts = options.Options()
    master = Master(opts)
    master.addons.add(core.Core(), proxyserver.Proxyserver(), next_layer.NextLayer(), tlsconfig.TlsConfig(),
                      *runpy.run_path(addon)["addons"])
    opts.update(listen_host="127.0.0.1", listen_port=port, confdir=confdir, connection_strategy="lazy")
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, master.shutdown)
    await master.run()


def copy_store(store: Path, copy: Path) -> Path:
    """A store per server: RocksDB lets one process open a store for writing."""
    shutil.copytree(store, copy)
    return copy


@dataclass(frozen=True)
class LoadGenerator:
    """The client that sends the load: hitload.py, or hitload.c built for the run. Both send
    the same requests and check the same answers; the C one costs the machine less per
    request, which matters where client and server share 2 cores (``--workers 2``)."""

    name: str
    command: tuple[str, ...]
    flat: bool  # reads hitload.py's flat plan

    def argv(self, subject: Subject, plan: Path) -> list[str]:
        if not self.flat:
            return [*self.command, "--plan", str(plan)]
        from scripts.bench.hitload import write_flat

        flat = plan.with_name(f"{plan.stem}-{subject.port}.flat")
        if not flat.exists():
            write_flat(json.loads(plan.read_text()), f"127.0.0.1:{subject.port}", flat)
        return [*self.command, "--plan", str(flat)]


PYTHON_LOAD = LoadGenerator("hitload.py", (sys.executable, str(HITLOAD)), flat=False)


def c_load_missing() -> str | None:
    """What this machine lacks to build hitload.c, or None: a C compiler and OpenSSL's headers."""
    compiler = os.environ.get("CC", "cc")
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler}; Debian: gcc)"
    probe = subprocess.run([compiler, "-E", "-x", "c", "-"], input="#include <openssl/ssl.h>\n",
                           capture_output=True, text=True, timeout=60)
    return None if probe.returncode == 0 else "no OpenSSL headers (Debian: libssl-dev)"


def build_c_load(workdir: Path) -> LoadGenerator:
    """hitload.c compiled into ``workdir`` ($CC, else cc, with OpenSSL)."""
    if missing := c_load_missing():
        raise SystemExit(f"--client c builds {HITLOAD_C.name}, and this machine has {missing}")
    binary = workdir / "hitload"
    argv = [os.environ.get("CC", "cc"), "-O2", "-o", str(binary), str(HITLOAD_C), "-lssl", "-lcrypto", "-lm"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"building {HITLOAD_C.name} failed:\n{done.stderr[-2000:]}")
    return LoadGenerator("hitload.c", (str(binary),), flat=True)


def load_generator(choice: str, workdir: Path) -> LoadGenerator:
    """The --client option's generator: ``python`` (the default) or ``c``."""
    return build_c_load(workdir) if choice == "c" else PYTHON_LOAD


def measure(subject: Subject, plan: Path, requests: int, warmup: int, concurrency: int,
            load: LoadGenerator = PYTHON_LOAD) -> dict:
    argv = [*load.argv(subject, plan), "--port", str(subject.port),
            "--requests", str(requests), "--warmup", str(warmup), "--concurrency", str(concurrency)]
    if subject.ca:
        argv += ["--ca", subject.ca]
    before = subject.cpu()
    done = subprocess.run(argv, capture_output=True, text=True, env=child_env(), timeout=900)
    after = subject.cpu()
    if done.returncode != 0:
        raise RuntimeError(f"the load generator failed against {subject.name}:\n{done.stdout}\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # Warm-up requests are served too (with the connections' set-up): all count in the CPU per request.
    spent = after - before
    result["cpu_ms"] = spent / (requests + warmup) * 1e3 if not math.isnan(spent) else float("nan")
    result["client_share"] = result["client_cpu_s"] / (result["seconds"] * (os.cpu_count() or 1))
    return result


def interleaved(args, warmup_per_connection: int):
    """(concurrency, requests, warm-up requests) of each run: every repeat goes through every
    concurrency, so drift in the machine's load touches all subjects alike."""
    for _ in range(args.repeats):
        for concurrency in args.concurrency:
            requests = args.requests1 if concurrency == 1 else args.requests
            yield concurrency, requests, min(1000, max(concurrency * warmup_per_connection, requests // 10))


class Matrix:
    """Results of (path, subject, concurrency), repeated; failures collected, never hidden."""

    def __init__(self, load: LoadGenerator = PYTHON_LOAD) -> None:
        self.runs: dict[tuple[str, str, int], list[dict]] = {}
        self.failures: list[str] = []
        self.load = load

    def run(self, path: str, subject: Subject, plan: Path, concurrency: int, requests: int, warmup: int) -> dict:
        result = measure(subject, plan, requests, warmup, concurrency, self.load)
        self.runs.setdefault((path, subject.name, concurrency), []).append(result)
        if result["failures"]:
            self.failures += [f"{path} {subject.name} c{concurrency}: {s}" for s in result["samples"]]
            self.failures.append(f"{path} {subject.name} c{concurrency}: {result['failures']} failed requests")
        cpu = f"  CPU {result['cpu_ms']:.3f} ms/req" if not math.isnan(result["cpu_ms"]) else ""
        print(f"  {path:<8} {subject.name:<22} c{concurrency:<3} {result['rps']:8.0f} req/s  "
              f"p50 {result['p50_ms']:7.3f} ms  p99 {result['p99_ms']:7.3f} ms{cpu}"
              + (f"  FAILED {result['failures']}" if result["failures"] else ""), flush=True)
        return result

    def get(self, path: str, name: str, concurrency: int, field: str) -> float:
        runs = self.runs.get((path, name, concurrency))
        return median(r[field] for r in runs) if runs else float("nan")

    def paired_ratio(self, path: str, name: str, other: str, concurrency: int, field: str) -> float:
        """The median over repeats of ``name``'s figure divided by ``other``'s in the same repeat.
        Subjects of one repeat run back to back, so a burst of load from elsewhere touches both
        sides of a pair; separate medians could pair a quiet run with a loaded one."""
        ratios = self.paired_ratios(path, name, other, concurrency, field)
        return statistics.median(ratios) if ratios else float("nan")

    def paired_ratios(self, path: str, name: str, other: str, concurrency: int, field: str) -> list[float]:
        """Each repeat's ratio of ``name``'s figure to ``other``'s (see paired_ratio)."""
        mine = self.runs.get((path, name, concurrency), [])
        theirs = self.runs.get((path, other, concurrency), [])
        return [a[field] / b[field] for a, b in zip(mine, theirs)
                if b[field] and not math.isnan(a[field]) and not math.isnan(b[field])]

    def table(self, path: str, names: list[str], concurrencies: list[int]) -> None:
        print(f"\n{path} hits (medians): {'subject':<31}{'conc':>5}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}"
              f"{'CPU ms/req':>12}{'CPU vs ' + 'mitmdump':>16}")
        for concurrency in concurrencies:
            base = self.get(path, BASELINE, concurrency, "cpu_ms")
            for name in names:
                if (path, name, concurrency) not in self.runs:
                    continue
                cpu = self.get(path, name, concurrency, "cpu_ms")
                ratio = cpu / base if base and not math.isnan(cpu) else float("nan")
                print(f"{'':<21}{name:<31}{concurrency:>5}{self.get(path, name, concurrency, 'rps'):>9.0f}"
                      f"{self.get(path, name, concurrency, 'p50_ms'):>9.3f}"
                      f"{self.get(path, name, concurrency, 'p99_ms'):>9.3f}"
                      f"{cpu:>12.3f}{ratio:>16.2f}")


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def workers_speedup(matrix: Matrix, path: str, concurrency: int, target: float) -> str:
    """The line on ``--workers 2`` over one worker: the median of the paired ratios, their
    range, and the load generator's share of the machine (it runs on the same cores)."""
    ratios = matrix.paired_ratios(path, WORKERS, "stbproxy", concurrency, "rps")
    speedup = statistics.median(ratios) if ratios else float("nan")
    spread = f", which ranged {min(ratios):.2f}-{max(ratios):.2f}" if len(ratios) > 1 else ""
    return (f"{path}: --workers 2 / 1 worker at concurrency {concurrency}: {speedup:.2f}x (median of the repeats' "
            f"ratios{spread}; medians {matrix.get(path, WORKERS, concurrency, 'rps'):.0f} vs "
            f"{matrix.get(path, 'stbproxy', concurrency, 'rps'):.0f} req/s; target >= {target}: "
            f"{verdict(speedup >= target)}); the load generator ({matrix.load.name}) used "
            f"{matrix.get(path, WORKERS, concurrency, 'client_share'):.0%} of the machine's CPU meanwhile")


if __name__ == "__main__" and sys.argv[1:2] == ["_lean"]:
    import asyncio

    asyncio.run(_run_lean(sys.argv[2], int(sys.argv[3]), sys.argv[4]))
