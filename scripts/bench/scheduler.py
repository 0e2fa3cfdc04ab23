"""Scheduler throughput benchmark: evalfleet against Labtasker 2.8.0, measured in the same run.

Workload (the issue's): one submission of N episodes in minibatches of 1, drained by W worker
processes that each loop claim -> report the episode -> complete. Four evalfleet calling patterns:
the three calls with minimal messages, the same work in one call (``Complete`` carrying the result
and claiming the next task), and the renderer worker's own pattern before and after it ended tasks
in one round trip, with the messages it sends (its routes and checkpoint filter, a LIBERO-sized
result with its info, the task's result JSON). Per run it reports tasks/s, claim latency p50/p99
(timed in the workers around the claim call), server CPU per task (utime + stime of the server
process over the drain) and the server's peak RSS (VmHWM). A second
measurement times sequential claims from one client against a backlog of 1k .. 100k pending tasks,
to show whether a claim's cost grows with the backlog.

The baseline is Labtasker 2.8.0 (HTTP + SQLite), run under its own virtual environment
(``--baseline-python``, default ``.venv-bench/bin/python``) by ``scripts.bench.labtasker_baseline``,
which reuses this module's drain and claim loops. This module therefore imports only the standard
library and ``evalfleet.processes`` (which needs nothing else) at top level; evalfleet's other
modules are imported inside the functions that need them.

Run from the repository root: ``.venv/bin/python -m scripts.bench.scheduler [--quick]``.
Every server and worker process it starts listens on or talks to 127.0.0.1 only, and is stopped on
exit, on error and on Ctrl-C.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import multiprocessing
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalfleet.processes import ServiceProcess, cpu_seconds, peak_rss_mib
from scripts.common.command import command_line
from scripts.common.progress import progress
from scripts.common.signals import interrupt_on
from scripts.common.stats import percentile
from scripts.common.tables import aligned, number

if TYPE_CHECKING:
    from evalfleet.scheduler_api.client import SchedulerClient

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0
WORKER_READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
WARMUP_CLAIMS = 20
ROUTE = "bench"

# The reference numbers for Labtasker 2.8.0 on a 2-core machine, shown when the baseline
# cannot be measured in this run.
REFERENCE_NOTE = (
    "issue reference (2 cores): Labtasker 2.8.0 drains 52-60 tasks/s at W=1..16, claim p99 2.4 s at "
    "W=16, 13-15 ms server CPU/task, claim cost x3.5 from 1k to 10k pending"
)
TARGET_RATE_RATIO = 20.0
TARGET_P99_MS = 25.0
TARGET_CPU_MS = 1.0
FLAT_GROWTH = 1.5


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


# ---------------------------------------------------------------------------------------------
# evalfleet.


def evalfleet_server(db: Path, synchronous: str) -> ServiceProcess:
    """A started scheduler on 127.0.0.1, its log beside the database; stopped when its block exits."""
    from evalfleet.local_fleet import scheduler_argv

    argv = scheduler_argv(db, "--host", "127.0.0.1", "--lease-seconds", "600", "--synchronous", synchronous)
    return ServiceProcess(argv, db.with_suffix(".log")).start(START_TIMEOUT_S)


def evalfleet_populate(address: str, episodes: int, submission_id: str, checkpoint: str = "") -> None:
    """One submission of ``episodes`` synthetic episodes, one task per episode (batch 1)."""
    from benchmarks.synthetic.manifest import build_synthetic
    from evalfleet.scheduler_api.client import SchedulerClient

    with SchedulerClient(address, timeout=600) as client:
        client.wait_ready(30)
        client.submit(
            [build_synthetic(episodes, seed=1, mean_seconds=0.0)],
            ROUTE,
            batch_size=1,
            submission_id=submission_id,
            checkpoint=checkpoint,
        )


def registered_client(address: str, worker_id: str, routes: Sequence[str]) -> SchedulerClient:
    """A client connected and registered as ``worker_id``, as a renderer worker starts."""
    from evalfleet.scheduler_api.client import SchedulerClient

    client = SchedulerClient(address, timeout=60)
    client.wait_ready(30)
    client.register_worker(worker_id, routes, host="127.0.0.1")
    return client


def evalfleet_worker(address: str, route: str, index: int) -> WorkerOps:
    """Registered, then three calls per task with minimal messages: claim / report / complete."""
    worker_id = f"bench-{index}"
    client = registered_client(address, worker_id, [route])

    def finish(lease: Any) -> None:
        for episode in lease.episodes:
            client.report_episode(lease, episode, True, steps=1, wall_seconds=0.0)
        client.complete(lease)

    return WorkerOps(claim=lambda: client.claim(worker_id, [route]), finish=finish, close=client.close)


def evalfleet_fused_worker(address: str, route: str, index: int) -> WorkerOps:
    """The same work in one call per task: Complete carries the episode results and claims the next."""
    from evalfleet.scheduler_api.client import claim_request, episode_result

    worker_id = f"bench-fused-{index}"
    client = registered_client(address, worker_id, [route])
    next_claim = claim_request(worker_id, [route])

    def finish_and_claim(lease: Any) -> Any:
        episodes = [episode_result(episode, True, steps=1) for episode in lease.episodes]
        return client.complete(lease, episodes=episodes, claim_next=next_claim)

    return WorkerOps(
        claim=lambda: client.claim(worker_id, [route]),
        finish=lambda lease: None,
        close=client.close,
        finish_and_claim=finish_and_claim,
    )


# What the renderer worker sends: its default routes (the benchmark's among them), the digest its
# inference server serves as the claim's checkpoint filter (the submission carries it), and per
# episode what renderer_worker/episode.py and worker.py report for a LIBERO episode.
WORKER_ROUTES = (ROUTE, "libero", "robotwin")
WORKER_CHECKPOINT = "5e" * 32


def worker_episode(index: int) -> dict[str, Any]:
    """``episode_result``'s arguments for one LIBERO-sized episode, as the worker fills them."""
    return {
        "index": index,
        "success": True,
        "steps": 220,
        "wall_seconds": 12.3,
        "trace_digest": "7d" * 32,
        "info": {
            "episode_id": f"libero_spatial/3/{index:04d}",
            "wait_steps": 10,
            "instruction": "pick up the black bowl between the plate and the ramekin and place it on the plate",
            "policy_steps": 44,
            "policy": "10.0.0.5:9340",
            "log": f"runs/worker-0/bench-{index:05d}/episode-{index:06d}.jsonl",
        },
        "execute_steps": 5,
    }


