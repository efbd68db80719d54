"""Ctrl-C as a terminal delivers it to the command it runs in the foreground.

A shell starts a background job with SIGINT ignored, and a child inherits that: Python then
installs no KeyboardInterrupt handler at all. A suite started in the background (a CI
runner's script, ``nohup``) would hand that on to the commands its tests interrupt, which
would then run to their end as if nobody had pressed Ctrl-C. ``foreground`` is the
``preexec_fn`` that gives such a command SIGINT's default back, as a terminal's job has it.
"""

from __future__ import annotations

import signal


def foreground() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
