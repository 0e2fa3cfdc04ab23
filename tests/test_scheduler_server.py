"""Server plumbing: health, reflection (for grpcurl), bearer tokens, TLS, refusing open binds."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from procs import ServiceProcess, cli, scheduler_argv, self_signed_certificate

from benchmarks.synthetic.manifest import build_synthetic
from evalfleet.scheduler_api.client import SchedulerClient
from evalfleet.scheduler_api.errors import Unauthenticated

pytestmark = pytest.mark.timeout(120)


def test_health_and_reflection(scheduler):
    with grpc.insecure_channel(scheduler.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "evalfleet.v1.Scheduler"):
            response = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert response.status == health_pb2.HealthCheckResponse.SERVING
        services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
    assert {"evalfleet.v1.Scheduler", "grpc.health.v1.Health"} <= services


GRPCURL = shutil.which("grpcurl", path=str(Path(sys.executable).parent)) or shutil.which("grpcurl")


@pytest.mark.skipif(GRPCURL is None, reason="grpcurl is installed by the test extra on x86_64 only")
def test_grpcurl_diagnostics(scheduler):
    """What an operator types: list services through reflection, then call one."""
    client = scheduler.client()
    client.submit([build_synthetic(3, seed=1)], "synthetic", submission_id="curl")
    listed = subprocess.run(
        [GRPCURL, "-plaintext", scheduler.address, "list"], capture_output=True, text=True, timeout=30
    )
    assert "evalfleet.v1.Scheduler" in listed.stdout.split(), listed.stderr
    called = subprocess.run(
        [
            GRPCURL,
            "-plaintext",
            "-d",
            '{"submission_id": "curl"}',
            scheduler.address,
            "evalfleet.v1.Scheduler/GetStatus",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert called.returncode == 0, called.stderr
    assert '"pending": 1' in called.stdout


def test_bearer_token_required(start_scheduler, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    scheduler = start_scheduler("--token-file", str(token_file))
    manifest = build_synthetic(2, seed=1)
    for token in (None, "wrong"):
        with pytest.raises(Unauthenticated):
            SchedulerClient(scheduler.address, token).submit([manifest], "synthetic", submission_id="t")
    with SchedulerClient(scheduler.address, "s3cret") as client:
        assert client.submit([manifest], "synthetic", submission_id="t").tasks_total == 1
    run = cli("status", "--server", scheduler.address)
    assert run.returncode == 2 and "UNAUTHENTICATED" in run.stderr
    run = cli("status", "--json", "--server", scheduler.address, "--token-file", str(token_file))
    assert run.returncode == 0, run.stderr


def test_binding_beyond_loopback_needs_a_token(tmp_path):
    run = cli("serve", "--db", str(tmp_path / "db.sqlite"), "--host", "0.0.0.0", "--port", "0")
    assert run.returncode == 2 and "--token-file" in run.stderr
    assert not (tmp_path / "db.sqlite").exists()


def test_tls(tmp_path):
    key, cert = self_signed_certificate(tmp_path, "localhost")
    argv = scheduler_argv(tmp_path / "db.sqlite", "--host", "localhost", "--tls-cert", str(cert), "--tls-key", str(key))
    server = ServiceProcess(argv, tmp_path / "tls.log").start()
    try:
        address = f"localhost:{server.port}"
        with SchedulerClient(address, tls_ca=cert.read_bytes()) as client:
            assert client.submit([build_synthetic(1, seed=1)], "synthetic", submission_id="tls").tasks_total == 1
        run = cli("status", "--json", "--server", address, "--tls-ca", str(cert))
        assert run.returncode == 0, run.stderr
        with grpc.insecure_channel(address) as channel:
            with pytest.raises(grpc.RpcError):
                health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=3)
    finally:
        server.kill()


def test_sigterm_stops_cleanly(start_scheduler):
    scheduler = start_scheduler()
    assert scheduler.terminate() == 0