def renderer_worker_before(address: str, route: str, index: int) -> WorkerOps:
    """The renderer worker until it ended tasks in one round trip: Claim, ReportEpisode per
    episode, Complete."""
    worker_id = f"worker-before-{index}"
    client = registered_client(address, worker_id, WORKER_ROUTES)

    def finish(lease: Any) -> None:
        for episode in lease.episodes:
            fields = worker_episode(episode)
            client.report_episode(lease, fields.pop("index"), fields.pop("success"), **fields)
        client.complete(lease, {"worker": worker_id})

    return WorkerOps(
        claim=lambda: client.claim(worker_id, WORKER_ROUTES, [WORKER_CHECKPOINT]), finish=finish, close=client.close
    )


def renderer_worker_now(address: str, route: str, index: int) -> WorkerOps:
    """The renderer worker now: its first task by Claim, then one Complete per task carrying the
    task's last result and claiming the next (earlier episodes of a task, none at batch 1, go alone)."""
    from evalfleet.scheduler_api.client import claim_request, episode_result

    worker_id = f"worker-now-{index}"
    client = registered_client(address, worker_id, WORKER_ROUTES)
    next_claim = claim_request(worker_id, WORKER_ROUTES, [WORKER_CHECKPOINT])

    def finish_and_claim(lease: Any) -> Any:
        *alone, last = lease.episodes
        for episode in alone:
            fields = worker_episode(episode)
            client.report_episode(lease, fields.pop("index"), fields.pop("success"), **fields)
        fields = worker_episode(last)
        result = episode_result(fields.pop("index"), fields.pop("success"), **fields)
        return client.complete(lease, {"worker": worker_id}, episodes=[result], claim_next=next_claim)

    return WorkerOps(
        claim=lambda: client.claim(worker_id, WORKER_ROUTES, [WORKER_CHECKPOINT]),
        finish=lambda lease: None,
        close=client.close,
        finish_and_claim=finish_and_claim,
    )


