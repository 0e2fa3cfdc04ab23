"""evalfleet's side of the scheduler benchmark: a scheduler server, a backlog of synthetic tasks, and
the four calling patterns its workers drain it with (``EVALFLEET_MODES``).

The load benchmark builds its backlog with ``evalfleet_populate`` too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.local_fleet import scheduler_argv
from evalfleet.processes import ServiceProcess
from evalfleet.scheduler_api.client import SchedulerClient, claim_request, episode_result
from scripts.bench.drain import (
    START_TIMEOUT_S,
    WARMUP_CLAIMS,
    ClaimCost,
    DrainResult,
    WorkerFactory,
    WorkerOps,
    describe_claims,
    describe_drain,
    measure_claims,
    run_drain,
)
from scripts.common.progress import progress

ROUTE = "bench"


def evalfleet_server(db: Path, synchronous: str) -> ServiceProcess:
    """A started scheduler on 127.0.0.1, its log beside the database; stopped when its block exits."""
    argv = scheduler_argv(db, "--host", "127.0.0.1", "--lease-seconds", "600", "--synchronous", synchronous)
    return ServiceProcess(argv, db.with_suffix(".log")).start(START_TIMEOUT_S)


def evalfleet_populate(address: str, episodes: int, submission_id: str, checkpoint: str = "") -> None:
    """One submission of ``episodes`` synthetic episodes, one task per episode (batch 1)."""
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
    results: list[DrainResult] = []
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
