"""One spelling of the scheduler's task states and of a success rate, for every reader and writer.

The wire carries a task's state as the ``TaskState`` enum (``TASK_STATE_FAILED``); the database,
the CLI's ``--state`` choices and columns, ``--json`` documents, the dashboard and ``/metrics``
use short lower-case names (``"failed"``). Every conversion between the two happens here, so a new
state is added in the proto and in ``TASK_STATE_NAMES`` and nowhere else.

A success rate is succeeded over *completed* episodes, never over planned ones: an incomplete
submission's rate covers what has run so far, and a population with nothing completed has no rate
(None, shown as ``-``) rather than 0. Every rate shown comes with its 95% Wilson score interval
(``wilson_interval``): a closed form of a few lines, so the scheduler and its clients need no
statistics library for it, and it stays inside [0, 1] and is sensible at 0 and at n successes out
of n, where the textbook normal interval collapses to a point.

Failure reasons: ``FailureReason`` on the wire and in the database; people read the short name
(``simulator_crash``) in tables, logs and error text ("[simulator_crash] episode process exited").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from statistics import NormalDist
from types import MappingProxyType
from typing import NamedTuple, cast

from evalfleet.v1 import scheduler_pb2 as pb

# The states a task can be in, in the order people read them (columns, counts, choices).
TASK_STATE_NAMES: tuple[str, ...] = ("pending", "leased", "succeeded", "failed", "cancelled")
_ENUM_PREFIX = "TASK_STATE_"


def task_state(name: str) -> pb.TaskState:
    """The enum value of a state name: ``"failed"`` -> ``TASK_STATE_FAILED``.

    Looked up in the enum itself, so any case is accepted; a name the enum lacks raises ValueError.
    """
    # The stubs type an enum's Value() as a plain int; it is a member of TaskState.
    return cast(pb.TaskState, pb.TaskState.Value(_ENUM_PREFIX + name.upper()))


def task_state_name(state: int) -> str:
    """The name of an enum value: ``TASK_STATE_FAILED`` -> ``"failed"``; ValueError for a number it lacks."""
    return pb.TaskState.Name(state).removeprefix(_ENUM_PREFIX).lower()


# The five states both ways, for lookups that must refuse anything else (0 is no task's state).
TASK_STATES: Mapping[str, pb.TaskState] = MappingProxyType({name: task_state(name) for name in TASK_STATE_NAMES})
TASK_STATE_NAMES_BY_ENUM: Mapping[int, str] = MappingProxyType({value: name for name, value in TASK_STATES.items()})


def success_rate(succeeded: int, completed: int, *, scale: float = 1.0) -> float | None:
    """``scale * succeeded / completed`` (``scale=100.0`` gives percent), or None when nothing completed.

    The scale multiplies before the division: ``100.0 * 23 / 80`` is exactly 28.75, where
    ``100.0 * (23 / 80)`` is 28.749999999999996, so a percentage shown to a tenth rounds as it reads.
    """
    return scale * succeeded / completed if completed else None


def success_percent(succeeded: int, completed: int) -> str:
    """The rate as tables and progress lines show it: ``"28.8%"``, or ``"-"`` when nothing completed."""
    percent = success_rate(succeeded, completed, scale=100.0)
    return "-" if percent is None else f"{percent:.1f}%"


# The two-sided 95% normal quantile, 1.959963984540054.
Z_95 = NormalDist().inv_cdf(0.975)


class Interval(NamedTuple):
    """A confidence interval of a rate or of a difference of rates, as fractions (not percent)."""

    low: float
    high: float


def wilson_interval(succeeded: int, completed: int, z: float = Z_95) -> Interval | None:
    """The Wilson score interval of ``succeeded / completed`` (95% by default), None when nothing completed.

    Wilson (1927): the rates p whose score test against the observed rate does not reject, in
    closed form ``(p̂ + z²/2n ± z·sqrt(p̂(1-p̂)/n + z²/4n²)) / (1 + z²/n)``.
    """
    if not completed:
        return None
    n, rate = completed, succeeded / completed
    denominator = 1.0 + z * z / n
    center = (rate + z * z / (2 * n)) / denominator
    half = z * math.sqrt(rate * (1.0 - rate) / n + z * z / (4 * n * n)) / denominator
    low = 0.0 if succeeded == 0 else max(0.0, center - half)
    high = 1.0 if succeeded == completed else min(1.0, center + half)
    return Interval(low, high)


def interval_text(interval: Interval | None) -> str:
    """An interval as tables show it, in percent: ``"[20.1, 39.4]"``, or ``"-"`` when there is none."""
    return "-" if interval is None else f"[{100.0 * interval.low:.1f}, {100.0 * interval.high:.1f}]"


def rate_fields(
    succeeded: int, completed: int, digits: int | None = None, interval_valid: bool = True
) -> dict[str, float | None]:
    """``success_rate`` and its 95% interval, ``success_rate_low`` and ``success_rate_high``, as every
    JSON document spells them (None when nothing completed, or when the episodes are not a sample a
    fixed-N interval is valid for: ``interval_valid``), rounded to ``digits`` when given."""
    interval = wilson_interval(succeeded, completed) if interval_valid else None
    values = {
        "success_rate": success_rate(succeeded, completed),
        "success_rate_low": None if interval is None else interval.low,
        "success_rate_high": None if interval is None else interval.high,
    }
    if digits is None:
        return values
    return {key: None if value is None else round(value, digits) for key, value in values.items()}


FailureReason = pb.FailureReason
_FAILURE_PREFIX = "FAILURE_REASON_"


def failure_reason_name(reason: int) -> str:
    """`simulator_crash` for FAILURE_REASON_SIMULATOR_CRASH; "" for the unspecified reason.

    Takes any number, as read from a database or a message; one outside the enum raises ValueError.
    """
    if reason == FailureReason.FAILURE_REASON_UNSPECIFIED:
        return ""
    return FailureReason.Name(reason).removeprefix(_FAILURE_PREFIX).lower()


def failure_text(reason: int, message: str) -> str:
    """What people read of a failure: "[reason] message", or the message alone without a reason."""
    name = failure_reason_name(reason)
    return f"[{name}] {message}" if name else message


def failure_counts(failures: Iterable[pb.FailureCount]) -> dict[str, int]:
    """Failed or lost attempts by reason name, in enum order: ``{"timeout": 2, "lease_expired": 1}``.

    Attempts whose client named no reason count under ``"unspecified"``.
    """
    counts: dict[str, int] = {}
    for failure in sorted(failures, key=lambda f: f.reason):
        name = failure_reason_name(failure.reason) or "unspecified"
        counts[name] = counts.get(name, 0) + failure.attempts
    return counts
