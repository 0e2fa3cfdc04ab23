"""Makespan of a RoboTwin-shaped synthetic evaluation under three ways of cutting it into tasks (issue #7).

Workload: 50 benchmark tasks x 20 episodes (1,000 episodes); the tasks' mean episode times are spread
5x (geometric from --min-mean to 5x that, in a seeded shuffle: a benchmark's task order says nothing
about task length), episode times log-normal around each task's mean (long-tailed), every duration
scaled by --time-scale so that a strategy runs in about a minute. One fleet (a scheduler, one
inference server, W renderer workers) runs, one after the other:

  (a) per-task    one task per benchmark task (batch_size=20), the StarVLA launcher's unit;
  (b) minibatch   fixed 5-episode minibatches in submission order (the manifests as given);
  (c) default     what `scheduler submit` does by default: 5-episode minibatches, manifests ordered
                  longest expected episode first (manifests.expected.longest_first).

Makespan is wall time from the Submit call to the poll that sees every task succeeded (polled every
50 ms; nothing subtracted). The bound is max(total work / W, longest single episode), from the
manifests' duration_s x time_scale. `sim` is the same claim order list-scheduled on W idle workers
with zero overhead: the part of the ratio that is the order, not the machinery.

    .venv/bin/python scripts/bench_makespan.py              # 16 worker processes, ~5 minutes
"""

from __future__ import annotations

import argparse
import faulthandler
import heapq
import math
import os
import platform
import random
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.synthetic.adapter import REFERENCE_POLICY_SETTINGS
from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.local_fleet import WORKER_LINE, LocalFleet, policy_argv, scheduler_argv, worker_argv
from evalfleet.scheduler_api.client import SchedulerClient
from inference_server.checkpoint import seal
from manifests.expected import longest_first
from manifests.format import Manifest
from manifests.partition import minibatches

EPOCH = "syn"
ROUTE = "synthetic"


@dataclass(frozen=True)
class Strategy:
    name: str
    batch_size: int
    longest_first: bool

    def order(self, manifests: list[Manifest]) -> list[Manifest]:
        return longest_first(manifests) if self.longest_first else list(manifests)


STRATEGIES = (
    Strategy("(a) per-task, batch 20", 20, False),
    Strategy("(b) minibatch 5, submission order", 5, False),
    Strategy("(c) default: minibatch 5, longest-first", 5, True),
)


@dataclass
class Row:
    strategy: str
    tasks: int
    makespan: float
    bound: float
    sim: float
    failed: int

    @property
    def ratio(self) -> float:
        return self.makespan / self.bound


def workload(seed: int, tasks: int, episodes: int, min_mean: float, spread: float, sigma: float) -> list[Manifest]:
    """The benchmark tasks' manifests in their (shuffled) benchmark order."""
    means = [min_mean * spread ** (i / max(1, tasks - 1)) for i in range(tasks)]
    random.Random(seed).shuffle(means)
    return [
        build_synthetic(episodes, seed=seed, mean_seconds=round(mean, 3), sigma=sigma, task=f"task{i:02d}")
        for i, mean in enumerate(means)
    ]


def durations(manifest: Manifest) -> list[float]:
    return [float(entry["duration_s"]) for entry in manifest.episodes]


def bound_seconds(manifests: list[Manifest], workers: int, time_scale: float) -> float:
    every = [d for m in manifests for d in durations(m)]
    return max(sum(every) / workers, max(every)) * time_scale


def simulated_makespan(ordered: list[Manifest], batch_size: int, workers: int, time_scale: float) -> float:
    """List scheduling of the tasks, in claim order, on ``workers`` workers of one slot each."""
    free_at = [0.0] * workers
    for manifest in ordered:
        d = durations(manifest)
        for start, end in minibatches(len(d), batch_size):
            heapq.heappush(free_at, heapq.heappop(free_at) + sum(d[start:end]) * time_scale)
    return max(free_at)


