"""Draining a scheduler's queue with worker processes, and timing claims against a backlog: the
measurement every system of the scheduler benchmark is put through alike.

A system is given as a ``WorkerFactory``: what its worker does, built inside each spawned worker
process (clients are not picklable). ``run_drain`` times W such processes from the moment all of
them are connected until each has reported, sampling the server's CPU around exactly that window;
``measure_claims`` times sequential claims from one client. ``run_timed`` is the process pool
underneath, which the load benchmark drives too.

Standard library and the process harness only: the Labtasker baseline
(``scripts.bench.labtasker_baseline``) runs this module in a virtual environment without gRPC.
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from evalfleet.processes import ServiceProcess
from scripts.common.procstat import cpu_seconds, peak_rss_mib
from scripts.common.stats import percentile

START_TIMEOUT_S = 60.0
WORKER_READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
WARMUP_CLAIMS = 20


# ---------------------------------------------------------------------------------------------
# Results.


@dataclass(frozen=True)
class DrainResult:
    """One drain: W workers emptying a queue of ``tasks`` tasks."""

    system: str
    workers: int
    tasks: int
    done: int
    seconds: float
    claim_p50_ms: float
    claim_p99_ms: float
    cpu_ms_per_task: float
    worker_cpu_ms_per_task: float
    peak_rss_mib: float
    finished: bool

    @property
    def rate(self) -> float:
        return self.done / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class ClaimCost:
    """Sequential claims from one client against a backlog of ``pending`` tasks."""

    system: str
    pending: int
    claims: int
    mean_ms: float
    p50_ms: float
    p99_ms: float
    cpu_ms_per_claim: float


# ---------------------------------------------------------------------------------------------
# Worker processes.


@dataclass
class WorkerOps:
    """What a system's worker does, built inside the worker process (clients are not picklable)."""

    claim: Callable[[], Any]  # a lease, or None when nothing is pending
    finish: Callable[[Any], None]  # report the lease's episodes, then complete it
    close: Callable[[], None]
    # Finishes the lease and claims the next one in a single call (timed as the claim), if the
    # system can; ``finish`` is then unused.
    finish_and_claim: Callable[[Any], Any] | None = None


WorkerFactory = Callable[[str, str, int], WorkerOps]


def drain_loop(ops: WorkerOps, max_tasks: int, budget_s: float) -> dict[str, Any]:
    """Claims and finishes tasks until none is pending, ``max_tasks`` are done, or time runs out.

    Also reports this process's CPU time: on a small machine the workers compete with the server
    for the same cores, and the table should show how much they took.
    """
    deadline = time.monotonic() + budget_s
    cpu0 = time.process_time()
    claim_ms: list[float] = []

    def timed(call: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        result = call()
        claim_ms.append((time.perf_counter() - start) * 1000)
        return result

    done = 0
    lease = timed(ops.claim)
    while lease is not None and done < max_tasks and time.monotonic() < deadline:
        if ops.finish_and_claim is not None:
            lease = timed(functools.partial(ops.finish_and_claim, lease))
        else:
            ops.finish(lease)
            lease = timed(ops.claim) if done + 1 < max_tasks else None
        done += 1
    return {"done": done, "claim_ms": claim_ms, "cpu_s": time.process_time() - cpu0}


def worker_main(
    factory: WorkerFactory,
    address: str,
    handle: str,
    index: int,
    max_tasks: int,
    budget_s: float,
    barrier: Any,
    results: Any,
) -> None:
    """One worker process: connect first, wait for every worker, then drain (only that is timed)."""
    try:
        ops = factory(address, handle, index)
    except Exception as exc:
        barrier.abort()
        results.put({"error": f"worker {index} could not connect: {exc!r}"})
        return
    try:
        barrier.wait(WORKER_READY_TIMEOUT_S)
        results.put(drain_loop(ops, max_tasks, budget_s))
    except Exception as exc:
        results.put({"error": f"worker {index}: {exc!r}"})
    finally:
        ops.close()


@dataclass(frozen=True)
class TimedRun:
    """What the processes of one timed run reported, and the server's share of the run."""

    reports: list[dict[str, Any]]
    seconds: float
    server_cpu_s: float


def run_timed(
    target: Callable[..., None], arg_lists: Sequence[tuple[Any, ...]], server_pid: int, report_timeout_s: float
) -> TimedRun:
    """Runs ``target(*args, barrier, results)`` in one spawned process per ``args``, and times the run.

    Each process connects, then waits on ``barrier``; the clock and the server's CPU run from the
    moment all of them are ready until each has put its report (a dict) on ``results``. A report
    with an ``error`` raises, once every process has been stopped.
    """
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(arg_lists) + 1)
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, barrier, results), daemon=True) for args in arg_lists]
    reported = False
    try:
        for proc in procs:
            proc.start()
        barrier.wait(WORKER_READY_TIMEOUT_S)
        cpu0, t0 = cpu_seconds(server_pid), time.perf_counter()
        reports = [results.get(timeout=report_timeout_s) for _ in procs]
        seconds, cpu = time.perf_counter() - t0, cpu_seconds(server_pid) - cpu0
        reported = True
    finally:
        stop_workers(procs, STOP_TIMEOUT_S if reported else 0.0)
    errors = [r["error"] for r in reports if "error" in r]
    if errors:
        raise RuntimeError("; ".join(errors))
    return TimedRun(reports, seconds, cpu)


