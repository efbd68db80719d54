"""What every stbproxy command shares: the store option, sizes, and the one error style."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

log = logging.getLogger("stbproxy")

SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2,
              "mib": 1024**2, "g": 1024**3, "gb": 1024**3, "gib": 1024**3}


class ByteSize(click.ParamType):
    name = "size"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        text = str(value).strip().lower()
        number = text.rstrip("kmgib")
        unit = text[len(number):]
        try:
            if unit not in SIZE_UNITS:
                raise ValueError
            return int(float(number) * SIZE_UNITS[unit])
        except ValueError:
            self.fail(f"{value!r} is not a size such as 10MiB, 512k or 1048576", param, ctx)


def store_option(func):
    return click.option(
        "--store",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path(".stbproxy") / "store",
        envvar="STBPROXY_STORE",
        show_envvar=True,
        show_default=True,
        help="The store directory (an embedded RocksDB database).",
    )(func)


def default_confdir(store: Path) -> Path:
    """The CA lives beside the store (./.stbproxy/certs for the default store)."""
    return store.parent / "certs"


def fail(message: str) -> None:
    click.echo(f"stbproxy: error: {message}", err=True)
    sys.exit(2)
