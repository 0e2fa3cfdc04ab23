"""A whole evalfleet on one machine: scheduler, inference servers and workers as child processes.

Used by ``make demo``, the tests and the benchmark scripts. What starts, waits for and stops one
process is ``evalfleet.processes`` (standard library only, so that a benchmark baseline without gRPC
can use it too); this module adds what is evalfleet's: the command lines of the three services, the
line a renderer worker prints once it is up, the wait for a server's gRPC health to say SERVING, and
``LocalFleet``, which stops everything it started when it exits, on errors and on Ctrl-C alike.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from evalfleet.channels import open_channel
from evalfleet.processes import ADDRESS_LINE, ServiceProcess

WORKER_LINE = re.compile(r"renderer-worker (\S+) started")


def wait_serving(address: str, timeout: float = 60.0, service: str = "", tls_ca: bytes | None = None) -> None:
    """Blocks until the server's health service answers SERVING (over TLS verified by `tls_ca` when given)."""
    with open_channel(address, [], tls_ca) as channel:
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
        str(port),  # 0: the server binds a free port and logs it
        *extra,
    ]


def worker_argv(scheduler: str, policies: Sequence[str], *extra: str) -> list[str]:
    policy_args = [arg for policy in policies for arg in ("--policy", policy)]
    return [sys.executable, "-m", "renderer_worker.cli", "--scheduler", scheduler, *policy_args, *extra]


def cpu_worker_argv(
    scheduler: str, policies: Sequence[str], routes: Sequence[str], worker_id: str, output: Path, *extra: str
) -> list[str]:
    """A worker that renders on the CPU, serves ``routes`` and writes its episode logs under
    ``output``: how the demo and the benchmarks run one on this machine."""
    return worker_argv(
        scheduler,
        policies,
        "--cpu",
        "--routes",
        ",".join(routes),
        "--worker-id",
        worker_id,
        "--output",
        str(output),
        *extra,
    )


class LocalFleet:
    """Starts services under one run directory and stops them all on exit, in reverse order."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.services: list[ServiceProcess] = []

    def __enter__(self) -> LocalFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(
        self,
        name: str,
        argv: Sequence[str],
        ready: re.Pattern[str] = ADDRESS_LINE,
        spawned: Callable[[ServiceProcess], None] | None = None,
    ) -> ServiceProcess:
        """Starts a service and waits until it is up; ``spawned`` is called as soon as it exists
        (before it is up), so that a caller killed meanwhile has its pid on record."""
        service = ServiceProcess(argv, self.run_dir / "logs" / f"{name}.log", ready=ready)
        self.services.append(service)
        service.spawn()
        if spawned is not None:
            spawned(service)
        service.wait_ready()
        if ready is ADDRESS_LINE:
            wait_serving(service.address)
        return service

    def stop(self, timeout: float = 30.0) -> None:
        for service in reversed(self.services):
            service.stop(timeout)
        self.services.clear()
