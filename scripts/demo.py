"""`make demo`: a real evaluation end to end on the embedded local default.

It builds (or reuses) a small libero_object manifest set, starts a scheduler (SQLite under
runs/demo/), one inference server with the scripted LIBERO oracle backend, and two CPU renderer
workers; submits; shows live progress; prints the per-task summary; writes runs/demo/RESULTS.json;
and stops every process it started, also on Ctrl-C.

    .venv/bin/python -m scripts.demo [--tasks 0-4] [--trials 2] [--workers 2]
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from evalfleet.local_fleet import WORKER_LINE, LocalFleet, cpu_worker_argv, policy_argv, scheduler_argv
from evalfleet.policy_api.client import PolicyClient
from evalfleet.scheduler_api.client import SchedulerClient
from inference_server.backends.oracle import ORACLE_SETTINGS
from inference_server.checkpoint import seal
from manifests import format as manifest_format
from scheduler import cli as scheduler_cli
from scheduler.results import results_document, write_results

REPO = Path(__file__).resolve().parents[1]
CHECKPOINT = "libero-oracle"
console = Console()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, default=REPO / "runs" / "demo")
    parser.add_argument("--suite", default="libero_object")
    parser.add_argument("--tasks", default="0-4", help="task ids of the suite")
    parser.add_argument("--trials", type=int, default=2, help="trials per task")
    parser.add_argument("--camera-size", type=int, default=128)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1800.0, help="give up after this many seconds")
    return parser.parse_args()


def build_manifests(args: argparse.Namespace) -> list[manifest_format.Manifest]:
    """Scans the trials once; later runs reuse the sealed manifests of the same definition."""
    key = f"{args.suite}-tasks{args.tasks}-trials{args.trials}-cam{args.camera_size}"
    out = args.run_dir / "manifests" / key
    if not (out / "BUILT").exists():
        console.print(f"[bold]building manifests[/] {key} (scanning LIBERO trials: about a minute per task on 2 cores)")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "scheduler.cli",
                "manifest",
                "build",
                "libero",
                "--out",
                str(out),
                "--suite",
                args.suite,
                "--tasks",
                args.tasks,
                "--trials",
                str(args.trials),
                "--camera-size",
                str(args.camera_size),
            ],
            check=True,
        )
        (out / "BUILT").touch()
    return [manifest_format.read(path) for path in sorted(out.glob("*.json"))]


def oracle_checkpoint(args: argparse.Namespace) -> Path:
    """A sealed checkpoint folder naming the oracle backend and the cameras and state it reads."""
    root: Path = args.run_dir / "checkpoints"
    folder = root / CHECKPOINT
    folder.mkdir(parents=True, exist_ok=True)
    settings = {
        **ORACLE_SETTINGS,
        "cameras": [{"name": "agentview", "height": args.camera_size, "width": args.camera_size}],
    }
    seal(folder, "libero-oracle", settings)
    return root


def fresh_database(args: argparse.Namespace) -> Path:
    db: Path = args.run_dir / "scheduler.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    return db


def watch(client: SchedulerClient, submission_id: str, timeout: float) -> None:
    """Live progress until every task has ended (succeeded, failed or cancelled)."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
    )
    deadline = time.monotonic() + timeout
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("episodes", total=None, note="")
        while time.monotonic() < deadline:
            sub = client.status(submission_id).submissions[0]
            note = f"{sub.episodes_succeeded} succeeded · {sub.tasks.leased} tasks running · {sub.tasks.failed} failed"
            progress.update(bar, completed=sub.episodes_completed, total=sub.episodes_planned, note=note)
            if sub.tasks.pending == 0 and sub.tasks.leased == 0:
                return
            time.sleep(1.0)
    raise TimeoutError(f"the evaluation did not finish within {timeout}s")


def main() -> int:
    args = parse_args()
    args.run_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    manifests = build_manifests(args)
    checkpoint_root = oracle_checkpoint(args)
    db = fresh_database(args)
    started = time.monotonic()
    with LocalFleet(args.run_dir) as fleet:
        scheduler = fleet.start("scheduler", scheduler_argv(db, "--lease-seconds", "60"))
        policy = fleet.start("inference-server", policy_argv(CHECKPOINT, checkpoint_root))
        for n in range(args.workers):
            fleet.start(
                f"worker-{n}",
                cpu_worker_argv(
                    scheduler.address, [policy.address], ["libero"], f"demo-worker-{n}", args.run_dir / "episodes"
                ),
                ready=WORKER_LINE,
            )
        with PolicyClient(policy.address) as policy_client:
            identity = policy_client.identity()
        client = SchedulerClient(scheduler.address)
        submission = client.submit(manifests, "libero", batch_size=1, submission_id="demo", checkpoint=identity.digest)
        console.print(
            f"submitted [bold]{submission.episodes_total}[/] episodes of {len(manifests)} {args.suite} tasks "
            f"to {args.workers} workers; logs in {args.run_dir / 'logs'}"
        )
        watch(client, "demo", args.timeout)
        scheduler_cli.main(["summary", "demo", "--server", scheduler.address])
        now = datetime.datetime.now(datetime.timezone.utc)
        document = results_document(client.summary("demo"), client.workers(), now, identity.identity)
        write_results(args.run_dir / "RESULTS.json", document)
        client.close()
    overall = document["overall"]
    console.print(
        f"[bold]{overall['succeeded']}/{overall['completed']}[/] episodes solved "
        f"({overall['planned']} planned) in {time.monotonic() - started:.0f}s; "
        f"results in {args.run_dir / 'RESULTS.json'}"
    )
    return 0 if document["complete"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        console.print("interrupted: every process the demo started has been stopped")
        sys.exit(130)
