"""The `evalfleet.v1.Scheduler` gRPC service: request validation and mapping onto the store.

Handlers check every field before anything touches the database, so a bad request gets a status
code and a message naming the field and changes nothing. Writes go through the group-commit writer;
reads run on their own connections in a thread pool (``scheduler.readers``) so they never wait
behind writes. The operator actions (Cancel, Requeue, SetPriority) are ``scheduler.operations``,
shared with the dashboard.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError

from evalfleet.scheduler_api.errors import InvalidArgument, NotFound, ResourceExhausted, SchedulerError
from evalfleet.scheduler_api.limits import (
    ARTIFACT_CHUNK_BYTES,
    DEFAULT_LIST_TASKS,
    MAX_ATTEMPTS,
    MAX_BATCH_EPISODES,
    MAX_CHECKPOINT_CHARS,
    MAX_LIST_TASKS,
    MAX_MANIFEST_BYTES,
    MAX_REMOTE_DIALECT_BYTES,
    MAX_REMOTE_URL_BYTES,
    MAX_SHORT_TEXT_BYTES,
    MAX_TEXT_BYTES,
)
from evalfleet.scheduler_api.vocabulary import TASK_STATES
from evalfleet.v1 import scheduler_pb2 as pb
from evalfleet.v1 import scheduler_pb2_grpc as pb_grpc
from manifests.format import is_hash
from scheduler.artifacts import ArtifactLimits, ArtifactStore
from scheduler.metrics import SchedulerMetrics
from scheduler.operations import Operations
from scheduler.readers import Readers
from scheduler.store import artifacts, leases, queries
from scheduler.store import operations as store_operations
from scheduler.store.validation import (
    check_artifact_kind,
    check_execute_steps,
    check_id,
    check_json_object,
    check_media_type,
    check_priority,
    check_worker_id,
)
from scheduler.writer import GroupCommitWriter

log = logging.getLogger(__name__)

T = TypeVar("T")


def _handler(method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Counts the call by method, and turns typed scheduler errors into their status code, with the
    error kind in trailers."""

    @functools.wraps(method)
    async def wrapper(self: SchedulerService, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> T:
        self.metrics.requests.labels(method.__name__).inc()
        try:
            return await method(self, request, context)
        except SchedulerError as exc:
            await context.abort(exc.code, str(exc), trailing_metadata=exc.trailing_metadata())
            raise  # unreachable: abort raises

    return wrapper


def _failure_reason(reason: int) -> int:
    """A reason a worker may give: a defined FailureReason other than the scheduler's own."""
    if reason not in pb.FailureReason.values():
        raise InvalidArgument(f"{reason} is not a FailureReason", field="reason")
    if reason == pb.FAILURE_REASON_LEASE_EXPIRED:
        raise InvalidArgument("FAILURE_REASON_LEASE_EXPIRED is set by the scheduler only", field="reason")
    return reason


def _lease_ref(ref: pb.LeaseRef, field: str = "lease") -> tuple[str, int]:
    if not ref.task_id:
        raise InvalidArgument("is required", field=f"{field}.task_id")
    if ref.fencing_token < 1:
        raise InvalidArgument("must be >= 1 (as returned by Claim)", field=f"{field}.fencing_token")
    return ref.task_id, ref.fencing_token


def _text(value: str, field: str, limit: int = MAX_TEXT_BYTES) -> str:
    if len(value.encode("utf-8")) > limit:
        raise InvalidArgument(f"larger than {limit} bytes", field=field)
    return value


def _episode_result(result: pb.EpisodeResult, field: str) -> pb.EpisodeResult:
    if not math.isfinite(result.wall_seconds) or result.wall_seconds < 0:
        raise InvalidArgument("must be a finite number >= 0", field=f"{field}.wall_seconds")
    _text(result.trace_digest, f"{field}.trace_digest", MAX_SHORT_TEXT_BYTES)
    check_json_object(result.info_json, f"{field}.info_json")
    if result.HasField("execute_steps"):
        check_execute_steps(result.execute_steps, f"{field}.execute_steps")
    if result.HasField("remote"):
        _text(result.remote.dialect, f"{field}.remote.dialect", MAX_REMOTE_DIALECT_BYTES)
        _text(result.remote.url, f"{field}.remote.url", MAX_REMOTE_URL_BYTES)
        _text(result.remote.handshake_sha256, f"{field}.remote.handshake_sha256", MAX_SHORT_TEXT_BYTES)
    return result


def _checkpoint(value: str, field: str) -> str:
    if len(value) > MAX_CHECKPOINT_CHARS or any(c.isspace() for c in value):
        raise InvalidArgument(f"must be at most {MAX_CHECKPOINT_CHARS} characters without spaces", field=field)
    return value


class SchedulerService(pb_grpc.SchedulerServicer):
    def __init__(
        self,
        writer: GroupCommitWriter,
        readers: Readers,
        operations: Operations,
        lease_seconds: float,
        artifact_store: ArtifactStore,
        artifact_limits: ArtifactLimits,
    ) -> None:
        self.instance_id = uuid.uuid4().hex
        self.lease_seconds = lease_seconds
        self._writer = writer
        self._readers = readers
        self._operations = operations
        self._artifacts = artifact_store
        self._artifact_limits = artifact_limits
        # Bytes of uploads in flight, counted against the total limit before they are stored.
        self._artifact_bytes_reserved = 0
        # Renaming a file into the store and naming it in the database, or collecting files and
        # deleting them, happen one at a time: a file is never deleted under an upload naming it.
        self._artifact_files_lock = asyncio.Lock()
        self.metrics = SchedulerMetrics(readers.run_blocking, lease_seconds)

    async def renew_held_leases(self) -> list[str]:
        deadline = time.time() + self.lease_seconds
        return await self._writer.run(lambda conn: leases.renew_held_leases(conn, deadline))

    async def reap_expired(self) -> list[str]:
        now = time.time()
        expired = await self._writer.run(lambda conn: leases.reap_expired(conn, now))
        self.metrics.lease_expiries.inc(len(expired))
        return expired

    # Manifests and submissions ----------------------------------------------------------------

    @_handler
    async def PutManifest(self, request: pb.PutManifestRequest, context: Any) -> pb.PutManifestResponse:
        if not request.body:
            raise InvalidArgument("is empty", field="body")
        if len(request.body) > MAX_MANIFEST_BYTES:
            raise InvalidArgument(f"larger than {MAX_MANIFEST_BYTES} bytes", field="body")
        if request.expected_hash and not is_hash(request.expected_hash):
            raise InvalidArgument("must be 64 lowercase hex characters", field="expected_hash")
        now = time.time()
        stored = await self._writer.run(
            lambda conn: store_operations.put_manifest(conn, request.body, request.expected_hash, now)
        )
        return pb.PutManifestResponse(hash=stored.hash, created=stored.created)

    @_handler
    async def GetManifest(self, request: pb.GetManifestRequest, context: Any) -> pb.GetManifestResponse:
        if not is_hash(request.hash):
            raise InvalidArgument("must be 64 lowercase hex characters", field="hash")
        body = await self._readers.run(lambda conn: queries.get_manifest(conn, request.hash))
        return pb.GetManifestResponse(hash=request.hash, body=body)

    @_handler
    async def Submit(self, request: pb.SubmitRequest, context: Any) -> pb.SubmitResponse:
        check_id(request.submission_id, "submission_id")
        if not request.manifest_hashes:
            raise InvalidArgument("at least one manifest is required", field="manifest_hashes")
        for i, manifest_hash in enumerate(request.manifest_hashes):
            if not is_hash(manifest_hash):
                raise InvalidArgument("must be 64 lowercase hex characters", field=f"manifest_hashes[{i}]")
        check_id(request.route, "route")
        if not 1 <= request.batch_size <= MAX_BATCH_EPISODES:
            raise InvalidArgument(f"{request.batch_size} is outside [1, {MAX_BATCH_EPISODES}]", field="batch_size")
        if not 1 <= request.max_attempts <= MAX_ATTEMPTS:
            raise InvalidArgument(f"{request.max_attempts} is outside [1, {MAX_ATTEMPTS}]", field="max_attempts")
        check_priority(request.priority)
        labels = check_json_object(request.labels_json, "labels_json")
        definition = store_operations.SubmissionDefinition(
            manifest_hashes=tuple(request.manifest_hashes),
            route=request.route,
            batch_size=request.batch_size,
            max_attempts=request.max_attempts,
            checkpoint=_checkpoint(request.checkpoint, "checkpoint"),
            execute_steps=(
                check_execute_steps(request.execute_steps, "execute_steps")
                if request.HasField("execute_steps")
                else None
            ),
        )
        now = time.time()
        submitted = await self._writer.run(
            lambda conn: store_operations.submit(conn, request.submission_id, definition, request.priority, labels, now)
        )
        return pb.SubmitResponse(
            submission_id=request.submission_id,
            tasks_created=submitted.tasks_created,
            tasks_total=submitted.tasks_total,
            episodes_total=submitted.episodes_total,
        )

    # Workers and leases -----------------------------------------------------------------------

    @_handler
    async def RegisterWorker(self, request: pb.RegisterWorkerRequest, context: Any) -> pb.RegisterWorkerResponse:
        check_worker_id(request.worker_id)
        for i, route in enumerate(request.routes):
            check_id(route, f"routes[{i}]")
        versions = check_json_object(request.versions_json, "versions_json")
        host = _text(request.host, "host", MAX_SHORT_TEXT_BYTES)
        gpu_uuid = _text(request.gpu_uuid, "gpu_uuid", MAX_SHORT_TEXT_BYTES)
        now = time.time()
        await self._writer.run(
            lambda conn: leases.register_worker(
                conn, request.worker_id, host, gpu_uuid, list(request.routes), versions, now
            )
        )
        return pb.RegisterWorkerResponse(scheduler_instance_id=self.instance_id, lease_seconds=self.lease_seconds)

    @_handler
    async def Claim(self, request: pb.ClaimRequest, context: Any) -> pb.ClaimResponse:
        claim = self._claim(request, "")
        started, now = time.perf_counter(), time.time()
        lease = await self._writer.run(lambda conn: claim(conn, now))
        self.metrics.claimed(started, lease is not None)
        return pb.ClaimResponse(lease=queries.lease_message(lease)) if lease is not None else pb.ClaimResponse()

    def _claim(
        self, request: pb.ClaimRequest, prefix: str
    ) -> Callable[[sqlite3.Connection, float], leases.Lease | None]:
        """Validates a claim and returns it as a write (Claim, and Complete's claim_next)."""
        check_worker_id(request.worker_id, f"{prefix}worker_id")
        if not request.routes:
            raise InvalidArgument("at least one route is required", field=f"{prefix}routes")
        for i, route in enumerate(request.routes):
            check_id(route, f"{prefix}routes[{i}]")
        for i, checkpoint in enumerate(request.checkpoints):
            _checkpoint(checkpoint, f"{prefix}checkpoints[{i}]")
        worker_id, routes, checkpoints = request.worker_id, list(request.routes), list(request.checkpoints)
        return lambda conn, now: leases.claim(conn, worker_id, routes, checkpoints, self.lease_seconds, now)

    @_handler
    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> pb.HeartbeatResponse:
        task_id, token = _lease_ref(request.lease)
        if request.worker_id:
            check_worker_id(request.worker_id)
        now = time.time()
        deadline, cancelled = await self._writer.run(
            lambda conn: leases.heartbeat(conn, task_id, token, request.worker_id, self.lease_seconds, now)
        )
        return pb.HeartbeatResponse(deadline=deadline, cancelled=cancelled)

    @_handler
    async def ReportEpisode(self, request: pb.ReportEpisodeRequest, context: Any) -> pb.ReportEpisodeResponse:
        task_id, token = _lease_ref(request.lease)
        if not request.HasField("result"):
            raise InvalidArgument("is required", field="result")
        result = _episode_result(request.result, "result")
        now = time.time()
        duplicate = await self._writer.run(
            lambda conn: leases.report_episode(conn, task_id, token, result, now, field="result")
        )
        self.metrics.episodes.inc(0 if duplicate else 1)
        return pb.ReportEpisodeResponse(duplicate=duplicate)

    @_handler
    async def Complete(self, request: pb.CompleteRequest, context: Any) -> pb.CompleteResponse:
        task_id, token = _lease_ref(request.lease)
        result = check_json_object(request.result_json, "result_json")
        episodes = [_episode_result(r, f"results[{i}]") for i, r in enumerate(request.results)]
        claim = self._claim(request.claim_next, "claim_next.") if request.HasField("claim_next") else None

        def write(conn: sqlite3.Connection) -> tuple[int, leases.Lease | None]:
            stored = sum(
                not leases.report_episode(conn, task_id, token, episode, now, field=f"results[{i}]")
                for i, episode in enumerate(episodes)
            )
            leases.complete(conn, task_id, token, result, now)
            return stored, claim(conn, now) if claim is not None else None

        started, now = time.perf_counter(), time.time()
        stored, lease = await self._writer.run(write)
        self.metrics.episodes.inc(stored)
        if claim is not None:
            self.metrics.claimed(started, lease is not None)
        return pb.CompleteResponse(next=queries.lease_message(lease)) if lease is not None else pb.CompleteResponse()

    @_handler
    async def Fail(self, request: pb.FailRequest, context: Any) -> pb.FailResponse:
        task_id, token = _lease_ref(request.lease)
        error = _text(request.error, "error")
        reason = _failure_reason(request.reason)
        now = time.time()
        state = await self._writer.run(
            lambda conn: leases.fail(conn, task_id, token, error, request.retryable, now, reason)
        )
        if state == "pending":
            self.metrics.retries.inc()
        return pb.FailResponse(state=TASK_STATES[state])

    @_handler
    async def Release(self, request: pb.ReleaseRequest, context: Any) -> pb.ReleaseResponse:
        task_id, token = _lease_ref(request.lease)
        reason = _text(request.reason, "reason")
        now = time.time()
        await self._writer.run(lambda conn: leases.release(conn, task_id, token, reason, now))
        return pb.ReleaseResponse()

    # Reads --------------------------------------------------------------------------------------

    @_handler
    async def GetStatus(self, request: pb.GetStatusRequest, context: Any) -> pb.GetStatusResponse:
        if request.submission_id:
            check_id(request.submission_id, "submission_id")
        return await self._readers.run(lambda conn: queries.status(conn, request.submission_id))

    @_handler
    async def GetSummary(self, request: pb.GetSummaryRequest, context: Any) -> pb.GetSummaryResponse:
        check_id(request.submission_id, "submission_id")
        include = request.include_episodes
        return await self._readers.run(lambda conn: queries.summary(conn, request.submission_id, include))

    @_handler
    async def ListTasks(self, request: pb.ListTasksRequest, context: Any) -> pb.ListTasksResponse:
        if request.limit > MAX_LIST_TASKS:
            raise InvalidArgument(f"{request.limit} is above {MAX_LIST_TASKS}", field="limit")
        limit = request.limit or DEFAULT_LIST_TASKS
        return await self._readers.run(lambda conn: queries.list_tasks(conn, request.selector, limit))

    @_handler
    async def ListWorkers(self, request: pb.ListWorkersRequest, context: Any) -> pb.ListWorkersResponse:
        now = time.time()
        return await self._readers.run(lambda conn: queries.list_workers(conn, self.lease_seconds, now))

    @_handler
    async def GetTask(self, request: pb.GetTaskRequest, context: Any) -> pb.GetTaskResponse:
        if not request.task_id:
            raise InvalidArgument("is required", field="task_id")
        _text(request.task_id, "task_id", MAX_SHORT_TEXT_BYTES)
        return await self._readers.run(lambda conn: queries.get_task(conn, request.task_id))

    # Operations: shared with the dashboard (scheduler.operations) -------------------------------

    @_handler
    async def Cancel(self, request: pb.CancelRequest, context: Any) -> pb.ChangeResponse:
        return pb.ChangeResponse(changed=await self._operations.cancel(request.selector))

    @_handler
    async def Requeue(self, request: pb.RequeueRequest, context: Any) -> pb.ChangeResponse:
        return pb.ChangeResponse(changed=await self._operations.requeue(request.selector))

    @_handler
    async def SetPriority(self, request: pb.SetPriorityRequest, context: Any) -> pb.ChangeResponse:
        return pb.ChangeResponse(changed=await self._operations.set_priority(request.selector, request.priority))

    # Artifacts --------------------------------------------------------------------------------

    @_handler
    async def UploadArtifact(self, request_iterator: Any, context: Any) -> pb.UploadArtifactResponse:
        first = await _read_upload(context)
        if first is None or not first.HasField("header"):
            raise InvalidArgument("the first message must be the header", field="header")
        header = first.header
        task_id, token = _lease_ref(header.lease, "header.lease")
        upload = artifacts.Upload(
            task_id=task_id,
            episode_index=header.episode_index,
            fencing_token=token,
            kind=check_artifact_kind(header.kind, "header.kind"),
            media_type=check_media_type(header.media_type, "header.media_type"),
            sha256=_sha256(header.sha256, "header.sha256"),
            size=header.size_bytes,
        )
        # Refused before any byte is received: a stale lease stores nothing.
        await self._readers.run(lambda conn: artifacts.check_upload(conn, task_id, token, upload.episode_index))
        limits = self._artifact_limits
        if upload.size > limits.per_artifact_bytes:
            raise ResourceExhausted(
                f"{upload.size} bytes is above the limit per artifact, {limits.per_artifact_bytes} bytes"
                " (scheduler serve --max-artifact-bytes)",
                field="header.size_bytes",
            )
        # Reserved before the stored total is read, so that uploads arriving together cannot all pass.
        self._artifact_bytes_reserved += upload.size
        try:
            stored = await self._readers.run(artifacts.stored_bytes)
            if stored + self._artifact_bytes_reserved > limits.total_bytes:
                raise ResourceExhausted(
                    f"storing {upload.size} more bytes would pass the limit on all artifacts,"
                    f" {limits.total_bytes} bytes ({stored} stored,"
                    f" {self._artifact_bytes_reserved - upload.size} being uploaded;"
                    " scheduler serve --max-artifacts-total-bytes, or free space with scheduler gc)",
                    field="header.size_bytes",
                )
            return await self._receive(upload, context)
        finally:
            self._artifact_bytes_reserved -= upload.size

    async def _receive(self, upload: artifacts.Upload, context: Any) -> pb.UploadArtifactResponse:
        """Receives the chunks into a temporary file, verifies it, then stores and names it."""
        with self._artifacts.receive(upload.sha256, upload.size) as incoming:
            while (message := await _read_upload(context)) is not None:
                if not message.HasField("chunk"):
                    raise InvalidArgument("only the first message may be a header", field="header")
                incoming.write(message.chunk)
            incoming.verify()
            async with self._artifact_files_lock:
                known = await self._readers.run(lambda conn: artifacts.has_file(conn, upload.sha256))
                await asyncio.to_thread(incoming.commit)
                now = time.time()
                try:
                    artifact, created = await self._writer.run(lambda conn: artifacts.record_upload(conn, upload, now))
                except SchedulerError:
                    if not known:  # refused meanwhile (the lease moved on): keep no unnamed file
                        self._artifacts.delete(upload.sha256)
                    raise
        return pb.UploadArtifactResponse(artifact=artifact, created=created)

    @_handler
    async def GetArtifact(self, request: pb.GetArtifactRequest, context: Any) -> None:
        sha256 = _sha256(request.sha256, "sha256")
        row = await self._readers.run(lambda conn: artifacts.stored_file(conn, sha256))
        try:
            file = self._artifacts.open(sha256)
        except FileNotFoundError:  # collected between the lookup and here
            raise NotFound(
                f"artifact {sha256} was collected (scheduler gc): its bytes are gone", field="sha256"
            ) from None
        with file:
            first = True
            while True:
                data = await asyncio.to_thread(file.read, ARTIFACT_CHUNK_BYTES)
                if not data and not first:
                    return
                if first:
                    await context.write(
                        pb.ArtifactChunk(data=data, size_bytes=row["size"], media_type=row["media_type"])
                    )
                    first = False
                else:
                    await context.write(pb.ArtifactChunk(data=data))

    @_handler
    async def CollectArtifacts(self, request: pb.CollectArtifactsRequest, context: Any) -> pb.CollectArtifactsResponse:
        check_id(request.submission_id, "submission_id")
        now = time.time()
        async with self._artifact_files_lock:
            collected = await self._writer.run(
                lambda conn: artifacts.collect(conn, request.submission_id, request.force, now)
            )
            for sha256, _ in collected.files:
                self._artifacts.delete(sha256)
        return pb.CollectArtifactsResponse(
            artifacts_collected=collected.artifacts,
            files_deleted=len(collected.files),
            bytes_freed=sum(size for _, size in collected.files),
        )


def _sha256(value: str, field: str) -> str:
    if not is_hash(value):
        raise InvalidArgument("must be 64 lowercase hex characters (a sha256)", field=field)
    return value


async def _read_upload(context: Any) -> pb.UploadArtifactRequest | None:
    """The next message of an upload, None once the client is done; unparseable bytes are the
    client's error, not grpc's UNKNOWN."""
    try:
        message: object = await context.read()
    except DecodeError as exc:
        raise InvalidArgument(f"message does not parse: {exc}", field="part") from None
    return message if isinstance(message, pb.UploadArtifactRequest) else None
