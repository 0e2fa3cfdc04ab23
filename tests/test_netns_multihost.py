"""Multi-host faults on one machine: the scheduler, the inference server and two renderer workers
each on a host of its own (a network namespace with its own address, see scripts/common/netns.py),
talking over a switch that the tests unplug hosts from.

What they pin: a worker cut off past its lease loses the task to the other worker, and whatever it
tries to write once it is back is refused, so every episode is counted once; a blip shorter than
the lease costs nothing; a scheduler host that dies and comes back is reconnected to and the
evaluation finishes without spending an attempt; an inference host that dies turns the episodes in
flight into infrastructure retries, and the evaluation finishes once it is back (or on the other
inference host); a dead worker host's stream is ended by the inference server. The operator's
commands run on the scheduler's host, as over ssh. docs/faults.md lists the faults and these tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from procs import WORKER_LINE, ServiceProcess, policy_argv, policy_steps_logged, scheduler_argv, wait_until, worker_argv

from manifests.format import parse
from scripts.common.netns import Host, Network, netns_unavailable

pytestmark = [pytest.mark.slow, pytest.mark.netns, pytest.mark.timeout(300)]

_UNAVAILABLE = netns_unavailable()
if _UNAVAILABLE and os.environ.get("EVALFLEET_REQUIRE_NETNS"):
    raise RuntimeError(f"EVALFLEET_REQUIRE_NETNS is set but {_UNAVAILABLE}")
if _UNAVAILABLE:
    pytest.skip(_UNAVAILABLE, allow_module_level=True)

LEASE_SECONDS = 3
BLIP_SECONDS = 1.5
POLICY_TIMEOUT_SECONDS = 4
SCHEDULER_PORT = 50051
POLICY_PORT = 9340
POLICY_METRICS_PORT = 9341
CLAIMED = re.compile(r"claimed (\S+) \(attempt (\d+)")
ENDED = re.compile(r"task (\S+) ended")


class Cluster:
    """The four hosts and the services on them; every process and namespace goes at ``close``."""

    def __init__(self, tmp: Path, checkpoint_root: Path, lease_seconds: float) -> None:
        self.tmp = tmp
        self.checkpoint_root = checkpoint_root
        self.net = Network()
        self.scheduler_host = self.net.add_host("sched")
        self.policy_host = self.net.add_host("policy")
        self.worker_hosts = {name: self.net.add_host(name) for name in ("w1", "w2")}
        self.token_file = tmp / "token"
        self.token_file.write_text("multi-host-test-token\n")
        self.scheduler_address = self.scheduler_host.endpoint(SCHEDULER_PORT)
        self.policy_address = self.policy_host.endpoint(POLICY_PORT)
        self.scheduler = self._service(
            self.scheduler_host,
            "scheduler",
            scheduler_argv(
                tmp / "scheduler.sqlite",
                "--host",
                self.scheduler_host.address,
                "--token-file",
                str(self.token_file),
                "--lease-seconds",
                str(lease_seconds),
                port=SCHEDULER_PORT,
            ),
        )
        self.policy = self.policy_service(self.policy_host)
        self.workers: dict[str, ServiceProcess] = {}
        self.extra_services: list[ServiceProcess] = []

    def policy_service(self, host: Host) -> ServiceProcess:
        """An inference server for the `syn` checkpoint on ``host`` (not started)."""
        return self._service(
            host,
            host.name,
            policy_argv(
                "syn",
                self.checkpoint_root,
                "--host",
                host.address,
                "--token-file",
                str(self.token_file),
                "--metrics-port",
                str(POLICY_METRICS_PORT),
                port=POLICY_PORT,
            ),
        )

    def _service(self, host: Host, name: str, argv: list[str], **kwargs: object) -> ServiceProcess:
        return ServiceProcess(host.argv(argv), self.tmp / "logs" / f"{name}.log", **kwargs)

    def start_worker(self, name: str, *extra: str, policies: tuple[str, ...] = ()) -> ServiceProcess:
        argv = worker_argv(
            self.scheduler_address,
            list(policies or [self.policy_address]),
            "--cpu",
            "--worker-id",
            name,
            "--token-file",
            str(self.token_file),
            "--output",
            str(self.tmp / "episodes" / name),
            "--poll-seconds",
            "0.2",
            "--policy-timeout",
            str(POLICY_TIMEOUT_SECONDS),
            "--adapter-option",
            "synthetic.time_scale=1.0",
            *extra,
        )
        worker = self._service(self.worker_hosts[name], f"worker-{name}", argv, ready=WORKER_LINE)
        self.workers[name] = worker.start()
        return worker

    def cli(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """The `scheduler` CLI, run by an operator on the scheduler's host."""
        argv = [sys.executable, "-m", "scheduler.cli", *args]
        env = {
            **os.environ,
            "EVALFLEET_SCHEDULER": self.scheduler_address,
            "EVALFLEET_TOKEN_FILE": str(self.token_file),
        }
        return subprocess.run(self.scheduler_host.argv(argv), capture_output=True, text=True, env=env, timeout=timeout)

    def cli_json(self, *args: str) -> dict:
        run = self.cli(*args, "--json")
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)

    def submit(self, submission: str, episodes: int, mean_seconds: float) -> Path:
        manifest = self.tmp / f"{submission}.json"
        built = self.cli(
            "manifest",
            "build",
            "synthetic",
            "--episodes",
            str(episodes),
            "--seed",
            "3",
            "--mean-seconds",
            str(mean_seconds),
            "--out",
            str(manifest),
        )
        assert built.returncode == 0, built.stderr
        run = self.cli(
            "submit",
            "--manifest",
            str(manifest),
            "--route",
            "synthetic",
            "--batch-size",
            "1",
            "--submission-id",
            submission,
        )
        assert run.returncode == 0, run.stderr
        return manifest

    def policy_gauge(self, name: str) -> float:
        """One gauge of the inference server's /metrics, read on its own host."""
        url = f"http://{self.policy_host.endpoint(POLICY_METRICS_PORT)}/metrics"
        read = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=10).read().decode())"
        run = subprocess.run(
            self.policy_host.argv([sys.executable, "-c", read]), capture_output=True, text=True, timeout=30
        )
        assert run.returncode == 0, run.stderr
        return float(re.search(rf"^{name} (\S+)$", run.stdout, re.MULTILINE).group(1))

    def wait_policy_gauge(self, name: str, value: float, timeout: float) -> None:
        wait_until(lambda: self.policy_gauge(name) == value, timeout, f"{name} == {value:g}")

    def wait_finished(self, submission: str, timeout: float = 180.0) -> None:
        """Returns once no task of ``submission`` is pending or leased (`status --watch` exits)."""
        run = self.cli("status", submission, "--watch", "--interval", "0.5", timeout=timeout)
        assert run.returncode == 0, run.stderr

    def close(self) -> None:
        for service in [*self.workers.values(), *self.extra_services, self.policy, self.scheduler]:
            service.kill()
        self.net.close()


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path, checkpoint_root: Path) -> Iterator[Cluster]:
    """Parametrize indirectly with a lease period for another than ``LEASE_SECONDS``."""
    cluster = Cluster(tmp_path, checkpoint_root, getattr(request, "param", LEASE_SECONDS))
    try:
        cluster.scheduler.start()
        cluster.policy.start()
        yield cluster
    finally:
        cluster.close()


