"""The `evalfleet.v1.Policy` gRPC service: identity, session streams, health and reflection.

The server starts NOT_SERVING, verifies and loads the checkpoint on a worker thread, warms the
model, and only then reports SERVING; until then every Policy call is refused as UNAVAILABLE.
Errors about one observation are answered in-band and leave the stream and the session as they
were; errors that make the stream meaningless end it with a status whose trailing metadata names
the reason and the field.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NoReturn

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from evalfleet.auth import BearerTokenInterceptor
from evalfleet.policy_api import identity, tensors
from evalfleet.policy_api.errors import (
    INSTANCE_KEY,
    BadToken,
    IdentityMismatch,
    InvalidField,
    NotServing,
    PolicyError,
    ProtocolViolation,
)
from evalfleet.v1 import policy_pb2, policy_pb2_grpc
from evalfleet.wire import MalformedRequestInterceptor
from inference_server import observations, sessions
from inference_server.backends.contract import Backend, EndsSessions, action_dtype_of
from inference_server.batcher import Batcher
from inference_server.metrics import PolicyMetrics

log = logging.getLogger("inference_server")

SERVICE_NAME = policy_pb2.DESCRIPTOR.services_by_name["Policy"].full_name

SessionContext = grpc.aio.ServicerContext[policy_pb2.SessionRequest, policy_pb2.SessionResponse]


@dataclass(frozen=True)
class ServerConfig:
    max_batch: int = 32
    batch_timeout_s: float = 0.005
    max_sessions: int = 256
    session_idle_seconds: float = 300.0
    token: str | None = None
    max_message_bytes: int = 64 * 1024 * 1024


@dataclass(frozen=True)
class Loaded:
    """A backend that is loaded, warmed and identified."""

    backend: Backend
    record: policy_pb2.IdentityRecord
    digest: str
    # What the backend declares it was trained on (GetIdentityResponse.action_range), if anything.
    action_range: policy_pb2.ActionRange | None = None


class PolicyService(policy_pb2_grpc.PolicyServicer):
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.instance_id = uuid.uuid4().hex
        self.sessions = sessions.SessionRegistry(config.max_sessions, config.session_idle_seconds)
        self.loaded: Loaded | None = None
        self.batcher: Batcher | None = None
        self._attached = 0
        self.metrics = PolicyMetrics(self)
        # Backends' end_session hooks run here: they may talk to a remote, never on the event loop.
        self._session_ends = ThreadPoolExecutor(max_workers=4, thread_name_prefix="session-end")

    @property
    def attached(self) -> int:
        """Session streams attached now (each has at most one step in flight)."""
        return self._attached

    def serve(self, loaded: Loaded) -> Batcher:
        """Makes the service answer with a loaded backend; returns the batcher to run."""
        self.loaded = loaded
        self.batcher = Batcher(
            loaded.backend.act,
            max_batch=self.config.max_batch,
            timeout_s=self.config.batch_timeout_s,
            chunk_shape=(loaded.backend.chunk_length, loaded.backend.action_dim),
            action_dtype=action_dtype_of(loaded.backend),
            attached_sessions=lambda: self._attached,
        )
        return self.batcher

    async def session_ended(self, session_id: str) -> None:
        """Tells a backend that holds per-session state (it has `end_session`) that a session was
        closed or evicted, and waits until it has released it, so that a client which closes one
        session and opens the next finds the backend's capacity free; a failing hook is logged."""
        backend: object = self.loaded.backend if self.loaded is not None else None  # Backend has no end_session
        if isinstance(backend, EndsSessions):
            await asyncio.get_running_loop().run_in_executor(self._session_ends, _end_session, backend, session_id)

    def close(self) -> None:
        """Once the server has stopped: waits for the session-end hooks running now (each talks to
        its remote within its own timeout) and drops those not started; their sessions go with the
        process."""
        self._session_ends.shutdown(wait=True, cancel_futures=True)

    # -- helpers ---------------------------------------------------------------------------------

    def _ready(self) -> tuple[Loaded, Batcher]:
        if self.loaded is None or self.batcher is None:
            raise NotServing("the checkpoint is not loaded and warmed yet", field="")
        return self.loaded, self.batcher

    async def _abort(self, context: grpc.aio.ServicerContext[Any, Any], error: PolicyError) -> NoReturn:
        await context.abort(
            error.code, error.message, trailing_metadata=((INSTANCE_KEY, self.instance_id), *error.trailing_metadata())
        )

    def _reply(
        self,
        *,
        opened: policy_pb2.SessionOpened | None = None,
        chunk: policy_pb2.ActionChunk | None = None,
        error: policy_pb2.SessionError | None = None,
        closed: policy_pb2.SessionClosed | None = None,
    ) -> policy_pb2.SessionResponse:
        """A response of one kind (the one given; None leaves a field unset)."""
        return policy_pb2.SessionResponse(
            instance_id=self.instance_id, opened=opened, chunk=chunk, error=error, closed=closed
        )

    # -- GetIdentity -----------------------------------------------------------------------------

    async def GetIdentity(
        self,
        request: policy_pb2.GetIdentityRequest,
        context: grpc.aio.ServicerContext[policy_pb2.GetIdentityRequest, policy_pb2.GetIdentityResponse],
    ) -> policy_pb2.GetIdentityResponse:
        try:
            loaded, batcher = self._ready()
        except PolicyError as error:
            await self._abort(context, error)
        load = policy_pb2.ServerLoad(
            sessions=len(self.sessions),
            max_sessions=self.config.max_sessions,
            queue_depth=batcher.queue_depth,
            steps_served=batcher.steps_served,
            batches_served=batcher.batches_served,
            max_batch=batcher.max_batch,
        )
        context.set_trailing_metadata(((INSTANCE_KEY, self.instance_id),))
        return policy_pb2.GetIdentityResponse(
            identity=loaded.record,
            digest=loaded.digest,
            instance_id=self.instance_id,
            load=load,
            remote_handshake_sha256=str(getattr(loaded.backend, "handshake_sha256", "")),
            action_range=loaded.action_range,
        )

    # -- Session ---------------------------------------------------------------------------------

    async def Session(
        self, request_iterator: AsyncIterator[policy_pb2.SessionRequest], context: SessionContext
    ) -> None:
        await context.send_initial_metadata(((INSTANCE_KEY, self.instance_id),))
        session: sessions.Session | None = None
        try:
            loaded, batcher = self._ready()
            first = await _read(context)
            if first is None:
                return
            session, resumed = self._open(first, loaded)
            attachment = session.attachment
            self._attached += 1
            await context.write(
                self._reply(
                    opened=policy_pb2.SessionOpened(
                        session_id=session.session_id, digest=loaded.digest, next_step=session.next_step
                    )
                )
            )
            await self._serve_session(context, session, attachment, loaded, batcher, resumed)
        except PolicyError as error:
            await self._abort(context, error)
        finally:
            if session is not None:
                self._attached -= 1
                if session.ended is None:
                    self.sessions.detach(session, attachment)
        context.set_trailing_metadata(((INSTANCE_KEY, self.instance_id),))

    def _open(self, first: policy_pb2.SessionRequest, loaded: Loaded) -> tuple[sessions.Session, bool]:
        if first.WhichOneof("kind") != "open":
            raise ProtocolViolation("the first message of a session stream must be `open`", field="open")
        request = first.open
        self._check_identity(request, loaded)
        target = request.WhichOneof("target")
        if target == "resume_session_id":
            return self.sessions.resume(request.resume_session_id), True
        if target != "episode":
            raise InvalidField("open needs `episode` (new session) or `resume_session_id`", field="open.episode")
        return self.sessions.open(request.episode), False

    def _check_identity(self, request: policy_pb2.OpenSession, loaded: Loaded) -> None:
        if not request.expected_digest:
            raise InvalidField("open.expected_digest is required", field="open.expected_digest")
        if request.expected_digest == loaded.digest:
            return
        detail = ""
        if request.HasField("expected_identity"):
            differing = identity.differences(request.expected_identity, loaded.record)
            detail = f"; fields that differ: {', '.join(differing) or 'none (digest itself)'}"
        raise IdentityMismatch(
            f"expected identity {request.expected_digest}, this server serves "
            f"{loaded.record.epoch} with identity {loaded.digest}{detail}",
            field="open.expected_digest",
        )

    async def _serve_session(
        self,
        context: SessionContext,
        session: sessions.Session,
        attachment: int,
        loaded: Loaded,
        batcher: Batcher,
        resumed: bool,
    ) -> None:
        while True:
            request = await _read(context)
            if request is None:
                return
            session.check_driver(attachment)
            kind = request.WhichOneof("kind")
            if kind == "observation":
                await context.write(await self._step(session, request.observation, loaded, batcher, resumed))
                resumed = False
            elif kind == "close":
                steps = session.next_step
                self.sessions.close(session)
                await self.session_ended(session.session_id)
                await context.write(self._reply(closed=policy_pb2.SessionClosed(steps=steps)))
                return
            else:
                error = ProtocolViolation(
                    f"`{kind or 'empty'}` is not valid inside an open session",
                    field=kind or "kind",
                    code=grpc.StatusCode.FAILED_PRECONDITION,
                )
                await context.write(self._reply(error=error.to_proto()))

    async def _step(
        self,
        session: sessions.Session,
        message: policy_pb2.Observation,
        loaded: Loaded,
        batcher: Batcher,
        resumed: bool,
    ) -> policy_pb2.SessionResponse:
        """Answers one observation; any refusal is in-band and leaves the session untouched."""
        started = time.perf_counter()
        self.sessions.touch(session)
        backend = loaded.backend
        try:
            plan = session.plan(message.step, message.executed, resumed)
            if plan.replay is not None:
                return self._reply(chunk=plan.replay)
            observation = observations.validate(message, backend.cameras, backend.state)
            session.pending = True
            try:
                result = await batcher.submit(session.session_id, observation, plan.history)
            finally:
                session.pending = False
                self.sessions.touch(session)
        except PolicyError as error:
            return self._reply(error=error.to_proto())
        answer = policy_pb2.ActionChunk(
            step=message.step,
            actions=tensors.encode(result.chunk),
            batch_size=result.batch_size,
            queue_ms=result.queue_ms,
            model_ms=result.model_ms,
        )
        session.commit(plan, observation, result.chunk, answer)
        self.metrics.observe_step(result, (time.perf_counter() - started) * 1000.0)
        return self._reply(chunk=answer)


