"""Values of a report document read leniently: the page is drawn from whatever the
document holds, so a field of the wrong type reads as none (a number that is no finite
number, a dict or list that is something else)."""

from __future__ import annotations

import math
from typing import Any


def number(value: Any) -> float | None:
    """A finite int or float as a float (not a bool); None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def as_dict(value: Any) -> dict:
    """The value if it is a dict, else an empty one."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list:
    """The value if it is a list, else an empty one."""
    return value if isinstance(value, list) else []
