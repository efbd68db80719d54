"""A run folder's summary file and JSON-lines files, and tables as text: Markdown for
reading, CSV for spreadsheets (report.py and exec_report.py write theirs with them)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from .errors import InputError

SUMMARY = "summary.json"


def markdown(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    def line(values: list[str]) -> str:
        return "| " + " | ".join(str(v).ljust(w) for v, w in zip(values, widths)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def to_csv(header: list[str], rows: list[list[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def read_json_lines(path: Path) -> list[Any]:
    """Every line of a JSON-lines file of a run folder; InputError naming the line that is not JSON."""
    values = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            try:
                values.append(json.loads(line))
            except ValueError as exc:
                raise InputError(f"{path}:{number}: not a JSON line ({exc})") from None
    return values