def _end_session(backend: EndsSessions, session_id: str) -> None:
    try:
        backend.end_session(session_id)
    except Exception:
        log.exception("the backend's end_session(%s) failed; the server keeps serving", session_id)


async def _read(context: SessionContext) -> policy_pb2.SessionRequest | None:
    """The next stream message, None once the client is done writing; bytes that do not parse are
    the client's error, not grpc's UNKNOWN."""
    try:
        request: object = await context.read()  # the stubs leave grpc.aio.EOF out of read()'s type
    except DecodeError as exc:
        raise ProtocolViolation(f"message does not parse: {exc}", field="kind") from None
    return request if isinstance(request, policy_pb2.SessionRequest) else None


async def evict_idle_sessions(service: PolicyService) -> None:
    """Periodically ends sessions idle past the limit (checked a few times per limit)."""
    period = max(0.05, min(1.0, service.config.session_idle_seconds / 4))
    while True:
        await asyncio.sleep(period)
        for session_id in service.sessions.evict_idle():
            log.info("evicted idle session %s", session_id)
            await service.session_ended(session_id)


# A worker host that dies or is cut off mid-episode sends nothing more, not even a FIN. Between its
# observations the server has nothing to send either, so without pings its stream would stay
# attached for good, and every batch would wait out its timeout for a step that never comes. Pinging
# every connection every 10 s ends such a stream within 15 s (gRPC clients answer pings unasked).
KEEPALIVE_OPTIONS = (
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
)


def build_server(service: PolicyService) -> tuple[grpc.aio.Server, health.aio.HealthServicer]:
    """An aio server with the Policy service, health (NOT_SERVING for now) and reflection; with a
    token, every call but health's must carry it (the scheduler's rule, `evalfleet.auth`)."""
    limit = service.config.max_message_bytes
    interceptors: list[grpc.aio.ServerInterceptor] = []
    if service.config.token is not None:
        # The refusal is a typed BadToken for the policy clients: reason, field and instance ride along.
        refusal = BadToken("", field="metadata.authorization").trailing_metadata()
        refusal += ((INSTANCE_KEY, service.instance_id),)
        interceptors.append(BearerTokenInterceptor(service.config.token, refusal))
    interceptors.append(MalformedRequestInterceptor())
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            # Not gRPC's default SO_REUSEPORT: a second server on a taken port must fail to start,
            # not silently take half of the first one's sessions.
            ("grpc.so_reuseport", 0),
            *KEEPALIVE_OPTIONS,
        ],
    )
    policy_pb2_grpc.add_PolicyServicer_to_server(service, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME), server
    )
    return server, health_servicer


async def set_serving(health_servicer: health.aio.HealthServicer, serving: bool) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, status)
