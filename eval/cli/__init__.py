"""The ``eval`` command group: ``stbproxy eval ...`` or ``python -m stbeval ...``.

The only package of stbeval that imports click; its commands live in modules by what they
need: judged.py (a judge), reading.py (files only), execution.py (a proxy); common.py holds
the group and what they share. Commands read files, build a judge over
the run folder's log, call the library, write the run folder and print the table to
standard output; warnings, progress and judge statistics go to standard error.
"""

from __future__ import annotations

from . import execution, judged, reading  # noqa: F401  (each adds its commands to the group)
from .common import eval_group

__all__ = ["eval_group"]