def expected_results(manifest: Path) -> dict[int, bool]:
    """Each episode's outcome, known in advance from the synthetic manifest."""
    return {i: entry["success"] for i, entry in enumerate(parse(manifest.read_bytes()).episodes)}


def stored_results(cluster: Cluster, submission: str) -> dict[int, tuple[bool, int, str]]:
    """episode index -> (success, fencing token, worker) over every task of a batch-size-1 submission."""
    stored = {}
    for task in cluster.cli_json("tasks", "--submission", submission)["tasks"]:
        for episode in cluster.cli_json("task", task["task_id"])["episodes"]:
            result = episode["result"]
            assert result["episode_index"] not in stored, f"episode {result['episode_index']} stored twice"
            stored[result["episode_index"]] = (result["success"], episode["fencing_token"], episode["worker_id"])
    return stored


def host_down_until_noticed(
    cluster: Cluster, service: ServiceProcess, host: Host, workers: list[ServiceProcess], noticed: str
) -> None:
    """A host dies (its service killed, its link down) until every worker has logged ``noticed``,
    then comes back on the same address with the service restarted."""
    service.kill()
    cluster.net.cut(host)
    for worker in workers:
        worker.wait_for_line(lambda line: noticed in line, timeout=60)
    cluster.net.restore(host)
    service.start()


