"""Python API for the scheduler: what the CLI, the renderer worker and scripts use.

Calls raise the typed errors of ``evalfleet.scheduler_api.errors`` (``StaleLease``, ``NotFound``, ...) rather
than raw ``grpc.RpcError``. Wire types are the generated protobuf messages: ``claim`` returns an
``evalfleet.v1.Lease`` (``task_id``, ``attempt``, ``fencing_token``, ``manifest_hash``,
``episodes``), status and summary return their response messages.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, BinaryIO

import grpc

from evalfleet.auth import bearer_metadata
from evalfleet.channels import channel_options, open_channel
from evalfleet.scheduler_api.errors import from_rpc_error
from evalfleet.scheduler_api.limits import ARTIFACT_CHUNK_BYTES, MAX_MESSAGE_BYTES, MAX_TEXT_BYTES
from evalfleet.scheduler_api.vocabulary import task_state, task_state_name
from evalfleet.v1 import scheduler_pb2 as pb
from evalfleet.v1 import scheduler_pb2_grpc as pb_grpc
from manifests.format import Manifest

DEFAULT_ADDRESS = "127.0.0.1:50051"
ADDRESS_ENV = "EVALFLEET_SCHEDULER"

Lease = pb.Lease


def default_address() -> str:
    return os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS


def new_submission_id() -> str:
    """A readable, unique id, made on the client so that a retried Submit stays idempotent."""
    return time.strftime("s%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(3)


def selector(
    submission_id: str = "",
    task_ids: Iterable[str] = (),
    route: str = "",
    states: Iterable[str] = (),
) -> pb.TaskSelector:
    """Builds a task selector; states are names such as ``"failed"``."""
    return pb.TaskSelector(
        submission_id=submission_id,
        task_ids=list(task_ids),
        route=route,
        states=[task_state(state) for state in states],
    )


class SchedulerClient:
    def __init__(
        self,
        address: str | None = None,
        token: str | None = None,
        *,
        tls_ca: bytes | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.address = address or default_address()
        # A worker must be back within a lease period of the scheduler's return, so it tries to
        # reconnect at least every 2 s.
        options = channel_options(MAX_MESSAGE_BYTES, max_reconnect_backoff_ms=2000)
        self._channel = open_channel(self.address, options, tls_ca)
        self._stub = pb_grpc.SchedulerStub(self._channel)
        self._metadata = bearer_metadata(token)
        self.timeout = timeout

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> SchedulerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, request: Any, timeout: float | None = None) -> Any:
        """The response message of ``method`` (the generated stub is untyped: callers annotate it)."""
        try:
            return getattr(self._stub, method)(request, timeout=timeout or self.timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Blocks until the channel connects (e.g. while the scheduler restarts)."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise TimeoutError(f"scheduler at {self.address} not reachable within {timeout}s") from None

    # Manifests and submissions ----------------------------------------------------------------

    def put_manifest(self, manifest: Manifest | bytes) -> str:
        body = manifest.body if isinstance(manifest, Manifest) else manifest
        expected = manifest.hash if isinstance(manifest, Manifest) else ""
        response: pb.PutManifestResponse = self._call(
            "PutManifest", pb.PutManifestRequest(body=body, expected_hash=expected)
        )
        return response.hash

    def get_manifest(self, manifest_hash: str) -> bytes:
        response: pb.GetManifestResponse = self._call("GetManifest", pb.GetManifestRequest(hash=manifest_hash))
        return response.body

    def submit(
        self,
        manifests: Sequence[Manifest | str],
        route: str,
        *,
        batch_size: int = 5,
        max_attempts: int = 3,
        priority: int = 0,
        submission_id: str | None = None,
        checkpoint: str = "",
        labels: Mapping[str, Any] | None = None,
        execute_steps: int | None = None,
        spec_json: str = "",
        canary: pb.CanarySettings | None = None,
        sequential: pb.SequentialSettings | None = None,
        max_leased_tasks: int = 0,
    ) -> pb.SubmitResponse:
        """Uploads the manifests (by value) or refers to stored ones (by hash), then submits.

        ``execute_steps`` overrides the actions per chunk the checkpoint declares (0: the whole
        chunk); None leaves it to the checkpoint. ``spec_json`` is the evaluation spec the
        submission came from (scheduler.spec's canonical form), kept with it; ``canary`` the
        broken-setup canary's settings (None: no canary); ``sequential`` makes it a sequential
        evaluation (its dispatch seed and stopping rule; None: it runs to the end in given order);
        ``max_leased_tasks`` caps its tasks leased at once (0: none)."""
        hashes = [self.put_manifest(m) if isinstance(m, Manifest) else m for m in manifests]
        request = pb.SubmitRequest(
            submission_id=submission_id or new_submission_id(),
            manifest_hashes=hashes,
            route=route,
            batch_size=batch_size,
            max_attempts=max_attempts,
            priority=priority,
            checkpoint=checkpoint,
            labels_json=json.dumps(dict(labels or {})),
            execute_steps=execute_steps,
            spec_json=spec_json,
            canary=canary,
            sequential=sequential,
            max_leased_tasks=max_leased_tasks,
        )
        response: pb.SubmitResponse = self._call("Submit", request)
        return response

    # Worker side ------------------------------------------------------------------------------

    def register_worker(
        self,
        worker_id: str,
        routes: Sequence[str],
        *,
        host: str = "",
        gpu_uuid: str = "",
        versions: Mapping[str, Any] | None = None,
        stacks: Sequence[str] = (),
    ) -> pb.RegisterWorkerResponse:
        request = pb.RegisterWorkerRequest(
            worker_id=worker_id,
            host=host,
            gpu_uuid=gpu_uuid,
            routes=list(routes),
            versions_json=json.dumps(dict(versions or {})),
            stacks=list(stacks),
        )
        response: pb.RegisterWorkerResponse = self._call("RegisterWorker", request)
        return response

    def claim(
        self, worker_id: str, routes: Sequence[str], checkpoints: Sequence[str] = (), stacks: Sequence[str] = ()
    ) -> Lease | None:
        """The next task on ``routes`` that needs no checkpoint or one of ``checkpoints``, and no
        simulator stack or one of ``stacks``; None when there is none."""
        response: pb.ClaimResponse = self._call("Claim", claim_request(worker_id, routes, checkpoints, stacks))
        return response.lease if response.HasField("lease") else None

    def heartbeat(self, lease: Lease, worker_id: str = "") -> pb.HeartbeatResponse:
        response: pb.HeartbeatResponse = self._call(
            "Heartbeat", pb.HeartbeatRequest(lease=_ref(lease), worker_id=worker_id)
        )
        return response

    def report_episode(
        self,
        lease: Lease,
        index: int,
        success: bool,
        *,
        steps: int = 0,
        wall_seconds: float = 0.0,
        trace_digest: str = "",
        info: Mapping[str, Any] | None = None,
        execute_steps: int | None = None,
        remote: pb.RemotePolicy | None = None,
    ) -> bool:
        """Stores one episode's result (built by ``episode_result``); returns True when it had been
        stored already."""
        result = episode_result(
            index,
            success,
            steps=steps,
            wall_seconds=wall_seconds,
            trace_digest=trace_digest,
            info=info,
            execute_steps=execute_steps,
            remote=remote,
        )
        return self.report_result(lease, result)

    def report_result(self, lease: Lease, result: pb.EpisodeResult) -> bool:
        """Stores one episode's result as ``Complete`` would carry it (see ``episode_result``);
        returns True when it had been stored already."""
        response: pb.ReportEpisodeResponse = self._call(
            "ReportEpisode", pb.ReportEpisodeRequest(lease=_ref(lease), result=result)
        )
        return response.duplicate

    def complete(
        self,
        lease: Lease,
        result: Mapping[str, Any] | None = None,
        *,
        episodes: Sequence[pb.EpisodeResult] = (),
        claim_next: pb.ClaimRequest | None = None,
    ) -> Lease | None:
        """Completes the task, storing ``episodes`` (see ``episode_result``) with it in one write.

        With ``claim_next`` (see ``claim_request``) the next lease comes back in the same round
        trip; returns it, or None.
        """
        request = pb.CompleteRequest(
            lease=_ref(lease),
            result_json=json.dumps(dict(result)) if result else "",
            results=list(episodes),
            claim_next=claim_next,
        )
        response: pb.CompleteResponse = self._call("Complete", request)
        return response.next if response.HasField("next") else None

    def fail(
        self,
        lease: Lease,
        error: str,
        retryable: bool = True,
        *,
        reason: pb.FailureReason = pb.FAILURE_REASON_UNSPECIFIED,
    ) -> str:
        """Ends the attempt as an infrastructure failure for ``reason``; returns the task's new state name.

        ``error`` is the message people read; the scheduler stores it as "[reason] error".
        """
        request = pb.FailRequest(lease=_ref(lease), error=clip_text(error), retryable=retryable, reason=reason)
        response: pb.FailResponse = self._call("Fail", request)
        return task_state_name(response.state)

    def release(self, lease: Lease, reason: str = "") -> None:
        self._call("Release", pb.ReleaseRequest(lease=_ref(lease), reason=clip_text(reason)))

    def upload_artifact(
        self,
        lease: Lease,
        episode_index: int,
        path: str | os.PathLike[str],
        kind: str,
        media_type: str,
        *,
        chunk_bytes: int = ARTIFACT_CHUNK_BYTES,
        timeout: float | None = None,
    ) -> pb.UploadArtifactResponse:
        """Uploads one file an episode produced, under the lease that ran it, in chunks.

        The file is read twice (its sha256 first, then its bytes), never held in memory whole. The
        scheduler lists it on the episode once the lease's result for it is stored, and refuses it
        when the lease is stale (``StaleLease``), the file is too large (``ResourceExhausted``) or
        the bytes changed between the two reads (``InvalidArgument``).
        """
        digest, size = file_sha256(path, chunk_bytes)
        header = pb.ArtifactHeader(
            lease=_ref(lease),
            episode_index=episode_index,
            kind=kind,
            media_type=media_type,
            size_bytes=size,
            sha256=digest,
        )

        def messages() -> Iterator[pb.UploadArtifactRequest]:
            yield pb.UploadArtifactRequest(header=header)
            with open(path, "rb") as file:
                while chunk := file.read(chunk_bytes):
                    yield pb.UploadArtifactRequest(chunk=chunk)

        response: pb.UploadArtifactResponse = self._call("UploadArtifact", messages(), timeout)
        return response

    def download_artifact(self, sha256: str, out: BinaryIO) -> int:
        """Writes a stored artifact's bytes to ``out`` as they arrive; returns how many. The bytes
        are checked against ``sha256`` (``ValueError`` when they differ)."""
        digest, written = hashlib.sha256(), 0
        try:
            for chunk in self._stub.GetArtifact(
                pb.GetArtifactRequest(sha256=sha256), timeout=self.timeout, metadata=self._metadata
            ):
                digest.update(chunk.data)
                out.write(chunk.data)
                written += len(chunk.data)
        except grpc.RpcError as error:
            raise from_rpc_error(error) from None
        if digest.hexdigest() != sha256:
            raise ValueError(f"artifact {sha256}: the scheduler sent bytes that hash to {digest.hexdigest()}")
        return written

    def collect_artifacts(self, submission_id: str, *, force: bool = False) -> pb.CollectArtifactsResponse:
        """Frees the space of a finished submission's artifacts (``force``: also an unfinished one)."""
        response: pb.CollectArtifactsResponse = self._call(
            "CollectArtifacts", pb.CollectArtifactsRequest(submission_id=submission_id, force=force)
        )
        return response

    # Reads and operations ---------------------------------------------------------------------

    def pause(self, submission_id: str, paused: bool = True) -> bool:
        """Holds a submission's pending tasks back from claims (``paused``) or lets them go again;
        True if that changed anything."""
        response: pb.PauseSubmissionResponse = self._call(
            "PauseSubmission", pb.PauseSubmissionRequest(submission_id=submission_id, paused=paused)
        )
        return response.changed

    def status(self, submission_id: str = "") -> pb.GetStatusResponse:
        response: pb.GetStatusResponse = self._call("GetStatus", pb.GetStatusRequest(submission_id=submission_id))
        return response

    def summary(self, submission_id: str, include_episodes: bool = False) -> pb.GetSummaryResponse:
        """Results per manifest; ``include_episodes`` also lists which episodes succeeded and failed."""
        response: pb.GetSummaryResponse = self._call(
            "GetSummary", pb.GetSummaryRequest(submission_id=submission_id, include_episodes=include_episodes)
        )
        return response

    def tasks(self, task_selector: pb.TaskSelector | None = None, limit: int = 0) -> pb.ListTasksResponse:
        response: pb.ListTasksResponse = self._call(
            "ListTasks", pb.ListTasksRequest(selector=task_selector, limit=limit)
        )
        return response

    def workers(self) -> list[pb.WorkerInfo]:
        response: pb.ListWorkersResponse = self._call("ListWorkers", pb.ListWorkersRequest())
        return list(response.workers)

    def task(self, task_id: str) -> pb.GetTaskResponse:
        """One task with every attempt (worker, start, end, outcome, error) and its episode results."""
        response: pb.GetTaskResponse = self._call("GetTask", pb.GetTaskRequest(task_id=task_id))
        return response

    def cancel(self, task_selector: pb.TaskSelector) -> int:
        response: pb.ChangeResponse = self._call("Cancel", pb.CancelRequest(selector=task_selector))
        return response.changed

    def requeue(self, task_selector: pb.TaskSelector) -> int:
        response: pb.ChangeResponse = self._call("Requeue", pb.RequeueRequest(selector=task_selector))
        return response.changed

    def set_priority(self, task_selector: pb.TaskSelector, priority: int) -> int:
        response: pb.ChangeResponse = self._call(
            "SetPriority", pb.SetPriorityRequest(selector=task_selector, priority=priority)
        )
        return response.changed


def claim_request(
    worker_id: str, routes: Sequence[str], checkpoints: Sequence[str] = (), stacks: Sequence[str] = ()
) -> pb.ClaimRequest:
    return pb.ClaimRequest(worker_id=worker_id, routes=list(routes), checkpoints=list(checkpoints), stacks=list(stacks))


def episode_result(
    index: int,
    success: bool,
    *,
    steps: int = 0,
    wall_seconds: float = 0.0,
    trace_digest: str = "",
    info: Mapping[str, Any] | None = None,
    execute_steps: int | None = None,
    remote: pb.RemotePolicy | None = None,
) -> pb.EpisodeResult:
    """One episode's result; ``execute_steps`` (actions run per chunk) and ``remote`` (the remote
    policy server that answered) say how it was run."""
    return pb.EpisodeResult(
        episode_index=index,
        success=success,
        steps=steps,
        wall_seconds=wall_seconds,
        trace_digest=trace_digest,
        info_json=json.dumps(dict(info)) if info else "",
        execute_steps=execute_steps,
        remote=remote,
    )


def clip_text(text: str, limit: int = MAX_TEXT_BYTES) -> str:
    """Cuts diagnostic text to what the scheduler stores, marking the cut. A simulator's error can
    be arbitrarily long; refusing it would leave the worker unable to end the attempt at all."""
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    marker = f" [... cut; {len(encoded)} bytes in all]"
    return encoded[: limit - len(marker)].decode("utf-8", "ignore") + marker


def file_sha256(path: str | os.PathLike[str], chunk_bytes: int = ARTIFACT_CHUNK_BYTES) -> tuple[str, int]:
    """The sha256 and size of a file, read in chunks."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as file:
        while chunk := file.read(chunk_bytes):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _ref(lease: Lease) -> pb.LeaseRef:
    return pb.LeaseRef(task_id=lease.task_id, fencing_token=lease.fencing_token)
