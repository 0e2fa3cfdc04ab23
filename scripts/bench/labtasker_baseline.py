"""The Labtasker 2.8.0 side of ``scripts.bench.scheduler``, run under an environment that has it.

Labtasker pins its own FastAPI / httpx / SQLAlchemy stack, so it lives in a separate virtual
environment (``.venv-bench``) and this module runs there as a subprocess of the benchmark. It reuses
the benchmark's drain and claim loops and the process harness (``evalfleet.processes``, standard
library only, taken from this checkout since evalfleet is not installed there) so both systems are
measured the same way, and writes its results as JSON for the benchmark's table.

Labtasker's worker protocol (from its ``labtasker.worker`` loop): claim with a caller-made run id,
then complete under that run id. The benchmark's "report one episode" step maps to its
``report_progress`` call. ``database_busy`` answers are retried with the same run id, as its worker
does, so they show up as latency rather than as errors.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import re
import secrets
import signal
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from evalfleet.processes import ServiceProcess, free_port
from scripts.bench.drain import (
    START_TIMEOUT_S,
    WARMUP_CLAIMS,
    ClaimCost,
    DrainResult,
    WorkerOps,
    describe_claims,
    describe_drain,
    measure_claims,
    run_drain,
)
from scripts.common.progress import progress
from scripts.common.signals import interrupt_on

T = TypeVar("T")
ROUTE = "default"
BUSY_RETRIES = 50
POPULATE_THREADS = 4
_READY = re.compile(r"Uvicorn running on http://(\S+):(\d+)")


def labtasker_server(db: Path) -> ServiceProcess:
    """A started Labtasker server, stopped when its block exits; it cannot bind port 0 itself."""
    argv = [
        sys.executable, "-m", "labtasker_server", "serve", "--connection", "http", "--host", "127.0.0.1",
        "--port", str(free_port()), "--database", str(db), "--database-filesystem", "local",
    ]  # fmt: skip
    return ServiceProcess(argv, db.with_suffix(".log"), ready=_READY).start(START_TIMEOUT_S)


def retry_busy(call: Callable[[], T]) -> T:
    """Retries Labtasker's ``database_busy`` refusals (SQLite lock contention) with a short backoff."""
    from labtasker.errors import APIError

    for attempt in range(BUSY_RETRIES):
        try:
            return call()
        except APIError as error:
            if error.code != "database_busy" or attempt == BUSY_RETRIES - 1:
                raise
            time.sleep(0.005 * (attempt + 1))
    raise AssertionError("unreachable")


def new_run_id() -> str:
    """The run id format Labtasker's own worker makes (``r_`` + 12 URL-safe characters)."""
    return f"r_{secrets.token_urlsafe(9)}"


def connect(address: str, queue_name: str) -> Any:
    """A client with its connection made; the one-line "connected" notice per client is dropped."""
    from labtasker import Client

    client = Client(url=f"http://{address}", queue=queue_name)
    with contextlib.redirect_stderr(io.StringIO()):
        client._health()
    return client


def populate(address: str, queue_name: str, tasks: int) -> None:
    """Creates the queue and submits ``tasks`` tasks; a few threads, since it has no bulk submit."""
    with connect(address, queue_name) as client:
        client.create_queue(queue_name)
        with ThreadPoolExecutor(POPULATE_THREADS) as pool:
            futures = [
                pool.submit(retry_busy, lambda i=i: client.submit_task({"episode": i}, max_attempts=3))
                for i in range(tasks)
            ]
            for future in futures:
                future.result()


def labtasker_worker(address: str, queue_name: str, index: int) -> WorkerOps:
    """One Labtasker worker: health check (connects), then claim / report_progress / complete."""
    client = connect(address, queue_name)

    def claim() -> Any:
        run_id = new_run_id()
        return retry_busy(lambda: client._claim(route=ROUTE, run_id=run_id))

    def finish(lease: Any) -> None:
        task_id, run_id = lease.task.id, lease.run_id
        retry_busy(
            lambda: client._report_progress(task_id=task_id, run_id=run_id, progress={"episode": 0, "success": True})
        )
        retry_busy(lambda: client._complete(task_id=task_id, run_id=run_id, result={"success": True}))

    return WorkerOps(claim=claim, finish=finish, close=client.close)


def drains(tmp: Path, tasks: int, worker_counts: Sequence[int], budget_s: float) -> list[DrainResult]:
    """A fresh server and database per worker count, as on the evalfleet side."""
    results = []
    for run, workers in enumerate(worker_counts):
        with labtasker_server(tmp / f"labtasker-drain-{run}-w{workers}.sqlite") as server:
            populate(server.address, "bench", tasks)
            result = run_drain("labtasker", server, labtasker_worker, "bench", tasks, workers, budget_s)
        progress(describe_drain(result))
        results.append(result)
    return results


def claim_costs(tmp: Path, pendings: Sequence[int], claims: int) -> list[ClaimCost]:
    results = []
    for run, pending in enumerate(pendings):
        with labtasker_server(tmp / f"labtasker-claims-{run}-{pending}.sqlite") as server:
            populate(server.address, "bench", pending + claims + WARMUP_CLAIMS)
            with connect(server.address, "bench") as client:

                def claim() -> Any:
                    return retry_busy(lambda: client._claim(route=ROUTE, run_id=new_run_id()))

                result = measure_claims("labtasker", server, claim, pending, claims)
        progress(describe_claims(result))
        results.append(result)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description="Labtasker side of scripts.bench.scheduler")
    parser.add_argument("--tasks", type=int, required=True)
    parser.add_argument("--workers", required=True, help="comma-separated worker counts")
    parser.add_argument("--pending", required=True, help="comma-separated backlogs")
    parser.add_argument("--claims", type=int, required=True)
    parser.add_argument("--budget-seconds", type=float, required=True)
    parser.add_argument("--tmp", type=Path, required=True)
    parser.add_argument("--json-out", type=Path, required=True)
    args = parser.parse_args()
    interrupt_on(signal.SIGTERM)  # the benchmark stops this run with SIGTERM
    try:
        drained = drains(args.tmp, args.tasks, [int(w) for w in args.workers.split(",")], args.budget_seconds)
        costs = claim_costs(args.tmp, [int(p) for p in args.pending.split(",")], args.claims)
    except KeyboardInterrupt:
        return 130
    payload = {"drains": [dataclasses.asdict(d) for d in drained], "claims": [dataclasses.asdict(c) for c in costs]}
    args.json_out.write_text(json.dumps(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
