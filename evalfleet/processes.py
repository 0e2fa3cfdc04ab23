"""One child process of a harness: started, waited for on the line it prints once up, stopped.

The local fleet (``make demo``), the tests and the benchmarks start servers and workers with this
code. It is a module of its own, beside ``evalfleet.local_fleet``, because it knows nothing of
evalfleet and imports only the standard library: the Labtasker baseline of the scheduler benchmark
(``scripts/bench/labtasker_baseline.py``) runs under its own virtual environment, without gRPC, and
starts its server with this same code, so both systems are run alike (what a process costs, the
benchmarks read with ``scripts.common.procstat``). ``local_fleet`` adds what is evalfleet's: the
services' command lines, the line a worker prints, the gRPC health wait, and a fleet that stops
every service it started.

Each process runs as its own process group (so a kill reaches its episode processes too), writes its
output to a log file, and is waited for on the line it prints once it is up, never on a fixed delay.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

# The line a server prints once it is up: "... listening on HOST:PORT".
ADDRESS_LINE = re.compile(r"listening on (\S+):(\d+)")
LOG_TAIL_LINES = 20


class ServiceProcess:
    """One service process, its output in a log file and a line queue to wait on.

    ``ready`` matches the line the process prints once it is up; for servers its two groups are
    the host and port it bound. As a context manager it is stopped when the block exits.
    """

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        ready: re.Pattern[str] = ADDRESS_LINE,
    ) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.ready = ready
        self.proc: subprocess.Popen[str] | None = None
        self.address = ""
        self._lines: queue.Queue[str | None] = queue.Queue()

    def __enter__(self) -> ServiceProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def spawn(self) -> ServiceProcess:
        """Starts the process and returns at once; ``start`` also waits for its ready line."""
        self._lines = queue.Queue()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=self.env,
            start_new_session=True,
        )
        # Each run pumps into its own queue: the pump of a killed run may still be draining its
        # output when a restart begins, and its end-of-output must not reach the new run's waiter.
        threading.Thread(target=self._pump, args=(self.proc, self._lines), daemon=True).start()
        return self

    def start(self, timeout: float = 120.0) -> ServiceProcess:
        """Starts the process and returns once it has printed its ready line.

        A process that does not get there (it exits, the time runs out, or the caller is
        interrupted) is killed before the error propagates, so a failed start leaves nothing behind.
        """
        self.spawn()
        return self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 120.0) -> ServiceProcess:
        """Returns once the spawned process has printed its ready line (``start``'s second half),
        killing it if it does not get there."""
        try:
            match = self.wait_for_line(self.ready.search, timeout)
        except BaseException:
            self.kill()
            raise
        if match.re.groups >= 2:
            self.address = f"{match.group(1)}:{match.group(2)}"
        return self

    def _pump(self, proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        with open(self.log_path, "a") as log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                lines.put(line)
        lines.put(None)

    def wait_for_line(self, predicate: Callable[[str], T | None], timeout: float) -> T:
        """Returns the predicate's first truthy value over the output lines to come."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{self.name}: no expected output within {timeout}s; {self._see_log()}")
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"{self.name} exited with {self._started.wait()}; {self._see_log()}")
            value = predicate(line)
            if value:
                return value

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the log, or nothing if it cannot be read."""
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def _see_log(self) -> str:
        return f"see {self.log_path}, which ends:\n{self.log_tail()}"

    @property
    def _started(self) -> subprocess.Popen[str]:
        if self.proc is None:
            raise RuntimeError(f"{self.name} has not been started")
        return self.proc

    @property
    def name(self) -> str:
        return " ".join(self.argv[:4])

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    @property
    def pid(self) -> int:
        return self._started.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the whole process group: no cleanup, as a crash."""
        if self.running:
            os.killpg(self.pid, signal.SIGKILL)
            self._started.wait()

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM, then SIGKILL if the process is still there after ``timeout``; the exit status."""
        proc = self._started
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return proc.wait()

    def stop(self, timeout: float = 30.0) -> None:
        """``terminate`` if the process was started and still runs; nothing otherwise."""
        if self.running:
            self.terminate(timeout)


def wait_until(condition: Callable[[], T | None], timeout: float, what: str, period: float = 0.1) -> T:
    """Polls state that changes on its own; returns the condition's first truthy value."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:g}s: {what}")
        time.sleep(period)
    return value


def free_port() -> int:
    """A port that was free a moment ago, for a server that must come back on the same port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
