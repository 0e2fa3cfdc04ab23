"""Chaos run on real LIBERO episodes: the synthetic run's claim (faults cost time, never results) on
simulator processes, renders and traces, with per-episode steps compared too.

The fleet is the scheduler, one inference server serving the demo's scripted oracle
(deterministic: each command is a function of the observation and the session's own history) and
renderer workers running LIBERO in their episode processes. Faults fire on progress here too,
counted in policy steps: the calm run goes first and its total of logged policy steps is what the
seeded fractions are taken of. Beside the kills of workers, the scheduler and the inference server,
the episode process under a worker is killed; where root and iproute2 allow it, each service runs
on a host of its own (scripts.common.netns) and one more fault unplugs a worker's host past its lease,
then plugs it back in.

    MUJOCO_GL=osmesa python -m scripts.chaos --benchmark libero --tasks 0-1 --trials 5
"""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

from evalfleet.local_fleet import WORKER_LINE, cpu_worker_argv, policy_argv, scheduler_argv
from evalfleet.processes import ServiceProcess, wait_until
from evalfleet.scheduler_api.limits import MAX_ATTEMPTS
from inference_server.backends.oracle import ORACLE_SETTINGS
from inference_server.checkpoint import seal
from manifests.format import read as read_manifest
from scripts.chaos.database import all_tasks_done, read_db
from scripts.chaos.faults import Fault
from scripts.common.netns import Host, Network, netns_unavailable
from scripts.common.procstat import episode_processes

LIBERO_TARGETS = ("worker", "episode", "policy", "scheduler")
PARTITION = "partition"
LIBERO_SUBMISSION = "chaos-libero"
LIBERO_CHECKPOINT = "libero-oracle"
# Fixed ports, each on its own host, in the network-namespace layout; loopback binds free ones.
NETNS_SCHEDULER_PORT = 50051
NETNS_POLICY_PORT = 9340
EpisodeKey = tuple[str, int]  # (manifest hash, episode index)
LiberoResults = dict[EpisodeKey, tuple[bool, int, str]]


@dataclass(frozen=True)
class LiberoConfig:
    """What the LIBERO chaos run evaluates and how hard it is shaken."""

    suite: str = "libero_spatial"
    tasks: str = "0-1"
    trials: int = 5
    camera: int = 128
    max_steps: int = 20
    wait_steps: int = 2
    workers: int = 2
    lease_seconds: float = 8.0
    seed: int = 7
    faults_per_target: int = 2
    partitions: int = 1
    timeout: float = 1800.0


@dataclass
class LiberoOutcome:
    """What one LIBERO evaluation stored, and what it took."""

    results: LiberoResults
    result_rows: int
    duplicates: int
    attempts: int
    tasks: int
    failed_tasks: int
    policy_steps: int  # in the episode logs at the end (a retry on the same worker rewrites its log)
    seconds: float
    fault_log: list[str] = field(default_factory=list)
    kills: dict[str, int] = field(default_factory=dict)


def libero_fault_plan(seed: int, faults_per_target: int, partitions: int) -> list[Fault]:
    """Seeded kill moments (fractions of the calm run's policy steps), in progress order."""
    rng = random.Random(seed)
    targets = [t for t in LIBERO_TARGETS for _ in range(faults_per_target)] + [PARTITION] * partitions
    return sorted((Fault(round(rng.uniform(0.05, 0.85), 3), target) for target in targets), key=lambda f: f.at)


