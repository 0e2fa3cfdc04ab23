"""The policy path's security, end to end over real processes: TLS and bearer tokens on the inference
server, the same exposure, token and reflection rules on both servers, and a worker that reaches
both over TLS with a token."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from procs import (
    WORKER_LINE,
    ServiceProcess,
    cli,
    policy_argv,
    policy_steps_logged,
    scheduler_argv,
    self_signed_certificate,
    wait_serving,
    wait_settled,
    worker_argv,
)

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.auth import bearer_metadata
from evalfleet.policy_api.client import PolicyClient
from evalfleet.policy_api.errors import BadToken, PolicyUnavailable
from evalfleet.scheduler_api.client import SchedulerClient
from evalfleet.v1 import policy_pb2
from manifests.format import write

pytestmark = pytest.mark.timeout(180)

TOKEN = "s3cret"


@dataclass(frozen=True)
class Secrets:
    token_file: Path
    key: Path
    cert: Path  # self-signed for "localhost": the CA that clients verify both servers with

    @property
    def ca(self) -> bytes:
        return self.cert.read_bytes()

    def server_flags(self) -> tuple[str, ...]:
        return ("--host", "localhost", "--token-file", str(self.token_file), "--tls-cert", str(self.cert),
                "--tls-key", str(self.key))  # fmt: skip


@pytest.fixture
def secrets(tmp_path: Path) -> Secrets:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    key, cert = self_signed_certificate(tmp_path, "localhost")
    return Secrets(token_file, key, cert)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[ServiceProcess]]:
    """Processes a test starts, killed at its end whatever happened."""
    processes: list[ServiceProcess] = []
    yield processes
    for process in reversed(processes):
        process.kill()


def start_service(started: list[ServiceProcess], argv: list[str], log: Path, tls_ca: bytes | None) -> ServiceProcess:
    """A server process, once its health service (over TLS when `tls_ca`) says SERVING."""
    process = ServiceProcess(argv, log)
    started.append(process)
    process.start()
    wait_serving(process.address, tls_ca=tls_ca)
    return process


def one_line_refusal(run: subprocess.CompletedProcess[str], *words: str) -> None:
    assert run.returncode == 2, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr, run.stderr
    for word in words:
        assert word in run.stderr, run.stderr


# -- the inference server over TLS -------------------------------------------------------------


def test_plaintext_to_a_tls_inference_server_is_refused(secrets, started, checkpoint_root, tmp_path):
    argv = policy_argv("syn", checkpoint_root, *secrets.server_flags())
    policy = start_service(started, argv, tmp_path / "policy.log", secrets.ca)
    assert policy.address.startswith("localhost:")

    with PolicyClient(policy.address, TOKEN, timeout_s=5) as plaintext, pytest.raises(PolicyUnavailable) as refused:
        plaintext.identity()
    assert refused.value.code == grpc.StatusCode.UNAVAILABLE
    with grpc.insecure_channel(policy.address) as channel, pytest.raises(grpc.RpcError) as health_refused:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert health_refused.value.code() == grpc.StatusCode.UNAVAILABLE

    with PolicyClient(policy.address, TOKEN, tls_ca=secrets.ca) as client:
        assert len(client.identity().digest) == 64


def test_a_wrong_or_missing_token_over_tls_is_unauthenticated(secrets, started, checkpoint_root, tmp_path):
    argv = policy_argv("syn", checkpoint_root, *secrets.server_flags())
    policy = start_service(started, argv, tmp_path / "policy.log", secrets.ca)
    with PolicyClient(policy.address, TOKEN, tls_ca=secrets.ca) as client:
        digest = client.identity().digest
    for token, message in (("wrong", "wrong bearer token"), (None, "missing authorization")):
        with PolicyClient(policy.address, token, tls_ca=secrets.ca) as client:
            with pytest.raises(BadToken) as refused:
                client.identity()
            assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
            assert message in refused.value.message and refused.value.field == "metadata.authorization"
            assert refused.value.instance_id  # which server refused: the same trailers as every typed error
            with pytest.raises(BadToken):
                client.open_session(digest, policy_pb2.EpisodeMeta(benchmark="synthetic", episode_id="0"))


# -- the same rules on both servers ------------------------------------------------------------


@pytest.mark.parametrize("server", ["scheduler", "inference-server"])
def test_beyond_loopback_without_a_token_exits_2_in_one_line(server, checkpoint_root, tmp_path):
    def argv(*flags: str) -> list[str]:
        if server == "scheduler":
            return scheduler_argv(tmp_path / "db.sqlite", *flags)
        return policy_argv("syn", checkpoint_root, *flags)

    run = subprocess.run(argv("--host", "0.0.0.0"), capture_output=True, text=True, timeout=60)
    one_line_refusal(run, "--host 0.0.0.0 is beyond loopback: --token-file is required")
    run = subprocess.run(argv("--tls-cert", str(tmp_path / "cert.pem")), capture_output=True, text=True, timeout=60)
    one_line_refusal(run, "--tls-cert and --tls-key go together")
    missing = tmp_path / "missing.pem"
    run = subprocess.run(
        argv("--tls-cert", str(missing), "--tls-key", str(missing)), capture_output=True, text=True, timeout=60
    )
    one_line_refusal(run, f"--tls-cert {missing}: No such file")
    assert not (tmp_path / "db.sqlite").exists()


@pytest.mark.parametrize("server", ["scheduler", "inference-server"])
def test_a_certificate_and_key_grpc_refuses_exit_2_naming_them_not_the_port(server, secrets, checkpoint_root, tmp_path):
    """Both files are PEM, but swapped: gRPC cannot build its TLS credentials from them."""
    flags = ("--port", "0", "--tls-cert", str(secrets.key), "--tls-key", str(secrets.cert))
    if server == "scheduler":
        argv = scheduler_argv(tmp_path / "db.sqlite", *flags)
    else:
        argv = policy_argv("syn", checkpoint_root, *flags)
    run = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    (last,) = run.stderr.strip().splitlines()[-1:]
    assert "gRPC refused the TLS certificate or key" in last and "port is taken" not in last, run.stderr


@pytest.mark.parametrize("server", ["scheduler", "inference-server"])
def test_reflection_needs_the_token_and_health_does_not(server, secrets, started, checkpoint_root, tmp_path):
    flags = ("--token-file", str(secrets.token_file))
    if server == "scheduler":
        argv, service = scheduler_argv(tmp_path / "db.sqlite", *flags), "evalfleet.v1.Scheduler"
    else:
        argv, service = policy_argv("syn", checkpoint_root, *flags), "evalfleet.v1.Policy"
    process = start_service(started, argv, tmp_path / f"{server}.log", None)

    def list_services(token: str | None) -> set[str]:
        with grpc.insecure_channel(process.address) as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            (reply,) = stub.ServerReflectionInfo(iter([request]), metadata=bearer_metadata(token), timeout=10)
            return {entry.name for entry in reply.list_services_response.service}

    for token in (None, "wrong"):
        with pytest.raises(grpc.RpcError) as refused:
            list_services(token)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert {service, "grpc.health.v1.Health"} <= list_services(TOKEN)
    with grpc.insecure_channel(process.address) as channel:
        for name in ("", service):
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


# -- a worker over TLS to both servers ---------------------------------------------------------


def test_a_worker_runs_episodes_over_tls_to_both_servers_with_a_token(secrets, started, checkpoint_root, tmp_path):
    scheduler = start_service(
        started, scheduler_argv(tmp_path / "db.sqlite", *secrets.server_flags()), tmp_path / "sched.log", secrets.ca
    )
    policy = start_service(
        started, policy_argv("syn", checkpoint_root, *secrets.server_flags()), tmp_path / "policy.log", secrets.ca
    )
    token_flags = ("--token-file", str(secrets.token_file))
    manifest = write(build_synthetic(4, seed=3, mean_seconds=0.5), tmp_path)
    submit = ("submit", "--server", scheduler.address, *token_flags, "--tls-ca", str(secrets.cert), "--route",
              "synthetic", "--batch-size", "2", "--submission-id", "tls", "--manifest", str(manifest))  # fmt: skip
    # Resolving the checkpoint at a TLS inference server needs its CA: without it, one line, exit 2.
    one_line_refusal(cli(*submit, "--policy-server", policy.address), "--policy-server", "UNAVAILABLE")
    run = cli(*submit, "--policy-server", policy.address, "--policy-tls-ca", str(secrets.cert))
    assert run.returncode == 0, run.stderr

    output = tmp_path / "episodes"
    argv = worker_argv(scheduler.address, [policy.address], "--cpu", *token_flags, "--tls-ca", str(secrets.cert),
                       "--policy-tls-ca", str(secrets.cert), "--output", str(output), "--poll-seconds", "0.2",
                       "--adapter-option", "synthetic.time_scale=0")  # fmt: skip
    worker = ServiceProcess(argv, tmp_path / "worker.log", ready=WORKER_LINE)
    started.append(worker)
    worker.start()

    with SchedulerClient(scheduler.address, TOKEN, tls_ca=secrets.ca) as client:
        wait_settled(client, "tls", timeout=120)
        summary = client.summary("tls")
        assert client.status("tls").tasks.succeeded == 2
    assert summary.complete and summary.episodes_completed == 4
    assert policy_steps_logged(output) > 0  # the episode processes stepped the policy over TLS


def test_a_worker_with_an_unreadable_policy_ca_exits_2_in_one_line(tmp_path):
    missing = tmp_path / "ca.pem"
    argv = worker_argv("127.0.0.1:1", ["127.0.0.1:2"], "--cpu", "--policy-tls-ca", str(missing))
    run = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    one_line_refusal(run, f"--policy-tls-ca {missing}: No such file")
