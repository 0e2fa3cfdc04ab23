"""`scheduler serve`: the gRPC server process around the store.

It opens the database (WAL), starts the group-commit writer, serves `evalfleet.v1.Scheduler` with
health and reflection, and reclaims expired leases on a timer. On SIGTERM or SIGINT it stops
accepting calls, finishes the writes in flight, and closes the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sqlite3
import ssl
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from evalfleet.auth import BearerTokenInterceptor
from evalfleet.ports import bind, tls_credentials
from evalfleet.scheduler_api.limits import MAX_MESSAGE_BYTES
from evalfleet.v1 import scheduler_pb2, scheduler_pb2_grpc
from evalfleet.wire import MalformedRequestInterceptor
from scheduler.artifacts import ArtifactLimits, ArtifactStore, default_root
from scheduler.dashboard import Dashboard
from scheduler.operations import Operations
from scheduler.readers import Readers
from scheduler.service import SchedulerService
from scheduler.store import artifacts, schema
from scheduler.writer import GroupCommitWriter, StorageFull, is_disk_full

log = logging.getLogger(__name__)

SERVICE_NAME = scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"].full_name


@dataclass(frozen=True)
class ServeConfig:
    db_path: Path
    host: str = "127.0.0.1"
    port: int = 50051
    lease_seconds: float = 60.0
    synchronous: str = "NORMAL"
    token: str | None = None
    tls_cert: bytes | None = None
    tls_key: bytes | None = None
    # The dashboard, its JSON API and /metrics over HTTP on the same host; None: off.
    http_port: int | None = None
    # Episode artifacts: where their files live (None: ``<db>.artifacts`` beside the database), and
    # how much the store accepts.
    artifacts_dir: Path | None = None
    artifact_limits: ArtifactLimits = ArtifactLimits()


class SchedulerServer:
    """The running server; ``start`` returns once it accepts calls and reports its bound port."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        conn = schema.open_database(config.db_path, synchronous=config.synchronous)
        self.artifacts = ArtifactStore(config.artifacts_dir or default_root(config.db_path), artifacts.store_id(conn))
        removed, freed = self.artifacts.sweep(artifacts.stored_files(conn))
        if removed:
            log.info(
                "artifact store: removed %d file(s), %d bytes, left by an interrupted upload or gc", removed, freed
            )
        self.writer = GroupCommitWriter(conn)
        self.readers = Readers(config.db_path)
        self.operations = Operations(self.writer)
        self.service = SchedulerService(
            self.writer, self.readers, self.operations, config.lease_seconds, self.artifacts, config.artifact_limits
        )
        # Authentication first; unparseable request bytes are INVALID_ARGUMENT (evalfleet.wire).
        interceptors: list[grpc.aio.ServerInterceptor] = [BearerTokenInterceptor(config.token)] if config.token else []
        interceptors.append(MalformedRequestInterceptor())
        self.server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                # gRPC binds with SO_REUSEPORT by default: a second scheduler on the same port would
                # start, and share the clients with this one over another database.
                ("grpc.so_reuseport", 0),
            ],
        )
        scheduler_pb2_grpc.add_SchedulerServicer_to_server(self.service, self.server)
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server)
        self.port = 0
        self.http_port = 0
        self.dashboard: Dashboard | None = None
        self._reaper: asyncio.Task[None] | None = None

    async def start(self) -> int:
        address = f"{self.config.host}:{self.config.port}"
        self.port = bind(self.server, address, tls_credentials(self.config.tls_cert, self.config.tls_key))
        self.writer.start()
        renewed = await self.service.renew_held_leases()
        if renewed:
            log.info(
                "renewed %d lease(s) held when the scheduler stopped: %gs to heartbeat again",
                len(renewed),
                self.config.lease_seconds,
            )
        await self.server.start()
        for name in ("", SERVICE_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._reaper = asyncio.create_task(self._reap_forever())
        if self.config.http_port is not None:
            self.dashboard = Dashboard(
                self.operations,
                self.readers,
                self.config.lease_seconds,
                asyncio.get_running_loop(),
                self.config.host,
                self.config.http_port,
                self.config.token,
                self.service.metrics.exposition,
                _tls_context(self.config.tls_cert, self.config.tls_key),
                self.artifacts,
            )
            self.http_port = self.dashboard.start()
        return self.port

    async def _reap_forever(self) -> None:
        """Reclaims expired leases, and checkpoints the WAL, on one timer.

        Each goes on while the other fails. On a full disk reaping is refused like every write (the
        writer logs it once), heartbeats too, so the first reaping after it renews the held leases
        first, as a restart does: the outage costs the workers no attempt. The checkpoint fails
        while the database file cannot grow; once there is room it empties the WAL, whose space
        the writer then reuses.
        """
        interval = min(1.0, self.config.lease_seconds / 4)
        reaping_refused = checkpoint_waits = False
        while True:
            # While the checkpoint waits for room, it is retried often: once there is room, every
            # write appends to the WAL until a checkpoint lets it start over, and a burst of retried
            # writes could fill the room again first.
            await asyncio.sleep(min(interval, 0.1) if checkpoint_waits else interval)
            try:
                if reaping_refused:
                    renewed = await self.service.renew_held_leases()
                    log.info("renewed %d lease(s) held while the disk was full", len(renewed))
                expired = await self.service.reap_expired()
            except StorageFull:
                reaping_refused, expired = True, []
            except Exception:
                log.exception("lease reaper failed; retrying")
                expired = []
            else:
                reaping_refused = False
            if expired:
                log.info("lease expired: %s", ", ".join(expired))
            try:
                await self.readers.checkpoint_wal()
            except sqlite3.Error as exc:
                if not is_disk_full(exc):
                    log.exception("WAL checkpoint failed; retrying")
                elif not checkpoint_waits:
                    log.warning("the WAL checkpoint waits for room on the disk of %s", self.config.db_path)
                checkpoint_waits = is_disk_full(exc)
            else:
                checkpoint_waits = False

    async def stop(self, grace: float = 5.0) -> None:
        await self.health.enter_graceful_shutdown()
        if self.dashboard is not None:
            await asyncio.to_thread(self.dashboard.stop)
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        await self.server.stop(grace)
        self.writer.stop()
        self.readers.close()


def _tls_context(cert: bytes | None, key: bytes | None) -> ssl.SSLContext | None:
    """The HTTP side's TLS context from the gRPC side's PEM bytes (ssl loads chains from files only)."""
    if not (cert and key):
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory() as folder:
        cert_path, key_path = Path(folder) / "cert.pem", Path(folder) / "key.pem"
        cert_path.write_bytes(cert)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        context.load_cert_chain(cert_path, key_path)
    return context


async def serve(config: ServeConfig) -> None:
    """Runs until SIGTERM or SIGINT. Prints one line with the bound address once serving."""
    server = SchedulerServer(config)
    port = await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"scheduler listening on {config.host}:{port} (db {config.db_path})", flush=True)
    if server.dashboard is not None:
        print(f"dashboard on {server.dashboard.scheme}://{config.host}:{server.http_port}/", flush=True)
    await stop.wait()
    print("scheduler stopping", file=sys.stderr, flush=True)
    await server.stop()