def build_libero(manifests: Path, config: LiberoConfig) -> list[Path]:
    """`scheduler manifest build libero`, once per definition under ``manifests``; their paths."""
    out = manifests / (
        f"{config.suite}-tasks{config.tasks}-trials{config.trials}-cam{config.camera}"
        f"-wait{config.wait_steps}-steps{config.max_steps}"
    )
    if not (out / "BUILT").exists():
        run = subprocess.run(
            [
                sys.executable, "-m", "scheduler.cli", "manifest", "build", "libero", "--out", str(out),
                "--suite", config.suite, "--tasks", config.tasks, "--trials", str(config.trials),
                "--camera-size", str(config.camera), "--wait-steps", str(config.wait_steps),
                "--max-steps", str(config.max_steps),
            ],
            capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        if run.returncode != 0:
            raise RuntimeError(f"manifest build failed: {run.stderr.strip()[-2000:]}")
        (out / "BUILT").touch()
    return sorted(out.glob("*.json"))


def seal_oracle(root: Path, camera: int) -> Path:
    """The demo's scripted oracle, reading one `camera`-sized view besides the object poses."""
    folder = root / LIBERO_CHECKPOINT
    if not folder.exists():
        folder.mkdir(parents=True)
        settings = {**ORACLE_SETTINGS, "cameras": [{"name": "agentview", "height": camera, "width": camera}]}
        seal(folder, "libero-oracle", settings)
    return root


class Machine:
    """Where a service runs: this machine's loopback, or a network-namespace host of its own."""

    def __init__(self, host: Host | None) -> None:
        self.host = host
        self.address = host.address if host else "127.0.0.1"

    def argv(self, command: list[str]) -> list[str]:
        return self.host.argv(command) if self.host else command


def steps_logged(directory: Path) -> int:
    """Policy steps written so far to the episode logs under ``directory`` (one JSON line each)."""
    return sum(path.read_text(errors="replace").count('"event": "step"') for path in directory.rglob("*.jsonl"))


def newest_episode_log(log_dir: Path) -> Path | None:
    logs = sorted(log_dir.rglob("*.jsonl"), key=lambda path: path.stat().st_mtime)
    return logs[-1] if logs else None


def rolling_out(log: Path | None) -> bool:
    """True while an episode log says its policy session is open and the episode has not ended."""
    if log is None:
        return False
    text = log.read_text(errors="replace")
    return '"event": "start"' in text and '"event": "end"' not in text


# One rollout: its log's path and the time its start line gives (the worker rewrites the same path
# when it runs the same task's episode again).
Rollout = tuple[Path, str]


def rollout(log: Path) -> Rollout:
    """The rollout a log records now; its first line begins `{"t": <time>, "event": "start"`."""
    with log.open(errors="replace") as text:
        return log, text.readline().partition('"event"')[0]


class LiberoFleet:
    """Scheduler, inference server and LIBERO workers, on loopback or on hosts of their own."""

    def __init__(self, run_dir: Path, checkpoint_root: Path, config: LiberoConfig, network: Network | None) -> None:
        self.run_dir = run_dir
        self.config = config
        self.network = network
        self.db = run_dir / "scheduler.sqlite"
        self.logs = run_dir / "logs"
        self.episodes = run_dir / "episodes"
        self.checkpoint_root = checkpoint_root
        self.token_file = run_dir / "token"
        self.token_file.parent.mkdir(parents=True, exist_ok=True)
        self.token_file.write_text(f"chaos-{config.seed}\n")
        self.sched_machine = Machine(network.add_host("sched") if network else None)
        self.policy_machine = Machine(network.add_host("policy") if network else None)
        self.worker_machines = [Machine(network.add_host(f"w{n}") if network else None) for n in range(config.workers)]
        ports = (NETNS_SCHEDULER_PORT, NETNS_POLICY_PORT) if network else (0, 0)
        self.scheduler = ServiceProcess(self._scheduler_argv(ports[0]), self.logs / "scheduler.log")
        self.policy = ServiceProcess(self._policy_argv(ports[1]), self.logs / "policy.log")
        # slot -> the worker now running on that slot's machine; a killed one is replaced there
        self.workers: list[ServiceProcess] = []
        self._started_workers = 0
        # Rollouts a fault ended: their logs never get an end line, yet they are not in flight. A
        # retry of the same episode on the same worker rewrites that log: a rollout of its own.
        self.ended: set[Rollout] = set()

    def _scheduler_argv(self, port: int) -> list[str]:
        argv = scheduler_argv(
            self.db,
            "--host",
            self.sched_machine.address,
            "--token-file",
            str(self.token_file),
            "--lease-seconds",
            str(self.config.lease_seconds),
            port=port,
        )
        return self.sched_machine.argv(argv)

    def _policy_argv(self, port: int) -> list[str]:
        argv = policy_argv(
            LIBERO_CHECKPOINT,
            self.checkpoint_root,
            "--host",
            self.policy_machine.address,
            "--token-file",
            str(self.token_file),
            port=port,
        )
        return self.policy_machine.argv(argv)

    def cli(self, *args: str, timeout: float = 120.0) -> str:
        """The `scheduler` CLI, run by the operator on the scheduler's machine; its stdout."""
        env = {**os.environ, "EVALFLEET_TOKEN_FILE": str(self.token_file)}
        argv = self.sched_machine.argv([sys.executable, "-m", "scheduler.cli", *args])
        run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
        if run.returncode != 0:
            raise RuntimeError(f"scheduler {' '.join(args[:2])} failed: {run.stderr.strip()[-2000:]}")
        return run.stdout

    def wait_serving(self, machine: Machine, address: str) -> None:
        """gRPC health SERVING, asked from ``machine`` (the only place a namespaced address is reached)."""
        probe = "import sys; from evalfleet.local_fleet import wait_serving; wait_serving(sys.argv[1], 120)"
        argv = machine.argv([sys.executable, "-c", probe, address])
        subprocess.run(argv, check=True, capture_output=True, timeout=180)

    def start_server(self, server: ServiceProcess, machine: Machine) -> None:
        server.start()
        self.wait_serving(machine, server.address)

    def start(self) -> None:
        self.start_server(self.scheduler, self.sched_machine)
        self.start_server(self.policy, self.policy_machine)
        for slot in range(self.config.workers):
            self.workers.append(self.start_worker(slot))

    def start_worker(self, slot: int) -> ServiceProcess:
        """A worker with a fresh id on the slot's machine, as an operator restarting a lost one would."""
        worker_id = f"w{self._started_workers}"
        self._started_workers += 1
        argv = cpu_worker_argv(
            self.scheduler.address,
            [self.policy.address],
            ["libero"],
            worker_id,
            self.episodes / worker_id,
            "--token-file",
            str(self.token_file),
            "--poll-seconds",
            "0.5",
            "--policy-timeout",
            "20",
        )
        worker = ServiceProcess(
            self.worker_machines[slot].argv(argv), self.logs / f"worker-{worker_id}.log", ready=WORKER_LINE
        )
        worker.start()
        return worker

    def submit(self, manifests: list[Path]) -> None:
        self.cli(
            "submit", "--server", self.scheduler.address, "--route", "libero", "--batch-size", "1",
            "--max-attempts", str(MAX_ATTEMPTS), "--policy-server", self.policy.address,
            "--submission-id", LIBERO_SUBMISSION, "--manifest", *(str(path) for path in manifests),
        )  # fmt: skip

    def worker_id(self, slot: int) -> str:
        argv = self.workers[slot].argv
        return argv[argv.index("--worker-id") + 1]

    def rolling_out(self, slot: int) -> Path | None:
        """The log of the episode the slot's worker is rolling out (session open, not ended), if any."""
        log = newest_episode_log(self.episodes / self.worker_id(slot))
        if log is None or not self.workers[slot].running or not rolling_out(log) or rollout(log) in self.ended:
            return None
        return log

    def busy_slots(self) -> list[int]:
        return [slot for slot in range(len(self.workers)) if self.rolling_out(slot)]

    def inject(self, target: str, rng: random.Random) -> str | None:
        """Kills ``target`` (SIGKILL) or cuts a worker's host, and brings it back; returns the log line.

        Every fault but the scheduler's waits for an episode mid-rollout (its policy session open);
        None if the evaluation ends first."""
        if target == "scheduler":
            return self.restart("scheduler", self.scheduler, self.sched_machine, self._scheduler_argv)

        busy = wait_until(
            lambda: self.busy_slots() or all_tasks_done(self.db), self.config.timeout, "an episode mid-rollout", 0.1
        )
        # Nothing busy (an empty list) is falsy, so the value is busy slots or True; mypy solves it as object.
        busy = cast("list[int] | Literal[True]", busy)
        if busy is True:
            return None
        slot = rng.choice(busy)
        worker_id = self.worker_id(slot)
        if target == "policy":
            self.ended |= {rollout(log) for n in range(len(self.workers)) if (log := self.rolling_out(n))}
            return self.restart("inference server", self.policy, self.policy_machine, self._policy_argv)
        log = self.rolling_out(slot)
        assert log is not None
        self.ended.add(rollout(log))
        if target == "worker":
            self.workers[slot].kill()
            self.workers[slot] = self.start_worker(slot)
            return f"killed worker {worker_id} mid-episode, started {self.worker_id(slot)} on its machine"
        if target == "episode":
            pids = episode_processes(self.workers[slot].pid)
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            return f"killed episode process {pids} of worker {worker_id} mid-episode (the worker spawns the next)"
        return self.partition(slot)

    def restart(self, name: str, server: ServiceProcess, machine: Machine, argv: Callable[[int], list[str]]) -> str:
        """kill -9 of a server's process group, and the same server started again on its address."""
        port = server.port
        server.kill()
        server.argv = argv(port)
        self.start_server(server, machine)
        return f"killed the {name}, restarted it on {server.address}"

    def partition(self, slot: int) -> str:
        """Unplugs the slot's host until the scheduler has taken its lease back, then plugs it in."""
        assert self.network is not None
        host = self.worker_machines[slot].host
        assert host is not None
        worker_id = self.worker_id(slot)
        query = "SELECT COUNT(*) FROM attempts WHERE worker_id = ? AND outcome = 'lost'"
        lost_before = read_db(self.db, query, (worker_id,))[0][0]
        started = time.monotonic()
        self.network.cut(host)
        wait_until(
            lambda: read_db(self.db, query, (worker_id,))[0][0] > lost_before, 300, f"{worker_id}'s lease lost", 0.2
        )
        self.network.restore(host)
        return f"cut worker {worker_id}'s host off for {time.monotonic() - started:.1f}s, past its lease; reconnected"

    def stop(self) -> None:
        for service in (*self.workers, self.policy, self.scheduler):
            service.kill()


def planned_episodes(manifests: list[Path]) -> set[EpisodeKey]:
    planned = set()
    for path in manifests:
        manifest = read_manifest(path)
        planned |= {(manifest.hash, index) for index in range(len(manifest.episodes))}
    return planned


def evaluate_libero(
    run_dir: Path,
    checkpoint_root: Path,
    manifests: list[Path],
    config: LiberoConfig,
    *,
    plan: list[Fault],
    calm_steps: int,
    use_network: bool,
) -> LiberoOutcome:
    """Runs the submission to the end on a fresh fleet, injecting ``plan``; returns what was stored."""
    started = time.monotonic()
    network = Network(f"{os.getpid() % 10000}{run_dir.name[:3]}") if use_network else None
    fleet: LiberoFleet | None = None
    rng = random.Random(config.seed)
    log: list[str] = []
    kills = dict.fromkeys((*LIBERO_TARGETS, PARTITION), 0)
    try:
        fleet = LiberoFleet(run_dir, checkpoint_root, config, network)
        fleet.start()
        fleet.submit(manifests)
        live = fleet

        def steps() -> int:
            return steps_logged(live.episodes)

        for fault in plan:
            at = math.ceil(fault.at * calm_steps)

            def reached(at: int = at) -> bool:
                return steps() >= at or all_tasks_done(live.db)

            wait_until(reached, config.timeout, f"{at} policy steps", 0.1)
            if all_tasks_done(fleet.db):
                log.append(f"evaluation finished before {fault.target} fault at step {at}: not injected")
                continue
            moment = f"t={time.monotonic() - started:6.1f}s steps={steps():4d}/{calm_steps}"
            line = fleet.inject(fault.target, rng)
            if line is None:
                log.append(f"evaluation finished before {fault.target} fault at step {at}: not injected")
                continue
            kills[fault.target] += 1
            log.append(f"{moment} {line}")
        wait_until(lambda: all_tasks_done(live.db), config.timeout, "every task finished", 0.5)
    finally:
        if fleet is not None:
            fleet.stop()
        if network is not None:
            network.close()
    rows = read_db(
        fleet.db,
        "SELECT manifest_hash, episode_index, success, steps, trace_digest FROM episode_results "
        "WHERE submission_id = ?",
        (LIBERO_SUBMISSION,),
    )
    ((duplicates,),) = read_db(
        fleet.db,
        "SELECT COUNT(*) FROM (SELECT 1 FROM episode_results "
        "GROUP BY manifest_hash, episode_index HAVING COUNT(*) > 1)",
    )
    ((attempts, tasks, failed),) = read_db(
        fleet.db, "SELECT COALESCE(SUM(attempts), 0), COUNT(*), COALESCE(SUM(state = 'failed'), 0) FROM tasks"
    )
    return LiberoOutcome(
        results={(mh, index): (bool(success), n, digest) for mh, index, success, n, digest in rows},
        result_rows=len(rows),
        duplicates=duplicates,
        attempts=attempts,
        tasks=tasks,
        failed_tasks=failed,
        policy_steps=steps_logged(fleet.episodes),
        seconds=time.monotonic() - started,
        fault_log=log,
        kills=kills,
    )


def reconcile_libero(planned: set[EpisodeKey], chaotic: LiberoOutcome, calm: LiberoOutcome) -> list[str]:
    """Every way the chaotic run differs from the calm one or from the plan; empty if none."""
    problems = []
    for name, outcome in (("chaos", chaotic), ("calm", calm)):
        if outcome.result_rows != len(planned) or set(outcome.results) != planned or outcome.duplicates:
            problems.append(
                f"{name}: {outcome.result_rows} result rows ({outcome.duplicates} episodes twice) "
                f"for {len(planned)} planned episodes"
            )
        if outcome.failed_tasks:
            problems.append(f"{name}: {outcome.failed_tasks} tasks failed for good")
    differing = sorted(key for key in planned if chaotic.results.get(key) != calm.results.get(key))
    if differing:
        shown = [f"{mh[:8]}#{i}: {chaotic.results.get((mh, i))} vs {calm.results.get((mh, i))}" for mh, i in differing]
        problems.append(f"success, steps or trace digest differ from the calm run at {len(differing)}: {shown[:5]}")
    return problems


def libero_report(chaotic: LiberoOutcome, calm: LiberoOutcome, problems: list[str], layout: str) -> str:
    lines = [f"layout: {layout}", "fault log:", *(f"  {line}" for line in chaotic.fault_log), "reconciliation:"]
    kills = ", ".join(f"{target} {count}" for target, count in chaotic.kills.items())
    lines.append(f"  faults injected: {kills}")
    for name, outcome in (("calm", calm), ("chaos", chaotic)):
        successes = sum(success for success, _, _ in outcome.results.values())
        lines.append(
            f"  {name}: {outcome.result_rows} results, {successes} succeeded, {outcome.attempts} attempts for "
            f"{outcome.tasks} tasks ({outcome.attempts - outcome.tasks} retries), "
            f"{outcome.policy_steps} policy steps in the episode logs, {outcome.seconds:.1f}s"
        )
    lines += [f"  PROBLEM {problem}" for problem in problems] or [
        "  OK: every episode once; success, steps and trace digest per episode identical to the calm run"
    ]
    return "\n".join(lines)


def libero_chaos_run(
    run_dir: Path, config: LiberoConfig, use_network: bool | None = None
) -> tuple[LiberoOutcome, LiberoOutcome, list[str], str]:
    """The calm evaluation, then the same with the seeded faults; their reconciliation and layout.

    ``use_network`` None: hosts of their own where root and iproute2 allow, else loopback without
    the partition fault (said in the layout line)."""
    unavailable = netns_unavailable()
    if use_network is None:
        use_network = unavailable is None
    elif use_network and unavailable:
        raise RuntimeError(f"network namespaces asked for, but {unavailable}")
    layout = (
        "each service on a network-namespace host of its own"
        if use_network
        else f"all on loopback; worker-host partition skipped ({unavailable or 'not asked for'})"
    )
    manifests = build_libero(run_dir / "manifests", config)
    checkpoint_root = seal_oracle(run_dir / "checkpoints", config.camera)
    planned = planned_episodes(manifests)
    plan = libero_fault_plan(config.seed, config.faults_per_target, config.partitions if use_network else 0)
    calm = evaluate_libero(
        run_dir / "calm", checkpoint_root, manifests, config, plan=[], calm_steps=0, use_network=use_network
    )
    chaotic = evaluate_libero(
        run_dir / "chaos",
        checkpoint_root,
        manifests,
        config,
        plan=plan,
        calm_steps=calm.policy_steps,
        use_network=use_network,
    )
    return chaotic, calm, reconcile_libero(planned, chaotic, calm), layout
