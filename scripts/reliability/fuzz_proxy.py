#!/usr/bin/env python3
"""The larger fuzz run of issue 24, item 10: hostile requests against `stbproxy serve`, per lane.

For each lane (the fast lane, serve's default, and --no-fast-lane, mitmproxy's own layers) a
proxy is started on 127.0.0.1 with a loopback upstream (HTTP and HTTPS) and gets --cases seeded
cases from scripts/reliability/fuzz_hostile.py (``hostile_cases``: hostile content in valid framing,
and hostile framing made at the byte level from valid requests, plain proxied, to /virtual,
to the proxy's own address and inside CONNECT tunnels with TLS). A case fails when the proxy
answers with a 5xx it made itself, blames the upstream for a request that never reached it,
closes a whole request without an answer, or neither answers nor closes within --timeout
seconds; a lane fails too when its log holds a Traceback, "mitmproxy has crashed" or
"internal error", or when an ordinary proxied GET, a /virtual call or a GET in a tunnel fails
afterwards. tests/proxy/test_fuzz_proxy.py runs the same for a few seconds per lane. The run itself
is scripts/reliability/fuzz_lane.py's ``fuzz_lane``.

Baseline: none to compare against; every case and check is pass/fail. What the loopback upstream
saw tells the proxy's failures from the upstream's (scripts/reliability/fuzz_judge.py).

It prints, per lane, the counts by class and outcome, the checks afterwards, the log's
problems and the first failing case of each kind (bytes sent, status, X-Stb-Source, answer).
Exit status: 0 when every lane passed, 1 when a check failed, 2 when the run itself failed.

Usage (from the repository root):
    python -m scripts.reliability.fuzz_proxy [--cases 10000] [--seed 1] [--lane fast-lane|no-fast-lane|both]
        [--class NAME ...] [--mode virtual|record] [--no-tls] [--concurrency 8] [--timeout 8] [--examples 12]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.reliability.fuzz_hostile import CLASSES  # noqa: E402
from scripts.reliability.fuzz_lane import LANES, LaneRun, fuzz_lane  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=10_000, help="cases per lane (default 10,000)")
    parser.add_argument("--seed", type=int, default=1, help="the same seed sends the same cases (default 1)")
    parser.add_argument("--lane", choices=[*LANES, "both"], default="both")
    parser.add_argument("--class", dest="classes", action="append", choices=list(CLASSES),
                        help="only cases of this class (repeatable; default: all)")
    parser.add_argument("--mode", choices=["virtual", "record"], default="virtual",
                        help="the proxy's mode (default virtual, serve's default)")
    parser.add_argument("--no-tls", action="store_true", help="no cases inside CONNECT tunnels")
    parser.add_argument("--concurrency", type=int, default=8, help="cases in flight (default 8)")
    parser.add_argument("--timeout", type=float, default=8.0,
                        help="seconds a case may wait for its answer (default 8; the proxy's upstream timeout is 3)")
    parser.add_argument("--max-seconds", type=float, default=1800.0,
                        help="stop starting cases after this long per lane (default 1800)")
    parser.add_argument("--examples", type=int, default=12, help="failing cases shown per lane (default 12)")
    parser.add_argument("--keep", type=Path, help="keep the stores, and write each lane's log there")
    return parser.parse_args(argv)


def run_lane(a: argparse.Namespace, lane: str, folder: Path) -> LaneRun:
    run = fuzz_lane(folder, lane, seed=a.seed, seconds=a.max_seconds, max_cases=a.cases,
                            concurrency=a.concurrency, timeout=a.timeout, classes=a.classes, tls=not a.no_tls,
                            mode=a.mode)
    if a.keep:
        (folder / "proxy.log").write_text(run.output)
    return run


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    lanes = list(LANES) if a.lane == "both" else [a.lane]
    runs = []
    with tempfile.TemporaryDirectory(prefix="stbproxy-fuzz-") as scratch:
        base = a.keep or Path(scratch)
        for lane in lanes:
            try:
                run = run_lane(a, lane, base / lane)
            except Exception:  # noqa: BLE001 - the run failed, not the proxy's answers
                print(f"lane {lane}: the run itself failed:\n{traceback.format_exc()}", flush=True)
                return 2
            runs.append(run)
            print(run.report(a.examples), "\n", flush=True)
    failed = [run.lane for run in runs if not run.ok]
    total = sum(len(run.results) for run in runs)
    if failed:
        print(f"FAILED on {', '.join(failed)} ({total} cases, seed {a.seed})")
        return 1
    print(f"all checks passed ({total} cases, seed {a.seed}, lanes {', '.join(lanes)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
