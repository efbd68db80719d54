"""A run folder's summary file, and tables as text: Markdown for reading, CSV for
spreadsheets (report.py and exec_report.py write theirs with them)."""

from __future__ import annotations

import csv
import io
from typing import Any

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