def successes(stored: dict[int, tuple[bool, int, str]]) -> dict[int, bool]:
    return {index: success for index, (success, _, _) in stored.items()}


def test_worker_cut_off_past_its_lease_loses_the_task_and_its_late_writes_are_refused(cluster: Cluster) -> None:
    manifest = cluster.submit("cut", episodes=4, mean_seconds=1.0)
    w1 = cluster.start_worker("w1")
    task_id = w1.wait_for_line(CLAIMED.search, timeout=60).group(1)
    cluster.net.cut(cluster.worker_hosts["w1"])

    w2 = cluster.start_worker("w2")
    cluster.wait_finished("cut")
    attempts = cluster.cli_json("task", task_id)["attempts"]
    assert [(a["worker_id"], a["outcome"]) for a in attempts] == [("w1", "lost"), ("w2", "succeeded")]
    assert w2.terminate() == 0

    # Back on the network, w1 still holds its old lease: the scheduler refuses what it writes with it.
    cluster.net.restore(cluster.worker_hosts["w1"])
    refusal = f"task {task_id} is at fencing token 2, this lease holds 1"
    w1.wait_for_line(lambda line: refusal in line, timeout=120)

    stored = stored_results(cluster, "cut")
    assert successes(stored) == expected_results(manifest)
    moved = cluster.cli_json("task", task_id)["episodes"]
    assert [(e["worker_id"], e["fencing_token"]) for e in moved] == [("w2", 2)]
    summary = cluster.cli_json("summary", "cut")
    assert (summary["episodes_planned"], summary["episodes_completed"], summary["complete"]) == (4, 4, True)

    # ... and w1 survived the partition: it takes and finishes new work.
    cluster.submit("after", episodes=2, mean_seconds=0.5)
    cluster.wait_finished("after")
    assert {worker for _, _, worker in stored_results(cluster, "after").values()} == {"w1"}


def test_worker_cut_off_from_the_scheduler_only_has_its_finished_episode_refused(cluster: Cluster) -> None:
    """A partial partition: w1 still reaches the inference server, so its episode runs to the end
    while its lease expires; the result it then reports carries a stale lease and is not stored."""
    manifest = cluster.submit("partial", episodes=3, mean_seconds=1.5)
    w1 = cluster.start_worker("w1")
    task_id = w1.wait_for_line(CLAIMED.search, timeout=60).group(1)
    cluster.net.cut_between(cluster.worker_hosts["w1"], cluster.scheduler_host)

    w2 = cluster.start_worker("w2")
    cluster.wait_finished("partial")
    assert w2.terminate() == 0
    cluster.net.restore_between(cluster.worker_hosts["w1"], cluster.scheduler_host)
    refusal = f"report not stored: lease.fencing_token: task {task_id} is at fencing token 2, this lease holds 1"
    w1.wait_for_line(lambda line: refusal in line, timeout=120)

    moved = cluster.cli_json("task", task_id)
    assert [(a["worker_id"], a["outcome"]) for a in moved["attempts"]] == [("w1", "lost"), ("w2", "succeeded")]
    assert [(e["worker_id"], e["fencing_token"]) for e in moved["episodes"]] == [("w2", 2)]
    stored = stored_results(cluster, "partial")
    assert successes(stored) == expected_results(manifest)


# The workers' channels must reconnect (up to 2 s of backoff) and heartbeat within one lease
# period of the restart: longer than the 3 s the partition tests use to expire leases quickly.
@pytest.mark.parametrize("cluster", [8], indirect=True)
def test_scheduler_host_killed_and_restarted_workers_reconnect_and_finish(cluster: Cluster) -> None:
    manifest = cluster.submit("restart", episodes=10, mean_seconds=1.0)
    workers = [cluster.start_worker(name) for name in ("w1", "w2")]
    workers[0].wait_for_line(ENDED.search, timeout=60)

    host_down_until_noticed(cluster, cluster.scheduler, cluster.scheduler_host, workers, "scheduler unreachable")

    cluster.wait_finished("restart")
    stored = stored_results(cluster, "restart")
    assert successes(stored) == expected_results(manifest)
    assert {worker for _, _, worker in stored.values()} == {"w1", "w2"}
    assert all(worker.running for worker in workers)
    # The outage cost no worker its task: the leases held across it were renewed, not reaped.
    for task in cluster.cli_json("tasks", "--submission", "restart")["tasks"]:
        assert [a["outcome"] for a in cluster.cli_json("task", task["task_id"])["attempts"]] == ["succeeded"]
    summary = cluster.cli_json("summary", "restart")
    assert (summary["episodes_completed"], summary["complete"]) == (10, True)


