"""A real one-node SLURM cluster for the tests: Debian's slurm-wlm and munge, started here as root.

munged runs as the munge user with its Debian key (created if missing); slurmctld and slurmd run in
the foreground with a configuration of their own (free ports, state under a temporary folder,
no cgroups), so the machine's own SLURM setup, if any, is left alone. The node declares more CPUs
than this machine has (``SlurmdParameters=config_overrides``) so that an inference server and a
small worker array fit at once.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

from procs import free_port, wait_until

MUNGE_KEY = Path("/etc/munge/munge.key")
BINARIES = ("slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "munged")


def missing() -> list[str]:
    return [name for name in BINARIES if shutil.which(name) is None]


class SlurmCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.daemons: list[subprocess.Popen[bytes]] = []

    def start(self) -> SlurmCluster:
        _start_munge()
        host = socket.gethostname().split(".")[0]
        for folder in ("state", "spool", "log"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=evalfleet-test",
                    f"SlurmctldHost={host}",
                    "SlurmUser=root",
                    f"SlurmctldPort={free_port()}",
                    f"SlurmdPort={free_port()}",
                    "AuthType=auth/munge",
                    f"StateSaveLocation={self.root / 'state'}",
                    f"SlurmdSpoolDir={self.root / 'spool'}",
                    f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
                    f"SlurmdPidFile={self.root / 'slurmd.pid'}",
                    f"SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}",
                    f"SlurmdLogFile={self.root / 'log' / 'slurmd.log'}",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core",
                    "SlurmdParameters=config_overrides",
                    "ReturnToService=2",
                    "MpiDefault=none",
                    "KillWait=30",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    f"NodeName={host} CPUs=8 RealMemory=8000 State=UNKNOWN",
                    "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )
        for daemon in ("slurmctld", "slurmd"):
            log = open(self.root / "log" / f"{daemon}.out", "wb")
            self.daemons.append(
                subprocess.Popen([daemon, "-D", "-c"], env=self.env, stdout=log, stderr=subprocess.STDOUT)
            )
        wait_until(lambda: self.node_state() == "idle", 60, "the SLURM node idle")
        return self

    def stop(self) -> None:
        subprocess.run(["scancel", "--full", "--user", "root"], env=self.env, check=False, capture_output=True)
        for daemon in reversed(self.daemons):
            daemon.terminate()
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()

    def node_state(self) -> str:
        run = self.command("sinfo", "-h", "-o", "%T", check=False)
        return run.stdout.strip() if run.returncode == 0 else ""

    def command(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60, check=check)

    def sbatch(self, *argv: str, env: dict[str, str]) -> str:
        """Submits a batch script; the job id."""
        run = subprocess.run(
            ["sbatch", *argv], env={**self.env, **env}, capture_output=True, text=True, timeout=60, check=True
        )
        match = re.search(r"Submitted batch job (\d+)", run.stdout)
        assert match, run.stdout + run.stderr
        return match.group(1)

    def state(self, job: str) -> str:
        """The job's (or array task's) state as squeue shows it; '' once it has left the queue."""
        return self.command("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()


def _start_munge() -> None:
    """munged as the munge user, with the Debian key (created once), unless one already answers."""
    if subprocess.run(["munge", "-n"], capture_output=True, check=False).returncode == 0:
        return
    if not MUNGE_KEY.exists():
        subprocess.run(["mungekey", "--create", "--keyfile", str(MUNGE_KEY)], check=True)
    shutil.chown(MUNGE_KEY, "munge", "munge")
    MUNGE_KEY.chmod(0o400)
    Path("/run/munge").mkdir(exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "munged"], check=True)
    wait_until(lambda: subprocess.run(["munge", "-n"], capture_output=True, check=False).returncode == 0, 30, "munged")
