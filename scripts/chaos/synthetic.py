"""Chaos run on the synthetic benchmark: an evaluation while workers, the scheduler and the inference
server are killed (SIGKILL to the process group) and restarted at seeded moments, then reconciled.

The claim under test: faults cost time, never results. At the end every planned episode has
exactly one stored result, the summary's successes equal the manifest's success draws (retries
after infrastructure faults are not counted as episodes), and the per-episode results (success and
trace digest by episode index) equal those of the same evaluation run without faults.

Faults fire on progress, not on the clock: each is drawn (seeded) as a fraction of the episodes
stored, so a slow machine sees the same fault schedule as a fast one.

    python -m scripts.chaos --episodes 1000 --seed 7
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.synthetic.adapter import REFERENCE_POLICY_SETTINGS
from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.local_fleet import WORKER_LINE, policy_argv, scheduler_argv, wait_serving, worker_argv
from evalfleet.processes import ServiceProcess, wait_until
from evalfleet.scheduler_api.client import SchedulerClient
from evalfleet.scheduler_api.limits import MAX_ATTEMPTS
from inference_server.checkpoint import seal
from manifests.format import Manifest
from scripts.chaos.database import all_tasks_done, read_db, stored_episodes
from scripts.chaos.faults import Fault

SUBMISSION = "chaos"
EPOCH = "syn"
TARGETS = ("worker", "scheduler", "policy")
EpisodeResults = dict[int, tuple[bool, str]]


@dataclass
class Outcome:
    """What one evaluation produced, and the log of the faults injected into it."""

    results: EpisodeResults
    result_rows: int
    episodes_succeeded: int
    attempts: int
    tasks: int
    seconds: float
    fault_log: list[str] = field(default_factory=list)


def fault_plan(seed: int, faults_per_target: int) -> list[Fault]:
    """Seeded kill moments, each target ``faults_per_target`` times, in progress order."""
    rng = random.Random(seed)
    plan = [Fault(round(rng.uniform(0.05, 0.9), 3), target) for target in TARGETS for _ in range(faults_per_target)]
    return sorted(plan, key=lambda fault: fault.at)


def seal_checkpoint(root: Path) -> Path:
    """The deterministic reference checkpoint under ``root/syn`` (sealed once)."""
    if not (root / EPOCH).exists():
        (root / EPOCH).mkdir(parents=True)
        seal(root / EPOCH, "deterministic", REFERENCE_POLICY_SETTINGS)
    return root


class Fleet:
    """The scheduler, one inference server and the workers of one evaluation, restartable in place."""

    def __init__(self, run_dir: Path, checkpoint_root: Path, workers: int, time_scale: float) -> None:
        self.run_dir = run_dir
        self.db = run_dir / "scheduler.sqlite"
        self.logs = run_dir / "logs"
        self.scheduler = ServiceProcess(scheduler_argv(self.db, "--lease-seconds", "4"), self.logs / "scheduler.log")
        self.checkpoint_root = checkpoint_root
        self.policy = ServiceProcess(policy_argv(EPOCH, checkpoint_root), self.logs / "policy.log")
        self.worker_count = workers
        self.time_scale = time_scale
        self.workers: list[ServiceProcess] = []
        self._started_workers = 0

    def start(self) -> None:
        for server in (self.scheduler, self.policy):
            server.start()
            wait_serving(server.address)
        for _ in range(self.worker_count):
            self.start_worker()

    def start_worker(self) -> ServiceProcess:
        """A worker with a fresh id, as a scheduler restarting a lost job array element would."""
        worker_id = f"w{self._started_workers}"
        self._started_workers += 1
        argv = worker_argv(
            self.scheduler.address,
            [self.policy.address],
            "--cpu",
            "--worker-id",
            worker_id,
            "--output",
            str(self.run_dir / "episodes"),
            "--poll-seconds",
            "0.2",
            "--concurrency",
            "2",
            "--adapter-option",
            f"synthetic.time_scale={self.time_scale}",
        )
        worker = ServiceProcess(argv, self.logs / f"worker-{worker_id}.log", ready=WORKER_LINE)
        worker.start()
        self.workers.append(worker)
        return worker

    def inject(self, fault: Fault, rng: random.Random) -> str:
        """Kills the target's whole process group and brings it back; returns the log line."""
        if fault.target == "worker":
            victim = rng.choice([w for w in self.workers if w.running])
            victim.kill()
            replacement = self.start_worker()
            killed, started = (p.argv[p.argv.index("--worker-id") + 1] for p in (victim, replacement))
            return f"killed worker {killed}, started {started}"
        server = self.scheduler if fault.target == "scheduler" else self.policy
        port = server.port
        server.kill()
        if fault.target == "scheduler":
            server.argv = scheduler_argv(self.db, "--lease-seconds", "4", port=port)
        else:
            server.argv = policy_argv(EPOCH, self.checkpoint_root, port=port)
        server.start()
        wait_serving(server.address)
        return f"killed {fault.target} on port {port}, restarted on the same port"

    def stop(self) -> None:
        for service in (*self.workers, self.policy, self.scheduler):
            service.kill()