def run_drain(
    system: str,
    server: ServiceProcess,
    factory: WorkerFactory,
    handle: str,
    tasks: int,
    workers: int,
    budget_s: float,
) -> DrainResult:
    """Drains ``tasks`` with ``workers`` spawned processes; server CPU is sampled around the drain."""
    worker_args = [(factory, server.address, handle, i, tasks, budget_s) for i in range(workers)]
    run = run_timed(worker_main, worker_args, server.pid, budget_s + 60)
    done = sum(r["done"] for r in run.reports)
    claim_ms = [ms for r in run.reports for ms in r["claim_ms"]]
    return DrainResult(
        system=system,
        workers=workers,
        tasks=tasks,
        done=done,
        seconds=run.seconds,
        claim_p50_ms=percentile(claim_ms, 50),
        claim_p99_ms=percentile(claim_ms, 99),
        cpu_ms_per_task=run.server_cpu_s * 1000 / done if done else math.nan,
        worker_cpu_ms_per_task=sum(r["cpu_s"] for r in run.reports) * 1000 / done if done else math.nan,
        peak_rss_mib=peak_rss_mib(server.pid),
        finished=done == tasks,
    )


def stop_workers(procs: Sequence[multiprocessing.process.BaseProcess], grace_s: float) -> None:
    """Gives workers ``grace_s`` in all to exit (0 after an error or Ctrl-C), then SIGTERM, then SIGKILL."""
    started = [proc for proc in procs if proc.pid is not None]
    for signal_rest in (None, "terminate", "kill"):
        alive = [proc for proc in started if proc.is_alive()]
        if not alive:
            return
        for proc in alive:
            if signal_rest is not None:
                getattr(proc, signal_rest)()
        deadline = time.monotonic() + (grace_s if signal_rest is None else STOP_TIMEOUT_S)
        for proc in alive:
            proc.join(max(0.0, deadline - time.monotonic()))


def measure_claims(
    system: str, server: ServiceProcess, claim: Callable[[], Any], pending: int, claims: int
) -> ClaimCost:
    """Times ``claims`` sequential claims after a short warm-up; the caller queued enough tasks."""
    for _ in range(WARMUP_CLAIMS):
        if claim() is None:
            raise RuntimeError(f"{system}: queue ran dry during warm-up")
    latencies: list[float] = []
    cpu0 = cpu_seconds(server.pid)
    for _ in range(claims):
        start = time.perf_counter()
        lease = claim()
        latencies.append((time.perf_counter() - start) * 1000)
        if lease is None:
            raise RuntimeError(f"{system}: queue ran dry after {len(latencies)} claims")
    cpu = cpu_seconds(server.pid) - cpu0
    return ClaimCost(
        system=system,
        pending=pending,
        claims=claims,
        mean_ms=sum(latencies) / claims,
        p50_ms=percentile(latencies, 50),
        p99_ms=percentile(latencies, 99),
        cpu_ms_per_claim=cpu * 1000 / claims,
    )


def describe_claims(result: ClaimCost) -> str:
    return (
        f"{result.system} claim cost at {result.pending:,} pending: mean {result.mean_ms:.2f} ms, "
        f"server CPU {result.cpu_ms_per_claim:.3f} ms/claim"
    )


def describe_drain(result: DrainResult) -> str:
    return (
        f"{result.system} W={result.workers}: {result.done}/{result.tasks} tasks in {result.seconds:.1f}s "
        f"= {result.rate:.0f}/s, claim p99 {result.claim_p99_ms:.1f} ms, CPU {result.cpu_ms_per_task:.2f} ms/task"
    )
