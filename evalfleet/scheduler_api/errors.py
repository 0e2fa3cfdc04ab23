"""Typed scheduler errors, shared by the server (which maps them to gRPC status codes) and the
client (which maps status codes back to them), so callers catch ``StaleLease`` rather than parse text.

The error kind travels in the trailing metadata key ``evalfleet-error``: two kinds can share a
status code (a stale lease and an incomplete task are both FAILED_PRECONDITION) and a caller must
tell them apart without matching on message text.
"""

from __future__ import annotations

import grpc

from evalfleet.metadata import text_value, trailers

ERROR_KIND_KEY = "evalfleet-error"


class SchedulerError(Exception):
    """Base class: a request the scheduler refused. Nothing was changed."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


class InvalidArgument(SchedulerError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(SchedulerError):
    code = grpc.StatusCode.NOT_FOUND


class Conflict(SchedulerError):
    """A different definition already exists under the same id."""

    code = grpc.StatusCode.ALREADY_EXISTS


class StaleLease(SchedulerError):
    """The write carries a fencing token that is no longer the task's current lease."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class PreconditionFailed(SchedulerError):
    """The request is well-formed but the task is not in a state that allows it."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Unauthenticated(SchedulerError):
    code = grpc.StatusCode.UNAUTHENTICATED


class Unavailable(SchedulerError):
    """The scheduler could not be reached, or did not answer in time (client side only).

    A call that ran out of time may or may not have been applied; every write is idempotent or
    fenced, so the caller retries it like one that never left.
    """

    code = grpc.StatusCode.UNAVAILABLE


KINDS: dict[str, type[SchedulerError]] = {
    cls.__name__: cls
    for cls in (InvalidArgument, NotFound, Conflict, StaleLease, PreconditionFailed, Unauthenticated, Unavailable)
}


def from_rpc_error(error: grpc.RpcError) -> SchedulerError:
    """Turns a failed call into the typed error the server raised (or the closest one by code)."""
    kind = KINDS.get(text_value(trailers(error), ERROR_KIND_KEY))
    if kind is None and error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        kind = Unavailable
    if kind is None:
        kind = next((cls for cls in KINDS.values() if cls.code == error.code()), SchedulerError)
    exc = kind(error.details() or error.code().name)
    exc.code = error.code()
    return exc
