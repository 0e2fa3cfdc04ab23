"""Typed scheduler errors, shared by the server (which maps them to gRPC status codes) and the
client (which maps status codes back to them), so callers catch ``StaleLease`` rather than parse text.

The error kind travels in the trailing metadata key ``evalfleet-error`` as the name of an
``evalfleet.v1.ErrorKind`` value: two kinds can share a status code (a stale lease and an
incomplete task are both FAILED_PRECONDITION) and a caller must tell them apart without matching
on message text. The kind is part of the wire contract, so renaming a class here changes nothing
on the wire.
"""

from __future__ import annotations

from typing import ClassVar

import grpc

from evalfleet.metadata import text_value, trailers
from evalfleet.v1 import scheduler_pb2 as pb

ERROR_KIND_KEY = "evalfleet-error"
Kind = pb.ErrorKind


class SchedulerError(Exception):
    """Base class: a request the scheduler refused. Nothing was changed."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    kind: ClassVar[pb.ErrorKind] = Kind.ERROR_KIND_UNSPECIFIED

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        """The trailers a server sends with this error: its kind, by enum name."""
        return ((ERROR_KIND_KEY, Kind.Name(self.kind)),)


class InvalidArgument(SchedulerError):
    code = grpc.StatusCode.INVALID_ARGUMENT
    kind = Kind.ERROR_KIND_INVALID_ARGUMENT


class NotFound(SchedulerError):
    code = grpc.StatusCode.NOT_FOUND
    kind = Kind.ERROR_KIND_NOT_FOUND


class Conflict(SchedulerError):
    """A different definition already exists under the same id."""

    code = grpc.StatusCode.ALREADY_EXISTS
    kind = Kind.ERROR_KIND_CONFLICT


class StaleLease(SchedulerError):
    """The write carries a fencing token that is no longer the task's current lease."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    kind = Kind.ERROR_KIND_STALE_LEASE


class PreconditionFailed(SchedulerError):
    """The request is well-formed but the task is not in a state that allows it."""

    code = grpc.StatusCode.FAILED_PRECONDITION
    kind = Kind.ERROR_KIND_PRECONDITION_FAILED


class ResourceExhausted(SchedulerError):
    """A limit of the scheduler's was reached (an artifact's size, the artifacts' total); the
    message names the limit and its flag."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    kind = Kind.ERROR_KIND_RESOURCE_EXHAUSTED


class Unauthenticated(SchedulerError):
    code = grpc.StatusCode.UNAUTHENTICATED
    kind = Kind.ERROR_KIND_UNAUTHENTICATED


class Unavailable(SchedulerError):
    """The scheduler could not be reached, or did not answer in time (client side only).

    A call that ran out of time may or may not have been applied; every write is idempotent or
    fenced, so the caller retries it like one that never left.
    """

    code = grpc.StatusCode.UNAVAILABLE
    kind = Kind.ERROR_KIND_UNAVAILABLE


KINDS: dict[int, type[SchedulerError]] = {
    cls.kind: cls
    for cls in (
        InvalidArgument,
        NotFound,
        Conflict,
        StaleLease,
        PreconditionFailed,
        ResourceExhausted,
        Unauthenticated,
        Unavailable,
    )
}


def _kind_named(name: str) -> type[SchedulerError] | None:
    """The error class of a kind name from the trailers; None for none, or one this client does not know."""
    try:
        return KINDS.get(Kind.Value(name)) if name else None
    except ValueError:
        return None


def from_rpc_error(error: grpc.RpcError) -> SchedulerError:
    """Turns a failed call into the typed error the server raised (or the closest one by code)."""
    kind = _kind_named(text_value(trailers(error), ERROR_KIND_KEY))
    if kind is None and error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        kind = Unavailable
    if kind is None:
        kind = next((cls for cls in KINDS.values() if cls.code == error.code()), SchedulerError)
    exc = kind(error.details() or error.code().name)
    exc.code = error.code()
    return exc
