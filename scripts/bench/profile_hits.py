#!/usr/bin/env python3
"""Where a cache hit's CPU goes: `stbproxy serve` under cProfile on the hit benchmarks' load.

In one run, on 127.0.0.1 only, in a temporary folder removed afterwards:

1. fill one store with plain-HTTP and HTTPS answers (``stbproxy import cassette``) and
   another with /virtual answers (``stbproxy import stb-cache``), as the benchmarks do;
2. start ``stbproxy serve --mode replay`` on each, as users start it, but inside this
   file's ``_serve`` role, which runs the command under cProfile switched on by SIGUSR1
   and off (writing the profile) by SIGUSR2, so start-up and shutdown are left out;
3. for each path (``virtual``, ``plain``, ``https`` keep-alive): warm up, switch the
   profiler on, send the measured hits from the load generator (scripts/bench/hitload.py, its
   own process), switch it off, and print the top entries by own time and by
   cumulative time, with the CPU per hit measured from the process's times (without the
   profiler, in a separate unprofiled run, so the profiler's own cost is not counted).

cProfile inflates many small calls; the ranking is what counts, the CPU figure comes
from the unprofiled run. ``--out DIR`` keeps the .prof files for snakeviz or pstats.

Baseline (measured in the same run): the unprofiled server, for the CPU per hit; the
profiles themselves are a ranking, not a comparison.

Usage: python scripts/bench/profile_hits.py [--paths virtual,plain,https] [--requests N] [--top N] [--out DIR]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.bench import hitstores  # noqa: E402
from scripts.common import child_env, cpu_seconds  # noqa: E402
from stbproxy.serve_process import ServeProcess  # noqa: E402

SCRIPT = Path(__file__).resolve()
HITLOAD = SCRIPT.with_name("hitload.py")
SOURCE_VARIABLE = "STB_PROFILE_SOURCE"  # the _serve role's --source
START_TIMEOUT = 90.0


# -- role: the profiled server -------------------------------------------------------------


def serve_profiled(out: str, argv: list[str]) -> None:
    """`stbproxy <argv>` in this process; SIGUSR1 starts the profiler, SIGUSR2 stops it and writes ``out``."""
    import cProfile

    profiler = cProfile.Profile()

    def start(*_):
        profiler.enable()

    def stop(*_):
        profiler.disable()
        profiler.dump_stats(out)
        Path(out + ".done").touch()

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    source = os.environ.get(SOURCE_VARIABLE)
    if source:  # another tree's stbproxy (and its stbcore), ahead of this one's
        sys.path.insert(0, source)
        for name in [name for name in sys.modules if name.split(".")[0] in ("stbproxy", "stbcore")]:
            del sys.modules[name]
    from stbproxy.cli import main

    main(argv, prog_name="stbproxy")


class ProfiledServe(ServeProcess):
    """ServeProcess, started through the ``_serve`` role above."""

    def __init__(self, store: Path, profile: Path, *args: str, env: dict | None = None) -> None:
        super().__init__(store, *args, env=env)
        self.profile = profile

    def launch(self) -> ProfiledServe:
        import threading

        command = [sys.executable, str(SCRIPT), "_serve", str(self.profile), "serve", *self.args]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env=self.env)
        threading.Thread(target=self._read, daemon=True).start()
        return self


# -- the run -----------------------------------------------------------------------------------


def load(server: ServeProcess, plan: Path, requests: int, warmup: int, concurrency: int) -> dict:
    argv = [sys.executable, str(HITLOAD), "--port", str(server.port), "--plan", str(plan),
            "--requests", str(requests), "--warmup", str(warmup), "--concurrency", str(concurrency),
            "--ca", str(server.ca_file)]
    done = subprocess.run(argv, capture_output=True, text=True, env=child_env(), timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the load generator failed:\n{done.stdout}\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["failures"]:
        raise RuntimeError(f"{result['failures']} requests failed: {result['samples']}")
    return result


def top_entries(profile: Path, count: int, sort: str) -> str:
    text = io.StringIO()
    stats = pstats.Stats(str(profile), stream=text)
    stats.strip_dirs().sort_stats(sort).print_stats(count)
    lines = text.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    return "\n".join(lines[start:])


def wait_for(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the profiled server wrote no profile ({path.name})")
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--paths", default="virtual,plain,https", help="which hit paths [virtual,plain,https]")
    p.add_argument("--requests", type=int, default=4000, help="profiled hits per path [4000]")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--top", type=int, default=25, help="entries printed per table [25]")
    p.add_argument("--out", type=Path, default=None, help="keep the .prof files here")
    p.add_argument("--source", type=Path, default=None, metavar="DIR",
                   help="profile the stbproxy of this source tree (e.g. an older commit's worktree) instead")
    p.add_argument("--cold", action="store_true",
                   help="12,000 different calls per path, so hits rarely repeat (the path of a hit never seen before)")
    args = p.parse_args(argv)
    paths = [name.strip() for name in args.paths.split(",") if name.strip()]
    unknown = set(paths) - {"virtual", "plain", "https"}
    if unknown:
        p.error(f"unknown paths: {', '.join(sorted(unknown))}")
    warmup = max(400, args.requests // 10)
    workdir = Path(tempfile.mkdtemp(prefix="stb-profile-"))
    servers: list[ServeProcess] = []
    env = {"PYTHONPATH": str(args.source.resolve()), SOURCE_VARIABLE: str(args.source.resolve())} if args.source else {}
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    try:
        plans: dict[str, Path] = {}
        http_store, virtual_store = workdir / "http-store", workdir / "virtual-store"
        distinct = 12000 if args.cold else 200
        targets = hitstores.http_targets(distinct)
        if {"plain", "https"} & set(paths):
            bases = {"plain": f"http://{hitstores.API_HOST}", "https": f"https://{hitstores.API_HOST}"}
            hitstores.fill_http_store(http_store, workdir, list(bases.values()), targets, args.source)
            for kind in ("plain", "https"):
                plans[kind] = workdir / f"plan-{kind}.json"
                plans[kind].write_text(json.dumps(hitstores.http_plan(kind, bases[kind], targets)))
        if "virtual" in paths:
            made = hitstores.write_cache(workdir / "cache", distinct // len(hitstores.APIS) if args.cold else 50)
            hitstores.import_cache(workdir / "cache", virtual_store, args.source)
            plans["virtual"] = workdir / "plan-virtual.json"
            plans["virtual"].write_text(json.dumps(hitstores.virtual_plan(made, max(4096, distinct), 1)))
        for kind in paths:
            store = virtual_store if kind == "virtual" else http_store
            # Unprofiled first (the profiler never switched on): the CPU a hit costs, from the
            # process's own times.
            plain = ProfiledServe(store, workdir / "unused.prof", "--mode", "replay", "--simulator", "off",
                                  env=env).start(START_TIMEOUT)
            servers.append(plain)
            load(plain, plans[kind], warmup, 0, args.concurrency)
            before = cpu_seconds(plain.process.pid)
            measured = load(plain, plans[kind], args.requests, 0, args.concurrency)
            cpu_ms = (cpu_seconds(plain.process.pid) - before) / args.requests * 1e3
            plain.stop()
            servers.remove(plain)

            profile = workdir / f"{kind}.prof"
            server = ProfiledServe(store, profile, "--mode", "replay", "--simulator", "off",
                                   env=env).start(START_TIMEOUT)
            servers.append(server)
            load(server, plans[kind], warmup, 0, args.concurrency)
            server.process.send_signal(signal.SIGUSR1)
            time.sleep(0.2)
            load(server, plans[kind], args.requests, 0, args.concurrency)
            server.process.send_signal(signal.SIGUSR2)
            wait_for(Path(str(profile) + ".done"))
            server.stop()
            servers.remove(server)
            print(f"\n=== {kind} hits: {args.requests} at concurrency {args.concurrency}; unprofiled: "
                  f"{measured['rps']:.0f} req/s, server CPU {cpu_ms:.3f} ms per hit ===")
            print(f"-- by own time (tottime), top {args.top}")
            print(top_entries(profile, args.top, "tottime"))
            print(f"-- by cumulative time, top {args.top}")
            print(top_entries(profile, args.top, "cumulative"))
            if args.out:
                args.out.mkdir(parents=True, exist_ok=True)
                shutil.copy(profile, args.out / profile.name)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"profile_hits: FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["_serve"]:
        serve_profiled(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(main(sys.argv[1:]))