def start_fleet(fleet: LocalFleet, run_dir: Path, args: argparse.Namespace) -> str:
    """Starts the scheduler, the inference server and the workers; returns the scheduler address."""
    root = run_dir / "checkpoints"
    (root / EPOCH).mkdir(parents=True)
    seal(root / EPOCH, "deterministic", REFERENCE_POLICY_SETTINGS)
    scheduler = fleet.start("scheduler", scheduler_argv(run_dir / "scheduler.sqlite", "--lease-seconds", "60"))
    policy = fleet.start("policy", policy_argv(EPOCH, root))
    processes, concurrency = (args.workers, 1) if args.mode == "processes" else (1, args.workers)
    for i in range(processes):
        argv = worker_argv(
            scheduler.address,
            [policy.address],
            "--cpu",
            "--routes",
            ROUTE,
            "--worker-id",
            f"w{i:02d}",
            "--concurrency",
            str(concurrency),
            "--poll-seconds",
            str(args.poll_seconds),
            "--output",
            str(run_dir / "episodes"),
            "--video",
            "none",  # scheduling figures, not encoding
            "--adapter-option",
            f"synthetic.time_scale={args.time_scale}",
            "--adapter-option",
            f"synthetic.steps_per_second={args.steps_per_second}",
        )
        fleet.start(f"worker-w{i:02d}", argv, ready=WORKER_LINE)
    return scheduler.address


def run_submission(
    client: SchedulerClient, submission_id: str, manifests: list[Manifest], batch_size: int, timeout: float
) -> tuple[float, int, int]:
    """Submits and waits for every task to end; returns (makespan, tasks, failed tasks)."""
    for manifest in manifests:  # uploaded before the clock starts: the same bytes for every strategy
        client.put_manifest(manifest)
    hashes = [m.hash for m in manifests]
    started = time.monotonic()
    client.submit(hashes, ROUTE, batch_size=batch_size, submission_id=submission_id)
    deadline = started + timeout
    while True:
        counts = client.status(submission_id).tasks
        if counts.total and counts.succeeded + counts.failed + counts.cancelled == counts.total:
            return time.monotonic() - started, counts.total, counts.failed + counts.cancelled
        if time.monotonic() > deadline:
            raise TimeoutError(f"{submission_id}: {counts.succeeded}/{counts.total} tasks done after {timeout:.0f}s")
        time.sleep(0.05)


def warm_up(client: SchedulerClient, args: argparse.Namespace) -> None:
    """One short episode per worker slot, so that every episode process is spawned before timing."""
    slots = args.workers
    manifest = build_synthetic(slots, seed=0, mean_seconds=2.0 / max(args.time_scale, 1e-9), sigma=0.01, task="warmup")
    run_submission(client, "warmup", [manifest], 1, timeout=300.0)


def order_only(args: argparse.Namespace, seeds: int) -> str:
    """The simulated (zero-overhead) ratio of each strategy over ``seeds`` workloads: order, not luck."""
    ratios: dict[str, list[float]] = {s.name: [] for s in STRATEGIES}
    for seed in range(seeds):
        manifests = workload(seed, args.tasks, args.episodes, args.min_mean, args.spread, args.sigma)
        bound = bound_seconds(manifests, args.workers, args.time_scale)
        for s in STRATEGIES:
            ratios[s.name].append(
                simulated_makespan(s.order(manifests), s.batch_size, args.workers, args.time_scale) / bound
            )
    lines = [
        f"Order only (simulated, zero overhead), workload seeds 0-{seeds - 1}:",
        "",
        "| strategy | median ratio | p90 | max | seeds over 1.10 |",
        "|---|---|---|---|---|",
    ]
    for name, values in ratios.items():
        values.sort()
        p90 = values[min(len(values) - 1, math.ceil(0.9 * len(values)) - 1)]
        over = sum(v > 1.10 for v in values)
        lines.append(f"| {name} | {values[len(values) // 2]:.3f} | {p90:.3f} | {values[-1]:.3f} | {over}/{seeds} |")
    return "\n".join(lines)


def machine() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{platform.node()}: {os.cpu_count()} cores, {platform.machine()}, "
        f"Python {platform.python_version()}, load avg {load}"
    )


