"""ServiceProcess restarts: the end of a killed run's output never reaches the next run."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import pytest
from procs import ServiceProcess

pytestmark = pytest.mark.timeout(60)


def announcer(gate: Path) -> list[str]:
    """A process that prints its ready line once ``gate`` exists, then stays up."""
    code = (
        "import os, time\n"
        f"while not os.path.exists({str(gate)!r}): time.sleep(0.02)\n"
        "print('listening on 127.0.0.1:1', flush=True)\n"
        "time.sleep(60)\n"
    )
    return [sys.executable, "-c", code]


def test_previous_run_ending_during_a_restart_does_not_end_the_restart(tmp_path: Path) -> None:
    """Regression: the old run's pump put its end-of-output marker into the new run's queue, and
    start() then waited forever on the new, live process (seen as a hung chaos run)."""
    first_gate, second_gate = tmp_path / "first", tmp_path / "second"
    first_gate.touch()
    service = ServiceProcess(announcer(first_gate), tmp_path / "log")
    service.start(timeout=30)
    old = service.proc
    service.argv = announcer(second_gate)
    outcome: list[object] = []
    restart = threading.Thread(target=lambda: outcome.append(service.start(timeout=30)), daemon=True)
    restart.start()
    while service.proc is old:  # the restart has spawned its process and waits for its line
        restart.join(0.01)
    os.killpg(old.pid, signal.SIGKILL)
    old.wait()
    second_gate.touch()
    restart.join(30)
    try:
        assert outcome == [service] and service.running
    finally:
        service.kill()
