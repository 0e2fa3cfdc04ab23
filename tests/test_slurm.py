"""scripts/slurm/ on a real SLURM (Debian's slurm-wlm and munge, started by the test on this machine).

The inference-server job and a two-task array of renderer workers, each submitted with `sbatch` as
the README says (rendering on the CPU: `RENDER=cpu`, `--gres=none`), run a synthetic evaluation to
the end against a scheduler with a token. Midway, `scancel` of one array task stops its worker with
SIGTERM while it holds a lease: the task is handed back, no attempt spent. The other array task is
requeued by SLURM (`scontrol requeue`, the mechanism preemption with PreemptMode=REQUEUE uses) while
it holds a lease: it hands its task back too, starts again as the same array task and finishes the
evaluation. Every episode is stored once. The GPU selection of the worker script is checked with a
double of nvidia-smi (no GPU here), for device cgroups on and off.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from procs import ServiceProcess, cli, free_port, scheduler_argv, wait_serving, wait_until
from slurm_cluster import SlurmCluster, missing

from benchmarks.synthetic.manifest import build_synthetic
from manifests import format as manifest_format

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts" / "slurm"
VENV = Path(sys.prefix)

if (missing() or os.geteuid() != 0) and os.environ.get("EVALFLEET_REQUIRE_SLURM") != "1":
    pytest.skip("needs root and slurm-wlm + munge (make test installs them)", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.timeout(600)]
EPISODES = 8
# Small jobs: the node declares 8 CPUs and 8000 MB.
SMALL = ["--gres=none", "--mem=1000M", "--cpus-per-task=1"]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    yield cluster
    cluster.stop()


def attempts(db: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return list(conn.execute("SELECT task_id, worker_id, outcome FROM attempts ORDER BY started_at"))


def leased_by(db: Path, worker_prefix: str) -> bool:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        row = conn.execute(
            "SELECT COUNT(*) FROM tasks WHERE state = 'leased' AND worker_id LIKE ?", (f"{worker_prefix}%",)
        ).fetchone()
    return bool(row[0])


def stored(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        count: int = conn.execute("SELECT COUNT(*) FROM episode_results").fetchone()[0]
    return count


def test_an_evaluation_on_slurm_survives_scancel_and_requeue(
    slurm: SlurmCluster, tmp_path: Path, checkpoint_root: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    token = shared / "token"
    token.write_text("slurm-test-token\n")
    token.chmod(0o600)
    db = tmp_path / "scheduler.sqlite"
    scheduler = ServiceProcess(
        scheduler_argv(db, "--token-file", str(token), "--lease-seconds", "20"), tmp_path / "scheduler.log"
    )
    with scheduler:
        scheduler.start()
        wait_serving(scheduler.address)
        common = {"EVALFLEET_SHARED": str(shared), "EVALFLEET_VENV": str(VENV)}
        policy_job = slurm.sbatch(
            *SMALL,
            f"--output={shared}/policy-%j.log",
            str(SCRIPTS / "inference-server.sbatch"),
            env={
                **common,
                "EPOCH": "syn",
                "CHECKPOINT_ROOT": str(checkpoint_root),
                "DEVICE": "cpu",
                "DTYPE": "float32",
                "POLICY_PORT": str(free_port()),
                "METRICS_PORT": str(free_port()),
            },
        )
        address_file = shared / f"policy-{policy_job}.addr"
        wait_until(address_file.exists, 180, f"the inference-server job publishing {address_file.name}")
        policy = address_file.read_text().strip()

        manifest = build_synthetic(EPISODES, seed=5, mean_seconds=6.0, success_rate=0.5)
        manifest_path = manifest_format.write(manifest, tmp_path / "manifests")
        submitted = cli(
            "submit", "--server", scheduler.address, "--token-file", str(token), "--route", "synthetic",
            "--batch-size", "1", "--policy-server", policy, "--submission-id", "slurm",
            "--manifest", str(manifest_path),
        )  # fmt: skip
        assert submitted.returncode == 0, submitted.stderr

        array = slurm.sbatch(
            *SMALL,
            "--array=0-1",
            "--open-mode=append",  # a requeued task writes on after its first run
            f"--output={shared}/workers-%A_%a.log",
            str(SCRIPTS / "renderer-workers.sbatch"),
            env={**common, "SCHEDULER": scheduler.address, "ROUTES": "synthetic", "RENDER": "cpu",
                 "CONCURRENCY": "1", "GRACE_SECONDS": "1"},
        )  # fmt: skip
        host = slurm.command("hostname", "-s").stdout.strip()
        cancelled, requeued = f"{host}-{array}-0", f"{host}-{array}-1"

        # scancel one array task while it holds a lease: SIGTERM, its task handed back.
        wait_until(lambda: leased_by(db, cancelled) and stored(db) >= 1, 180, "array task 0 mid-episode")
        slurm.command("scancel", f"{array}_0")
        wait_until(lambda: slurm.state(f"{array}_0") == "", 90, "array task 0 gone")
        assert "released" in {outcome for _, worker, outcome in attempts(db) if worker == cancelled}, attempts(db)

        # Requeue the other while it holds a lease; it starts again as the same array task.
        wait_until(lambda: leased_by(db, requeued), 120, "array task 1 mid-episode")
        slurm.command("scontrol", "requeue", f"{array}_1")
        wait_until(lambda: not leased_by(db, requeued), 90, "array task 1 handing its task back")
        # A requeued job waits out a begin time; let it start now.
        slurm.command("scontrol", "update", f"JobId={array}_1", "StartTime=now", check=False)
        wait_until(lambda: stored(db) == EPISODES, 300, "every episode stored")

        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            states = dict(conn.execute("SELECT state, COUNT(*) FROM tasks GROUP BY state").fetchall())
            keys = conn.execute("SELECT COUNT(DISTINCT task_id || ':' || episode_index) FROM episode_results")
            distinct = keys.fetchone()[0]
        assert states == {"succeeded": EPISODES} and distinct == EPISODES
        outcomes = [(worker, outcome) for _, worker, outcome in attempts(db)]
        assert (cancelled, "released") in outcomes and (requeued, "released") in outcomes, outcomes
        assert not {o for _, o in outcomes} & {"failed", "lost"}, outcomes
        released = [i for i, (w, o) in enumerate(outcomes) if (w, o) == (requeued, "released")][0]
        assert any(w == requeued for w, _ in outcomes[released + 1 :]), "the requeued task worked again"
        log = (shared / f"workers-{array}_1.log").read_text()
        assert log.count(f"renderer-worker {requeued} started") == 2, log[-3000:]
        slurm.command("scancel", array, policy_job, check=False)


def fake_gpu_tools(folder: Path, listing: str) -> dict[str, str]:
    """A double of nvidia-smi printing `listing`, and of the worker (it prints its arguments)."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\nprintf '{listing}'\n")
    (bin_dir / "renderer-worker").write_text('#!/bin/sh\necho "$@"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    shared = folder / "shared"
    shared.mkdir()
    (shared / "policy-1.addr").write_text("node:9340")
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "EVALFLEET_VENV": str(folder),
        "EVALFLEET_SHARED": str(shared),
        "SCHEDULER": "sched:50051",
        "ROUTES": "libero",
    }


@pytest.mark.parametrize(
    ("listing", "allocated", "uuid"),
    [
        # Device cgroups: only the allocated GPU is visible, as index 0, whatever its physical index.
        ("0, GPU-cccc\\n", "2", "GPU-cccc"),
        # No cgroups: every GPU, under physical indices; SLURM_JOB_GPUS names the allocated one.
        ("0, GPU-aaaa\\n1, GPU-bbbb\\n2, GPU-cccc\\n3, GPU-dddd\\n", "2", "GPU-cccc"),
    ],
)
def test_the_worker_script_selects_its_gpu_by_uuid(tmp_path: Path, listing: str, allocated: str, uuid: str) -> None:
    env = {**os.environ, **fake_gpu_tools(tmp_path, listing), "SLURM_JOB_GPUS": allocated, "SLURM_JOB_ID": "7"}
    run = subprocess.run(
        ["bash", str(SCRIPTS / "renderer-workers.sbatch")], env=env, capture_output=True, text=True, timeout=30
    )
    assert run.returncode == 0, run.stderr
    assert f"--gpu-uuid {uuid} " in run.stdout, run.stdout