def test_inference_host_killed_episodes_in_flight_become_infrastructure_retries(cluster: Cluster) -> None:
    manifest = cluster.submit("infer", episodes=8, mean_seconds=2.0)
    workers = [cluster.start_worker(name) for name in ("w1", "w2")]
    in_flight = [worker.wait_for_line(CLAIMED.search, timeout=60).group(1) for worker in workers]

    host_down_until_noticed(cluster, cluster.policy, cluster.policy_host, workers, "[policy_unavailable]")

    cluster.wait_finished("infer")
    stored = stored_results(cluster, "infer")
    assert successes(stored) == expected_results(manifest)
    for task_id in in_flight:
        attempts = cluster.cli_json("task", task_id)["attempts"]
        assert attempts[0]["outcome"] == "failed" and "policy_unavailable" in attempts[0]["error"], attempts
        assert attempts[-1]["outcome"] == "succeeded"
    summary = cluster.cli_json("summary", "infer")
    assert (summary["episodes_completed"], summary["complete"]) == (8, True)
    assert summary["episodes_succeeded"] == sum(expected_results(manifest).values())


def test_inference_server_ends_the_stream_of_a_worker_host_that_died(cluster: Cluster) -> None:
    """A dead host sends nothing more, not even a FIN: its stream would count as attached forever
    and every batch would wait out its timeout for a step that never comes. Keepalive pings end it.
    Observations 8 s apart (a chunk of 4 at 0.5 steps/s), as with a real simulator: with none in
    flight, nothing else on the connection would notice the host is gone."""
    cluster.submit("dead", episodes=1, mean_seconds=120.0)
    w1 = cluster.start_worker("w1", "--adapter-option", "synthetic.steps_per_second=0.5")
    w1.wait_for_line(CLAIMED.search, timeout=60)
    cluster.wait_policy_gauge("evalfleet_policy_streams", 1, timeout=60)

    cluster.net.cut(cluster.worker_hosts["w1"])
    w1.kill()
    cluster.wait_policy_gauge("evalfleet_policy_streams", 0, timeout=60)


def test_one_of_two_inference_hosts_dies_and_the_other_finishes_the_evaluation(cluster: Cluster) -> None:
    spare_host = cluster.net.add_host("policy2")
    spare = cluster.policy_service(spare_host)
    cluster.extra_services.append(spare.start())
    manifest = cluster.submit("spare", episodes=8, mean_seconds=1.0)
    worker = cluster.start_worker(
        "w1", "--concurrency", "2", policies=(cluster.policy_address, spare_host.endpoint(POLICY_PORT))
    )
    worker.wait_for_line(ENDED.search, timeout=60)

    cluster.policy.kill()
    cluster.net.cut(cluster.policy_host)  # and it stays gone
    cluster.wait_finished("spare")
    assert successes(stored_results(cluster, "spare")) == expected_results(manifest)
    assert worker.running


@pytest.mark.parametrize("cluster", [8], indirect=True)
def test_a_network_blip_shorter_than_the_lease_costs_nothing(cluster: Cluster) -> None:
    """The worker's link drops for a few policy steps of its episode (its packets lost, not refused)
    and comes back: TCP carries on, the lease holds, no attempt is spent and no episode re-run."""
    manifest = cluster.submit("blip", episodes=2, mean_seconds=4.0)
    w1 = cluster.start_worker("w1")
    task_id = w1.wait_for_line(CLAIMED.search, timeout=60).group(1)
    wait_until(lambda: policy_steps_logged(cluster.tmp / "episodes" / "w1" / task_id) >= 1, 60, "episode under way")
    cluster.net.cut(cluster.worker_hosts["w1"])
    time.sleep(BLIP_SECONDS)  # the fault's length, not a wait for anything
    cluster.net.restore(cluster.worker_hosts["w1"])

    cluster.wait_finished("blip")
    assert successes(stored_results(cluster, "blip")) == expected_results(manifest)
    for task in cluster.cli_json("tasks", "--submission", "blip")["tasks"]:
        assert [a["outcome"] for a in cluster.cli_json("task", task["task_id"])["attempts"]] == ["succeeded"]
