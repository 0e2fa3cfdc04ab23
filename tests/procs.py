"""Process helpers for tests: the harness's names, and the `scheduler` CLI run as a user would.

The harness is `evalfleet.processes` (one process: start, wait, stop) and `evalfleet.local_fleet`
(the services' command lines and health wait). Tests import it from here, beside the helpers that
only tests need, so that a test names one module for the processes it runs; `__all__` declares
the re-exports.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from evalfleet.local_fleet import WORKER_LINE, policy_argv, scheduler_argv, wait_serving, worker_argv
from evalfleet.processes import ServiceProcess, free_port, wait_until
from evalfleet.scheduler_api.client import SchedulerClient

__all__ = [
    "WORKER_LINE",
    "ServiceProcess",
    "cli",
    "db_fingerprint",
    "free_port",
    "one_line_refusal",
    "policy_argv",
    "policy_steps_logged",
    "scheduler_argv",
    "self_signed_certificate",
    "build_libero_manifests",
    "submit_libero",
    "wait_settled",
    "wait_serving",
    "wait_until",
    "worker_argv",
]


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Runs the `scheduler` CLI as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


def one_line_refusal(run: subprocess.CompletedProcess[str]) -> str:
    """The stderr of a command that must have refused a user's mistake: exit 2, one line, no
    traceback."""
    assert run.returncode == 2, run
    stderr = run.stderr
    assert "Traceback" not in stderr and stderr.count("\n") == 1, stderr
    return stderr


def db_fingerprint(db_path: Path) -> str:
    """A digest of every row of every table, read on a separate read-only connection."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    digest = hashlib.sha256()
    tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    for table in tables:
        for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2"):
            digest.update(repr(row).encode())
    conn.close()
    return digest.hexdigest()


def policy_steps_logged(directory: Path) -> int:
    """Policy steps written so far to the episode logs under ``directory`` (one JSON line each)."""
    return sum(path.read_text().count('"event": "step"') for path in directory.rglob("*.jsonl"))


def self_signed_certificate(directory: Path, host: str) -> tuple[Path, Path]:
    """A throwaway TLS key and certificate for ``host`` (the real openssl), valid for a day."""
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            f"/CN={host}",
            "-addext",
            f"subjectAltName=DNS:{host}",
        ],
        check=True,
        capture_output=True,
    )
    return key, cert


def build_libero_manifests(out: Path, tasks: str, trials: int, camera: int, max_steps: int) -> None:
    """`scheduler manifest build libero` of libero_object tasks into `out`, with 2 wait steps, as a user would."""
    run = cli(
        "manifest", "build", "libero", "--out", str(out), "--suite", "libero_object", "--tasks", tasks,
        "--trials", str(trials), "--camera-size", str(camera), "--wait-steps", "2", "--max-steps", str(max_steps),
        timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr


def submit_libero(scheduler: str, policy: str, manifests: Path, submission_id: str, *extra: str) -> None:
    """`scheduler submit` of every manifest in a folder on route libero, one episode a task, with the
    checkpoint resolved from the inference server at `policy`, as a user would."""
    run = cli(
        "submit", "--server", scheduler, "--route", "libero", "--batch-size", "1", "--policy-server", policy,
        "--submission-id", submission_id, *extra, "--manifest", *(str(p) for p in sorted(manifests.glob("*.json"))),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr


def wait_settled(client: SchedulerClient, submission_id: str, timeout: float) -> None:
    """Waits until every task of a submission has succeeded or failed for good."""

    def settled() -> bool:
        tasks = client.status(submission_id).tasks
        return tasks.succeeded + tasks.failed == tasks.total

    wait_until(settled, timeout, f"every task of {submission_id} settled", period=0.5)


def require_built(folder: Path, make_target: str) -> Path:
    """``folder``, an overlay ``make_target`` builds (it holds ``.evalfleet-installed`` once built).
    Without it the caller's tests skip, or fail under ``make test``, which builds every one and says
    so with EVALFLEET_REQUIRE_STACKS=1. Usable at module level too."""
    if not (folder / ".evalfleet-installed").is_file():
        if os.environ.get("EVALFLEET_REQUIRE_STACKS") == "1":
            raise RuntimeError(f"{folder} is not built although make test builds it ({make_target})")
        pytest.skip(f"{folder} is not built ({make_target})", allow_module_level=True)
    return folder
