#!/usr/bin/env python3
"""HTML report benchmark: the size of the page ``stbproxy eval report --html`` writes for a
thousand queries judged three times, and its time to interactive in a browser, against a
page that merely parses the same embedded data, in the same run.

In one run, in a temporary folder that is removed afterwards:

1. build the synthetic report document (tests/eval/report_samples.py: N queries x R
   rounds, about 6 steps each, answers of about 300 characters) and render it
   (eval/html_report.py); print the page's size (target < 5 MB);
2. write the baseline page: the same ``<script type="application/json">`` block and a
   script that only ``JSON.parse``s it;
3. in headless Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright), load each
   page from disk, interleaved, a fresh browser context per load, every network request
   blocked; wait for ``window.stbReportReady`` (set when the first rows are shown and the
   controls wired; ``performance.now()``, from the start of the navigation);
4. check each report load (the count line, a page of rows, no console error, no request)
   and print the medians and their ratio.

Baseline (measured in the same run, interleaved): the parse-only page.
Target: the report is interactive within 2 s (median). Exit status 1 when a load failed its
check; missing the target is reported but is not an error.

Usage: python scripts/bench/bench_report.py [--quick] [--queries N] [--rounds R] [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.bench.hitbench import verdict  # noqa: E402
from scripts.common import run_in_workdir  # noqa: E402
from stbeval.html_json import embed_json  # noqa: E402
from stbeval.html_report import render  # noqa: E402
from tests.eval.report_samples import make_document  # noqa: E402

TARGET_SECONDS = 2.0
TARGET_MB = 5.0
PAGE_SIZE = 100  # rows the report shows at first
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
READY = "typeof window.stbReportReady === 'number'"


def options(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a small document, two loads of each page: seconds")
    parser.add_argument("--queries", type=int, default=None, help="queries in the document [1000; quick 100]")
    parser.add_argument("--rounds", type=int, default=3, help="rounds judged per query [3]")
    parser.add_argument("--repeats", type=int, default=None, help="loads of each page [5; quick 2]")
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the browser [/usr/bin/chromium]")
    args = parser.parse_args(argv)
    args.queries = args.queries or (100 if args.quick else 1000)
    args.repeats = args.repeats or (2 if args.quick else 5)
    return args


def baseline_page(document: dict) -> str:
    """The same embedded data, only parsed: what any page showing it must at least do."""
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>parse only</title></head><body>'
            f'<script type="application/json" id="stb-data">{embed_json(document)}</script>'
            '<script>var data = JSON.parse(document.getElementById("stb-data").textContent);'
            'document.body.dataset.ready = "1"; window.stbReportReady = performance.now();</script></body></html>\n')


def load(browser, path: Path, expect_rows: int | None, failures: list[str]) -> float:
    """Open ``path`` in a fresh context; its time to interactive in ms (checked when ``expect_rows``)."""
    url = path.as_uri()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    try:
        def route(request_route):
            if request_route.request.url == url:
                request_route.continue_()
            else:
                problems.append(f"network request {request_route.request.url}")
                request_route.abort()

        context.route("**/*", route)
        page = context.new_page()
        page.on("console", lambda message: message.type == "error" and problems.append(f"console: {message.text}"))
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.goto(url)
        page.wait_for_function(READY, timeout=60_000)
        ready = float(page.evaluate("window.stbReportReady"))
        if expect_rows is not None:
            rows = page.locator('[data-testid="query-row"]').count()
            count = page.get_by_test_id("count").inner_text()
            if rows != min(PAGE_SIZE, expect_rows) or count != f"{expect_rows} of {expect_rows} queries":
                problems.append(f"{rows} rows shown, count line {count!r}")
    finally:
        context.close()
    failures += [f"{path.name}: {p}" for p in problems]
    return ready


def run(args: argparse.Namespace, workdir: Path) -> int:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("bench_report: needs Playwright for Python (pip install playwright)", file=sys.stderr)
        return 2
    if not Path(args.chromium).exists():
        print(f"bench_report: no browser at {args.chromium} (apt-get install chromium)", file=sys.stderr)
        return 2

    started = time.perf_counter()
    document = make_document(args.queries, args.rounds, steps=6, answer_chars=300)
    built = time.perf_counter() - started
    render_times = []
    for _ in range(3):
        started = time.perf_counter()
        page = render(document)
        render_times.append(time.perf_counter() - started)
    report, baseline = workdir / "report.html", workdir / "baseline.html"
    report.write_text(page, encoding="utf-8")
    baseline.write_text(baseline_page(document), encoding="utf-8")
    size_mb = report.stat().st_size / 1e6

    failures: list[str] = []
    times: dict[str, list[float]] = {"report": [], "baseline": []}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        try:
            print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; "
                  f"Chromium {browser.version}; {args.queries} queries x {args.rounds} rounds, "
                  f"{args.repeats} load(s) of each page")
            load(browser, baseline, None, failures)  # warm-up: the browser's first page, not counted
            load(browser, report, args.queries, failures)
            for repeat in range(args.repeats):
                order = ("baseline", "report") if repeat % 2 == 0 else ("report", "baseline")
                for name in order:
                    path, rows = (report, args.queries) if name == "report" else (baseline, None)
                    times[name].append(load(browser, path, rows, failures))
        finally:
            browser.close()

    print(f"document built in {built:.2f} s, page rendered in {statistics.median(render_times):.3f} s (median of 3)")
    print(f"page size: {size_mb:.2f} MB (target < {TARGET_MB:.0f} MB: {verdict(size_mb < TARGET_MB)})")
    mine, base = statistics.median(times["report"]), statistics.median(times["baseline"])
    ratios = [m / b for m, b in zip(times["report"], times["baseline"])]
    print(f"time to interactive (median of {args.repeats}): report {mine:.0f} ms, "
          f"baseline (parse only) {base:.0f} ms: ratio {mine / base:.2f} "
          f"(per load {min(ratios):.2f}-{max(ratios):.2f}); report loads {min(times['report']):.0f}-"
          f"{max(times['report']):.0f} ms")
    print(f"target < {TARGET_SECONDS:.0f} s: {verdict(mine / 1000 < TARGET_SECONDS)}")
    if failures:
        print("\nFAILED:\n" + "\n".join(f"  {f}" for f in failures[:20]))
        return 1
    print(f"all loads checked: {min(PAGE_SIZE, args.queries)} rows shown, the count line, "
          "no console error, no network request")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = options(argv)
    return run_in_workdir("bench_report", "stbproxy-bench-report-", lambda workdir, stack: run(args, workdir))


if __name__ == "__main__":
    sys.exit(main())
