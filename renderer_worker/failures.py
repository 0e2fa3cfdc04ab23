"""Why an episode did not produce a result: the infrastructure failure classes.

A policy that fails the task is a *result* and never comes through here. Everything here is an
infrastructure failure: the task's attempt ends with ``Fail`` carrying the reason (the wire's
``FailureReason``) and the message, its episodes are retried (skipping those already stored), and
nothing here enters a success rate.
"""

from __future__ import annotations

from evalfleet.scheduler_api.vocabulary import FailureReason, failure_text
from evalfleet.v1 import scheduler_pb2 as pb

# A benchmark error means this manifest cannot run as stated; retrying elsewhere does not help.
NOT_RETRYABLE = frozenset({FailureReason.FAILURE_REASON_BENCHMARK_ERROR})


class EpisodeFailure(Exception):
    """An episode ended without a result, for ``reason``; ``str()`` is "[reason] message"."""

    def __init__(self, reason: pb.FailureReason, message: str) -> None:
        super().__init__(failure_text(reason, message))
        self.reason = reason
        self.message = message

    @property
    def retryable(self) -> bool:
        return self.reason not in NOT_RETRYABLE