def evaluate(
    run_dir: Path,
    checkpoint_root: Path,
    manifest: Manifest,
    *,
    plan: list[Fault],
    seed: int,
    workers: int = 3,
    time_scale: float = 0.01,
    timeout: float = 900.0,
) -> Outcome:
    """Runs the manifest to the end on a fresh fleet, injecting ``plan``; returns what was stored."""
    started = time.monotonic()
    fleet = Fleet(run_dir, checkpoint_root, workers, time_scale)
    rng = random.Random(seed)
    log: list[str] = []
    total = len(manifest.episodes)
    try:
        fleet.start()
        with SchedulerClient(fleet.scheduler.address) as client:
            client.submit([manifest], "synthetic", batch_size=5, max_attempts=MAX_ATTEMPTS, submission_id=SUBMISSION)
        for fault in plan:

            def reached(at: float = fault.at) -> bool:
                return stored_episodes(fleet.db) >= at * total

            wait_until(reached, timeout, f"{fault.at:.0%} stored", 0.2)
            stored = stored_episodes(fleet.db)
            log.append(f"t={time.monotonic() - started:6.1f}s stored={stored:5d}/{total} {fleet.inject(fault, rng)}")
        wait_until(lambda: all_tasks_done(fleet.db), timeout, "every task finished", 0.2)
        with SchedulerClient(fleet.scheduler.address) as client:
            summary = client.summary(SUBMISSION)
    finally:
        fleet.stop()
    rows = read_db(fleet.db, "SELECT episode_index, success, trace_digest FROM episode_results")
    ((attempts, tasks),) = read_db(fleet.db, "SELECT COALESCE(SUM(attempts), 0), COUNT(*) FROM tasks")
    return Outcome(
        results={index: (bool(success), digest) for index, success, digest in rows},
        result_rows=len(rows),
        episodes_succeeded=summary.episodes_succeeded,
        attempts=attempts,
        tasks=tasks,
        seconds=time.monotonic() - started,
        fault_log=log,
    )


def reconcile(manifest: Manifest, chaotic: Outcome, calm: Outcome) -> list[str]:
    """Every way the chaotic run differs from what a fault-free evaluation must give; empty if none."""
    total = len(manifest.episodes)
    draws = [bool(episode["success"]) for episode in manifest.episodes]
    problems = []
    for name, outcome in (("chaos", chaotic), ("calm", calm)):
        if outcome.result_rows != total or set(outcome.results) != set(range(total)):
            problems.append(f"{name}: {outcome.result_rows} result rows for {total} planned episodes")
        if outcome.episodes_succeeded != sum(draws):
            problems.append(
                f"{name}: summary counts {outcome.episodes_succeeded} successes, manifest draws {sum(draws)}"
            )
        wrong = [i for i, (success, _) in outcome.results.items() if success != draws[i]]
        if wrong:
            problems.append(f"{name}: success differs from the manifest at episodes {wrong[:10]}")
    differing = sorted(i for i in range(total) if chaotic.results.get(i) != calm.results.get(i))
    if differing:
        problems.append(
            f"per-episode results differ from the fault-free run at {len(differing)} episodes: {differing[:10]}"
        )
    return problems


def report(chaotic: Outcome, calm: Outcome, problems: list[str]) -> str:
    lines = ["fault log:", *(f"  {line}" for line in chaotic.fault_log), "reconciliation:"]
    for name, outcome in (("chaos", chaotic), ("calm", calm)):
        lines.append(
            f"  {name}: {outcome.result_rows} results, {outcome.episodes_succeeded} succeeded, "
            f"{outcome.attempts} attempts for {outcome.tasks} tasks, {outcome.seconds:.1f}s"
        )
    lines += [f"  PROBLEM {problem}" for problem in problems] or [
        "  OK: every episode once, same results as without faults"
    ]
    return "\n".join(lines)


def chaos_run(
    run_dir: Path, checkpoint_root: Path, episodes: int, seed: int, faults_per_target: int, workers: int = 3
) -> tuple[Outcome, Outcome, list[str]]:
    """The evaluation with the seeded faults, then without any; and their reconciliation."""
    manifest = build_synthetic(episodes, seed=seed, mean_seconds=1.0)
    plan = fault_plan(seed, faults_per_target)
    chaotic = evaluate(run_dir / "chaos", checkpoint_root, manifest, plan=plan, seed=seed, workers=workers)
    calm = evaluate(run_dir / "calm", checkpoint_root, manifest, plan=[], seed=seed, workers=workers)
    return chaotic, calm, reconcile(manifest, chaotic, calm)