@dataclass(frozen=True)
class Mode:
    """One evalfleet calling pattern: its name in the tables, its worker, the submission's checkpoint."""

    system: str
    factory: WorkerFactory
    checkpoint: str = ""


EVALFLEET_MODES: tuple[Mode, ...] = (
    Mode("evalfleet", evalfleet_worker),
    Mode("evalfleet 1-call", evalfleet_fused_worker),
    Mode("worker before (3 calls)", renderer_worker_before, WORKER_CHECKPOINT),
    Mode("worker now (1 call)", renderer_worker_now, WORKER_CHECKPOINT),
)


def evalfleet_drains(
    tmp: Path, episodes: int, worker_counts: Sequence[int], synchronous: str, budget_s: float
) -> list[DrainResult]:
    """A fresh server and database per worker count, so every drain starts from the same state."""
    results = []
    for mode in EVALFLEET_MODES:
        for workers in worker_counts:
            db = tmp / f"evalfleet-drain-{len(results)}-w{workers}.sqlite"
            with evalfleet_server(db, synchronous) as server:
                evalfleet_populate(server.address, episodes, f"drain-w{workers}", mode.checkpoint)
                result = run_drain(mode.system, server, mode.factory, ROUTE, episodes, workers, budget_s)
            progress(describe_drain(result))
            results.append(result)
    return results


def evalfleet_claim_costs(tmp: Path, pendings: Sequence[int], claims: int, synchronous: str) -> list[ClaimCost]:
    """The backlog stays within [pending, pending + claims] while the claims are timed."""
    from evalfleet.scheduler_api.client import SchedulerClient

    results = []
    for run, pending in enumerate(pendings):
        db = tmp / f"evalfleet-claims-{run}-{pending}.sqlite"
        with evalfleet_server(db, synchronous) as server:
            evalfleet_populate(server.address, pending + claims + WARMUP_CLAIMS, f"claims-{pending}")
            with SchedulerClient(server.address, timeout=60) as client:
                result = measure_claims(
                    "evalfleet", server, lambda: client.claim("bench-claims", [ROUTE]), pending, claims
                )
        progress(describe_claims(result))
        results.append(result)
    return results


# ---------------------------------------------------------------------------------------------
# The Labtasker baseline, in its own virtual environment.


@dataclass(frozen=True)
class Baseline:
    """Labtasker's results, or why there are none (the table says which)."""

    drains: list[DrainResult]
    claims: list[ClaimCost]
    version: str
    skipped: str  # why the baseline was not measured; empty when it was


def baseline_version(python: Path) -> str:
    """Labtasker's version in ``python``'s environment; raises when it cannot be imported."""
    probe = "import labtasker, labtasker_server; print(labtasker.__version__)"
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


def run_baseline(python: Path, args: argparse.Namespace, tmp: Path) -> Baseline:
    """Runs ``scripts.bench.labtasker_baseline`` under ``python``; it writes its results as JSON."""
    try:
        version = baseline_version(python)
    except (OSError, subprocess.SubprocessError) as exc:
        return Baseline([], [], "", f"Labtasker not importable with {python} ({type(exc).__name__})")
    out = tmp / "labtasker.json"
    argv = [
        str(python), "-m", "scripts.bench.labtasker_baseline",
        "--tasks", str(args.baseline_tasks), "--workers", _csv(args.workers),
        "--pending", _csv(args.baseline_pending), "--claims", str(args.baseline_claims),
        "--budget-seconds", str(args.budget_seconds), "--tmp", str(tmp), "--json-out", str(out),
    ]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=REPO)
    timeout = _baseline_timeout(args)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return Baseline([], [], version, f"Labtasker run exceeded {timeout:.0f}s and was stopped")
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if proc.returncode != 0:
        return Baseline([], [], version, f"Labtasker run failed (exit {proc.returncode}); see its output above")
    data = json.loads(out.read_text())
    return Baseline(
        drains=[DrainResult(**d) for d in data["drains"]],
        claims=[ClaimCost(**c) for c in data["claims"]],
        version=version,
        skipped="",
    )


