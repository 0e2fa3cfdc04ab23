"""The scheduler's words, each spelled in one place: wire enum values and the names people read.

Failure reasons: `evalfleet.v1.FailureReason` on the wire and in the database; people read the
short lower-case name (`simulator_crash`) in CLI tables, the dashboard, logs and error text
("[simulator_crash] episode process exited with code -9").
"""

from __future__ import annotations

from evalfleet.v1 import scheduler_pb2 as pb

FailureReason = pb.FailureReason
_FAILURE_PREFIX = "FAILURE_REASON_"


def failure_reason_name(reason: pb.FailureReason.ValueType) -> str:
    """`simulator_crash` for FAILURE_REASON_SIMULATOR_CRASH; "" for the unspecified reason."""
    if reason == FailureReason.FAILURE_REASON_UNSPECIFIED:
        return ""
    return FailureReason.Name(reason).removeprefix(_FAILURE_PREFIX).lower()


def failure_reason_value(name: str) -> pb.FailureReason.ValueType:
    """The enum value of a failure-reason name; ValueError naming the known ones otherwise."""
    try:
        return FailureReason.Value(_FAILURE_PREFIX + name.upper())
    except ValueError:
        raise ValueError(f"unknown failure reason {name!r}; known: {', '.join(failure_reason_names())}") from None


def failure_reason_names() -> list[str]:
    """Every named reason, in enum order."""
    return [failure_reason_name(value) for value in FailureReason.values() if value]


def failure_text(reason: pb.FailureReason.ValueType, message: str) -> str:
    """What people read of a failure: "[reason] message", or the message alone without a reason."""
    name = failure_reason_name(reason)
    return f"[{name}] {message}" if name else message
