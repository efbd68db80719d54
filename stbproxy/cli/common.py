"""What every stbproxy command shares: the store and confdir options, sizes, the
environment variables of options, and the one error style (``stbproxy: error: ...``)."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import select
import shutil
import signal
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Literal, NoReturn, TypeVar

import click

log = logging.getLogger("stbproxy")

FC = TypeVar("FC", bound=Callable[..., Any])  # a command's function, which options decorate

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


def store_option(func: FC) -> FC:
    return click.option(
        "--store",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path(".stbproxy") / "store",
        envvar="STBPROXY_STORE",
        show_default=True,
        help="The store directory (an embedded RocksDB database).",
    )(func)


CONFDIR_HELP = ("Where the interception CA lives: one per user, whatever the store, so that "
                "'stbproxy env' and 'stbproxy serve' agree [default: ~/.stbproxy].")


def confdir_option(func: FC) -> FC:
    return click.option("--confdir", type=click.Path(file_okay=False, path_type=Path), default=None,
                        envvar="STBPROXY_CONFDIR", help=CONFDIR_HELP)(func)


def user_confdir() -> Path:
    """~/.stbproxy: the CA of this user, as mitmproxy keeps its own in ~/.mitmproxy."""
    try:
        return Path.home() / ".stbproxy"
    except RuntimeError:  # no HOME and no password entry
        fail("cannot find your home folder for the CA: set HOME, STBPROXY_CONFDIR or --confdir")


def resolve_confdir(confdir: Path | None) -> Path:
    return (confdir or user_confdir()).expanduser().absolute()


def known_session(db, raw: str) -> str:
    from stbproxy.sessions import safe_session_name

    known = db.session_names()
    for name in (raw, safe_session_name(raw)):
        if name in known:
            return name
    listed = ", ".join(known[:30]) + (f" and {len(known) - 30} more" if len(known) > 30 else "")
    fail(f"no session {raw!r} in {db.path}; known sessions: {listed or 'none yet'}")


class CommandError(click.ClickException):
    """A failure, shown as one line in the one style of every stbproxy command."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"stbproxy: error: {self.format_message()}", err=True)


def fail(message: str, exit_code: int = 2) -> NoReturn:
    """End the command with ``message`` on one line and ``exit_code`` as its status."""
    raise (CommandError if exit_code == CommandError.exit_code else _ending_with(exit_code))(message)


@functools.cache
def _ending_with(code: int) -> type[CommandError]:
    """A CommandError with another exit status (click reads it from the class)."""

    class EndingWith(CommandError):
        exit_code = code

    return EndingWith


class OneLineErrors(click.Group):
    """The top-level group: whatever goes wrong in any command (a bad option, a missing
    file, a failure of our own) ends as one ``stbproxy: error: ...`` line, never a traceback."""

    def make_context(self, info_name, args, parent=None, **extra):
        with _OneLine():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx):
        with _OneLine():
            result = super().invoke(ctx)
            sys.stdout.flush()  # a reader gone early shows here, where it is handled, not at exit
            return result


_ENVVAR_HINT = re.compile(r" \(env var: [^)]*\)")


class _OneLine:
    def __enter__(self):
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        if exc is None or isinstance(exc, (CommandError, click.exceptions.Exit, SystemExit, KeyboardInterrupt)):
            return False
        if isinstance(exc, BrokenPipeError) and stdout_was_closed():
            stop_writing_to_stdout()
            raise SystemExit(SIGPIPE_EXIT)
        if isinstance(exc, click.UsageError):
            where = exc.ctx.command_path if exc.ctx is not None else "stbproxy"
            message = _ENVVAR_HINT.sub("", exc.format_message())  # the flag is what the user typed
            raise CommandError(f"{message} (see '{where} --help')") from exc
        if isinstance(exc, click.exceptions.Abort):
            fail("aborted", 1)
        if isinstance(exc, click.ClickException):
            fail(exc.format_message(), exc.exit_code)
        if os.environ.get("STBPROXY_TRACEBACK"):
            return False
        if isinstance(exc, OSError):
            where = f": {exc.filename}" if exc.filename else ""
            fail(f"{exc.strerror or exc}{where}", 1)
        fail(f"internal error: {type(exc).__name__}: {exc} (set STBPROXY_TRACEBACK=1 to see where; "
             "please report it)", 1)


# What a shell reports for git or seq cut short by `| head`: killed by SIGPIPE (128 + 13).
SIGPIPE_EXIT = 141


def stdout_was_closed() -> bool:
    """Whether the reader of our standard output went away (``stbproxy stats | head -1``):
    a pipe whose reading end is closed polls as an error. A broken pipe anywhere else (a
    socket to a server) is a real failure and is reported as one."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _fd, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no real stdout (a test runner's), or no poll()
        return False


def stop_writing_to_stdout() -> None:
    """Point standard output at the null device, so that what is still buffered, flushed at
    exit, does not end in Python's "Exception ignored ... BrokenPipeError" noise."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