def _baseline_timeout(args: argparse.Namespace) -> float:
    """Room for every drain's budget plus populating the claim-cost backlogs at >= 50 tasks/s."""
    populate = sum(p + args.baseline_claims for p in args.baseline_pending) / 50
    return len(args.workers) * (args.budget_seconds + 120) + populate + 300


# ---------------------------------------------------------------------------------------------
# The table.


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator and not math.isnan(denominator) else math.nan


def drain_table(drains: Sequence[DrainResult]) -> str:
    rows = [
        [
            d.system, str(d.workers), f"{d.done:,}" + ("" if d.finished else f" of {d.tasks:,} (budget)"),
            number(d.seconds), number(d.rate, 0), number(d.claim_p50_ms, 2), number(d.claim_p99_ms, 2),
            number(d.cpu_ms_per_task, 3), number(d.peak_rss_mib), number(d.worker_cpu_ms_per_task, 3),
        ]
        for d in drains
    ]  # fmt: skip
    header = [
        "system",
        "W",
        "tasks",
        "seconds",
        "tasks/s",
        "claim p50 ms",
        "claim p99 ms",
        "srv CPU ms/task",
        "srv peak RSS MiB",
        "workers' CPU ms/task",
    ]
    return aligned(rows, header)


def drain_ratio_table(ours: Sequence[DrainResult], theirs: Sequence[DrainResult]) -> str:
    """Per worker count: how many times better evalfleet is (higher is better in every column)."""
    by_w = {d.workers: d for d in theirs}
    rows = [
        [
            d.system, str(d.workers), number(_ratio(d.rate, by_w[d.workers].rate)) + "x",
            number(_ratio(by_w[d.workers].claim_p50_ms, d.claim_p50_ms)) + "x",
            number(_ratio(by_w[d.workers].claim_p99_ms, d.claim_p99_ms)) + "x",
            number(_ratio(by_w[d.workers].cpu_ms_per_task, d.cpu_ms_per_task)) + "x",
        ]
        for d in ours
        if d.workers in by_w
    ]  # fmt: skip
    header = ["system", "W", "tasks/s (ef/lt)", "claim p50 (lt/ef)", "claim p99 (lt/ef)", "CPU/task (lt/ef)"]
    return aligned(rows, header)


def claim_table(costs: Sequence[ClaimCost]) -> str:
    rows = [
        [
            c.system,
            f"{c.pending:,}",
            str(c.claims),
            number(c.mean_ms, 2),
            number(c.p50_ms, 2),
            number(c.p99_ms, 2),
            number(c.cpu_ms_per_claim, 3),
        ]
        for c in costs
    ]
    return aligned(rows, ["system", "pending", "claims", "mean ms", "p50 ms", "p99 ms", "srv CPU ms/claim"])


def growth(costs: Sequence[ClaimCost]) -> tuple[str, float, float]:
    """Claim cost at the largest backlog over the smallest: (label, mean-latency ratio, CPU ratio)."""
    if len(costs) < 2:
        return "-", math.nan, math.nan
    low, high = min(costs, key=lambda c: c.pending), max(costs, key=lambda c: c.pending)
    label = f"{high.pending:,} / {low.pending:,} pending"
    return label, _ratio(high.mean_ms, low.mean_ms), _ratio(high.cpu_ms_per_claim, low.cpu_ms_per_claim)


def growth_table(ours: Sequence[ClaimCost], theirs: Sequence[ClaimCost]) -> str:
    rows = []
    for system, costs in (("evalfleet", ours), ("labtasker", theirs)):
        label, latency, cpu = growth(costs)
        if len(costs) > 1:
            rows.append([system, label, number(latency, 2) + "x", number(cpu, 2) + "x"])
    if not rows:
        return "(one backlog size per system: no growth to show)"
    return aligned(rows, ["system", "backlog", "mean claim latency growth", "srv CPU/claim growth"])


