"""Why an episode did not produce a result: the infrastructure failure classes.

A policy that fails the task is a *result* and never comes through here. Everything here is an
infrastructure failure: the task's attempt ends with ``Fail`` carrying ``[reason] message``, its
episodes are retried (skipping those already stored), and nothing here enters a success rate.
"""

from __future__ import annotations

import enum


class FailureReason(str, enum.Enum):
    SIMULATOR_CRASH = "simulator_crash"  # the episode process died or the simulator raised
    POLICY_UNAVAILABLE = "policy_unavailable"  # no server reachable, or the stream broke for good
    POLICY_RESTARTED = "policy_restarted"  # instance id changed mid-episode: history is lost
    POLICY_ERROR = "policy_error"  # the server refused a step (bad field, backend failure)
    IDENTITY_MISMATCH = "identity_mismatch"  # the server does not serve the submitted checkpoint
    TIMEOUT = "timeout"  # the episode ran past its wall-clock limit
    BENCHMARK_ERROR = "benchmark_error"  # the manifest entry cannot be rebuilt here (drift, setup)


# A benchmark error means this manifest cannot run as stated; retrying elsewhere does not help.
NOT_RETRYABLE = frozenset({FailureReason.BENCHMARK_ERROR})


class EpisodeFailure(Exception):
    """An episode ended without a result, for ``reason``."""

    def __init__(self, reason: FailureReason, message: str) -> None:
        super().__init__(f"[{reason.value}] {message}")
        self.reason = reason
        self.message = message

    @property
    def retryable(self) -> bool:
        return self.reason not in NOT_RETRYABLE