# What a shell reports for a command stopped by Ctrl-C (128 + SIGINT).
INTERRUPTED_EXIT = 130


def end_at_once_on_ctrl_c(_signum, _frame) -> None:
    """A Ctrl-C once the command has ended: what it printed is flushed, and it exits with 130."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(INTERRUPTED_EXIT)


class CtrlC:
    """Ctrl-C during a long write (an import). The first press asks the writing loop to stop
    at its next safe point (``requested``). A second one stops the loop at once (a
    KeyboardInterrupt inside ``stoppable()``), though never inside ``holding()``, so that a
    write and its count stay together; outside the loop, where the store is flushed and
    closed and the summary printed, it is ignored: that wrap-up is what keeps the store whole."""

    def __init__(self) -> None:
        self.presses = 0
        self._stoppable = False
        self._holding = False
        self._held = False

    @property
    def requested(self) -> bool:
        return self.presses > 0

    def on_signal(self, _signum, _frame) -> None:
        self.presses += 1
        if self.presses < 2 or not self._stoppable:
            return
        if self._holding:
            self._held = True
        else:
            raise KeyboardInterrupt

    def unraisable(self, unraisable, previous) -> None:
        """Python drops an exception raised where nothing can catch it (a finalizer: a progress
        bar's __del__, a weak reference's callback) and prints it. A press that lands there
        stops the loop at the end of the next write instead; anything else is shown as before."""
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and self.presses >= 2:
            self._held = True
            return
        previous(unraisable)

    @contextlib.contextmanager
    def stoppable(self):
        self._stoppable = True
        try:
            yield
        finally:
            self._stoppable = False

    @contextlib.contextmanager
    def holding(self):
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
        if self._held and self._stoppable:
            raise KeyboardInterrupt


@contextlib.contextmanager
def ctrl_c_between_writes():
    """A CtrlC for the block (signal handlers belong to the main thread: elsewhere, as under
    a test runner's thread, Ctrl-C keeps its usual effect)."""
    ctrl_c = CtrlC()
    if threading.current_thread() is not threading.main_thread():
        yield ctrl_c
        return
    previous = signal.signal(signal.SIGINT, ctrl_c.on_signal)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: ctrl_c.unraisable(unraisable, previous_hook)
    try:
        yield ctrl_c
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = previous_hook


def echo_listed(label: str, items: list, limit: int = 50, more: str = "more") -> None:
    """One stderr line per item (``  label: item``), the first ``limit`` of them, then how
    many more there were: a long list never buries the command's summary."""
    for item in items[:limit]:
        click.echo(f"  {label}: {item}", err=True)
    if len(items) > limit:
        click.echo(f"  ... and {len(items) - limit} {more}", err=True)


def interrupted(done: str) -> None:
    """End a command that Ctrl-C stopped: what it had done, on one line, and status 130."""
    click.echo(f"stbproxy: interrupted: {done}", err=True)
    sys.exit(INTERRUPTED_EXIT)


def expose_envvars(command: click.Command, prefix: str) -> None:
    """Every option of ``command`` and its subcommands reads ``<PREFIX>_<COMMAND>_<OPTION>``,
    named after its long flag (``stats --json`` reads STBPROXY_STATS_JSON), before any
    shared variable it declares (STBPROXY_STORE); and every --help names them."""
    for param in command.params:
        if not isinstance(param, click.Option) or (param.is_eager and not param.expose_value):
            continue  # --help, --version
        own = f"{prefix}_{_flag_name(param)}"
        shared = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or [])
        param.envvar = [own, *(name for name in shared if name != own)]
        param.show_envvar = True
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            expose_envvars(sub, f"{prefix}_{_upper(name)}")


def _flag_name(option: click.Option) -> str:
    longs = [opt for opt in option.opts if opt.startswith("--")] or option.opts
    return _upper(max(longs, key=len).lstrip("-"))


def _upper(name: str) -> str:
    return name.upper().replace("-", "_")


def missing_roots(*paths: Path) -> list[tuple[Path, Path]]:
    """For each path that does not exist yet, itself and the first of its ancestors that does
    not exist either: the folder that creating it would make. A command that refuses to
    start removes them again (remove_new), so that a refused start leaves nothing behind."""
    roots: list[tuple[Path, Path]] = []
    for path in paths:
        path = Path(path).absolute()
        missing = next((p for p in reversed([path, *path.parents]) if not p.exists()), None)
        if missing is not None:
            roots.append((path, missing))
    return roots


def remove_new(roots: list[tuple[Path, Path]]) -> None:
    """Remove what a refused start made: the path itself (its store, its CA), then each
    folder above it up to its root while it is empty. A folder another process filled
    meanwhile (two starts side by side under one new folder) stays with what it holds."""
    for path, root in roots:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        for folder in [path.parent, *path.parent.parents] if path != root else []:
            if root not in (folder, *folder.parents):
                break
            try:
                folder.rmdir()
            except OSError:  # not empty (another's), or gone
                break