def target_table(drains: Sequence[DrainResult], costs: Sequence[ClaimCost], baseline: Baseline) -> str:
    """The issue's targets, each with the value it is judged on, per evalfleet calling pattern."""
    rows = []
    for system in dict.fromkeys(d.system for d in drains):
        rows += _target_rows(system, [d for d in drains if d.system == system], baseline)
    label, latency, cpu = growth(costs)
    if len(costs) > 1:
        flat = max(latency, cpu)
        rows.append(
            [
                "evalfleet",
                f"flat claim cost ({label}, growth <= {FLAT_GROWTH}x)",
                f"{flat:.2f}x",
                _verdict(flat <= FLAT_GROWTH),
            ]
        )
    return aligned(rows, ["system", "target", "measured", "verdict"])


def _target_rows(system: str, drains: Sequence[DrainResult], baseline: Baseline) -> list[list[str]]:
    rows = []
    by_w = {d.workers: d for d in baseline.drains}
    paired = [_ratio(d.rate, by_w[d.workers].rate) for d in drains if d.workers in by_w]
    if paired:
        worst = min(paired)
        rows.append(
            [
                system,
                f"drain rate >= {TARGET_RATE_RATIO:.0f}x Labtasker (worst W)",
                f"{worst:.1f}x",
                _verdict(worst >= TARGET_RATE_RATIO),
            ]
        )
    else:
        worst_rate = min(d.rate for d in drains)
        rows.append(
            [
                system,
                f"drain rate >= {TARGET_RATE_RATIO:.0f}x Labtasker (vs issue's 60/s; not measured)",
                f"{worst_rate / 60:.1f}x",
                _verdict(worst_rate / 60 >= TARGET_RATE_RATIO),
            ]
        )
    top = max(drains, key=lambda d: d.workers)
    if top.workers in by_w:  # issue #16 judges the renderer worker's pattern here
        at_top = _ratio(top.rate, by_w[top.workers].rate)
        rows.append(
            [
                system,
                f"drain rate >= {TARGET_RATE_RATIO:.0f}x Labtasker at W={top.workers}",
                f"{at_top:.1f}x",
                _verdict(at_top >= TARGET_RATE_RATIO),
            ]
        )
    rows.append(
        [
            system,
            f"claim p99 < {TARGET_P99_MS:.0f} ms at W={top.workers}",
            f"{top.claim_p99_ms:.2f} ms",
            _verdict(top.claim_p99_ms < TARGET_P99_MS),
        ]
    )
    worst_cpu = max(d.cpu_ms_per_task for d in drains)
    rows.append(
        [
            system,
            f"server CPU < {TARGET_CPU_MS:.0f} ms per task (worst W)",
            f"{worst_cpu:.3f} ms",
            _verdict(worst_cpu < TARGET_CPU_MS),
        ]
    )
    return rows


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def report(args: argparse.Namespace, drains: list[DrainResult], costs: list[ClaimCost], baseline: Baseline) -> str:
    sections = [
        "evalfleet scheduler benchmark",
        f"command: {command_line()}",
        f"machine: nproc={len(os.sched_getaffinity(0))}, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}",
        f"workload: one submission, batch 1; each worker process loops claim -> report 1 episode -> complete; "
        f"'evalfleet' makes those 3 calls, 'evalfleet 1-call' makes one (Complete carries the episode result and "
        f"claims the next task); 'worker before' / 'worker now' are the renderer worker's patterns (3 calls; 1 call) "
        f"with its messages (3 routes + checkpoint filter, a LIBERO-sized result with info, result JSON); "
        f"evalfleet synchronous={args.synchronous.upper()}",
    ]
    if baseline.skipped:
        sections.append(f"baseline: SKIPPED ({baseline.skipped}); {REFERENCE_NOTE}")
    else:
        sections.append(
            f"baseline: Labtasker {baseline.version} (FastAPI/uvicorn + SQLAlchemy/SQLite, synchronous=FULL, its "
            f"local default), same run, same machine; scaled down to {args.baseline_tasks:,} tasks per drain "
            f"(it drains ~50 tasks/s); its 'report' is report_progress"
        )
    sections += [
        "",
        "Drain",
        drain_table([*drains, *baseline.drains]),
        "srv CPU = utime + stime of the server process (all threads) over the drain, per task; srv peak RSS = its "
        "VmHWM, the submit included; workers' CPU = the W worker processes together, per task",
    ]
    if baseline.drains:
        sections += [
            "",
            "evalfleet vs Labtasker (x times better; different task counts, rates per second)",
            drain_ratio_table(drains, baseline.drains),
        ]
    sections += [
        "",
        f"Claim cost vs backlog (one client, sequential claims after {WARMUP_CLAIMS} warm-up; "
        "the backlog stays within [pending, pending + claims])",
        claim_table([*costs, *baseline.claims]),
        "",
        growth_table(costs, baseline.claims),
        "",
        "Targets (issue)",
        target_table(drains, costs, baseline),
    ]
    return "\n".join(sections)


