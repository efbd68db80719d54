#!/usr/bin/env python3
"""The screenshot of the HTML report in the docs: a realistic sample document (40 queries,
three rounds, a baseline; tests/eval/report_samples.py) rendered by eval/html_report.py,
opened in headless Chromium (Debian's, driven by Playwright) 1280 px wide, the queries that
changed since the baseline selected and one trajectory opened; saved as a small PNG.

Usage: python scripts/docs/report_screenshot.py [OUT.png] [--queries N] [--chromium PATH]
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a file: tests.* from the repository root

from stbeval.html_report import render  # noqa: E402
from tests.eval.report_samples import make_document  # noqa: E402

WIDTH = 1280
MAX_HEIGHT = 2600
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]


def shoot(out: Path, queries: int, chromium: str) -> tuple[int, int]:
    from PIL import Image
    from playwright.sync_api import sync_playwright

    document = make_document(queries, 3, baseline=True, steps=5, answer_chars=220)
    opened = next(q["id"] for q in document["runs"][0]["queries"] if q["baseline"]["changed_steps"])
    with tempfile.TemporaryDirectory(prefix="stbeval-report-shot-") as folder:
        page_file = Path(folder) / "report.html"
        page_file.write_text(render(document), encoding="utf-8")
        url = page_file.as_uri()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": WIDTH, "height": 900}, device_scale_factor=1)
                page.route("**/*", lambda route: route.continue_() if route.request.url == url else route.abort())
                page.goto(url)
                page.wait_for_function("document.body.dataset.ready === '1'")
                page.get_by_test_id("filter-status").select_option("changed")
                page.locator(f'[data-testid="query-row"][data-id="{opened}"]').click()
                box = page.get_by_test_id("trajectory").bounding_box()
                height = min(MAX_HEIGHT, int(box["y"] + box["height"] + 90))
                png = page.screenshot(full_page=True, clip={"x": 0, "y": 0, "width": WIDTH, "height": height})
            finally:
                browser.close()
    image = Image.open(io.BytesIO(png)).convert("RGB")
    small = image.quantize(colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    out.parent.mkdir(parents=True, exist_ok=True)
    small.save(out, optimize=True)
    return image.size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("out", nargs="?", type=Path, default=REPO / "docs" / "report.png",
                        help="the PNG to write [docs/report.png]")
    parser.add_argument("--queries", type=int, default=40, help="queries in the sample document [40]")
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the browser [/usr/bin/chromium]")
    args = parser.parse_args(argv)
    width, height = shoot(args.out, args.queries, args.chromium)
    print(f"{args.out}: {width}x{height} px, {args.out.stat().st_size / 1024:.0f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
