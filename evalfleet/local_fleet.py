"""A whole evalfleet on one machine: scheduler, inference servers and workers as child processes.

Used by ``make demo`` and the tests. Each service runs as its own process group (so a kill reaches
its episode processes too), writes its output to a log file, and is waited for on the line it
prints once it is up, never on a fixed delay. ``LocalFleet`` stops everything it started when it
exits, on errors and on Ctrl-C alike.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

T = TypeVar("T")

ADDRESS_LINE = re.compile(r"listening on (\S+):(\d+)")
WORKER_LINE = re.compile(r"renderer-worker (\S+) started")


class ServiceProcess:
    """One service process, its output in a log file and a line queue to wait on.

    ``ready`` matches the line the process prints once it is up; for servers its two groups are
    the host and port it bound.
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

    def start(self, timeout: float = 120.0) -> ServiceProcess:
        self._lines = queue.Queue()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=self.env,
            start_new_session=True,
        )
        # Each run pumps into its own queue: the pump of a killed run may still be draining its
        # output when a restart begins, and its end-of-output must not reach the new run's waiter.
        threading.Thread(target=self._pump, args=(self.proc, self._lines), daemon=True).start()
        match = self.wait_for_line(self.ready.search, timeout)
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
                raise TimeoutError(f"{self.name}: no expected output within {timeout}s; see {self.log_path}")
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                assert self.proc is not None
                raise RuntimeError(f"{self.name} exited with {self.proc.wait()}; see {self.log_path}")
            value = predicate(line)
            if value:
                return value

    @property
    def name(self) -> str:
        return " ".join(self.argv[:4])

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the whole process group: no cleanup, as a crash."""
        if self.running:
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM, then SIGKILL if the process is still there after ``timeout``."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.wait()


def wait_until(condition: Callable[[], T | None], timeout: float, what: str, period: float = 0.1) -> T:
    """Polls state the fleet changes on its own; returns the condition's first truthy value."""
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
        port: int = sock.getsockname()[1]  # (host, port) for an AF_INET socket
        return port


def wait_serving(address: str, timeout: float = 60.0, service: str = "") -> None:
    """Blocks until the server's health service answers SERVING."""
    with grpc.insecure_channel(address) as channel:
        grpc.channel_ready_future(channel).result(timeout=timeout)
        stub = health_pb2_grpc.HealthStub(channel)
        for response in stub.Watch(health_pb2.HealthCheckRequest(service=service), timeout=timeout):
            if response.status == health_pb2.HealthCheckResponse.SERVING:
                return
    raise TimeoutError(f"{address} not SERVING within {timeout}s")


def scheduler_argv(db: Path, *extra: str, port: int = 0) -> list[str]:
    return [sys.executable, "-m", "scheduler.cli", "serve", "--db", str(db), "--port", str(port), *extra]


def policy_argv(epoch: str, checkpoint_root: Path, *extra: str, port: int = 0) -> list[str]:
    return [
        sys.executable,
        "-m",
        "inference_server.cli",
        "--epoch",
        epoch,
        "--checkpoint-root",
        str(checkpoint_root),
        "--port",
        str(port or free_port()),
        *extra,
    ]


def worker_argv(scheduler: str, policies: Sequence[str], *extra: str) -> list[str]:
    policy_args = [arg for policy in policies for arg in ("--policy", policy)]
    return [sys.executable, "-m", "renderer_worker.cli", "--scheduler", scheduler, *policy_args, *extra]


class LocalFleet:
    """Starts services under one run directory and stops them all on exit, in reverse order."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.services: list[ServiceProcess] = []

    def __enter__(self) -> LocalFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, name: str, argv: Sequence[str], ready: re.Pattern[str] = ADDRESS_LINE) -> ServiceProcess:
        service = ServiceProcess(argv, self.run_dir / "logs" / f"{name}.log", ready=ready)
        self.services.append(service)
        service.start()
        if ready is ADDRESS_LINE:
            wait_serving(service.address)
        return service

    def stop(self, timeout: float = 30.0) -> None:
        for service in reversed(self.services):
            if service.running:
                service.terminate(timeout)
        self.services.clear()