def table(rows: list[Row]) -> str:
    lines = [
        "| strategy | tasks | makespan s | bound s | ratio | sim ratio |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        failed = f" ({row.failed} failed)" if row.failed else ""
        lines.append(
            f"| {row.strategy} | {row.tasks}{failed} | {row.makespan:.1f} | {row.bound:.1f} | "
            f"{row.ratio:.3f} | {row.sim / row.bound:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument(
        "--mode",
        choices=("processes", "single"),
        default="processes",
        help="processes: W worker processes, --concurrency 1; single: one worker, --concurrency W",
    )
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--episodes", type=int, default=20, help="episodes per benchmark task")
    parser.add_argument("--min-mean", type=float, default=20.0, help="shortest task's mean episode seconds")
    parser.add_argument("--spread", type=float, default=5.0, help="longest / shortest task mean")
    parser.add_argument("--sigma", type=float, default=0.5, help="log-normal sigma of episode times")
    parser.add_argument("--time-scale", type=float, default=0.02, help="wall seconds per episode second")
    parser.add_argument(
        "--steps-per-second",
        type=float,
        default=0.1,
        help="synthetic steps (policy calls / chunk) per episode second; low keeps 2 cores idle",
    )
    parser.add_argument("--poll-seconds", type=float, default=0.2, help="workers' wait between empty claims")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sim-seeds", type=int, default=50, help="workload seeds for the order-only simulation")
    parser.add_argument("--only", action="append", choices=("a", "b", "c"), help="run only these strategies")
    parser.add_argument("--run-dir", type=Path, default=None, help="keeps databases and logs (default: a temp dir)")
    parser.add_argument(
        "--timeout", type=float, default=1500.0, help="seconds before the stacks are dumped and the run exits"
    )
    args = parser.parse_args(argv)
    faulthandler.dump_traceback_later(args.timeout, exit=True)

    manifests = workload(args.seed, args.tasks, args.episodes, args.min_mean, args.spread, args.sigma)
    bound = bound_seconds(manifests, args.workers, args.time_scale)
    strategies = [s for s in STRATEGIES if not args.only or s.name[1] in args.only]
    every = [d for m in manifests for d in durations(m)]
    mode = (
        f"{args.workers} renderer-worker processes, --concurrency 1 each"
        if args.mode == "processes"
        else f"one renderer-worker, --concurrency {args.workers}"
    )
    print(f"command: {shlex.join([Path(sys.executable).name, *sys.argv])}")
    print(f"machine: {machine()}")
    print(f"fleet: {mode}; one scheduler, one inference server (deterministic), all on this machine")
    print(
        f"workload: {len(manifests)} tasks x {args.episodes} episodes, task means {args.min_mean:g}-"
        f"{args.min_mean * args.spread:g} s, sigma {args.sigma}; total {sum(every):.0f} s, longest episode "
        f"{max(every):.0f} s; x time_scale {args.time_scale} -> bound {bound:.1f} s",
        flush=True,
    )

    rows = []
    with tempfile.TemporaryDirectory(prefix="makespan-") as scratch:
        run_dir = args.run_dir or Path(scratch)
        with LocalFleet(run_dir) as fleet:
            address = start_fleet(fleet, run_dir, args)
            with SchedulerClient(address) as client:
                warm_up(client, args)
                for i, strategy in enumerate(strategies):
                    ordered = strategy.order(manifests)
                    sim = simulated_makespan(ordered, strategy.batch_size, args.workers, args.time_scale)
                    makespan, tasks, failed = run_submission(
                        client, f"makespan-{i}", ordered, strategy.batch_size, timeout=max(300.0, 10 * bound)
                    )
                    rows.append(Row(strategy.name, tasks, makespan, bound, sim, failed))
                    print(f"  {strategy.name}: {makespan:.1f} s ({makespan / bound:.3f}x bound)", flush=True)
    print(f"machine after: {machine()}")
    print(table(rows))
    if args.sim_seeds > 0:
        print()
        print(order_only(args, args.sim_seeds))
    return 1 if any(row.failed for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
