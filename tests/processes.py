"""Child processes the tests start: given Ctrl-C as a terminal gives it, waited for until
they listen, and stopped.

A shell starts a background job with SIGINT ignored, and a child inherits that: Python then
installs no KeyboardInterrupt handler at all. A suite started in the background (a CI
runner's script, ``nohup``) would hand that on to the commands its tests interrupt, which
would then run to their end as if nobody had pressed Ctrl-C. ``foreground`` is the
``preexec_fn`` that gives such a command SIGINT's default back, as a terminal's job has it.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time


def foreground() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_listening(process: subprocess.Popen, port: int, name: str, seconds: float = 30) -> None:
    """Until ``process`` accepts connections on 127.0.0.1:``port``; RuntimeError (the process
    stopped) if it exits first or takes longer than ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = process.stderr.read() if process.stderr is not None else ""
            raise RuntimeError(f"{name} exited: {said}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    stop(process)
    raise RuntimeError(f"{name} did not listen within {seconds:g} s")


def stop(process: subprocess.Popen | None) -> None:
    """Terminate ``process`` if it still runs; killed after 10 s."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
