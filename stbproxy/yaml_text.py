"""YAML read safely (the only importer of PyYAML): a document as plain values, never as
objects its tags ask for, and where in the text an error is."""

from __future__ import annotations

from typing import Any

import yaml
from yaml import YAMLError

ConstructorError = yaml.constructor.ConstructorError  # an unsafe or unknown tag, refused
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when it is built in


def load(text: str) -> Any:
    return yaml.load(text, Loader=_LOADER)


def where(exc: YAMLError) -> str:
    """" at line N" for an error that knows its place, else ""."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return f" at line {mark.line + 1}" if mark else ""
