"""Typed policy errors shared by the server and the client.

One exception type per ErrorReason, each carrying the gRPC status code, the request field at fault
and the server instance id, so that a worker can tell an infrastructure failure (retry the episode)
from a bug in its own requests (fix the worker) without parsing messages.
"""

from __future__ import annotations

import grpc

from evalfleet.metadata import text_value, trailers
from evalfleet.v1 import policy_pb2

Reason = policy_pb2.ErrorReason

INSTANCE_KEY = "evalfleet-instance-id"
REASON_KEY = "evalfleet-error-reason"
FIELD_KEY = "evalfleet-error-field"


class PolicyError(Exception):
    """A refused request: status code, machine-readable reason, field at fault, server instance."""

    reason: Reason = Reason.ERROR_REASON_UNSPECIFIED
    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(
        self, message: str, *, field: str = "", instance_id: str = "", code: grpc.StatusCode | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.instance_id = instance_id
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        where = f" [{self.field}]" if self.field else ""
        return f"{self.code.name} {Reason.Name(self.reason)}{where}: {self.message}"

    def to_proto(self) -> policy_pb2.SessionError:
        return policy_pb2.SessionError(
            code=self.code.value[0], reason=self.reason, field=self.field, message=self.message
        )

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((REASON_KEY, Reason.Name(self.reason)), (FIELD_KEY, self.field))


class IdentityMismatch(PolicyError):
    reason = Reason.IDENTITY_MISMATCH
    code = grpc.StatusCode.FAILED_PRECONDITION


class ProtocolViolation(PolicyError):
    reason = Reason.PROTOCOL_VIOLATION
    code = grpc.StatusCode.INVALID_ARGUMENT


class InvalidField(PolicyError):
    reason = Reason.INVALID_FIELD
    code = grpc.StatusCode.INVALID_ARGUMENT


class StaleStep(PolicyError):
    reason = Reason.STALE_STEP
    code = grpc.StatusCode.FAILED_PRECONDITION


class OutOfOrderStep(PolicyError):
    reason = Reason.OUT_OF_ORDER_STEP
    code = grpc.StatusCode.OUT_OF_RANGE


class SessionUnknown(PolicyError):
    reason = Reason.SESSION_UNKNOWN
    code = grpc.StatusCode.NOT_FOUND


class SessionClosed(PolicyError):
    reason = Reason.SESSION_CLOSED
    code = grpc.StatusCode.FAILED_PRECONDITION


class SessionEvicted(PolicyError):
    reason = Reason.SESSION_EVICTED
    code = grpc.StatusCode.FAILED_PRECONDITION


class SessionTakenOver(PolicyError):
    reason = Reason.SESSION_TAKEN_OVER
    code = grpc.StatusCode.ABORTED


class TooManySessions(PolicyError):
    reason = Reason.TOO_MANY_SESSIONS
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class BadToken(PolicyError):
    reason = Reason.BAD_TOKEN
    code = grpc.StatusCode.UNAUTHENTICATED


class BackendFailed(PolicyError):
    reason = Reason.BACKEND_FAILED
    code = grpc.StatusCode.INTERNAL


class NotServing(PolicyError):
    reason = Reason.NOT_SERVING
    code = grpc.StatusCode.UNAVAILABLE


class ServerRestarted(PolicyError):
    """Client side only: the server's instance id changed, so every session's history is gone."""

    code = grpc.StatusCode.ABORTED


class PolicyUnavailable(PolicyError):
    """Client side only: the server could not be reached or the stream broke (no typed reason)."""

    code = grpc.StatusCode.UNAVAILABLE


class RemoteUnavailable(NotServing):
    """The remote policy server behind a `remote` backend is down, closed the connection or timed
    out; in-band, so the session stays as it was (a NotServing: the worker retries the episode)."""

    reason = Reason.REMOTE_UNAVAILABLE
    code = grpc.StatusCode.UNAVAILABLE


class RemoteRestarted(ServerRestarted):
    """The remote policy server answered another handshake after a reconnect: it restarted, maybe
    with another model, so the episode in flight must not be scored (a ServerRestarted)."""

    reason = Reason.REMOTE_RESTARTED
    code = grpc.StatusCode.ABORTED


BY_REASON: dict[int, type[PolicyError]] = {
    cls.reason: cls
    for cls in (
        IdentityMismatch,
        ProtocolViolation,
        InvalidField,
        StaleStep,
        OutOfOrderStep,
        SessionUnknown,
        SessionClosed,
        SessionEvicted,
        SessionTakenOver,
        TooManySessions,
        BadToken,
        BackendFailed,
        NotServing,
        RemoteUnavailable,
        RemoteRestarted,
    )
}


def from_proto(error: policy_pb2.SessionError, instance_id: str) -> PolicyError:
    """Rebuilds the typed error of an in-band SessionError."""
    cls = BY_REASON.get(error.reason, PolicyError)
    code = next((c for c in grpc.StatusCode if c.value[0] == error.code), None)
    return cls(error.message, field=error.field, instance_id=instance_id, code=code)


# No answer from the server (down, partitioned, too slow): the episode is an infrastructure failure.
UNREACHED_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED)


def from_rpc_error(error: grpc.RpcError, instance_id: str) -> PolicyError:
    """Rebuilds the typed error of a gRPC status, using the reason in its trailing metadata."""
    metadata = trailers(error)
    reason_name = text_value(metadata, REASON_KEY)
    reason = Reason.Value(reason_name) if reason_name in Reason.keys() else 0
    cls = BY_REASON.get(reason)
    code = error.code()
    if cls is None:
        cls = PolicyUnavailable if code in UNREACHED_CODES else PolicyError
    return cls(
        error.details() or "",
        field=text_value(metadata, FIELD_KEY),
        instance_id=text_value(metadata, INSTANCE_KEY, instance_id),
        code=code,
    )