# ---------------------------------------------------------------------------------------------
# Command line.

FULL = {
    "episodes": 20_000,
    "pending": [1_000, 10_000, 100_000],
    "claims": 2_000,
    "baseline_tasks": 2_000,
    "baseline_pending": [1_000, 10_000],
    "baseline_claims": 500,
}
QUICK = {
    "episodes": 2_000,
    "pending": [1_000, 10_000],
    "claims": 500,
    "baseline_tasks": 200,
    "baseline_pending": [500, 2_000],
    "baseline_claims": 100,
}


def _ints(text: str) -> list[int]:
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return values


def _csv(values: Sequence[int]) -> str:
    return ",".join(map(str, values))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes: the whole run takes under 2 minutes")
    parser.add_argument(
        "--episodes", type=int, help=f"evalfleet drain size (default {FULL['episodes']}, quick {QUICK['episodes']})"
    )
    parser.add_argument("--workers", type=_ints, default=[1, 4, 16], help="worker process counts (default 1,4,16)")
    parser.add_argument("--pending", type=_ints, help="evalfleet claim-cost backlogs (default 1000,10000,100000)")
    parser.add_argument("--claims", type=int, help="evalfleet's timed claims per backlog (default 2000, quick 500)")
    parser.add_argument("--baseline-tasks", type=int, help="Labtasker drain size (default 2000, quick 200)")
    parser.add_argument("--baseline-pending", type=_ints, help="Labtasker claim-cost backlogs (default 1000,10000)")
    parser.add_argument(
        "--baseline-claims", type=int, help="Labtasker's timed claims per backlog (default 500, quick 100)"
    )
    parser.add_argument(
        "--baseline-python",
        type=Path,
        default=REPO / ".venv-bench" / "bin" / "python",
        help="interpreter with labtasker==2.8.0",
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip Labtasker (the table says so)")
    parser.add_argument(
        "--synchronous", choices=("normal", "full"), default="normal", help="evalfleet's SQLite synchronous mode"
    )
    parser.add_argument(
        "--budget-seconds", type=float, default=300.0, help="time limit per drain; a drain cut short says so"
    )
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    for key, value in sizes.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    interrupt_on(signal.SIGTERM)
    with tempfile.TemporaryDirectory(prefix="bench-scheduler-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            progress(f"evalfleet: drain {args.episodes:,} tasks with W={_csv(args.workers)}")
            drains = evalfleet_drains(tmp, args.episodes, args.workers, args.synchronous, args.budget_seconds)
            progress(f"evalfleet: claim cost at {_csv(args.pending)} pending")
            costs = evalfleet_claim_costs(tmp, args.pending, args.claims, args.synchronous)
            if args.no_baseline:
                baseline = Baseline([], [], "", "--no-baseline")
            else:
                sizes = f"drain {args.baseline_tasks:,} tasks, claim cost at {_csv(args.baseline_pending)} pending"
                progress(f"labtasker: {sizes}")
                baseline = run_baseline(args.baseline_python, args, tmp)
        except KeyboardInterrupt:
            progress("interrupted; every started process has been stopped")
            return 130
    print(report(args, drains, costs, baseline))
    return 0


if __name__ == "__main__":
    sys.exit(main())
