"""Signals a tool's run ends on: a job scheduler's SIGTERM (or a shell's SIGINT) must stop every
process the run started, as Ctrl-C does, rather than kill the tool and leave its children behind."""

from __future__ import annotations

import signal
import threading


def interrupt_on(*signums: signal.Signals) -> None:
    """Each of ``signums`` raises KeyboardInterrupt (named after the signal) in the main thread, so
    the ``finally`` blocks and context managers stop every child in order."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for signum in signums:
        signal.signal(signum, handler)


def set_on(event: threading.Event, *signums: signal.Signals) -> None:
    """Each of ``signums`` sets ``event``: for a run whose loop checks it between inputs, where an
    exception raised anywhere could be caught as the input's own failure."""

    def handler(signum: int, frame: object) -> None:
        event.set()

    for signum in signums:
        signal.signal(signum, handler)
